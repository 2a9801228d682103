"""The Chargeback page shows models.chargeback's statement, its reconciliation and its jobs (AppTest, lab)."""
from __future__ import annotations

import io
import zipfile

import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_copy, lab_db  # noqa: F401 (fixtures)
from dashboards import model_reads as mr, queries
from dashboards.snapshot import Snapshot
from ingest import warehouse
from models.metrics import chargeback


@pytest.fixture(scope="module")
def october(lab_db):
    stmt = chargeback.statement(Snapshot(lab_db).cursor(), "2026-10")
    return stmt, chargeback.views(stmt)


def _eur(x) -> str:
    return f"{float(x):,.2f} EUR"


def test_statement_kpis_reconciliation_and_lines(lab_db, october, monkeypatch):
    stmt, views = october
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "chargeback")
    assert at.selectbox(key="cb_period").value == "2026-10"          # the month of the window's last day
    assert at.selectbox(key="cb_period").options == ["2026-10", "2026-09"]
    t = stmt.total_row
    assert dfx.metric(at, "Cluster cost").value == f"{float(t['cluster_cost']):,.0f} EUR"
    assert dfx.metric(at, "Charged to teams").value == f"{float(t['direct_cost'] + t['idle_allocated']):,.0f} EUR"
    assert dfx.metric(at, "Rounding residue").value == _eur(t["rounding_residue"])
    assert dfx.metric(at, "Rate variance").value == f"{float(t['rate_variance']):,.0f} EUR"
    assert f"of which idle shares {float(t['idle_allocated']):,.0f} EUR" in [c.value for c in at.caption]
    # the tiles add up to the cluster cost, as the reconciliation line does
    assert t["cluster_cost"] == (t["direct_cost"] + t["idle_allocated"] + t["unallocated_idle"] + t["rate_variance"]
                                 + t["rounding_residue"])
    # the export stops at 2026-10-20 12:00: October's statement is open and provisional, and says so
    assert stmt.status == "provisional"
    captions = " ".join(c.value for c in at.caption)
    assert "The accounting does not reach the end of the period yet" in captions
    # and it cannot be closed yet: the close's own refusal is said, and its button is not offered
    refusal = chargeback.close_refusal(stmt)
    assert refusal == ("the accounting does not reach the end of the period yet (lab: 2026-10-01 00:00 to "
                       "2026-10-20 11:45); ingest the rest of the month first")
    assert f"2026-10 cannot be closed yet: {refusal}." in captions
    assert at.button(key="cb_close").disabled
    recon = [s.value for s in at.success if s.value.startswith("Cluster cost")]
    assert recon and recon[0].endswith("reconciles to the cent.")
    m = lambda x: f"{float(x):,.2f}"     # noqa: E731
    assert recon[0] == (f"Cluster cost {m(t['cluster_cost'])} EUR = charged to teams "
                        f"{m(t['direct_cost'] + t['idle_allocated'])} (direct {m(t['direct_cost'])} + idle shares "
                        f"{m(t['idle_allocated'])}) + unallocated idle {m(t['unallocated_idle'])} + rate variance "
                        f"{m(t['rate_variance'])} + rounding residue {m(t['rounding_residue'])} — reconciles to the "
                        "cent.")

    lines = dfx.frame_with(at, "Team", "Pool (GPU type)", "Total (EUR)")
    want = views["by team"].with_columns(pl.col("team").fill_null("(unmapped)"))
    assert len(lines) == want.height == 8
    assert [float(x) for x in lines["Total (EUR)"]] == pytest.approx([float(x) for x in want["total"]])
    assert sum(float(x) for x in lines["Total (EUR)"]) == pytest.approx(float(t["direct_cost"] + t["idle_allocated"]))
    assert "(unmapped)" in set(lines["Team"])                         # the guest account is charged, not dropped
    assert dfx.downloads(at) == ["Download CSV", "Statement CSV", "Workbook XLSX", "Download CSV", "Download CSV"]


def test_filters_and_drill_down_to_jobs(lab_db, october, monkeypatch):
    stmt, views = october
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "chargeback", f_teams=["vision"], f_pools=["h100"])
    lines = dfx.frame_with(at, "Team", "Pool (GPU type)", "Total (EUR)")
    assert list(lines["Team"]) == ["vision"] and list(lines["Pool (GPU type)"]) == ["h100"]
    assert at.selectbox(key="cb_drill").value == "vision · h100"
    jobs = dfx.frame_with(at, "Job", "GPU-hours in period")
    want = views["jobs"].filter((pl.col("team") == "vision") & (pl.col("gpu_type") == "h100"))
    line = views["by team"].filter((pl.col("team") == "vision") & (pl.col("gpu_type") == "h100")).row(0, named=True)
    assert len(jobs) == want.height == line["jobs"]
    assert sum(float(x) for x in jobs["GPU-hours in period"]) == pytest.approx(float(line["gpu_hours"]), abs=1e-3)
    # a statement for a month without data still reconciles (September started on the 21st)
    at.selectbox(key="cb_period").set_value("2026-09").run()
    assert not at.exception
    assert any(s.value.endswith("reconciles to the cent.") for s in at.success)


def test_workbook_download_is_the_cli_workbook(lab_db, tmp_path, monkeypatch):
    """The page's XLSX is `gpuledger chargeback --out X.xlsx`'s workbook: same sheets, cells and number formats
    (amounts show the currency). Only the creation stamp differs for an open month (the CLI stamps the time it
    ran, the page the snapshot's publication), so every part but the document properties is compared."""
    monkeypatch.setenv("GPULEDGER_DB", str(lab_db))
    got = mr.statement_xlsx(queries.current().version, "2026-10")
    out = tmp_path / "october.xlsx"
    dfx.cli(lab_db, "chargeback", "--period", "2026-10", "--out", str(out))
    page, cli = zipfile.ZipFile(io.BytesIO(got)), zipfile.ZipFile(out)
    assert page.namelist() == cli.namelist()
    for name in page.namelist():
        if name != "docProps/core.xml":
            assert page.read(name) == cli.read(name), name
    assert b'formatCode="#,##0.00 &quot;EUR&quot;"' in page.read("xl/styles.xml")


def test_closing_a_period_from_the_page_freezes_it_and_says_so(lab_copy, monkeypatch):
    """The page's one writing action, end to end: the button closes the month (the CLI's close, in a child
    process), the page then shows the outcome and the statement as closed, and offers no second close."""
    at = dfx.open_page(dfx.app(lab_copy, monkeypatch), "chargeback", cb_period="2026-09")
    assert at.selectbox(key="cb_period").value == "2026-09"
    at.button(key="cb_close").click().run()
    assert not at.exception, [e.value for e in at.exception]
    said = [s.value for s in at.success if s.value.startswith("closed 2026-09 ")]
    assert len(said) == 1 and said[0].endswith("(by local operator)"), [s.value for s in at.success]
    assert not [b for b in at.button if b.key == "cb_close"]          # a closed month offers no close
    assert "Closed" in " ".join(c.value for c in at.caption)
    with warehouse.connect(lab_copy, read_only=True) as con:
        assert con.sql("SELECT period FROM statements").fetchall() == [("2026-09",)]
