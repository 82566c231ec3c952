"""Crash injection (protocol §5): ``worker`` (the process that is killed), ``oracle`` (the independent
reader that checks the lake), ``driver`` (runs, kills and resumes workers) and ``scenarios``."""
