"""models/pipeline/open_statements.py: the stored statements of the newest open months are exactly what chargeback
computes, and are used only while they still are (no ingest since, same governance, same closed periods)."""
from __future__ import annotations

import polars as pl
import pytest

import test_chargeback as tc
from cost_helpers import Job, T, add_jobs, clone, refresh, template
from models.metrics import chargeback, freshness
from models.pipeline import open_statements as statement_mart
from models.pipeline import close


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return template(tmp_path_factory.mktemp("sm"), tc.JOBS, tc.NODES)


@pytest.fixture
def con(base, tmp_path):
    c = clone(base, tmp_path, tc.gov("proportional_usage"))
    refresh(c, tmp_path)
    yield c
    c.close()


def _same(a: chargeback.Statement, b: chargeback.Statement) -> None:
    assert (a.period, a.status, a.header) == (b.period, b.status, b.header)
    for part in ("lines", "recon", "rates"):
        assert getattr(a, part).equals(getattr(b, part)), part


def test_refresh_stores_the_horizon_month_and_the_one_before(con):
    # the horizon is in April (J6 runs Apr 1 - Apr 2): April and March are stored
    assert con.sql("SELECT period FROM open_statements ORDER BY 1").fetchall() == [("2026-03",), ("2026-04",)]
    for period in ("2026-03", "2026-04"):
        stored = chargeback.stored_open(con, period)
        assert stored is not None and not stored.detail and stored.jobs.height == 0
        _same(stored, chargeback.compute(con, period, detail=False))
        assert chargeback.statement(con, period, detail=False) is not None
    assert chargeback.stored_open(con, "2026-02") is None            # not stored: computed when asked for
    # with job-level detail the statement is always computed
    assert chargeback.statement(con, "2026-03").jobs.height > 0


def _nlp_gpu_hours(st: chargeback.Statement):
    return st.lines.filter((pl.col("team") == "nlp") & (pl.col("gpu_type") == "h100"))["gpu_hours"].sum()


def test_a_newer_ingest_makes_it_stale_until_the_next_refresh(con, tmp_path):
    before = chargeback.stored_open(con, "2026-03")
    add_jobs(con, tmp_path, [Job(7, "nlp", 1, T(25), T(26), node="h2")], name="late.psv")
    assert chargeback.stored_open(con, "2026-03") is None
    # reads never rebuild: until the refresh the statement is computed from the marts as they are, and says so
    _same(chargeback.statement(con, "2026-03", detail=False), before)
    assert freshness.note(con) is not None
    refresh(con, tmp_path)
    fresh = chargeback.statement(con, "2026-03", detail=False)
    assert _nlp_gpu_hours(fresh) - _nlp_gpu_hours(before) == 24 and freshness.note(con) is None
    _same(chargeback.stored_open(con, "2026-03"), fresh)
    _same(chargeback.compute(con, "2026-03", detail=False), fresh)


def test_closing_a_period_makes_the_next_one_stale(con):
    close.close_period(con, "2026-03")
    assert chargeback.stored_open(con, "2026-04") is None and chargeback.stored_open(con, "2026-03") is None
    _same(chargeback.statement(con, "2026-04", detail=False), chargeback.compute(con, "2026-04", detail=False))
    assert chargeback.statement(con, "2026-03", detail=False).status == "closed"


def test_no_governance_no_statements(base, tmp_path):
    c = clone(base, tmp_path)
    refresh(c, tmp_path)
    assert c.sql("SELECT count(*) FROM open_statements").fetchall() == [(0,)]
    c.close()
