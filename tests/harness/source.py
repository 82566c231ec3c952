"""The package's own source, for tests that guard a boundary (internals used by one module only)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "consistent_catalog"


def lines_matching(pattern: re.Pattern[str], *, except_in: str) -> list[str]:
    """``path:line: text`` of every source line matching ``pattern`` outside the module file ``except_in``."""
    return [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != except_in
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
