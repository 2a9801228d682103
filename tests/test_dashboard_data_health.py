"""The Data health page shows the ingest audit: runs, rejected lines with reasons, unmapped accounts (AppTest)."""
from __future__ import annotations

import dashboard_fixtures as dfx
import gpuledger
from dashboard_fixtures import lab_copy, lab_db  # noqa: F401 (fixtures)
from dashboards.snapshot import Snapshot


def test_runs_rejects_and_unmapped_accounts(lab_db, monkeypatch):
    snap = Snapshot(lab_db)
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "data_health")
    runs = snap.frame("SELECT run_id, source, lines_read, rejected FROM ingest_runs ORDER BY run_id DESC")
    shown = dfx.frame_with(at, "Run", "Source", "Lines read", "Rejected")
    assert list(shown["Run"]) == runs["run_id"].to_list()
    assert list(shown["Source"]) == runs["source"].to_list()
    assert dfx.metric(at, "Lines read").value == f"{runs['lines_read'].sum():,}"
    # the late export has two unreadable lines; each is shown with its line number, field and reason
    assert dfx.metric(at, "Rejected lines").value == "2"
    rej = dfx.frame_with(at, "Input", "Line", "Field", "Reason")
    assert list(rej["Line"]) == [4, 5]
    assert list(rej["Field"])[0] == "submit" and "cannot read time 2026-10-20T25:61:00" in list(rej["Reason"])[0]
    assert "expected 21 fields" in list(rej["Reason"])[1]
    # where and why, never the line's content (it stays in the warehouse's rejects table, for operators)
    raw = snap.frame("SELECT raw FROM rejects")["raw"].to_list()
    assert len(raw) == 2 and list(rej.columns) == ["Run", "Source", "Input", "Line", "Field", "Reason"]
    assert not any(r in cell for r in raw for cell in _page_text(at))
    assert any("`rejects` table" in c.value for c in at.caption)
    # inputs are named by file name: no directory of the ingesting machine reaches a viewer
    assert set(rej["Input"]) == {"sacct-late.psv"}
    assert set(dfx.frame_with(at, "Run", "Input")["Input"]) >= {"sacct.psv", "nodes.txt", "governance.toml"}
    assert str(dfx.FIX) not in "\n".join(_page_text(at))
    # the ingest ran today, outside the data's window: the page says it shows the latest runs instead
    assert any("latest 100" in (f["layout"]["title"]["text"] or "") for f in dfx.figures(at))

    um = dfx.frame_with(at, "Slurm account", "Jobs", "GPU-hours (whole jobs)")
    want = snap.frame("""SELECT count(*) AS n FROM jobs WHERE team IS NULL AND account = 'guest'
                         AND submit >= '2026-09-21' AND submit < '2026-10-21'""")["n"][0]
    assert list(um["Slurm account"]) == ["guest"] and list(um["Jobs"]) == [want]
    assert any("map to no team" in w.value for w in at.warning)


def _page_text(at) -> list[str]:
    """Every text the page shows: its elements' text and every cell of its tables (opened)."""
    dfx.open_tables(at)
    parts = [e.value for kind in (at.markdown, at.caption, at.info, at.warning, at.error, at.success, at.code)
             for e in kind]
    parts += [str(v) for t in at.dataframe for v in t.value.astype(str).to_numpy().ravel()]
    parts += [str(c) for t in at.dataframe for c in t.value.columns]
    return parts


def test_failed_run_message_names_files_without_directories(lab_copy, tmp_path, monkeypatch):
    """A failed ingest's message names its input (and any other file) by base name on the page."""
    bad = tmp_path / "deep" / "dir" / "late.psv"
    bad.parent.mkdir(parents=True)
    bad.write_text((dfx.FIX / "sacct-late.psv").read_text())
    # a --delimiter the header line contradicts: the run fails, and its message names the file
    assert gpuledger.main(["-q", "--db", str(lab_copy), "ingest", "sacct", str(bad), "--delimiter", "^|^",
                           "--no-refresh"]) == 1
    dfx.cli(lab_copy, "refresh")
    snap = Snapshot(lab_copy)
    message = snap.frame("SELECT message FROM ingest_runs WHERE input_name = ?", [str(bad)])["message"][0]
    assert str(bad.parent) in message                 # the warehouse keeps the full path for operators
    at = dfx.open_page(dfx.app(lab_copy, monkeypatch), "data_health")
    runs = dfx.frame_with(at, "Run", "Input", "Status", "Message")
    shown = runs.filter(items=["Input", "Status", "Message"])[runs["Input"] == "late.psv"]
    assert len(shown) == 1 and shown["Status"].iloc[0] != "ok"
    assert "late.psv" in shown["Message"].iloc[0]
    assert str(tmp_path) not in "\n".join(_page_text(at))


def test_team_filter_without_unmapped_explains_itself(lab_db, monkeypatch):
    # a team filter without "(unmapped)" hides unmapped accounts and says how to see them
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "data_health", f_teams=["nlp"])
    assert any("add “(unmapped)”" in c.value for c in at.caption)


def test_telemetry_gaps_match_the_efficiency_model(lab_db, monkeypatch):
    import datetime as dt

    import polars as pl
    import pytest
    from models.metrics import efficiency
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "data_health")
    daily = efficiency.by_group(Snapshot(lab_db).cursor(), dt.datetime(2026, 9, 21), dt.datetime(2026, 10, 21),
                                by=["gpu_type"], bucket="day")
    want = {(f"{r['bucket']:%Y-%m-%d}", r["gpu_type"]): r["alloc_gpu_h"] - r["telemetry_gpu_h"]
            for r in daily.iter_rows(named=True) if r["alloc_gpu_h"] - r["telemetry_gpu_h"] > 0.005}
    shown = dfx.frame_with(at, "Day (UTC)", "Pool (GPU type)", "Without telemetry (GPU-hours)")
    got = dict(zip(zip(shown["Day (UTC)"], shown["Pool (GPU type)"]), shown["Without telemetry (GPU-hours)"]))
    assert got == pytest.approx(want)
    # the A100 nodes have no exporter at all: every day of theirs is a gap; the H100s report on 2026-10-12 only
    a100 = daily.filter(pl.col("gpu_type") == "a100")
    assert all((d, "a100") in got for d in a100["bucket"].dt.strftime("%Y-%m-%d"))
    h100 = {f"{r['bucket']:%Y-%m-%d}": r["coverage_pct"]
            for r in daily.filter(pl.col("gpu_type") == "h100").iter_rows(named=True)}
    assert h100["2026-10-12"] > 50 and ("2026-10-11", "h100") in got



def test_sources_of_the_collector_service_with_lag_and_last_error(lab_copy, monkeypatch, tmp_path):
    """`gpuledger serve` records each source's status; the page lists them, the failing one with its error."""
    import threading

    from models.service import config, loop
    cfg_path = tmp_path / "gpuledger.toml"
    cfg_path.write_text(f'[service]\nwarehouse = "{lab_copy}"\n[[clusters]]\nname = "lab"\n[clusters.nodes]\n'
                        "command = \"sh -c 'echo slurm_load_node: Unable to contact slurm controller >&2; exit 1'\"\n"
                        f'[clusters.events]\ncommand = "cat {dfx.FIX}/events.psv"\n', encoding="utf-8")
    collector = loop.Collector(config.load(cfg_path))
    assert collector.cycle(threading.Event())
    at = dfx.open_page(dfx.app(lab_copy, monkeypatch), "data_health")
    assert "Sources" in [s.value for s in at.subheader]
    shown = dfx.frame_with(at, "Cluster", "Source", "Last success (UTC)", "Lag (minutes)", "Failures in a row",
                           "Last error", "Complete to (UTC)")
    assert list(shown["Source"]) == ["events", "nodes"] and set(shown["Cluster"]) == {"lab"}
    events, nodes = shown.iloc[0], shown.iloc[1]
    assert events["Failures in a row"] == 0 and 0 <= events["Lag (minutes)"] < 5 and not isinstance(events["Last error"], str)
    assert nodes["Failures in a row"] == 1 and nodes["Last error"].endswith(
        "exited 1: slurm_load_node: Unable to contact slurm controller")
    assert str(nodes["Last success (UTC)"]) in ("NaT", "None")          # never succeeded
    assert {str(events["Complete to (UTC)"]), str(nodes["Complete to (UTC)"])} <= {"NaT", "None"}   # snapshots: no mark
    assert any("1 source(s) failing: lab/nodes" in e.value for e in at.error)


def test_no_sources_section_without_the_service(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "data_health")
    assert "Sources" not in [s.value for s in at.subheader]
