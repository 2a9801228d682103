"""Shareable views (dashboards/sidebar.py): the window and filters in the URL both ways, the Overview's links that
keep them, the Efficiency page's user filter; and charts that carry what a screen can show (charts.fit_bucket,
charts.top_categories) with the totals of the tables beneath. AppTest on the lab warehouse (data 2026-09-21 to
2026-10-20); tests/test_dashboard_browser.py opens a pasted link in a real browser."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards import charts, sidebar
from dashboards.filters import Filters, preset_window
from dashboards.queries import Catalogue

LAST = dt.date(2026, 10, 20)   # the lab's data horizon day


def _open(db, monkeypatch, page: str | None = None, **params):
    at = dfx.app(db, monkeypatch)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page:
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def _url(at) -> dict[str, list[str]]:
    return {k: (v if isinstance(v, list) else [v]) for k, v in at.query_params.items()}


def test_a_link_restores_window_and_filters_and_drops_what_the_data_lacks(lab_db, monkeypatch):
    at = _open(lab_db, monkeypatch, "utilization", window="7d", team=["nlp", "no-such-team"], pool="h100")
    assert at.session_state["f_dates"] == (LAST - dt.timedelta(days=6), LAST)
    assert at.session_state["f_preset"] == "7 days"
    assert at.session_state["f_teams"] == ["nlp"] and at.session_state["f_pools"] == ["h100"]
    assert "2026-10-14 to 2026-10-20 (UTC); pool: h100; team: nlp" in at.caption[0].value
    # the URL now says exactly the view shown: the unknown team is gone
    assert _url(at) == {"window": ["7d"], "team": ["nlp"], "pool": ["h100"]}


def test_fixed_days_round_trip_and_changes_rewrite_the_url(lab_db, monkeypatch):
    at = _open(lab_db, monkeypatch, "overview", **{"from": "2026-10-01", "to": "2026-10-10"})
    assert at.session_state["f_dates"] == (dt.date(2026, 10, 1), dt.date(2026, 10, 10))
    assert _url(at) == {"from": ["2026-10-01"], "to": ["2026-10-10"]}
    at.session_state["f_partitions"] = ["gpu"]
    at.session_state["f_dates"] = (dt.date(2026, 10, 3), dt.date(2026, 10, 4))
    at.run()
    assert _url(at) == {"from": ["2026-10-03"], "to": ["2026-10-04"], "partition": ["gpu"]}
    # the same URL in a new session gives the same view
    again = _open(lab_db, monkeypatch, "overview", **{k: v if len(v) > 1 else v[0] for k, v in _url(at).items()})
    assert again.caption[0].value == at.caption[0].value


def test_the_default_view_has_a_bare_url_and_a_bad_link_falls_back_to_it(lab_db, monkeypatch):
    at = _open(lab_db, monkeypatch, "overview")
    assert _url(at) == {}
    bad = _open(lab_db, monkeypatch, "overview", window="5w", **{"from": "yesterday"})
    assert bad.session_state["f_dates"] == (LAST - dt.timedelta(days=29), LAST)
    assert _url(bad) == {}


def test_overview_links_open_their_pages_with_the_same_view(lab_db, monkeypatch):
    at = _open(lab_db, monkeypatch, "overview", window="7d", team="vision")
    table = dfx.frame_with(at, "Details on page", "Open (same filters)")
    paths = {"Utilization": "utilization", "Efficiency": "efficiency", "Fragmentation": "fragmentation",
             "Fairness & queues": "fairness", "Why jobs wait": "waiting", "Chargeback": "chargeback",
             "Forecast & capacity": "forecast"}
    for page, link in zip(table["Details on page"], table["Open (same filters)"]):
        assert link == f"{paths[page]}?window=7d&team=vision", (page, link)
    links = at.get("page_link")
    assert [ln.proto.page for ln in links] == list(paths.values())
    assert {ln.proto.query_string for ln in links} == {"window=7d&team=vision"}


def test_efficiency_user_filter_lists_one_persons_jobs_and_lives_in_the_url(lab_db, monkeypatch):
    day = {"from": "2026-10-12", "to": "2026-10-12"}     # the day the lab has telemetry for
    every = _open(lab_db, monkeypatch, "efficiency", **day)
    jobs = dfx.frame_with(every, "Job", "User", "Idle-allocated (GPU-hours)")
    who = jobs["User"].iloc[-1]                           # someone with idle GPUs, not the worst
    at = _open(lab_db, monkeypatch, "efficiency", **day, user=who)
    assert at.session_state["eff_user"] == who
    mine = dfx.frame_with(at, "Job", "User", "Idle-allocated (GPU-hours)")
    assert set(mine["User"]) == {who}
    assert set(mine["Job"]) >= set(jobs.loc[jobs["User"] == who, "Job"])
    assert any(c.value.startswith(f"{who}: ") for c in at.caption)
    assert _url(at)["user"] == [who]
    at.session_state["eff_user"] = None                   # back to everyone: the parameter goes
    at.run()
    assert "user" not in _url(at)
    assert dfx.frame_with(at, "Job", "User")["User"].nunique() > 1


def test_an_hourly_bucket_over_a_month_is_drawn_per_day_with_the_tables_totals(lab_db, monkeypatch):
    at = _open(lab_db, monkeypatch, None, **{"from": "2026-09-21", "to": "2026-10-20"})
    at.session_state["util_bucket"] = "Hour"
    at.switch_page("views/utilization.py").run()
    assert not at.exception
    assert any("Charts per day" in c.value for c in at.caption)
    stack = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Where the capacity went")
    assert stack["layout"]["yaxis"]["title"]["text"] == "GPU-hours per day"
    assert all(len(t["x"]) <= charts.MAX_POINTS for t in stack["data"])
    table = dfx.frame_with(at, "Period (hour, UTC)", "Allocated (GPU-hours)")     # the table keeps hours
    assert len(table) > charts.MAX_POINTS
    drawn = {t["name"]: sum(t["y"]) for t in stack["data"]}
    for name, col in (("Allocated", "Allocated (GPU-hours)"), ("Idle", "Idle (GPU-hours)"),
                      ("Unavailable", "Unavailable (GPU-hours)")):
        assert drawn[name] == pytest.approx(table[col].sum(), rel=1e-9, abs=1e-6), name
    teams = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Allocated GPU-hours by team")
    assert sum(sum(t["y"]) for t in teams["data"]) == pytest.approx(table["Allocated (GPU-hours)"].sum(), rel=1e-9)


# ---------------------------------------------------------------- pure functions

CAT = Catalogue(frozenset(), 1, dt.date(2026, 1, 5), dt.date(2027, 1, 5), None, ("c1", "c2"), ("a100", "h100"),
                ("gpu", "long"), ("nlp", "vision", "(unmapped)"), ("nlp", "vision"))


@settings(max_examples=60, deadline=None)
@given(start=st.dates(dt.date(2026, 1, 5), dt.date(2027, 1, 5)), days=st.integers(1, 400),
       teams=st.lists(st.sampled_from(CAT.teams), unique=True), pools=st.lists(st.sampled_from(CAT.pools), unique=True),
       preset=st.sampled_from([None, "7d", "30d", "90d", "1y", "all"]))
def test_url_params_name_the_view_exactly(start, days, teams, pools, preset):
    """A window is written as the preset only when it is that preset's days, else as its days; filters as they
    are; the default window (the last 30 days) leaves no window parameter."""
    f = Filters(start, start + dt.timedelta(days=days), pools=tuple(pools), teams=tuple(teams))
    p = sidebar.url_params(f, CAT, preset)
    last = f.end - dt.timedelta(days=1)
    if "window" in p:
        assert preset_window(p["window"], CAT.first_day, CAT.last_day) == (f.start, last) and p["window"] != "30d"
    elif "from" in p:
        assert (p["from"], p["to"]) == (f"{f.start:%Y-%m-%d}", f"{last:%Y-%m-%d}")
    else:
        assert (f.start, last) == preset_window("30d", CAT.first_day, CAT.last_day)
    assert p.get("team", []) == teams and p.get("pool", []) == pools
    assert sidebar.query_string(p).count("team=") == len(teams)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([f"t{i}" for i in range(30)]),
                               st.floats(0, 1e6, allow_nan=False)), min_size=1, max_size=200),
       n=st.integers(2, 15))
def test_top_categories_keep_every_total(rows, n):
    df = pl.DataFrame(rows, schema={"bucket": pl.Int64, "team": pl.String, "gpu_h": pl.Float64}, orient="row")
    out = charts.top_categories(df, "team", ["gpu_h"], n=n, by=["bucket"])
    assert out["team"].n_unique() <= n
    want = df.group_by("bucket").agg(pl.col("gpu_h").sum()).sort("bucket")
    got = out.group_by("bucket").agg(pl.col("gpu_h").sum()).sort("bucket")
    assert got["bucket"].to_list() == want["bucket"].to_list()
    assert got["gpu_h"].to_list() == pytest.approx(want["gpu_h"].to_list(), rel=1e-9, abs=1e-6)
    if df["team"].n_unique() > n:      # the largest teams keep their own bars
        biggest = df.group_by("team").agg(pl.col("gpu_h").sum()).sort(["gpu_h", "team"], descending=[True, False])
        assert biggest["team"][0] in set(out["team"].to_list())


@pytest.mark.parametrize("bucket,days,want", [("hour", 25, "hour"), ("hour", 26, "day"), ("day", 600, "day"),
                                              ("day", 601, "week"), ("week", 4000, "week"), ("hour", 20000, "month")])
def test_fit_bucket_keeps_a_chart_within_the_points_a_screen_shows(bucket, days, want):
    assert charts.fit_bucket(bucket, days) == want


def test_the_memory_budget_is_shared_and_parsed():
    from dashboards.budget import DEFAULT_BUDGET, Budget, parse_bytes
    assert parse_bytes("2GB") == DEFAULT_BUDGET == parse_bytes("2048 mb") == parse_bytes(str(2 * 1024 ** 3))
    with pytest.raises(ValueError, match="GPULEDGER_DASHBOARD_MEMORY"):
        parse_bytes("two gigs")
    for total in ("1GB", "2GB", "8GB"):
        b = Budget(parse_bytes(total))
        assert Budget.BASE + b.duckdb + b.views + b.statements * Budget.STATEMENT <= b.total
        assert 600 <= b.ttl <= 6 * 3600 and b.max_entries >= 32
    small, big = Budget(parse_bytes("1GB")), Budget(parse_bytes("8GB"))
    assert small.duckdb < big.duckdb and small.statements <= big.statements and small.ttl < big.ttl
