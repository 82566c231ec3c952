"""The installed ``consistent-catalog`` command: JSON contract, help texts, one-line errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog, EpochContext
from consistent_catalog import properties as P
from consistent_catalog.cli.main import cli
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, sqlite_catalog

EXE = str(Path(sys.executable).parent / "consistent-catalog")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """A catalog with words -> word_counts, one published epoch, and one more root snapshot."""
    directory = tmp_path_factory.mktemp("cli")
    catalog = sqlite_catalog(directory)
    catalog.create_namespace("demo")
    catalog.create_table("demo.words", schema=WORDS_SCHEMA)
    catalog.create_table("demo.word_counts", schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    cc.ingest("demo.words", pa.table({"word": ["a", "b", "a"]}, schema=WORDS_SCHEMA), barrier=1_700_000_000_000)

    def count(ctx: EpochContext) -> pa.Table:
        return ctx.read("demo.words").group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])

    job = cc.job("word-count", sources=["demo.words"], sinks=["demo.word_counts"], transform=count, mode="overwrite")
    job.register()
    job.run_epoch()
    cc.ingest("demo.words", pa.table({"word": ["c"]}, schema=WORDS_SCHEMA), barrier=1_700_000_001_000)
    env = dict(os.environ)
    env["PYICEBERG_CATALOG__LAKE__URI"] = f"sqlite:///{directory}/catalog.db"
    env["PYICEBERG_CATALOG__LAKE__WAREHOUSE"] = f"file://{directory}/warehouse"
    return catalog, env, directory


def run(env, *args, check=True):
    proc = subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_resolve_prints_exactly_the_spec_json(lake):
    catalog, env, _ = lake
    out = json.loads(run(env, "--catalog", "lake", "resolve", "demo.words", "demo.word_counts", "--output", "json").stdout)
    assert set(out) == {"level", "barrier", "tables"}
    assert out["level"] == "repeatable-read" and out["barrier"] == 1_700_000_000_000
    assert set(out["tables"]) == {"demo.words", "demo.word_counts"}
    for entry in out["tables"].values():
        assert set(entry) == {"snapshot_id", "barrier"}
    first_words = catalog.load_table("demo.words").snapshots()[0].snapshot_id
    counts_head = catalog.load_table("demo.word_counts").metadata.snapshot_by_name("main").snapshot_id
    assert out["tables"]["demo.words"] == {"snapshot_id": first_words, "barrier": 1_700_000_000_000}
    assert out["tables"]["demo.word_counts"]["snapshot_id"] == counts_head


def test_resolve_levels_and_as_of(lake):
    catalog, env, _ = lake
    ru = json.loads(run(env, "-c", "lake", "-o", "json", "resolve", "demo.words", "--level", "read-uncommitted").stdout)
    assert ru["barrier"] is None
    assert ru["tables"]["demo.words"]["snapshot_id"] == catalog.load_table("demo.words").metadata.current_snapshot_id
    old = json.loads(run(env, "-c", "lake", "resolve", "demo.words", "--as-of", "2023-11-14T22:13:20.500Z", "-o", "json").stdout)
    assert old["barrier"] == 1_700_000_000_500
    assert old["tables"]["demo.words"]["snapshot_id"] == catalog.load_table("demo.words").snapshots()[0].snapshot_id
    before = run(env, "-c", "lake", "resolve", "demo.words", "--as-of", "2000-01-01T00:00:00Z", check=False)
    assert before.returncode == 1 and "before the first barrier" in before.stderr  # protocol §4.4: holds nothing
    seconds = run(env, "-c", "lake", "resolve", "demo.words", "--as-of", "1700000000", check=False)
    assert seconds.returncode == 1 and "1700000000000" in seconds.stderr  # the value it would have in ms


def test_resolve_sql_output_is_runnable_text(lake):
    catalog, env, _ = lake
    out = run(env, "-c", "lake", "resolve", "demo.words", "demo.word_counts", "--sql").stdout
    first = catalog.load_table("demo.words").snapshots()[0].snapshot_id
    assert f"CREATE OR REPLACE TEMPORARY VIEW `words` AS SELECT * FROM `lake`.`demo`.`words` VERSION AS OF {first};" in out
    assert "-- repeatable-read cut at barrier 1700000000000" in out


def test_status_lineage_history_json(lake):
    catalog, env, _ = lake
    status = json.loads(run(env, "-c", "lake", "-o", "json", "status").stdout)
    by_table = {row["table"]: row for row in status}
    assert set(by_table) == {"demo.words", "demo.word_counts"}
    assert by_table["demo.word_counts"]["job"] == "word-count" and by_table["demo.word_counts"]["lease"] == "live"
    assert by_table["demo.words"]["watermark"] == 1_700_000_001_000
    assert by_table["demo.word_counts"]["own_delay_ms"] == 1_000

    lineage = json.loads(run(env, "-c", "lake", "lineage", "-o", "json").stdout)
    assert lineage["edges"] == [{"source": "demo.words", "sink": "demo.word_counts"}]
    assert lineage["jobs"] == [{"job": "word-count", "sources": ["demo.words"], "sinks": ["demo.word_counts"]}]

    history = json.loads(run(env, "-c", "lake", "history", "demo.word_counts", "-o", "json", "--limit", "0").stdout)
    snapshots = [s for s in catalog.load_table("demo.word_counts").metadata.snapshots
                 if P.FENCE_REASON not in s.summary.additional_properties]  # the fence ref's snapshot is not history
    assert len(history) == len(snapshots)
    tagged = {s.snapshot_id: s.summary.get(P.BARRIER) for s in snapshots}
    for entry in history:
        assert (str(entry["raw_barrier"]) if entry["raw_barrier"] is not None else None) == tagged[entry["snapshot_id"]]


def test_text_output_is_a_table(lake):
    _, env, _ = lake
    out = run(env, "-c", "lake", "status").stdout
    assert "demo.word_counts" in out and "word-count" in out and "┃" in out


def test_advance_watermark(lake, tmp_path):
    catalog, env, _ = lake
    catalog.create_table("demo.idle", schema=WORDS_SCHEMA)
    out = json.loads(run(env, "-c", "lake", "-o", "json", "advance-watermark", "demo.idle", "1700000005000").stdout)
    assert out == {"table": "demo.idle", "watermark": 1_700_000_005_000}
    assert catalog.load_table("demo.idle").metadata.properties[P.WATERMARK] == "1700000005000"
    back = run(env, "-c", "lake", "advance-watermark", "demo.idle", "1700000004000", check=False)
    assert back.returncode == 1 and "never moves back" in back.stderr
    # protocol §3.8: seconds are refused naming their milliseconds; now-D is the clock minus D
    seconds = run(env, "-c", "lake", "advance-watermark", "demo.idle", "1700000006", check=False)
    assert seconds.returncode == 1 and "in seconds 1700000006 would be 1700000006000" in seconds.stderr, seconds.stderr
    before = int(time.time() * 1000)
    out = json.loads(run(env, "-c", "lake", "-o", "json", "advance-watermark", "demo.idle", "now-1h").stdout)
    assert before - 3_600_000 <= out["watermark"] <= int(time.time() * 1000) - 3_600_000
    before = int(time.time() * 1000)  # the short form, which click would take for an option
    out = json.loads(run(env, "-c", "lake", "-o", "json", "advance-watermark", "demo.idle", "-30m").stdout)
    assert before - 1_800_000 <= out["watermark"] <= int(time.time() * 1000) - 1_800_000


def test_advance_watermark_allow_future(lake):
    catalog, env, _ = lake
    catalog.create_table("demo.future", schema=WORDS_SCHEMA)
    far = "2199-01-01T00:00:00Z"  # the last plausible years (protocol §3.8)
    plain = run(env, "-c", "lake", "advance-watermark", "demo.future", far, check=False)
    assert plain.returncode == 1 and "in the future" in plain.stderr and "Traceback" not in plain.stderr
    assert P.WATERMARK not in catalog.load_table("demo.future").metadata.properties
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", plain.stderr))
    assert "--allow-future" in named  # the way out is named...
    command = cli.commands["advance-watermark"]
    existing = {opt for param in command.params for opt in param.opts if opt.startswith("--")}
    assert named <= existing, named - existing  # ...and every option it names exists
    assert "--allow-future" in run(env, "advance-watermark", "--help").stdout

    out = json.loads(run(env, "-c", "lake", "-o", "json", "advance-watermark", "demo.future", far, "--allow-future").stdout)
    assert out == {"table": "demo.future", "watermark": 7_226_582_400_000}
    assert catalog.load_table("demo.future").metadata.properties[P.WATERMARK] == "7226582400000"


@pytest.mark.parametrize(
    "args, message",
    [
        (["resolve", "demo.missing"], "demo.missing does not exist"),
        (["resolve", "demo.words", "--as-of", "last tuesday"], "neither milliseconds"),
        (["history", "nonamespace"], "namespace.table"),
        (["--catalog", "nowhere", "status"], "cannot load catalog 'nowhere'"),
        (["revise", "demo.words", "--to-barrier", "2100-01-01T00:00:00Z"], "lies 2"),  # ... years in the future
        (["resolve", "demo.words", "--as-of", "2100-01-01T00:00:00Z"], "in the future: it would read the newest cut"),
    ],
)
def test_errors_are_one_line_without_traceback(lake, args, message):
    _, env, _ = lake
    if args[0] != "--catalog":
        args = ["-c", "lake", *args]
    proc = run(env, *args, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_verbose_shows_the_traceback(lake):
    _, env, _ = lake
    proc = run(env, "--verbose", "-c", "lake", "resolve", "demo.missing", check=False)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "TableNotFoundError" in proc.stderr


def test_bad_level_is_a_usage_error(lake):
    _, env, _ = lake
    proc = run(env, "-c", "lake", "resolve", "demo.words", "--level", "serializable", check=False)
    assert proc.returncode == 2 and "serializable" in proc.stderr


def test_catalog_from_pyiceberg_yaml(lake, tmp_path):
    _, env, directory = lake
    home = tmp_path / "home"
    home.mkdir()
    (home / ".pyiceberg.yaml").write_text(
        f"catalog:\n  lake:\n    uri: sqlite:///{directory}/catalog.db\n    warehouse: file://{directory}/warehouse\n"
    )
    clean = {k: v for k, v in env.items() if not k.startswith("PYICEBERG_")}
    clean["PYICEBERG_HOME"] = str(home)
    out = json.loads(run(clean, "--catalog", "lake", "resolve", "demo.words", "-o", "json").stdout)
    assert out["barrier"] == 1_700_000_001_000


@pytest.mark.slow  # one interpreter start per command: 6-15 s
def test_every_command_has_help_with_an_example(lake):
    _, env, _ = lake
    assert cli.commands, "no commands registered"
    for name in cli.commands:
        out = run(env, name, "--help").stdout
        assert "Example" in out and "consistent-catalog" in out, name


def test_readme_cli_section_lists_every_command():
    readme = (ROOT / "README.md").read_text()
    section = re.split(r"\n#{2,3} ", readme.split("## CLI", 1)[1], maxsplit=1)[0]
    documented = set(re.findall(r"^consistent-catalog (?:\[[^\]]*\] )*([a-z-]+)", section, flags=re.M))
    assert documented == set(cli.commands)


def test_history_by_epoch_json(lake):
    catalog, env, _ = lake
    epochs = json.loads(run(env, "-c", "lake", "history", "demo.word_counts", "--epochs", "-o", "json").stdout)
    assert [e["barrier"] for e in epochs] == [1_700_000_000_000]
    head = catalog.load_table("demo.word_counts").metadata.snapshot_by_name("main")
    assert epochs[0]["snapshot_ids"][-1] == head.snapshot_id and epochs[0]["added_records"] == 2
    assert epochs[0]["published_at_ms"] >= epochs[0]["staged_at_ms"]


def test_the_cli_adds_the_command_that_is_the_way_out(tmp_path):
    """The library's message states the problem; the command line appends the command to run."""
    catalog = sqlite_catalog(tmp_path)
    catalog.create_namespace("demo")
    catalog.create_table("demo.empty", schema=WORDS_SCHEMA)
    env = {**os.environ, "PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{tmp_path}/catalog.db",
           "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{tmp_path}/warehouse"}
    proc = run(env, "-c", "lake", "resolve", "demo.empty", check=False)
    assert proc.returncode == 1
    line, = proc.stderr.strip().splitlines()
    assert line.startswith("error: demo.empty is an empty root table")
    assert line.endswith("(CLI: consistent-catalog advance-watermark demo.empty BARRIER)")
    assert run(env, "-c", "lake", "advance-watermark", "demo.empty", "1700000000000").returncode == 0  # the hint works
    assert run(env, "-c", "lake", "resolve", "demo.empty", "-o", "json").returncode == 0


def test_lineage_exports_the_graph_as_openlineage_job_events(lake):
    """``lineage --format openlineage``: one JobEvent per job, valid OpenLineage, matching the tables' own
    lineage properties read with pyiceberg (protocol §5.8, §10.3)."""
    pytest.importorskip("openlineage.client", reason="openlineage-python is not installed (pip install -e '.[dev]')")
    from tests.harness.openlineage import validate

    catalog, env, _ = lake
    env = {k: v for k, v in env.items() if not k.startswith("OPENLINEAGE")} | {"OPENLINEAGE_NAMESPACE": "pipelines"}
    events = json.loads(run(env, "-c", "lake", "lineage", "--format", "openlineage").stdout)
    for event in events:
        validate(event, "JobEvent")
    sink = catalog.load_table("demo.word_counts").properties
    namespace = env["PYICEBERG_CATALOG__LAKE__URI"]  # the catalog is the datasource of its tables
    assert [(e["job"]["namespace"], e["job"]["name"], [(d["namespace"], d["name"]) for d in e["inputs"]],
             [(d["namespace"], d["name"]) for d in e["outputs"]]) for e in events] == [
        ("pipelines", sink[P.JOB], [(namespace, s) for s in json.loads(sink[P.SOURCES])], [(namespace, "demo.word_counts")])]


def test_history_labels_the_registration_s_genesis_in_text_only(lake):
    """Issue 42.8: the 0-row snapshot without a barrier that registration gives an empty sink (protocol §6.1) reads
    ``genesis`` in the barrier column, with a line under the table saying what it is; the JSON stays as §10.4 has it."""
    catalog, env, _ = lake
    table = catalog.load_table("demo.word_counts")
    (first,) = [s for s in table.metadata.snapshots if s.parent_snapshot_id is None
                and P.FENCE_REASON not in s.summary.additional_properties]
    assert P.BARRIER not in first.summary.additional_properties and first.summary.get("added-records") in (None, "0")
    text = run(env, "-c", "lake", "history", "demo.word_counts").stdout
    row = next(line for line in text.splitlines() if str(first.snapshot_id) in line and "│" in line)
    assert "genesis" in row, text
    assert sum("genesis" in line and "│" in line for line in text.splitlines()) == 1, text  # the epochs keep barriers
    flat = " ".join(text.split())
    assert (f"genesis: snapshot {first.snapshot_id} is the empty first snapshot that registering job 'word-count' "
            "gave the table") in flat, text
    entries = json.loads(run(env, "-c", "lake", "history", "demo.word_counts", "-o", "json").stdout)
    (genesis,) = [e for e in entries if e["snapshot_id"] == first.snapshot_id]
    assert genesis["barrier"] is None and genesis["raw_barrier"] is None and genesis["job"] == "word-count"
    assert "genesis" not in json.dumps(entries)


def test_status_piped_puts_a_long_note_under_the_table_and_an_empty_catalog_gets_a_hint(tmp_path):
    """Issue 42.8: piped, a status note (here: data written outside the job) is ``[1]`` in its row and wrapped under
    the table at 100 columns, never inside an id; the rows stay one line each. A catalog without tables says what
    to do next instead of an empty table."""
    catalog = sqlite_catalog(tmp_path)
    env = {**os.environ, "PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{tmp_path}/catalog.db",
           "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{tmp_path}/warehouse"}
    env.pop("COLUMNS", None)
    empty = run(env, "-c", "lake", "status").stdout
    assert "no tables in catalog 'lake' yet. Next:" in " ".join(empty.split()) and "CREATE TABLE" in empty, empty
    assert "┃" not in empty and max(len(line) for line in empty.splitlines()) <= 100, empty
    assert json.loads(run(env, "-c", "lake", "status", "-o", "json").stdout) == []

    catalog.create_namespace("demo")
    catalog.create_table("demo.words", schema=WORDS_SCHEMA)
    catalog.create_table("demo.word_counts", schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    cc.ingest("demo.words", pa.table({"word": ["a"]}, schema=WORDS_SCHEMA), barrier=1_700_000_000_000)
    with cc.job("word-count", sources=["demo.words"], sinks=["demo.word_counts"], mode="overwrite",
                transform=lambda ctx: pa.table({"word": ["a"], "cnt": [1]}, schema=COUNTS_SCHEMA)) as job:
        job.run_epoch()
    counts = catalog.load_table("demo.word_counts")
    counts.append(pa.table({"word": ["x"], "cnt": [9]}, schema=COUNTS_SCHEMA))  # outside any job: status notes it
    untracked = catalog.load_table("demo.word_counts").metadata.current_snapshot_id
    rows = {r["table"]: r for r in json.loads(run(env, "-c", "lake", "status", "-o", "json").stdout)}
    error = rows["demo.word_counts"]["error"]
    assert error and str(untracked) in error and len(error) > 100, rows

    text = run(env, "-c", "lake", "status").stdout
    lines = text.splitlines()
    (row,) = [line for line in lines if line.startswith("│ demo.word_counts ")]
    (words_row,) = [line for line in lines if line.startswith("│ demo.words ")]
    assert "[1]" in row and len(row) == len(words_row), text  # the note no longer widens the table
    notes = lines[next(i for i, line in enumerate(lines) if line.startswith("[1] ")):]
    assert all(len(line) <= 100 for line in notes), text
    assert " ".join(" ".join(notes)[4:].split()) == " ".join(error.split())  # all of it, no word cut
    assert re.search(rf"(?<!\d){untracked}(?!\d)", "\n".join(notes)), text
    assert max(len(line) for line in lines) < len(error), text
