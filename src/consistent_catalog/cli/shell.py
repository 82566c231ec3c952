"""Shell lines the command line prints for the user to run (``init``'s ``next:``, ``spark-conf``'s ``run:``), made
runnable as printed from the shell the command was called in (issue 42, item 3).

pyspark's ``spark-sql`` and ``spark-submit`` find Spark through the ``python3`` on ``PATH``: called by their path from a
shell where their venv is not active they fail (``find_spec("pyspark").origin`` traceback, then ``/bin/spark-submit:
No such file or directory``). So a line names this installation's commands by name when they are the ones on
``PATH``; otherwise, in a venv, its ``activate`` comes first, and outside one they are named by their full path.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

#: The installation's commands the printed lines start with.
COMMANDS = ("consistent-catalog", "spark-sql", "spark-submit")


def runnable(lines: list[str]) -> list[str]:
    """``lines`` (each starting with one of ``COMMANDS``), preceded by ``source <venv>/bin/activate`` when this
    installation's commands are not the ones on ``PATH`` (or, outside a venv, with their full paths)."""
    scripts = Path(sysconfig.get_path("scripts"))
    used = {line.split(maxsplit=1)[0] for line in lines}
    if all(_on_path(command, scripts) for command in used):
        return list(lines)
    activate = scripts / "activate"
    if sys.prefix != sys.base_prefix and activate.is_file():
        return [f"source {shlex.quote(str(activate))}", *lines]
    return [_full_path(line, scripts) for line in lines]


def one_line(lines: list[str]) -> str:
    """``runnable(lines)`` as one line (``&&`` between its commands)."""
    return " && ".join(runnable(lines))


def _full_path(line: str, scripts: Path) -> str:
    command, _, rest = line.partition(" ")
    return f"{shlex.quote(str(scripts / command))} {rest}".rstrip() if command in COMMANDS else line


def _on_path(command: str, scripts: Path) -> bool:
    found = shutil.which(command)
    return found is not None and (scripts / command).exists() and os.path.samefile(Path(found), scripts / command)
