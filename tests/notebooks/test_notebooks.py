"""Execute every notebook in notebooks/ on a real Jupyter kernel and check what it reports.

Each notebook creates its own catalog under ``$CONSISTENT_NOTEBOOK_DIR`` (set here to the test's
``tmp_path``) and ends with one ``RESULT {json}`` line. The tests parse that line and check the key
values again *independently*: the catalog the notebook left behind is opened with plain pyiceberg
(no consistent_catalog code) and the reported snapshot ids are scanned and recounted.

The kernel is this interpreter: a kernelspec written to a temporary directory (found through
``JUPYTER_PATH``) runs ``sys.executable``, and every notebook reports the ``sys.prefix`` it ran in.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL_NAME = "consistent-catalog-tests"
BARRIER = "consistent.barrier"

pytestmark = [pytest.mark.notebook]


# --- running a notebook -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kernel_name(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kernelspec that runs this very interpreter, visible only to this test session (no ~ writes)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "consistent-catalog tests",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(root))  # searched before the user's and the venv's kernelspecs
        yield KERNEL_NAME


def execute(path: Path, workdir: Path, kernel: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict, float]:
    """Run the notebook top to bottom on a fresh kernel; returns it with outputs, its RESULT and the seconds taken."""
    nbclient, nbformat = _jupyter()
    monkeypatch.setenv("CONSISTENT_NOTEBOOK_DIR", str(workdir))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # no display: figures still reach the notebook through %matplotlib inline
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name=kernel, resources={"metadata": {"path": str(workdir)}}
    )
    started = time.monotonic()
    client.execute()
    seconds = time.monotonic() - started
    print(f"{path.name}: executed in {seconds:.1f}s")
    return nb, result_of(nb), seconds


def _jupyter() -> tuple[Any, Any]:
    # imported here so that `make test-fast` still collects this module without the notebooks extra
    try:
        import nbclient
        import nbformat
    except ImportError as exc:  # make test installs the extra: a missing piece is a failure, not a skip
        pytest.fail(f"{exc}: install the notebooks extra (pip install 'consistent-catalog[notebooks]', or make setup)")
    return nbclient, nbformat


def stream_text(nb: Any) -> str:
    return "".join(
        output.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "stream" and output.name == "stdout"
    )


def result_of(nb: Any) -> dict:
    lines = [line for line in stream_text(nb).splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, f"expected exactly one RESULT line, found {len(lines)}"
    return json.loads(lines[0][len("RESULT ") :])


def png_outputs(nb: Any) -> list[bytes]:
    images = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            if output.output_type in ("display_data", "execute_result") and "image/png" in output.get("data", {}):
                images.append(base64.b64decode(output["data"]["image/png"]))
    return images


def text_outputs(nb: Any) -> list[str]:
    """What the code cells printed (stream outputs), cell by cell."""
    return [output.get("text", "") for cell in nb.cells if cell.cell_type == "code" for output in cell.outputs
            if output.output_type == "stream"]


def check_common(nb: Any, result: dict, workdir: Path, name: str) -> None:
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors  # nbclient raises on errors already; this also guards allow_errors changes
    assert Path(result["prefix"]).resolve() == Path(sys.prefix).resolve(), "the kernel ran another interpreter"
    assert Path(result["catalog_dir"]) == (workdir / Path(name).stem).resolve()
    assert result["invariants_ok"] is True


# --- independent checks with plain pyiceberg ---------------------------------------------------


class Lake:
    """The catalog a notebook left behind, opened with pyiceberg only."""

    def __init__(self, directory: str | Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        root = Path(directory)
        assert (root / "catalog.db").is_file(), f"no catalog in {root}"
        self.catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
        self._tables: dict[str, Any] = {}

    def table(self, name: str) -> Any:
        if name not in self._tables:
            self._tables[name] = self.catalog.load_table(name)
        return self._tables[name]

    def rows(self, name: str, snapshot_id: int | None) -> Any:
        table = self.table(name)
        if snapshot_id is None:
            return table.schema().as_arrow().empty_table()
        assert table.snapshot_by_id(snapshot_id) is not None, f"{name} has no snapshot {snapshot_id}"
        return table.scan(snapshot_id=snapshot_id).to_arrow()

    def summary(self, name: str, snapshot_id: int) -> dict[str, str]:
        snapshot = self.table(name).snapshot_by_id(snapshot_id)
        assert snapshot is not None and snapshot.summary is not None
        return dict(snapshot.summary.additional_properties)

    def head(self, name: str) -> int | None:
        snapshot = self.table(name).current_snapshot()
        return None if snapshot is None else snapshot.snapshot_id

    def main_ancestry(self, name: str) -> list[Any]:
        table, found = self.table(name), []
        snapshot = table.current_snapshot()
        while snapshot is not None:
            found.append(snapshot)
            snapshot = None if snapshot.parent_snapshot_id is None else table.snapshot_by_id(snapshot.parent_snapshot_id)
        return found

    def sources(self, name: str) -> list[str]:
        return json.loads(self.table(name).metadata.properties.get("consistent.sources", "[]"))

    def flip_totals(self, snapshot_ids: dict[str, int | None]) -> dict[str, Any]:
        """Protocol §7's quantities recomputed from the snapshots of one cut."""
        words = self.rows("demo.words", snapshot_ids["demo.words"])
        counts = self.rows("demo.word_counts", snapshot_ids["demo.word_counts"])
        all_words = words["word"].to_pylist()
        totals = {
            "count_words": words.num_rows,
            "sum_cnt": sum(counts["cnt"].to_pylist()),
            "count_word_counts": counts.num_rows,
            "words_per_word_match": counts.num_rows == len(set(all_words))
            and all(row["cnt"] == all_words.count(row["word"]) for row in counts.to_pylist()),
        }
        if "demo.count_histogram" in snapshot_ids:
            hist = self.rows("demo.count_histogram", snapshot_ids["demo.count_histogram"])
            expected: dict[int, int] = {}
            for cnt in counts["cnt"].to_pylist():
                expected[cnt] = expected.get(cnt, 0) + 1
            totals["sum_histogram_words"] = sum(hist["words"].to_pylist())
            totals["histogram_matches"] = expected == dict(zip(hist["cnt"].to_pylist(), hist["words"].to_pylist()))
        return totals


def snapshot_ids(cut: dict) -> dict[str, int | None]:
    return {name: part["snapshot_id"] for name, part in cut["tables"].items()}


def assert_consistent_cut(lake: Lake, cut: dict) -> dict[str, Any]:
    """The cut's snapshots satisfy protocol §7 and each carries a barrier at or below the cut's."""
    totals = lake.flip_totals(snapshot_ids(cut))
    assert totals["count_words"] == totals["sum_cnt"], totals
    assert totals["words_per_word_match"], "word_counts is not the word count of words at the cut"
    if "sum_histogram_words" in totals:
        assert totals["sum_histogram_words"] == totals["count_word_counts"], totals
        assert totals["histogram_matches"], totals
    for name, part in cut["tables"].items():
        raw = lake.summary(name, part["snapshot_id"]).get(BARRIER)
        assert raw is not None and int(raw) == part["barrier"] <= cut["barrier"], (name, raw, part, cut["barrier"])
    return totals


# --- per-notebook checks ------------------------------------------------------------------------


def check_quickstart(nb: Any, result: dict) -> None:
    lake = Lake(result["catalog_dir"])
    tables = ["demo.words", "demo.word_counts", "demo.count_histogram"]

    # the final repeatable-read cut: every table's main head, all at the newest ingested barrier
    final_cut = result["final_cut"]
    assert final_cut["level"] == "repeatable-read"
    assert snapshot_ids(final_cut) == {t: lake.head(t) for t in tables}
    totals = assert_consistent_cut(lake, final_cut)
    assert totals["count_words"] == result["final"]["count_words"] == 6 * 300  # 4 demo epochs + 2 late batches
    assert totals["sum_histogram_words"] == result["final"]["sum_histogram_words"]
    newest_words_barrier = max(int(s.summary.additional_properties[BARRIER]) for s in lake.main_ancestry("demo.words"))
    assert final_cut["barrier"] == newest_words_barrier

    # the historical cut: as_of a barrier between epochs, consistent there too, and older
    historical = result["historical_cut"]
    assert historical["barrier"] <= result["as_of"] < final_cut["barrier"]
    past = assert_consistent_cut(lake, historical)
    assert past["count_words"] == result["historical"]["count_words"] < totals["count_words"]

    # isolation levels on (words, word_counts) while word-count had crashed between stage and publish
    levels = result["levels"]
    recount = {}
    for level, seen in levels.items():
        ids = seen["snapshot_ids"]
        words = lake.rows("demo.words", ids["demo.words"]).num_rows
        cnt = sum(lake.rows("demo.word_counts", ids["demo.word_counts"])["cnt"].to_pylist())
        assert (words, cnt) == (seen["count_words"], seen["sum_cnt"]), level
        recount[level] = (words, cnt)
    assert recount["repeatable-read"][0] == recount["repeatable-read"][1]
    assert recount["read-committed"][0] == recount["read-committed"][1] > recount["repeatable-read"][0]
    assert recount["read-uncommitted"][0] != recount["read-uncommitted"][1]
    assert levels["read-uncommitted"]["barrier"] is None
    assert levels["repeatable-read"]["barrier"] < levels["read-committed"]["barrier"]
    staged = lake.summary("demo.word_counts", levels["read-committed"]["snapshot_ids"]["demo.word_counts"])
    assert int(staged[BARRIER]) == levels["read-committed"]["barrier"]  # the staged, never published epoch


UTC_TIME = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z")


def check_history_figures(nb: Any, checks: dict, lake: Lake) -> None:
    """Issue #23.8: what the figures show, from the matplotlib objects the notebook drew them with."""
    texts = checks["box_texts"]
    details = texts[1::2]  # per box: its name, then "<namespace or root> · W=<time>"
    assert len(details) == 4 and all("W=" in t and UTC_TIME.search(t) for t in details), texts
    assert any(t.startswith("root · W=") for t in details), texts  # the root's box too
    watermarks = {int(s.summary.additional_properties[BARRIER]) for s in lake.main_ancestry("demo.words")}
    assert any(ms_text(max(watermarks)) in t for t in details), (texts, max(watermarks))
    assert checks["labels_touching_boxes"] == 0 and checks["labels_touching_labels"] == 0
    assert checks["box_texts_outside_their_box"] == 0
    styles = checks["delay_styles"]
    assert styles["demo.words"] != styles["demo.word_counts"], styles  # drawn apart: both stay visible
    assert len({json.dumps(v) for v in styles.values()}) == len(styles)
    assert any("W(X): the barrier up to which table X is complete" in t for t in checks["delay_texts"])
    printed = "".join(text_outputs(nb))
    times = re.findall(r"\d\d:\d\d:\d\d\.\d{3}", printed)
    assert times and len(times) == len(UTC_TIME.findall(printed)), "a time printed without its date and zone"


def ms_text(ms: int) -> str:
    """A barrier as the notebook shows it (UTC, date included), computed here without consistent_catalog."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def check_history(nb: Any, result: dict) -> None:
    lake = Lake(result["catalog_dir"])
    images = png_outputs(nb)
    assert len(images) >= 3, f"expected the timeline, delay and lineage figures, got {len(images)} images"
    assert all(image.startswith(b"\x89PNG") for image in images)
    assert result["figures"] == ["barrier_timeline.png", "delays.png", "lineage.png"]
    for figure in result["figures"]:
        assert (Path(result["catalog_dir"]) / figure).read_bytes().startswith(b"\x89PNG")
    check_history_figures(nb, result["figure_checks"], lake)

    tables = result["tables"]
    assert tables == ["demo.words", "demo.word_counts", "demo.count_histogram", "demo.word_stats"]
    # history: snapshot and epoch counts recomputed from main's ancestry and the summaries' barriers
    for table in tables:
        ancestry = lake.main_ancestry(table)
        assert result["snapshots_per_table"][table] == len(ancestry), table
        barriers = {s.summary.additional_properties.get(BARRIER) for s in ancestry} - {None}
        assert result["epochs_per_table"][table] == len(barriers), table
    # word-count runs every epoch, count-histogram every 2nd, word-stats every 3rd (9 epochs)
    assert result["epochs_per_table"] == {
        "demo.words": 9,
        "demo.word_counts": 9,
        "demo.count_histogram": 4,
        "demo.word_stats": 3,
    }
    # lineage: the edges drawn are those in the tables' consistent.sources properties
    edges = sorted([source, table] for table in tables for source in lake.sources(table))
    assert result["lineage_edges"] == edges
    assert result["levels"] == {"demo.words": 0, "demo.word_counts": 1, "demo.count_histogram": 2, "demo.word_stats": 3}
    assert result["historical_cuts_checked"] == 9
    assert result["samples"] == 9

    # the current cut: protocol §7 plus both paths of the diamond agree
    cut = result["cut"]
    totals = assert_consistent_cut(lake, cut)
    stats = lake.rows("demo.word_stats", cut["tables"]["demo.word_stats"]["snapshot_id"]).to_pylist()
    assert stats == result["word_stats"] == [
        {"total_words": totals["count_words"], "distinct_words": totals["count_word_counts"]}
    ]


def check_spark(nb: Any, result: dict) -> None:
    lake = Lake(result["catalog_dir"])
    tables = ["demo.words", "demo.word_counts", "demo.count_histogram"]
    text = stream_text(nb)
    assert "CREATE OR REPLACE TEMPORARY VIEW `word_counts` AS SELECT * FROM `lake`.`demo`.`word_counts` VERSION AS OF" in text

    # the trap: latest snapshots disagreed (words had a batch word_counts had not seen)
    latest = result["latest"]
    assert latest["count_words"] != latest["sum_cnt"]
    assert latest["count_words"] == lake.rows("demo.words", lake.head("demo.words")).num_rows

    # the pinned views: Spark's totals equal pyiceberg's at the cut's snapshot ids
    cut = result["cut"]
    totals = assert_consistent_cut(lake, cut)
    assert result["pinned"] == {"count_words": totals["count_words"], "sum_cnt": totals["sum_cnt"]}
    assert totals["count_words"] == latest["sum_cnt"]  # the cut is where word_counts was
    spec7 = result["spec7_sql"]
    assert spec7["sum_histogram_words"] == spec7["count_word_counts"] == totals["count_word_counts"]
    assert spec7["missing_from_histogram"] == spec7["extra_in_histogram"] == 0

    # read_cut: the same cut, views named after the tables
    assert result["read_cut"]["cut"] == cut
    assert result["read_cut"]["views"] == {t: t.split(".")[1] for t in tables}
    assert result["read_cut"]["count_words"] == result["read_cut"]["sum_cnt"] == totals["count_words"]

    # after the Spark jobs: the heads, at the late barrier, written by Spark, consistent
    after = result["after_jobs"]
    assert snapshot_ids(after["cut"]) == {t: lake.head(t) for t in tables}
    assert after["cut"]["barrier"] == result["late_barrier"] > cut["barrier"]
    after_totals = assert_consistent_cut(lake, after["cut"])
    assert after["count_words"] == after["sum_cnt"] == after_totals["count_words"] == latest["count_words"]
    for table in ("demo.word_counts", "demo.count_histogram"):
        summary = lake.summary(table, lake.head(table))
        assert "spark.app.id" in summary, f"{table}'s head was not committed by Spark: {summary}"
    assert result["spark_stopped"] is True


CHECKS: dict[str, Callable[[Any, dict], None]] = {
    "01_quickstart.ipynb": check_quickstart,
    "02_history_and_freshness.ipynb": check_history,
    "03_spark_sql_on_a_cut.ipynb": check_spark,
}


def _notebooks() -> list[str]:
    return sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb"))


def _params() -> list[Any]:
    """Notebooks that start a SparkSession carry the spark marker too."""
    return [pytest.param(name, marks=[pytest.mark.spark] if "spark" in name else [], id=name) for name in _notebooks()]


def test_every_notebook_is_checked() -> None:
    found = _notebooks()
    assert set(CHECKS) <= set(found), f"missing notebooks: {sorted(set(CHECKS) - set(found))}"
    assert set(found) <= set(CHECKS), f"notebooks without checks in {__name__}: {sorted(set(found) - set(CHECKS))}"


@pytest.mark.parametrize("name", _notebooks())
def test_notebooks_are_stored_without_outputs(name: str) -> None:
    _, nbformat = _jupyter()
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{name}: cells {dirty} carry outputs; clear them before committing"


@pytest.mark.parametrize("name", _params())
def test_notebook_runs_and_reports(
    name: str, kernel_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb, result, _ = execute(NOTEBOOK_DIR / name, tmp_path, kernel_name, monkeypatch)
    check_common(nb, result, tmp_path, name)
    CHECKS[name](nb, result)
