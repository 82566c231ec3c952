"""Every fenced code block of README.md and docs/*.md runs, so a snippet that errs or hangs fails CI (issue #10, item 11).

One test per block, with the block's place as its id (``README.md:17``, ``docs/engines.md:45``). What a block's
fence language means here:

- ``python``: run in a fresh ``python`` of this venv (a script file), cwd a throw-away work directory;
- ``bash`` (also ``sh``, ``shell``): run with ``bash -euo pipefail``, the venv's ``bin`` first on ``PATH``, the same cwd;
- ``json``: must parse as JSON; ``yaml``: must parse the way pyiceberg reads ``.pyiceberg.yaml`` (strictyaml);
  ``text``, ``toml``, ``properties`` and ``sql`` (output shown to the reader) are not executed;
- anything else, or a fence without a language, fails: label it (``text`` for what is only to be read).

Runnable blocks share one throw-away catalog per module: FLIP-276's three tables built by
``consistent-catalog demo --engine pyiceberg`` into ``<work directory>/.demo``, exposed as catalog ``lake``
through ``PYICEBERG_CATALOG__LAKE__URI``/``__WAREHOUSE`` (and a ``PYICEBERG_HOME`` of its own, so no
``~/.pyiceberg.yaml`` interferes). The work directory stands in for a checkout: ``.venv`` links to this venv,
``.demo`` is the catalog, and ``spark-conf/spark-defaults.conf`` is rendered for it (for Spark blocks). Blocks
run in document order, so later blocks see what earlier ones wrote.

The docs' placeholders and undefined names are filled in by the small explicit tables below
(``SUBSTITUTIONS``, ``PRELUDES``); ``NOT_RUN`` lists the blocks that are not run and why. Each entry of
``PRELUDES``, ``NOT_RUN``, ``SLOW`` and ``USER_SHELL`` must match exactly one block (``test_tables_name_existing_blocks``), so
the tables cannot go stale silently. A block that is only illustrative belongs in a ```text fence in the
doc, never in ``NOT_RUN``. The blocks of ``USER_SHELL`` run as a user's shell runs them after the README's install
(issue 42, item 3): ``~/cc`` is this venv, nothing of it on ``PATH``, no catalog variables, an empty directory; so
does what ``consistent-catalog init`` prints under ``next:``. Blocks that need Spark (pyspark, ``spark.``, ``spark-sql``) are marked
``spark``; long ones are marked ``slow``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV = Path(sys.prefix)  # make test runs pytest with .venv/bin/python
BIN = VENV / "bin"

TIMEOUT_S = 120
SPARK_TIMEOUT_S = 300  # a Spark block starts a JVM (and the README's PySpark job polls for ~50 s)

RUN_LANGUAGES = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
READ_ONLY_LANGUAGES = {"text", "toml", "properties", "sql"}  # not executed (sql blocks show printed output)

SPARK = re.compile(r"\bpyspark\b|\bspark-(sql|submit|shell)\b|\bspark\.\w|\bconsistent_catalog\.spark\b")

# --- the explicit tables ---------------------------------------------------------------------------
# Placeholders the docs use for "your checkout's .demo": replaced in every runnable block.
SUBSTITUTIONS = {"/abs/path/.demo": "{demo}"}


@dataclass(frozen=True)
class Entry:
    document: str  # relative to the repository root
    contains: str  # a text that identifies the block in that document
    text: str  # the prelude's code, or the reason


# Code run before a block, in the block's language: the names a snippet takes as given.
PRELUDES = [
    Entry("README.md", 'cc.ingest("demo.words", arrow_table)', '''\
import pyarrow as pa  # prelude (tests/docs/test_snippets.py): the snippet's arrow_table and count()

arrow_table = pa.table({"word": ["hello", "world", "hello"]})


def count(words):
    return words.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])
'''),
    # The DuckDB CLI is not on PyPI at the pinned duckdb==1.5.5, and its INSTALL downloads the extension;
    # this stand-in runs the same SQL script in the pinned Python duckdb, with the extensions loaded from
    # their PyPI packages by consistent_catalog.duckdb_reader.connect() (INSTALL statements dropped).
    Entry("docs/engines.md", "| duckdb", '''\
duckdb() {  # prelude (tests/docs/test_snippets.py): stand-in for the DuckDB CLI, reading a script on stdin
  python -c '
import re, sys
from consistent_catalog.duckdb_reader import connect
script = re.sub(r"(?i)\\bINSTALL\\s+\\w+\\s*;", "", sys.stdin.read())
for row in connect().execute(script).fetchall():
    print(*row, sep="|")
'
}
'''),
    # No Trino server in the suite: the stand-in only checks that the block's own part (resolve -> id)
    # produced the query with a snapshot id.
    Entry("docs/engines.md", "trino --execute", '''\
trino() {  # prelude (tests/docs/test_snippets.py): stand-in for the Trino CLI, checks the pinned id
  [[ "$*" =~ "VERSION AS OF "[0-9]+ ]] || { echo "trino stand-in: no snapshot id in: $*" >&2; return 1; }
  echo "trino $*"
}
'''),
]

# Blocks that are not run at all, with the reason. Keep this to what the suite cannot do.
NOT_RUN = [
    # `make demo` / `make test` are the set-up itself (venv, packages, apt, jars) and `make test` runs this
    # very suite: running them from a test would recurse and reinstall the environment under the tests.
    Entry("README.md", "make demo", "the set-up commands themselves (make test runs this suite)"),
    # `make dist` runs the set-up too, then a build and an install into a venv of its own: the same steps, from
    # a clean clone into throw-away directories, are tests/integration/test_wheel.py.
    Entry("README.md", "make dist", "builds and installs the wheel (tests/integration/test_wheel.py does, from a clone)"),
]

# Blocks marked slow (still part of make test).
SLOW = [
    Entry("README.md", "run_continuously(interval=5, max_epochs=3)", "a PySpark job, then 3 attempts 5 s apart"),
]


# Blocks run in a user's shell after the README's install, not in the module's work directory (``user_shell``).
USER_SHELL = [
    Entry("README.md", "source ~/cc/bin/activate", "the install's lines, in a shell where the venv is not active"),
]


# --- the blocks ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    document: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    language: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"

    def matches(self, entry: Entry) -> bool:
        return self.document == entry.document and entry.contains in self.code

    @property
    def needs_spark(self) -> bool:
        return bool(SPARK.search(self.code))


FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


def parse_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file (CommonMark fences, also indented inside list items)."""
    document = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise AssertionError(f"{document}:{i + 1}: code fence never closed")
        language = info.split()[0].lower() if info else ""
        blocks.append(Block(document, i + 1, language, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in parse_blocks(path)]


def _one(entries: list[Entry], block: Block) -> Entry | None:
    found = [entry for entry in entries if block.matches(entry)]
    assert len(found) <= 1, f"{block.id}: more than one table entry matches: {found}"
    return found[0] if found else None


def _params() -> list:
    params = []
    for block in BLOCKS:
        marks = []
        if block.language in RUN_LANGUAGES and block.needs_spark:
            marks.append(pytest.mark.spark)
        if any(block.matches(entry) for entry in SLOW):
            marks.append(pytest.mark.slow)
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


# --- the throw-away catalog --------------------------------------------------------------------------
@dataclass
class Lake:
    workdir: Path
    demo: Path
    env: dict[str, str]


def _run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float, what: str) -> str:
    """Run ``args`` in its own process group; on timeout kill the whole group (a JVM too) and fail."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the block left running (e.g. a Spark JVM)
        except ProcessLookupError:
            pass
    if timed_out:
        pytest.fail(f"{what} did not finish within {timeout:.0f} s\n{_tails(out, err)}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"{what} exited {proc.returncode}\n{_tails(out, err)}", pytrace=False)
    if "Traceback (most recent call last)" in err:  # e.g. py4j's, when a snippet exits with Spark still up
        pytest.fail(f"{what} exited 0 but printed a traceback\n{_tails(out, err)}", pytrace=False)
    return out


def _tails(out: str, err: str, limit: int = 4000) -> str:
    return f"--- stdout (tail) ---\n{out[-limit:]}\n--- stderr (tail) ---\n{err[-limit:]}"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    workdir = tmp_path_factory.mktemp("docs-snippets")
    demo = workdir / ".demo"
    (workdir / ".venv").symlink_to(VENV, target_is_directory=True)
    home = workdir / "pyiceberg-home"
    home.mkdir()
    # shadows ~/.pyiceberg.yaml (pyiceberg takes the first file it finds); the catalog comes from the variables
    (home / ".pyiceberg.yaml").write_text("catalog:\n  lake:\n    type: sql\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYICEBERG_")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PYICEBERG_HOME=str(home),
        AIRFLOW_HOME=str(workdir / "airflow-home"),  # the Airflow blocks' config and logs, not ~/airflow
        PYICEBERG_CATALOG__LAKE__URI=f"sqlite:///{demo}/catalog.db",
        PYICEBERG_CATALOG__LAKE__WAREHOUSE=f"file://{demo}/warehouse",
        PYTHONUNBUFFERED="1",
    )
    _run([str(BIN / "consistent-catalog"), "demo", "--dir", str(demo), "--engine", "pyiceberg",
          "--epochs", "4", "--rows-per-epoch", "50"], cwd=workdir, env=env, timeout=TIMEOUT_S,
         what="building the throw-away catalog (consistent-catalog demo)")
    return Lake(workdir, demo, env)


@pytest.fixture(scope="module")
def spark_conf(lake: Lake) -> Path:
    """``spark-conf/spark-defaults.conf`` in the work directory, rendered for the throw-away catalog."""
    conf = lake.workdir / "spark-conf" / "spark-defaults.conf"
    conf.parent.mkdir(exist_ok=True)
    _run([str(BIN / "consistent-catalog"), "spark-conf", "--write", str(conf),
          "--catalog-uri", lake.env["PYICEBERG_CATALOG__LAKE__URI"], "--warehouse", str(lake.demo / "warehouse"),
          "--template", str(ROOT / "spark-conf" / "spark-defaults.conf.template")],
         cwd=lake.workdir, env=lake.env, timeout=TIMEOUT_S, what="rendering spark-conf/spark-defaults.conf")
    return conf


@dataclass(frozen=True)
class UserShell:
    workdir: Path
    home: Path
    env: dict[str, str]


def user_shell(tmp: Path) -> UserShell:
    """A user's shell after ``python3 -m venv ~/cc && ~/cc/bin/pip install ...``: ``HOME`` a new directory whose
    ``cc`` is this venv, ``PATH`` without this venv's ``bin`` (a shell where it is not activated), no pyiceberg or
    Spark variables, and an empty working directory."""
    home, workdir = tmp / "home", tmp / "work"
    home.mkdir()
    workdir.mkdir()
    (home / "cc").symlink_to(VENV, target_is_directory=True)
    leaky = ("VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_CONF_DIR",
             "CONSISTENT_SPARK_LINE")
    env = {k: v for k, v in os.environ.items() if k not in leaky and not k.startswith("PYICEBERG_")}
    path = [entry for entry in env.get("PATH", "").split(os.pathsep)
            if entry and not (Path(entry).exists() and Path(entry).resolve() == BIN.resolve())]
    env.update(HOME=str(home), PATH=os.pathsep.join(path), PYTHONUNBUFFERED="1")
    return UserShell(workdir, home, env)


# --- the tests ---------------------------------------------------------------------------------------
def test_every_document_has_blocks() -> None:
    """The parser sees the docs' blocks (guards against a parser that silently finds none)."""
    assert {b.document for b in BLOCKS} >= {"README.md", "docs/engines.md"}
    assert any(b.language == "python" for b in BLOCKS) and any(b.language == "bash" for b in BLOCKS)


@pytest.mark.parametrize("table", ["PRELUDES", "NOT_RUN", "SLOW", "USER_SHELL"])
def test_tables_name_existing_blocks(table: str) -> None:
    for entry in globals()[table]:
        found = [b.id for b in BLOCKS if b.matches(entry)]
        assert len(found) == 1, f"{table} entry {entry.document!r} / {entry.contains!r} matches {found or 'no block'}"
        block = next(b for b in BLOCKS if b.matches(entry))
        if table != "NOT_RUN":
            assert block.language in RUN_LANGUAGES, f"{table} entry for {block.id}: a {block.language} block is not run"


@pytest.mark.parametrize("block", _params())
def test_block(block: Block, request: pytest.FixtureRequest) -> None:
    language = block.language
    if language in READ_ONLY_LANGUAGES:
        return
    if language == "json":
        try:
            json.loads(block.code)
        except json.JSONDecodeError as exc:
            pytest.fail(f"{block.id}: not valid JSON: {exc}", pytrace=False)
        return
    if language == "yaml":
        import strictyaml  # what pyiceberg reads .pyiceberg.yaml with

        strictyaml.load(block.code)
        return
    if language not in RUN_LANGUAGES:
        pytest.fail(f"{block.id}: fence language {language or '(none)'!r} has no rule here: label the block "
                    f"(```text if it is only to be read) or add a rule to tests/docs/test_snippets.py", pytrace=False)
    not_run = _one(NOT_RUN, block)
    if not_run is not None:  # not run, but every `make X` it shows is a real target, and CI runs `make test`
        targets = re.findall(r"^make (\S+)", block.code, re.M)
        assert targets, f"{block.id}: {not_run.text}, yet it shows no make command"
        for target in targets:
            dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert dry.returncode == 0, f"{block.id}: `make {target}` is not a target: {dry.stderr}"
        assert "make test" in (ROOT / ".ci" / "run").read_text()
        return

    stem = re.sub(r"[^\w]+", "_", block.id)
    timeout = SPARK_TIMEOUT_S if block.needs_spark else TIMEOUT_S
    if _one(USER_SHELL, block) is not None:
        shell = user_shell(request.getfixturevalue("tmp_path"))
        script = shell.workdir.parent / f"{stem}.sh"
        script.write_text(block.code, encoding="utf-8")
        _run(["bash", "-euo", "pipefail", str(script)], cwd=shell.workdir, env=shell.env, timeout=timeout,
             what=f"{block.id} ({language}, run in a user's shell as {script.name})")
        return

    lake: Lake = request.getfixturevalue("lake")
    if block.needs_spark:
        request.getfixturevalue("spark_conf")
    code = block.code
    for placeholder, value in SUBSTITUTIONS.items():
        code = code.replace(placeholder, value.format(demo=lake.demo))
    prelude = _one(PRELUDES, block)
    if prelude is not None:
        code = prelude.text + "\n" + code

    if RUN_LANGUAGES[language] == "python":
        script = lake.workdir / f"{stem}.py"
        script.write_text(code, encoding="utf-8")
        args = [str(BIN / "python"), str(script)]
    else:
        script = lake.workdir / f"{stem}.sh"
        script.write_text(code, encoding="utf-8")
        args = ["bash", "-euo", "pipefail", str(script)]
    _run(args, cwd=lake.workdir, env=lake.env, timeout=timeout, what=f"{block.id} ({language}, run as {script.name})")


@pytest.mark.spark
def test_the_lines_init_prints_run_as_printed(tmp_path: Path) -> None:
    """Issue 42, item 3: ``~/cc/bin/consistent-catalog init`` from a shell where the venv is not active prints, under
    ``next:``, lines that run there as printed (its ``activate`` first); its ``spark-sql`` line, given statements,
    ingests through ``lake_consistent``, and pyiceberg counts the rows it wrote."""
    from pyiceberg.catalog.sql import SqlCatalog

    shell = user_shell(tmp_path)
    printed = _run([str(shell.home / "cc" / "bin" / "consistent-catalog"), "init"], cwd=shell.workdir, env=shell.env,
                   timeout=TIMEOUT_S, what="~/cc/bin/consistent-catalog init")
    hint = [line.strip() for line in printed.split("next:\n", 1)[1].splitlines() if line.strip()]
    assert hint[0].startswith("source ") and hint[0].endswith("/bin/activate"), hint  # the venv is not active here
    assert hint[-1] == f"spark-sql --properties-file {shell.workdir / 'lake' / 'spark-defaults.conf'}", hint
    statements = ("CREATE NAMESPACE lake.shop; CREATE TABLE lake.shop.orders (id bigint) USING iceberg; "
                  "INSERT INTO lake_consistent.shop.orders VALUES (1), (2), (3); "
                  "SELECT count(*) FROM lake_consistent.shop.orders")
    script = "\n".join([*hint[:-1], f"{hint[-1]} -S -e '{statements}'"]) + "\n"
    out = _run(["bash", "-euo", "pipefail", "-c", script], cwd=shell.workdir, env=shell.env, timeout=SPARK_TIMEOUT_S,
               what="init's next: lines")
    assert [line for line in out.splitlines() if line.strip()][-1] == "3", out
    lake = shell.workdir / "lake"
    # spark-conf's run: line is one line of the same kind
    written = _run([str(shell.home / "cc" / "bin" / "consistent-catalog"), "spark-conf", "--write", "again.conf",
                    "--catalog-uri", f"sqlite:///{lake}/catalog.db", "--warehouse", str(lake / "warehouse")],
                   cwd=shell.workdir, env=shell.env, timeout=TIMEOUT_S, what="~/cc/bin/consistent-catalog spark-conf")
    assert f"run: {hint[0]} && spark-sql --properties-file again.conf" in written, written
    independent = SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}/warehouse")
    try:
        assert independent.load_table("shop.orders").scan().to_arrow().num_rows == 3
    finally:
        independent.engine.dispose()
