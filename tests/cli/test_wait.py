"""``consistent-catalog wait``: the installed command, its exit codes, JSON and one-line output (issue #22).

Barriers and bottlenecks expected here come from the metadata the fixture wrote (read back with pyiceberg).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from consistent_catalog import properties as P
from consistent_catalog.cli.main import EXIT_INTERRUPTED, EXIT_NOT_FRESH, cli
from consistent_catalog.demo import COUNTS, WORDS
from consistent_catalog.util.time import fmt_ms, now_ms
from tests.harness.lake import lagging_word_counts, words

EXE = str(Path(sys.executable).parent / "consistent-catalog")
T0 = 1_700_000_000_000
KEYS = ["fresh", "tables", "target", "barrier", "now", "delay_ms", "lagging_table", "bottleneck_job",
        "bottleneck_table", "bottleneck_delay_ms", "error", "waited_ms", "polls", "cut"]
"""protocol §10.9, in order."""


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """words (W = T0 + 1000) -> word_counts (W = T0): word-count is 1 s behind its source (tests leave it so)."""
    return build_lake(tmp_path_factory.mktemp("wait"))


@pytest.fixture
def own_lake(tmp_path):
    """The same lake, for a test that commits to it."""
    return build_lake(tmp_path)


def build_lake(directory):
    cc, _ = lagging_word_counts(directory, ("c",), T0)
    env = {**os.environ, "PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{directory}/catalog.db",
           "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{directory}/warehouse"}
    return cc, env


def opened_the_catalog(pid: int, env: dict, timeout: float = 60.0) -> None:
    """Wait until process ``pid`` has the lake's SQLite file open (seen in /proc: the command is polling)."""
    database = env["PYICEBERG_CATALOG__LAKE__URI"].removeprefix("sqlite:///")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == database for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except OSError:
            pass  # a descriptor closed meanwhile
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never opened {database}")


def run(env, *args):
    return subprocess.run([EXE, "-c", "lake", *args], env=env, capture_output=True, text=True, timeout=120)


def test_fresh_exits_0_with_the_spec_json(lake):
    cc, env = lake
    proc = run(env, "wait", WORDS, COUNTS, "--barrier", str(T0), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == KEYS
    assert out["fresh"] is True and out["tables"] == [WORDS, COUNTS] and out["polls"] == 1
    assert out["target"] == {"barrier": T0, "fresher_than_ms": None}
    assert out["barrier"] == T0 and out["delay_ms"] == out["now"] - T0 and out["error"] is None
    head = cc.catalog.load_table(COUNTS).metadata.snapshot_by_name("main").snapshot_id
    assert out["cut"] == {"level": "repeatable-read", "barrier": T0,
                          "tables": {WORDS: {"snapshot_id": cc.catalog.load_table(WORDS).snapshots()[0].snapshot_id,
                                             "barrier": T0},
                                     COUNTS: {"snapshot_id": head, "barrier": T0}}}


def test_timeout_exits_75_with_one_line_naming_the_delay_and_the_bottleneck(lake):
    cc, env = lake
    started = time.monotonic()
    proc = run(env, "wait", WORDS, COUNTS, "--fresher-than", "10m", "--timeout", "500ms", "--interval", "100ms")
    assert time.monotonic() - started < 60
    assert proc.returncode == EXIT_NOT_FRESH == 75, proc.stderr
    line, = proc.stdout.strip().splitlines()
    job = cc.catalog.load_table(COUNTS).metadata.properties[P.JOB]  # who writes the lagging table
    assert line.startswith("not fresh after ") and "wanted delay <= 10.0m" in line
    assert f"barrier {T0} ({fmt_ms(T0)})" in line and " ms)" in line  # raw ms beside readable times
    assert f"bottleneck: job {job} writing {COUNTS}, 1.0s behind its sources" in line
    assert proc.stderr == ""


def test_timeout_json(lake):
    _, env = lake
    proc = run(env, "wait", COUNTS, "--fresher-than", "10m", "--timeout", "0", "-o", "json")
    assert proc.returncode == 75
    out = json.loads(proc.stdout)
    assert list(out) == KEYS and out["fresh"] is False and out["polls"] == 1
    assert out["target"] == {"barrier": None, "fresher_than_ms": 600_000}
    assert (out["barrier"], out["lagging_table"], out["bottleneck_job"], out["bottleneck_table"],
            out["bottleneck_delay_ms"]) == (T0, COUNTS, "word-count", COUNTS, 1_000)


def test_blocks_until_another_process_commits(own_lake):
    """The command polls while this process ingests; it can only be fresh by seeing that commit."""
    cc, env = own_lake
    target = now_ms() + 1_500
    proc = subprocess.Popen([EXE, "-c", "lake", "wait", WORDS, "--barrier", str(target), "--timeout", "60s",
                             "--interval", "100ms", "--max-interval", "200ms", "-o", "json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while now_ms() <= target:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()  # still waiting: nothing reached the barrier yet
        snapshot = cc.ingest(WORDS, words("d")).snapshot_id  # system time: >= target
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    found = json.loads(out)
    assert found["fresh"] and found["barrier"] >= target  # (one poll, if the command started after the commit)
    assert found["cut"]["tables"][WORDS]["snapshot_id"] == snapshot


def test_ctrl_c_exits_130_in_one_line(lake):
    _, env = lake
    proc = subprocess.Popen([EXE, "-c", "lake", "wait", COUNTS, "--fresher-than", "1m", "--interval", "100ms"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        opened_the_catalog(proc.pid, env)  # past its imports: it has polled (a SIGINT during imports is Python's)
        time.sleep(3.0)  # its first poll imports pyarrow and resolves after the catalog file is open: >0.5 s here
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED == 130
    line, = err.strip().splitlines()
    assert line.startswith(f"interrupted: stopped waiting for {COUNTS}: barrier {T0}") and "Traceback" not in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["wait", COUNTS], "give exactly one of --fresher-than D (e.g. 10m) or --barrier B"),
        (["wait", COUNTS, "--fresher-than", "5m", "--barrier", str(T0)], "give exactly one of --fresher-than"),
        (["wait", COUNTS, "--fresher-than", "5 minutes"], "500ms, 90s, 30m"),
        (["wait", COUNTS, "--fresher-than", "-5m"], "not understood"),
        (["wait", COUNTS, "--fresher-than", "5m", "--timeout", "3600"], "--timeout 3600 has no unit"),
        (["wait", COUNTS, "--fresher-than", "600"], "write it with one: 600s, 600m or 600ms"),
        (["wait", COUNTS, "--fresher-than", "5m", "--interval", "2.5"], "--interval 2.5 has no unit"),
        (["wait", COUNTS, "--barrier", "1700000000"], "would be 1700000000000"),
        (["wait", COUNTS, "--barrier", "2100-01-01T00:00:00Z", "--timeout", "1h"], "give a longer timeout"),
        (["wait", "demo.missing", "--fresher-than", "5m"], "demo.missing does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(lake, args, message):
    _, env = lake
    proc = run(env, *args)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    line, = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line and proc.stdout == ""


def test_help_has_an_example_and_names_the_exit_codes():
    from click.testing import CliRunner

    out = CliRunner().invoke(cli, ["wait", "--help"], terminal_width=80).output
    assert "Example" in out and "consistent-catalog --catalog lake wait" in out
    assert "75" in out and "130" in out
    assert max(len(line) for line in out.splitlines()) <= 80
