"""The installed command in a real pseudo-terminal (issue #10, items 9 and 10).

Text tables never cut an id, a barrier or a tag, at 80, 100 and 120 columns (the ids are read
independently with pyiceberg); barriers carry a readable UTC time; no Python value (None, True,
False) leaks into text; JSON carries every reason. Before the fix, ``history`` at 100 columns printed
``67611125987230636`` for ``6761112598723063619``, pins showed ``expired False``, barriers were raw
milliseconds, and ``expire --dry-run -o json`` cut reasons with ``...``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.cli.main import cli
from consistent_catalog.exceptions import OwnershipError
from consistent_catalog.util.time import fmt_barrier, fmt_ms

pytestmark = pytest.mark.slow  # 15 runs of the installed command in a pseudo-terminal (part of make test)

EXE = str(Path(sys.executable).parent / "consistent-catalog")
TABLES = ["demo.words", "demo.word_counts", "demo.count_histogram"]
WIDTHS = (80, 100, 120)
WIDE = {
    "history": ["history", "demo.word_counts"],
    "status": ["status"],
    "resolve": ["resolve", *TABLES],
    "pins": ["pins"],
    "expire": ["expire", "--dry-run"],
}
"""The commands checked at every width."""
MORE = {
    "epochs": ["history", "demo.word_counts", "--epochs"],
    "lineage": ["lineage"],
    "retained": ["retain", "--list"],
    "details": ["expire", "--dry-run", "--details"],
    "pins-piped": ["pins"],
}
"""More text output, run in-process (no terminal needed to check its values)."""
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
PYTHON_VALUES = re.compile(r"\b(None|True|False)\b")


def pty_run(args: list[str], env: dict[str, str], columns: int) -> tuple[int, str]:
    """Run the installed command on a pseudo-terminal ``columns`` wide; (exit code, text without ANSI codes)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    proc = subprocess.Popen([EXE, *args], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    try:
        while select.select([master], [], [], 120)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command exited and closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    code = proc.wait(timeout=120)
    return code, ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def has(text: str, number: int) -> bool:
    """``number`` appears whole (not as part of a longer or a cut-off digit run)."""
    return re.search(rf"(?<!\d){number}(?!\d)", text) is not None


@dataclass
class Demo:
    catalog: SqlCatalog
    out: dict[tuple[str, int], tuple[int, str]]
    """(command key, width) -> (exit code, text) from the installed command on a pseudo-terminal."""
    more: dict[str, tuple[int, str]]
    """Command key -> (exit code, text) of the in-process runs (MORE, ``retain``)."""
    expire_json: dict
    cut: dict


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    """The demo catalog (4 epochs), five reader pins, one retained cut — and every command's output, run once."""
    directory = tmp_path_factory.mktemp("terminal")
    lake = {"PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{directory}/catalog.db",
            "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{directory}/warehouse"}
    runner = CliRunner(env=lake)

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, ["-c", "lake", *args], catch_exceptions=False)
        return result.exit_code, result.output

    built = runner.invoke(cli, ["demo", "--dir", str(directory), "--engine", "pyiceberg", "--epochs", "4",
                                "--rows-per-epoch", "100"], catch_exceptions=False)
    assert built.exit_code == 0, built.output
    catalog = SqlCatalog("lake", uri=lake["PYICEBERG_CATALOG__LAKE__URI"], warehouse=lake["PYICEBERG_CATALOG__LAKE__WAREHOUSE"])
    cc = ConsistentCatalog(catalog)
    for _ in range(5):  # five pins of one cut: its snapshots stay for more than four reasons
        cc.pins.pin(TABLES, ttl="1h")
    more = {"retain": invoke("retain", "--daily", "1")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_") and k not in ("COLUMNS", "LINES")}
    env.update(lake, TERM="xterm")
    with ThreadPoolExecutor(max_workers=2) as pool:  # one process per command and width: the slow part
        futures = {(key, width): pool.submit(pty_run, ["-c", "lake", *args], env, width)
                   for key, args in WIDE.items() for width in WIDTHS}
        more.update({key: invoke(*args) for key, args in MORE.items()})
        code, expire_json = invoke("expire", "--dry-run", "--details", "-o", "json")
        assert code == 0, expire_json
        out = {key: future.result() for key, future in futures.items()}
    return Demo(catalog, out, more, json.loads(expire_json), cc.resolve(TABLES).to_json())


def main_chain(table) -> list:
    """The snapshots of main, newest first, read with pyiceberg."""
    chain, current = [], table.metadata.current_snapshot_id
    while current is not None:
        snapshot = table.metadata.snapshot_by_id(current)
        chain.append(snapshot)
        current = snapshot.parent_snapshot_id
    return chain


def barrier_of(snapshot) -> int | None:
    value = (snapshot.summary.additional_properties if snapshot.summary else {}).get(P.BARRIER)
    return None if value is None else int(value)


def snapshot_ids(demo: Demo, name: str) -> set[int]:
    return {s.snapshot_id for s in demo.catalog.load_table(name).snapshots()}


def expected(demo: Demo, key: str) -> tuple[set[int], set[int]]:
    """(ids, barriers) that the text of command ``key`` must show whole, from pyiceberg (and the CLI's JSON)."""
    if key == "history":
        chain = main_chain(demo.catalog.load_table("demo.word_counts"))
        return {s.snapshot_id for s in chain}, {b for s in chain if (b := barrier_of(s)) is not None}
    if key == "status":
        marks = set()
        for name in TABLES:
            table = demo.catalog.load_table(name)
            mark = table.metadata.properties.get(P.WATERMARK)
            marks.add(int(mark) if mark is not None else max(b for s in main_chain(table) if (b := barrier_of(s))))
        return set(), marks
    if key == "resolve":
        for name, entry in demo.cut["tables"].items():
            assert entry["snapshot_id"] in snapshot_ids(demo, name)
        return {e["snapshot_id"] for e in demo.cut["tables"].values()}, {demo.cut["barrier"]}
    if key == "pins":
        ids, tags = set(), set()
        for name in TABLES:
            for ref, info in demo.catalog.load_table(name).metadata.refs.items():
                if ref.startswith("consistent-pin-"):
                    ids.add(info.snapshot_id)
                    tags.add(ref)
        assert len(tags) == 5
        return ids, set()
    if key == "expire":
        ids, barriers = set(), set()
        for name, plan in demo.expire_json["tables"].items():
            start = plan["history_start"]
            assert start["snapshot_id"] in snapshot_ids(demo, name)
            ids.add(start["snapshot_id"])
            if start["barrier"] is not None:
                barriers.add(start["barrier"])
        return ids, barriers
    raise KeyError(key)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("key", list(WIDE))
def test_ids_and_barriers_are_never_cut(demo, key, width):
    code, text = demo.out[(key, width)]
    assert code == 0, text
    ids, barriers = expected(demo, key)
    assert ids or barriers
    for number in ids | barriers:
        assert has(text, number), f"{number} is missing or cut in {key} at {width} columns:\n{text}"
    for barrier in barriers:  # wherever a barrier is shown, its UTC time is beside it
        shown = len(re.findall(rf"(?<!\d){barrier}(?!\d)", text))
        assert text.count(fmt_ms(barrier)) >= shown, f"barrier {barrier} without its readable time:\n{text}"
    if key == "pins":
        for name in TABLES:
            for ref in demo.catalog.load_table(name).metadata.refs:
                if ref.startswith("consistent-pin-"):
                    assert re.search(rf"{ref}(?![0-9a-f])", text), f"tag {ref} cut at {width} columns:\n{text}"
    # the table fits: the terminal never wraps a line (which would split an id across lines)
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert too_wide == [], f"{key} at {width} columns:\n{text}"


def test_narrow_terminal_hides_decorative_columns_and_says_which(demo):
    """history at 80 columns: ids and barriers stay, decorative columns go — named, with the way to see them."""
    _, text = demo.out[("history", 80)]
    flat = " ".join(text.split())  # the note wraps to the terminal's width
    note = re.search(r"\(hidden at 80 columns: ([^;]+); widen the terminal or use --output json\)", flat)
    assert note, text
    hidden = [h.strip() for h in note.group(1).split(",")]
    header = next(line for line in text.splitlines() if "snapshot_id" in line)
    assert hidden and all(h not in header.split() for h in hidden)
    assert {"snapshot_id", "barrier", "job"} <= set(header.replace("┃", " ").split())


@pytest.mark.parametrize("key", [*WIDE, *MORE, "retain"])
def test_text_output_has_no_python_values(demo, key):
    outputs = [demo.more[key]] if key in demo.more else [v for (k, _), v in demo.out.items() if k == key]
    for code, text in outputs:
        assert code == 0, text
        assert PYTHON_VALUES.search(text) is None, f"Python value in {key}:\n{text}"


def test_booleans_read_yes_or_no(demo):
    for _, text in (demo.out[("pins", 100)], demo.more["pins-piped"], demo.more["retained"]):
        assert re.search(r"\bno\b", text), text


def test_barriers_carry_a_readable_utc_time(demo):
    barrier = demo.cut["barrier"]
    code, text = demo.more["retain"]
    assert code == 0 and "consistent-daily-" in text, text
    assert has(text, barrier) and fmt_ms(barrier) in text, text  # retain: the retained cut's barrier
    _, epochs = demo.more["epochs"]
    for snapshot in main_chain(demo.catalog.load_table("demo.word_counts")):
        if (b := barrier_of(snapshot)) is not None:
            assert has(epochs, b) and fmt_ms(b) in epochs
    _, resolve = demo.out[("resolve", 120)]
    assert f"cut at barrier {fmt_barrier(barrier)}" in resolve


def test_json_carries_every_reason(demo):
    """expire --dry-run --details -o json: no reason list is cut with "...", however long."""
    longest = 0
    for name, plan in demo.expire_json["tables"].items():
        for entry in plan["keep"]:
            assert "..." not in entry["reasons"], entry
            longest = max(longest, len(entry["reasons"]))
        refs = demo.catalog.load_table(name).metadata.refs
        (pinned,) = {info.snapshot_id for ref, info in refs.items() if ref.startswith("consistent-pin-")}
        reasons = next(e["reasons"] for e in plan["keep"] if e["snapshot_id"] == pinned)
        pins = [r for r in reasons if r.startswith("tag consistent-pin-")]
        assert len(pins) == 5, reasons
    assert longest > 5
    _, details = demo.more["details"]
    assert "more)" in details  # the text keeps to the first reasons and says how many it left out


def test_error_messages_show_lease_times_readably(tmp_path):
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("demo")
    schema = pa.schema([pa.field("word", pa.string())])
    catalog.create_table("demo.words", schema=schema)
    catalog.create_table("demo.copy", schema=schema)
    cc = ConsistentCatalog(catalog)
    lease = cc.register_job("copy", ["demo.words"], ["demo.copy"])
    with pytest.raises(OwnershipError) as other_job:
        cc.register_job("other", ["demo.words"], ["demo.copy"])
    assert f"holds a lease until {fmt_barrier(lease.until_ms)}" in str(other_job.value)
    with pytest.raises(OwnershipError) as other_instance:
        cc.register_job("copy", ["demo.words"], ["demo.copy"], instance="second")
    message = str(other_instance.value)
    assert fmt_barrier(lease.until_ms) in message and "takeover=True" in message
    assert "(--takeover)" not in message  # no such option of a job: only the demo has --takeover


def test_the_one_configured_catalog_is_used_and_status_names_every_derived_table_s_job(demo):
    """Issue #23, items 5 and 6: with only ``lake`` configured a bare command uses it (two configured: the error
    names them); ``status`` shows the job that writes a derived table also after the job released its lease."""
    lake = {"PYICEBERG_CATALOG__LAKE__URI": demo.catalog.properties["uri"],
            "PYICEBERG_CATALOG__LAKE__WAREHOUSE": demo.catalog.properties["warehouse"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_") and k not in ("COLUMNS", "LINES")}
    env.update(lake, TERM="xterm")
    code, text = pty_run(["status"], env, 120)
    assert code == 0, text
    code, listed = pty_run(["status", "-o", "json"], env, 120)
    assert code == 0, listed
    jobs = {row["table"]: row["job"] for row in json.loads(listed)}
    for name in ("demo.word_counts", "demo.count_histogram"):
        table = demo.catalog.load_table(name)
        assert P.LEASE_HOLDER not in table.metadata.properties  # the demo's jobs released their tables
        job = main_chain(table)[0].summary.additional_properties[P.JOB]  # who wrote the last epoch, per pyiceberg
        assert jobs[name] == job == table.metadata.properties[P.JOB]  # and still own them
        assert job in next(line for line in text.splitlines() if name in line)
    two = {**env, "PYICEBERG_CATALOG__OTHER__URI": "sqlite:////nonexistent/other.db"}
    code, text = pty_run(["status"], two, 120)
    assert code == 1 and "cannot load catalog 'default'" in text and "lake, other" in text, text


def test_the_demo_says_what_a_rerun_does_and_ends_with_the_leases_as_they_are(tmp_path):
    """Issue #23.6: a second ``demo`` on the same directory says it has nothing to ingest (``--epochs`` is a
    total) and how to get more; the last lines show the tables after the jobs released them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_") and k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    args = ["demo", "--dir", str(tmp_path), "--engine", "pyiceberg", "--epochs", "2", "--rows-per-epoch", "10"]
    code, first = pty_run(args, env, 120)
    assert code == 0, first
    assert "already holds" not in first and "lease=live" not in first
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    for name in ("demo.word_counts", "demo.count_histogram"):
        assert P.LEASE_HOLDER not in catalog.load_table(name).metadata.properties  # released, as the lines say
        assert re.search(rf"{name} +derived +job=\S+ +lease=none", first), first
    code, again = pty_run(args, env, 120)
    assert code == 0, again
    assert "already holds 2 epochs of words (--epochs 2 is a total" in again and "--epochs 4 for 2 more" in again
    assert len(catalog.load_table("demo.words").snapshots()) == 2  # nothing ingested twice
