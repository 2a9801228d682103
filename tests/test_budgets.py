"""Budgets in the governance file and models/forecasting/budgets.py: parsing with one-line errors, charged so far =
the statements, the forecast's overlap arithmetic, `gpuledger report budgets` = the chargeback page (lab)."""
from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest
from hypothesis import given, strategies as st

import dashboard_fixtures as dfx
from dashboard_fixtures import FIX, lab_db  # noqa: F401 (the shared lab warehouse, without budgets)
from ingest import governance, warehouse
from ingest.errors import InputError
from models.forecasting import budgets
from models.metrics import chargeback

BUDGETS = """
[[budgets]]
team = "vision"
period = "month"
amount = "20000.00"

[[budgets]]
cost_center = "CC-100"
period = "quarter"
gpu_hours = 2000

[[budgets]]
team = "nlp"
period = "month"
amount = "100.00"
from = "2026-10"
"""


def with_budgets(extra: str) -> str:
    return (FIX / "governance.toml").read_text() + extra


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    d = tmp_path_factory.mktemp("budgets")
    db = dfx.build_lab(d)
    gov = d / "governance.toml"
    gov.write_text(with_budgets(BUDGETS))
    dfx.cli(db, "ingest", "governance", str(gov))
    return db


@pytest.mark.parametrize("text, where, problem", [
    ('[[budgets]]\nteam = "vision"\ncost_center = "CC-100"\namount = 1\n', "budgets[0]", "exactly one of team"),
    ('[[budgets]]\nteam = "nobody"\namount = 1\n', "budgets[0].team", "not declared in [[teams]]"),
    ('[[budgets]]\ncost_center = "CC-7"\namount = 1\n', "budgets[0].cost_center", "not declared"),
    ('[[budgets]]\nteam = "nlp"\nperiod = "year"\namount = 1\n', "budgets[0].period", "month, quarter"),
    ('[[budgets]]\nteam = "nlp"\n', "budgets[0]", "exactly one of amount"),
    ('[[budgets]]\nteam = "nlp"\namount = "-5"\n', "budgets[0].amount", "must be > 0"),
    ('[[budgets]]\nteam = "nlp"\ngpu_hours = 5\nfrom = 2026-01-15\n', "budgets[0].from", "first day of a month"),
    ('[[budgets]]\nteam = "nlp"\ngpu_hours = 5\n\n[[budgets]]\nteam = "nlp"\ngpu_hours = 9\nfrom = "2026-03"\n',
     "budgets[1]", "overlaps budgets[0]"),
    ('[[budgets]]\nteam = "nlp"\ngpu_hours = 5\nmonth = 3\n', "budgets[0].month", "unknown key"),
])
def test_bad_budgets_fail_in_one_line_naming_line_and_key(text, where, problem):
    src = with_budgets("\n" + text)
    with pytest.raises(InputError) as exc:
        governance.parse(src, "gov.toml")
    msg = str(exc.value)
    assert "\n" not in msg and f"key {where}" in msg and problem in msg
    first = src.count("\n", 0, src.index("[[budgets]]")) + 1
    assert exc.value.line_no is not None and exc.value.line_no >= first


def test_budgets_load_and_stay_out_of_the_statement_document():
    gov = governance.parse(with_budgets(BUDGETS), "gov.toml")
    assert [b[1:6] for b in gov.budgets] == [("team", "vision", "month", "money", 20000),
                                            ("cost_center", "CC-100", "quarter", "gpu_hours", 2000),
                                            ("team", "nlp", "month", "money", 100)]
    assert gov.budgets[2][6] == dt.datetime(2026, 10, 1)
    assert "budgets" not in json.loads(gov.settings["document"])     # a new budget never stales a statement


def test_period_labels():
    assert budgets.months_of("2026-Q4") == ["2026-10", "2026-11", "2026-12"]
    assert budgets.quarter_of("2026-05") == "2026-Q2"
    assert budgets.bounds("2026-Q1", "Europe/Berlin") == (dt.datetime(2025, 12, 31, 23), dt.datetime(2026, 3, 31, 22))
    with pytest.raises(ValueError, match="YYYY-QN"):
        budgets.months_of("2026-Q5")


DAYS = pl.DataFrame({"team": ["a", "a", "a", "b"],
                     "ts": [dt.datetime(2026, 3, 30), dt.datetime(2026, 3, 31), dt.datetime(2026, 4, 1),
                            dt.datetime(2026, 3, 31)],
                     "forecast": [24.0, 48.0, 96.0, 1000.0]})


def test_rest_counts_only_the_part_of_each_day_after_the_horizon_and_before_the_end():
    # horizon 2026-03-30 18:00 (6 h of 24 left of 24 GPU-h: 6), all of the 31st (48), end 2026-04-01 06:00 (6/24 of 96)
    got = budgets._rest(DAYS, ["a"], dt.datetime(2026, 3, 30, 18), dt.datetime(2026, 4, 1, 6))
    assert got == pytest.approx(6 + 48 + 24)
    assert budgets._rest(DAYS, ["a"], dt.datetime(2026, 4, 2), dt.datetime(2026, 4, 3)) == 0
    assert budgets._rest(DAYS, ["a", "b"], dt.datetime(2026, 3, 31, 12), dt.datetime(2026, 4, 1)) == \
        pytest.approx(24 + 500)


@given(st.integers(0, 72 * 60), st.integers(0, 72 * 60))
def test_rest_is_additive_over_a_split_of_the_span(a, b):
    lo, hi = sorted((a, b))
    t0 = dt.datetime(2026, 3, 30)
    h, mid, end = t0, t0 + dt.timedelta(minutes=lo), t0 + dt.timedelta(minutes=hi)
    whole = budgets._rest(DAYS, ["a"], h, end)
    assert whole == pytest.approx(budgets._rest(DAYS, ["a"], h, mid) + budgets._rest(DAYS, ["a"], mid, end))


def _lines(con, period: str) -> pl.DataFrame:
    return chargeback.statement(con, period, detail=False).lines


def test_report_actual_is_the_statements_and_forecast_adds_the_rest(lab):
    con = warehouse.connect(lab, read_only=True)
    rep = budgets.report(con).sort("budget_no")
    oct_lines = _lines(con, "2026-10")
    vision = rep.row(0, named=True)
    assert (vision["period"], vision["unit"], vision["budget"]) == ("2026-10", "money", 20000.0)
    want = float(oct_lines.filter(pl.col("team") == "vision")["total"].sum())
    assert vision["actual"] == pytest.approx(want, abs=0.005)
    hours = float(oct_lines.filter(pl.col("team") == "vision")["gpu_hours"].sum())
    assert vision["rate"] == pytest.approx(want / hours, rel=1e-6)
    assert vision["forecast_rest"] > 0 and vision["forecast"] == pytest.approx(vision["actual"] + vision["forecast_rest"])
    assert vision["forecast_pct"] == pytest.approx(100 * vision["forecast"] / 20000, abs=0.05)
    cc = rep.row(1, named=True)                  # Q4 so far is October: CC-100 = vision + nlp lines
    assert cc["period"] == "2026-Q4" and cc["period_end"] == dt.datetime(2027, 1, 1)
    assert cc["actual"] == pytest.approx(float(oct_lines.filter(pl.col("cost_center") == "CC-100")["gpu_hours"].sum()),
                                         abs=0.005)
    assert cc["horizon"] == vision["horizon"] and cc["forecast_rest"] > vision["forecast_rest"] / vision["rate"]


def test_a_past_period_is_actual_only_and_budgets_not_yet_in_force_are_left_out(lab):
    con = warehouse.connect(lab, read_only=True)
    rep = budgets.report(con, "2026-09").sort("budget_no")
    assert rep["name"].to_list() == ["vision", "CC-100"]        # nlp's budget starts in October
    sep = _lines(con, "2026-09")
    assert rep["forecast_rest"].to_list() == [0.0, 0.0] and rep["note"][0] == "period ended: actual only"
    assert rep["actual"][0] == pytest.approx(float(sep.filter(pl.col("team") == "vision")["total"].sum()), abs=0.005)
    assert budgets.report(con, "2026-Q3")["name"].to_list() == ["CC-100"]


def test_cli_report_is_the_chargeback_page(lab, monkeypatch, capsys):
    code = dfx.gpuledger.main(["--db", str(lab), "report", "budgets", "--period", "2026-10", "--format", "json"])
    assert code == 0
    cli = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in cli] == ["vision", "CC-100", "nlp"]
    at = dfx.open_page(dfx.app(lab, monkeypatch), "chargeback")
    page = dfx.frame_with(at, "Team or cost centre", "Forecast, period", "Forecast (% of budget)")
    assert list(page["Team or cost centre"]) == [r["name"] for r in cli]
    for col, key in (("Budget", "budget"), ("Charged so far", "actual"), ("Forecast, rest of period", "forecast_rest"),
                     ("Forecast, period", "forecast"), ("Forecast (% of budget)", "forecast_pct")):
        assert [float(x) for x in page[col]] == [r[key] for r in cli], col
    over = [w.value for w in at.warning if "forecast over 100 %" in w.value]
    assert over and "nlp 2026-10" in over[0]


def test_cli_says_why_without_budgets(lab_db, capsys):
    db = lab_db
    assert dfx.gpuledger.main(["--db", str(db), "report", "budgets"]) == 0
    assert "no budget in force" in capsys.readouterr().err
    assert dfx.gpuledger.main(["--db", str(db), "report", "budgets", "--period", "2026-13"]) == 1
    assert "report budgets: period '2026-13'" in capsys.readouterr().err


def test_a_team_leads_scoped_read_sees_its_own_team_budgets_only(lab):
    from dashboards.snapshot import Snapshot
    cur = Snapshot(lab).cursor('teams:["nlp"]')
    try:
        assert cur.sql("SELECT scope, name FROM budgets").fetchall() == [("team", "nlp")]
        rep = budgets.report(cur, "2026-10")
    finally:
        cur.close()
    assert rep["name"].to_list() == ["nlp"]
    whole = budgets.report(warehouse.connect(lab, read_only=True), "2026-10").filter(pl.col("name") == "nlp")
    assert rep.drop("budget_no").rows() == whole.drop("budget_no").rows()      # the lead sees the same figures
