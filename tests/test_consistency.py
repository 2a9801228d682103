"""The dashboard says what the library (and so the CLI) says (#13 items 5 and 6).

For windows of 7, 30 and 90 days, a calendar month, a custom window with edges inside an hour, and All, with no
filter, one team and one pool, each Overview tile's figure (dashboards/model_reads.py's headline functions, which
the Overview and the page each tile links to both call) equals the figure of the library reader the CLI prints
(`gpuledger report utilization|efficiency|fragmentation|fairness|queue`, `chargeback`, `forecast`); the
chargeback's allocated GPU-hours equal utilization's for the same month and filters; and the rendered pages show
exactly those figures.

The warehouse is the lab cluster of tests/dashboard_fixtures.py plus two late jobs whose submit and start put the
data horizon at 2026-10-20 12:13:47: not on an hour, not on a day. Built once for the module.
"""
from __future__ import annotations

import datetime as dt
import functools
import os
import shutil

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dashboard_fixtures as dfx
from dashboards import charts, model_reads as mr, ui
from dashboards.filters import Filters
from dashboards.snapshot import Snapshot
from ingest import warehouse
from models.definitions.labels import SIZE_CLASSES
from models.definitions.times import period_bounds
from models.forecasting import capacity
from models.metrics import blocked, chargeback, cost, efficiency, fairness, fragmentation, queue, timeline
from models.metrics import utilization

HORIZON = dt.datetime(2026, 10, 20, 12, 13, 47)
LATE = f"""{dfx.FIX.joinpath("sacct.psv").read_text().splitlines()[0]}
2101|2101|lab|gpu|normal|nlp|alice|RUNNING|0:0|2026-10-20T12:02:09|2026-10-20T12:02:09|2026-10-20T12:02:09|Unknown|00:11:38|08:00:00|1|8|billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=32G,node=1|billing=8,cpu=8,gres/gpu=2,mem=32G,node=1|a100-03|train-nlp-2101
2102|2102|lab|gpu|normal|vision|bob|PENDING|0:0|2026-10-20T12:13:47|2026-10-20T12:13:47|Unknown|Unknown|00:00:00|04:00:00|1|16||billing=16,cpu=16,gres/gpu=4,mem=64G,node=1|None assigned|train-vision-2102
"""

WINDOWS = {
    "7 days": Filters(dt.date(2026, 10, 14), dt.date(2026, 10, 21)),      # the sidebar's presets end on the
    "30 days": Filters(dt.date(2026, 9, 21), dt.date(2026, 10, 21)),      # horizon's day
    "90 days": Filters(dt.date(2026, 7, 23), dt.date(2026, 10, 21)),      # before the data: clipped to it
    "month": Filters(dt.date(2026, 9, 1), dt.date(2026, 10, 1)),          # a calendar month (the one closed below)
    "mid-hour": Filters(dt.datetime(2026, 10, 3, 7, 41, 13), dt.datetime(2026, 10, 17, 15, 22, 48)),
    "All": Filters(dt.date(2026, 9, 21), dt.date(2026, 10, 21)),
}
SCOPES = {"no filter": {}, "team": {"teams": ("nlp",)}, "pool": {"pools": ("h100",)}}
CASES = [(w, s) for w in WINDOWS for s in SCOPES]


def _f(window: str, scope: str) -> Filters:
    return Filters(WINDOWS[window].start, WINDOWS[window].end, **SCOPES[scope])


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(warehouse path, snapshot version, read-only cursor of the snapshot); GPULEDGER_DB points at it while
    this module runs (model_reads reads the snapshot it names)."""
    d = tmp_path_factory.mktemp("consistency")
    late = d / "sacct-late-running.psv"
    late.write_text(LATE)
    db = dfx.build_lab(d, extra_sacct=(late,))
    old = os.environ.get("GPULEDGER_DB")
    os.environ["GPULEDGER_DB"] = str(db)
    try:
        from dashboards.queries import current
        yield db, current().version, Snapshot(db).cursor()
    finally:
        if old is None:
            os.environ.pop("GPULEDGER_DB", None)
        else:
            os.environ["GPULEDGER_DB"] = old


def test_the_fixture_horizon_is_not_on_an_hour(lab):
    _, _, cur = lab
    assert timeline.horizon(cur) == HORIZON


# ---------------------------------------------------------------- the library figures, as the CLI computes them

def _one(df: pl.DataFrame, col: str, scope: str, dims: dict) -> float | None:
    """The value of ``col`` in the row of ``df`` the scope selects (dims: scope -> (column, value))."""
    if scope in dims:
        c, v = dims[scope]
        df = df.filter(pl.col(c) == v)
    return df[col][0] if df.height else None


@functools.cache   # 'All' is the 30 days here: computed once
def lib_allocation(cur, f: Filters, scope: str) -> float | None:
    if scope == "team":
        df = utilization.by_bucket(cur, f.t0, f.t1, "month", by=["team"])
        tot = df.filter(pl.col("team") == utilization.TOTAL_LABEL)
        mine = df.filter(pl.col("team") == "nlp")["allocated_gpu_h"].sum()
        avail = tot["available_gpu_h"].sum()
        return mine / avail if avail else None
    df = utilization.by_bucket(cur, f.t0, f.t1, "month", by=["gpu_type"] if scope == "pool" else None)
    if scope == "pool":
        df = df.filter(pl.col("gpu_type") == "h100")
    avail = df["available_gpu_h"].sum()
    return df["sreport_allocated"].sum() / avail if avail else None


@functools.cache   # 'All' is the 30 days here: computed once
def lib_efficiency(cur, f: Filters, scope: str) -> dict | None:
    by = {"team": ["team"], "pool": ["gpu_type"]}.get(scope, [])
    df = efficiency.by_group(cur, f.t0, f.t1, by=by, bucket=None)
    df = df.filter(pl.col(by[0]) == {"team": "nlp", "pool": "h100"}[scope]) if by else df
    return df.row(0, named=True) if df.height and df["alloc_gpu_h"][0] else None


@functools.cache   # 'All' is the 30 days here: computed once
def lib_fragmentation(cur, f: Filters, scope: str) -> float | None:
    return fragmentation.window_rate(cur, f.t0, f.t1, keep={"gpu_type": ["h100"]} if scope == "pool" else None)


@functools.cache   # 'All' is the 30 days here: computed once
def lib_blocked(cur, f: Filters, scope: str) -> float | None:
    df = blocked.blocked(cur, f.t0, f.t1, by={"team": ("team",), "pool": ("gpu_type",)}.get(scope, ("team",)))
    row = df.filter(pl.col({"pool": "gpu_type"}.get(scope, "team")) == {"team": "nlp", "pool": "h100"}.get(scope,
                                                                                                      "(all)"))
    if row.height == 0 or not row["wait_gpu_h"][0]:
        return None
    return row["fragmentation_gpu_h"][0] / row["wait_gpu_h"][0]


@functools.cache   # 'All' is the 30 days here: computed once
def lib_jain(cur, f: Filters, scope: str) -> float | None:
    end = min(f.t1, HORIZON)
    if end <= f.t0:
        return None
    pools = fairness.report(cur, [("w", f.t0, end)])["pools"]
    return _one(pools, "jain_pending_teams", "pool" if scope == "pool" else "all",
                {"pool": ("pool", "h100"), "all": ("pool", "(all)")})


@functools.cache   # 'All' is the 30 days here: computed once
def lib_p95(cur, f: Filters, scope: str) -> float | None:
    by = ("cluster",) + {"team": ("team",), "pool": ("pool",)}.get(scope, ())
    return _one(queue.waits(cur, f.t0, f.t1, by), "wait_p95_h", scope,
                {"team": ("team", "nlp"), "pool": ("pool", "h100")})


@functools.cache   # 'All' is the 30 days here: computed once
def lib_cost(cur, f: Filters, scope: str) -> float:
    lines = chargeback.views(chargeback.statement(cur, f.month))["by team"]
    if scope == "team":
        lines = lines.filter(pl.col("team") == "nlp")
    if scope == "pool":
        lines = lines.filter(pl.col("gpu_type") == "h100")
    return float(lines["total"].cast(pl.Float64).sum())


@pytest.fixture(scope="module")
def forecast(lab):
    _, _, cur = lab
    return capacity.forecast_warehouse(cur, 90, by=("pool",), measure="demanded", target_util=0.85, band="80")


# ---------------------------------------------------------------- tiles = library figures

@pytest.mark.parametrize("window,scope", CASES)
def test_every_overview_tile_equals_the_library_figure(lab, forecast, window, scope):
    _, v, cur = lab
    f = _f(window, scope)
    approx = lambda x: None if x is None else pytest.approx(x, rel=1e-9, abs=1e-12)   # noqa: E731
    assert mr.allocation_ratio(v, f) == approx(lib_allocation(cur, f, scope))

    got, want = mr.efficiency_total(v, f), lib_efficiency(cur, f, scope)
    assert (got is None) == (want is None)
    if want is not None:
        assert got["mean_pct"] == approx(want["mean_pct"])
        assert got["coverage_pct"] == approx(want["coverage_pct"])

    assert mr.fragmentation_rate(v, f) == approx(lib_fragmentation(cur, f, scope))
    assert mr.blocked_share(v, f) == approx(lib_blocked(cur, f, scope))
    assert mr.jain(v, f) == approx(lib_jain(cur, f, scope))
    w = mr.worst_wait(v, f)
    assert (w and w["wait_p95_h"]) == approx(lib_p95(cur, f, scope))
    assert mr.month_cost(v, f)["cost"] == pytest.approx(lib_cost(cur, f, scope), abs=1e-6)

    cap = forecast["capacity"]
    cap = cap.filter(pl.col("pool") == "h100") if scope == "pool" else cap.filter(pl.col("capacity_gpus").is_not_null())
    hits = cap.filter(pl.col("exhausted_upper80").is_not_null()).sort("exhausted_upper80")
    reached = mr.capacity_reached(v, f)
    assert reached == ({} if hits.height == 0 else {"date": hits["exhausted_upper80"][0], "pool": hits["pool"][0],
                                                    "capacity_gpus": hits["capacity_gpus"][0],
                                                    "already": hits["already_above"][0]})


def _statement_hours(cur, month: str, scope: str) -> float:
    lines = chargeback.views(chargeback.statement(cur, month))["by team"]
    if scope == "team":
        lines = lines.filter(pl.col("team") == "nlp")
    if scope == "pool":
        lines = lines.filter(pl.col("gpu_type") == "h100")
    return float(lines["gpu_hours"].cast(pl.Float64).sum())


@pytest.mark.parametrize("scope", list(SCOPES))
@pytest.mark.parametrize("month", ["2026-09", "2026-10"])
def test_chargeback_gpu_hours_equal_utilization_for_the_month(lab, month, scope):
    """October is provisional: it stops at the horizon, inside an hour, where the running jobs stop too."""
    _, v, cur = lab
    t0, t1 = period_bounds(month, chargeback.statement(cur, month, detail=False).policy.period_timezone)
    f = Filters(t0, t1, **SCOPES[scope])            # the statement's period as a UTC window
    u = mr.utilization(v, f, "month")
    assert _statement_hours(cur, month, scope) == pytest.approx(u["allocated_gpu_h"].sum(), abs=1e-5)


# ---------------------------------------------------------------- edges anywhere inside an hour

_EDGE = st.tuples(st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))


def _at(day: dt.date, hms: tuple[int, int, int]) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(*hms))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(d0=st.integers(0, 26), length=st.integers(0, 12), e0=_EDGE, e1=_EDGE,
       scope=st.sampled_from(list(SCOPES)))
def test_allocation_and_chargeback_hours_for_any_edges(lab, d0, length, e0, e1, scope):
    """Random window edges (hours, minutes, seconds), up to past the horizon: the Overview's allocation ratio is
    utilization's, and the GPU-seconds the chargeback prices (cost.job_allocations, the reader statements use)
    are utilization's allocated GPU-hours, for the same filters."""
    _, v, cur = lab
    t0 = _at(dt.date(2026, 9, 21) + dt.timedelta(days=d0), e0)
    t1 = _at(t0.date() + dt.timedelta(days=length), e1)
    if t1 <= t0:
        t1 = t0 + dt.timedelta(hours=1, seconds=1)
    f = Filters(t0, t1, **SCOPES[scope])
    assert mr.allocation_ratio(v, f) == (None if lib_allocation(cur, f, scope) is None
                                         else pytest.approx(lib_allocation(cur, f, scope), rel=1e-9))
    alloc = cost.job_allocations(cur, t0, t1)
    if scope == "team":
        teams = cur.sql("SELECT job_uid, team FROM jobs").pl()
        alloc = alloc.join(teams, on="job_uid").filter(pl.col("team") == "nlp")
    if scope == "pool":
        alloc = alloc.filter(pl.col("gpu_type") == "h100")
    u = mr.utilization(v, f, "month")
    want = u["allocated_gpu_h"].sum() if u is not None and u.height else 0.0
    assert float(alloc["gpu_s"].cast(pl.Float64).sum()) / 3600 == pytest.approx(want, rel=1e-9, abs=1e-6)


# ---------------------------------------------------------------- the pages show those figures

def _overview(db, monkeypatch, **state):
    return dfx.open_page(dfx.app(db, monkeypatch), "overview", **state)


def test_overview_and_pages_show_the_headline_figures(lab, monkeypatch):
    db, v, cur = lab
    f = WINDOWS["30 days"]
    state = {"f_dates": (f.start, f.end - dt.timedelta(days=1))}
    at = _overview(db, monkeypatch, **state)
    shown = dfx.metric(at, "Fragmentation rate").value
    at.switch_page("views/fragmentation.py").run()
    # the Fragmentation page's rate for the same window is the Overview's (they differed: 3.5 % vs 3.8 %)
    assert dfx.metric(at, "Fragmentation rate (FGD)").value == shown
    rate = lib_fragmentation(cur, f, "no filter")
    assert shown == ui.pct(rate)
    at.switch_page("views/overview.py").run()
    assert dfx.metric(at, "Allocation ratio").value == ui.pct(lib_allocation(cur, f, "no filter"))
    assert dfx.metric(at, "Waiting blocked by fragmentation").value == ui.pct(lib_blocked(cur, f, "no filter"))
    assert dfx.metric(at, "p95 queue wait").value == f"{lib_p95(cur, f, 'no filter'):.1f} h"
    assert dfx.metric(at, "Fairness (Jain index)").value == f"{lib_jain(cur, f, 'no filter'):.2f}"
    eff = lib_efficiency(cur, f, "no filter")
    assert dfx.metric(at, "GPU efficiency").value == f"{eff['mean_pct']:.1f} %"
    assert ui.coverage_text(eff["coverage_pct"]) in [c.value for c in at.caption]   # coverage beside the value
    at.switch_page("views/fairness.py").run()
    assert dfx.metric(at, "Fairness (Jain index)").value == f"{lib_jain(cur, f, 'no filter'):.2f}"


def test_one_pool_shows_that_pools_fairness_on_both_pages(lab, monkeypatch):
    db, v, cur = lab
    f = WINDOWS["30 days"]
    state = {"f_dates": (f.start, f.end - dt.timedelta(days=1)), "f_pools": ["h100"]}
    at = _overview(db, monkeypatch, **state)
    shown = dfx.metric(at, "Fairness (Jain index)").value
    at.switch_page("views/fairness.py").run()
    assert dfx.metric(at, "Fairness (Jain index)").value == shown        # the Overview showed the whole cluster's
    want = lib_jain(cur, f, "pool")
    assert shown == ("—" if want is None else f"{want:.2f}")


def test_changes_of_percentages_read_pp(lab, monkeypatch):
    db, _, _ = lab
    f = WINDOWS["7 days"]
    at = _overview(db, monkeypatch, f_dates=(f.start, f.end - dt.timedelta(days=1)))
    for label in ("Allocation ratio", "Fragmentation rate", "Waiting blocked by fragmentation"):
        delta = dfx.metric(at, label).delta
        assert not delta or delta.endswith(" pp"), (label, delta)
    table = dfx.frame_with(at, "Figure", "Unit", "Change")
    for fig, unit, change in zip(table["Figure"], table["Unit"], table["Change"]):
        if unit == "%" and change != "—":
            assert change.endswith(" pp"), (fig, change)


# ---------------------------------------------------------------- efficiency without telemetry

def test_efficiency_without_telemetry_is_unknown_and_coverage_is_shown(lab, monkeypatch):
    """The lab has telemetry on 2026-10-12 only: the last 7 days have none, the last 30 days some."""
    db, v, cur = lab
    week = WINDOWS["7 days"]
    state = {"f_dates": (week.start, week.end - dt.timedelta(days=1))}
    at = dfx.open_page(dfx.app(db, monkeypatch), "efficiency", **state)
    texts = [s.value for s in at.success] + [i.value for i in at.info]
    assert not any("No job left its GPUs idle" in t for t in texts), texts
    assert any("unknown — no telemetry" in t for t in texts)
    # no efficiency line is drawn over an empty axis; the per-team split (all "no telemetry") still is
    titles = [fig["layout"]["title"]["text"] for fig in dfx.figures(at)]
    assert not [t for t in titles if t.startswith("GPU efficiency by pool")], titles
    assert "Allocated vs active GPU-hours by team" in titles
    at.switch_page("views/overview.py").run()
    assert dfx.metric(at, "GPU efficiency").value == "—"
    assert "unknown — no telemetry" in [c.value for c in at.caption]
    assert lib_efficiency(cur, week, "no filter")["coverage_pct"] == 0
    # 30 days: telemetry on one day of them; the tile says how much it covers
    month = WINDOWS["30 days"]
    at = _overview(db, monkeypatch, f_dates=(month.start, month.end - dt.timedelta(days=1)))
    cov = lib_efficiency(cur, month, "no filter")["coverage_pct"]
    assert 0 < cov < 100
    assert f"telemetry covers {cov:.1f} % of allocated GPU-hours" in [c.value for c in at.caption]


# ---------------------------------------------------------------- running jobs

def test_a_running_job_is_listed_as_running_not_ending_at_the_horizon(lab, monkeypatch):
    db, v, cur = lab
    at = dfx.open_page(dfx.app(db, monkeypatch), "chargeback", f_teams=["nlp"], f_pools=["a100"])
    jobs = dfx.frame_with(at, "Job", "To (UTC)")
    row = dict(zip(jobs["Job"], jobs["To (UTC)"]))
    assert not any(str(x).startswith(f"{HORIZON:%Y-%m-%d %H:%M}") for x in jobs["To (UTC)"])
    assert row["2101"] == "running"
    running = timeline.running_jobs(cur).join(cur.sql("SELECT job_uid, job_id FROM jobs").pl(), on="job_uid")
    assert "2101" in running["job_id"].to_list() and set(running["horizon"]) == {HORIZON}
    # the worst offenders table of the efficiency page (on the telemetry day) names the end, or "running"
    per_job = efficiency.per_job(cur, HORIZON - dt.timedelta(hours=1), HORIZON + dt.timedelta(hours=1))
    assert per_job.filter(pl.col("job_id") == "2101")["running"].to_list() == [True]


# ---------------------------------------------------------------- size classes, date range, closing a month

def test_size_classes_sort_in_their_defined_order(lab, monkeypatch):
    db, _, _ = lab
    # any chart of size classes, whatever order its rows come in (the what-if's bars came 1, 2-4, 33-64, 5-8)
    rows = pl.DataFrame({"size": ["1", "2-4", "33-64", "5-8"], "h": [1.0, 2.0, 3.0, 4.0], "run": ["Baseline"] * 4})
    assert list(charts.bars(rows, "size", "h", color="run", y_title="h").layout.xaxis.categoryarray) == [
        "1", "2-4", "5-8", "33-64"]
    assert list(charts.heatmap(rows, "size", "run", "h", z_title="h").data[0].x) == ["1", "2-4", "5-8", "33-64"]
    f = WINDOWS["30 days"]
    state = {"f_dates": (f.start, f.end - dt.timedelta(days=1))}
    at = dfx.open_page(dfx.app(db, monkeypatch), "fragmentation", **state)
    fig = next(x for x in dfx.figures(at) if x["layout"]["title"]["text"] == "Why jobs of each size waited")
    order = fig["layout"]["xaxis"]["categoryarray"]
    assert len(order) > 2 and order == sorted(order, key=SIZE_CLASSES.index)
    at.switch_page("views/fairness.py").run()
    heat = next(x for x in dfx.figures(at) if x["layout"]["title"]["text"].startswith("p95 queue wait"))
    xs = list(heat["data"][0]["x"])
    assert "9-16" in xs and xs == sorted(xs, key=SIZE_CLASSES.index)
    table = dfx.frame_with(at, "Team", "Requested GPUs", "p95 wait (h)")
    for team in set(table["Team"]):
        sizes = [str(s) for t, s in zip(table["Team"], table["Requested GPUs"]) if t == team]
        assert sizes == sorted(sizes, key=SIZE_CLASSES.index), (team, sizes)


def test_a_reversed_date_range_is_refused(lab, monkeypatch):
    db, _, _ = lab
    at = dfx.app(db, monkeypatch)
    at.run()
    at.session_state["f_dates"] = (dt.date(2026, 10, 15), dt.date(2026, 10, 2))
    at.run()
    assert not at.exception
    assert any("reversed" in e.value for e in at.sidebar.error), [e.value for e in at.sidebar.error]
    assert not at.metric                       # nothing is computed for a window that does not exist
    with pytest.raises(ValueError, match="reversed"):
        Filters(dt.date(2026, 10, 15), dt.date(2026, 10, 2))


def test_a_closed_month_shows_closed_at_once(lab, tmp_path, monkeypatch):
    db0, _, _ = lab
    for src in db0.parent.glob("lab*.duckdb"):
        shutil.copy2(src, tmp_path / src.name)
    shutil.copytree(warehouse.serving_dir(db0), warehouse.serving_dir(tmp_path / "lab.duckdb"))
    db = tmp_path / "lab.duckdb"
    state = {"f_dates": (dt.date(2026, 9, 21), dt.date(2026, 9, 30))}     # September (the data starts on the 21st)
    at = dfx.open_page(dfx.app(db, monkeypatch), "overview", **state)
    assert "Cost 2026-09" in [m.label for m in at.metric]          # complete, open: not "so far"
    assert any(c.value.startswith("Open") for c in at.caption)
    assert not any("Closed" in c.value for c in at.caption)
    dfx.cli(db, "chargeback", "--period", "2026-09", "--close")   # close.close_period(con, P, db_path=...)
    at.run()
    assert any(c.value.startswith("Closed") for c in at.caption), [c.value for c in at.caption]
    at.switch_page("views/chargeback.py").run()
    assert at.selectbox(key="cb_period").value == "2026-09"
    assert any(c.value.startswith("Closed") for c in at.caption), [c.value for c in at.caption]
