"""The dashboard tests' warehouse: the lab cluster of tests/fixtures/dashboard (real Slurm formats and a
governance file), loaded through the real CLI ingestors and refreshed, so its serving snapshot is what a
site's would be. Built once per test process and shared read-only (the dashboard never writes)."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import gpuledger
from dashboards.ui import FAILED_TEXT

FIX = Path(__file__).resolve().parent / "fixtures" / "dashboard"
APP = Path(__file__).resolve().parent.parent / "dashboards" / "app.py"
_built: dict[str, Path] = {}


def cli(db: Path, *argv: str) -> None:
    code = gpuledger.main(["-q", "--db", str(db), *argv])
    assert code == 0, f"gpuledger {' '.join(argv)} exited {code}"


def build_lab(directory: Path, late: bool = True, extra_sacct: tuple[Path, ...] = ()) -> Path:
    """Ingest the lab cluster into ``directory``/lab.duckdb and publish its serving snapshot (``extra_sacct``:
    more sacct exports, ingested before the governance file's refresh)."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "lab.duckdb"
    cli(db, "ingest", "nodes", str(FIX / "nodes.txt"), "--cluster", "lab", "--as-of", "2026-09-21T00:00:00",
        "--no-refresh")
    cli(db, "ingest", "events", str(FIX / "events.psv"), "--no-refresh")
    cli(db, "ingest", "sacct", str(FIX / "sacct.psv"), "--no-refresh")
    if late:  # two more pending jobs and two unreadable lines: the Data health page has rejects to show
        cli(db, "ingest", "sacct", str(FIX / "sacct-late.psv"), "--no-refresh")
    for path in extra_sacct:
        cli(db, "ingest", "sacct", str(path), "--no-refresh")
    # a day of DCGM telemetry on the H100 nodes: the efficiency figures have something to show
    cli(db, "ingest", "dcgm", str(FIX / "dcgm-h100-2026-10-12.prom"), "--cluster", "lab", "--no-refresh")
    cli(db, "ingest", "governance", str(FIX / "governance.toml"))   # re-maps teams, refreshes, publishes
    return db


def build_two_clusters(directory: Path) -> Path:
    """The lab cluster twice, as clusters "lab" and "lab2" (same node names and pools, the same jobs under the
    second cluster's name), in ``directory``/two.duckdb with its serving snapshot: pools shared by two clusters."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "two.duckdb"
    sacct2 = directory / "sacct-lab2.psv"
    sacct2.write_text((FIX / "sacct.psv").read_text().replace("|lab|", "|lab2|"))
    gov = directory / "governance.toml"
    gov.write_text((FIX / "governance.toml").read_text().replace(
        '[[clusters]]\nname = "lab"\ntimezone = "UTC"\n',
        '[[clusters]]\nname = "lab"\ntimezone = "UTC"\n\n[[clusters]]\nname = "lab2"\ntimezone = "UTC"\n', 1))
    for cluster in ("lab", "lab2"):
        cli(db, "ingest", "nodes", str(FIX / "nodes.txt"), "--cluster", cluster, "--as-of", "2026-09-21T00:00:00",
            "--no-refresh")
    cli(db, "ingest", "sacct", str(FIX / "sacct.psv"), "--no-refresh")
    cli(db, "ingest", "sacct", str(sacct2), "--no-refresh")
    cli(db, "ingest", "governance", str(gov))
    return db


@pytest.fixture(scope="session")
def two_clusters_db(tmp_path_factory) -> Path:
    """A warehouse of two clusters sharing their pool names (see build_two_clusters). Do not write to it."""
    if "two" not in _built:
        _built["two"] = build_two_clusters(tmp_path_factory.mktemp("two"))
    return _built["two"]


@pytest.fixture(scope="session")
def lab_db(tmp_path_factory) -> Path:
    """The shared lab warehouse (its serving snapshot beside it). Do not write to it."""
    if "lab" not in _built:
        _built["lab"] = build_lab(tmp_path_factory.mktemp("lab"))
    return _built["lab"]


@pytest.fixture
def lab_copy(lab_db, tmp_path) -> Path:
    """A private copy of the lab warehouse and its snapshot, for tests that ingest or republish."""
    for src in lab_db.parent.glob("lab*.duckdb"):
        shutil.copy2(src, tmp_path / src.name)
    for src in lab_db.parent.glob("lab*.serving"):      # the published view: Parquet parts and manifest
        shutil.copytree(src, tmp_path / src.name)
    return tmp_path / "lab.duckdb"


def app(db: Path | None, monkeypatch, timeout: float = 120):
    """An AppTest of the dashboard serving ``db``'s snapshot (None: a path with no warehouse)."""
    from streamlit.testing.v1 import AppTest
    monkeypatch.setenv("GPULEDGER_DB", str(db) if db else "/nonexistent/warehouse.duckdb")
    return AppTest.from_file(str(APP), default_timeout=timeout)


def open_page(at, page: str, **state):
    """Run the entry script, then switch to ``views/<page>.py`` (with widget ``state`` set first)."""
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page(f"views/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    failed = [e.value for e in at.error if FAILED_TEXT in e.value]
    assert not failed, failed
    return at


_CHART_TITLE = re.compile(r'<div class="gl-chart-title">(.*)</div>', re.S)


def figures(at) -> list[dict]:
    """Every plotly figure on the page, as plotly JSON, in page order, each with the title ui.chart drew above it
    as HTML put back as its layout's title (as the figure was built)."""
    out: list[dict] = []
    title = None

    def walk(node) -> None:
        nonlocal title
        for child in node.children.values():
            if child.type == "html" and (m := _CHART_TITLE.fullmatch(child.proto.body)):
                title = html.unescape(m.group(1))
            elif child.type == "plotly_chart":
                fig = json.loads(child.proto.spec)
                if title is not None:
                    fig["layout"].setdefault("title", {})["text"] = title
                out.append(fig)
                title = None
            elif hasattr(child, "children"):
                walk(child)
    walk(at._tree)
    assert len(out) == len(at.get("plotly_chart"))
    return out


def metric(at, label: str):
    hits = [m for m in at.metric if m.label == label]
    assert hits, f"no metric {label!r}; have {[m.label for m in at.metric]}"
    return hits[0]


def lazy_tables(at) -> list[str]:
    """Keys of the page's tables drawn only when opened (ui.table's collapsed sections), closed or open."""
    # a keyed element's id is "$$ID-<hash>-<key>"; ui.table's keys start with "open_"
    keys = [e.proto.id.split("-", 2)[-1] for e in at.expander if e.proto.id.startswith("$$ID-")]
    return [k for k in keys if k.startswith("open_")]


def open_tables(at):
    """Open every table of the page, as a viewer clicking each one (each opening reruns the page)."""
    keys = [k for k in lazy_tables(at) if not at.session_state[k]]
    for k in keys:
        at.session_state[k] = True
    if keys:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def frame_with(at, *labels: str):
    """The first table on the page whose columns include every label (what st.dataframe received, as pandas);
    opens the page's tables first."""
    open_tables(at)
    for el in at.dataframe:
        df = el.value
        if all(lab in df.columns for lab in labels):
            return df
    raise AssertionError(f"no table with columns {labels}; have {[list(e.value.columns) for e in at.dataframe]}")


def downloads(at) -> list[str]:
    """Labels of the page's download buttons (AppTest keeps no file bytes after a run: the browser test
    checks a downloaded file)."""
    return [d.proto.label for d in at.get("download_button")]


def env_without_db() -> dict:
    return {k: v for k, v in os.environ.items() if k != "GPULEDGER_DB"}
