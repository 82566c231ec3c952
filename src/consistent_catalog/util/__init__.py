"""Utilities every layer may use: time, identifiers, durations. They import nothing from the package but
``exceptions`` and ``properties``."""
