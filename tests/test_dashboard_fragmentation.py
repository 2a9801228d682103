"""The Fragmentation page shows models.fragmentation's figures and the blocked-by-fragmentation waits."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards.snapshot import Snapshot
from models.metrics import fragmentation, blocked as fragmentation_blocked

WEEK = {"f_dates": (dt.date(2026, 10, 5), dt.date(2026, 10, 11))}
T0, T1 = dt.datetime(2026, 10, 5), dt.datetime(2026, 10, 12)


def test_rate_histogram_and_blocked_waits_match_the_models(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "fragmentation", **WEEK)
    cur = Snapshot(lab_db).cursor()
    rep = fragmentation.report(cur, T0, T1, "day", by=("gpu_type",))
    w = rep["samples"]
    rate = (rep["fgd_frag_gpus"].fill_null(0) * w).sum() / (rep["free_gpus"] * w).sum()
    assert dfx.metric(at, "Fragmentation rate (FGD)").value == f"{100 * rate:.1f} %"
    per_day = rep.group_by("bucket").agg(pl.col("free_gpus").sum(), pl.col("samples").max())
    mean_free = (per_day["free_gpus"] * per_day["samples"]).sum() / per_day["samples"].sum()
    assert dfx.metric(at, "Free GPUs (mean)").value == f"{mean_free:,.1f}"

    hist = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"].startswith("Free-GPU histogram"))
    z = hist["data"][0]["z"]                       # rows: k free GPUs, columns: days; nodes summed over pools
    nodes_per_day = [sum(row[i] or 0 for row in z) for i in range(len(z[0]))]
    up = rep.group_by("bucket").agg(pl.col("nodes_up").sum()).sort("bucket")["nodes_up"].to_list()
    assert nodes_per_day == pytest.approx(up)      # every available node is in exactly one histogram bin

    blocked = fragmentation_blocked.blocked(cur, T0, T1, by=("team",))
    total = blocked.filter(pl.col("team") == "(all)").row(0, named=True)
    assert dfx.metric(at, "Waiting blocked by fragmentation").value == (
        f"{100 * total['fragmentation_gpu_h'] / total['wait_gpu_h']:.1f} %")
    shown = dfx.frame_with(at, "Team", "Queue wait (GPU-hours)", "Blocked by fragmentation (GPU-hours)")
    want = blocked.filter(pl.col("team") != "(all)").filter(pl.col("wait_gpu_h") > 0)
    got = dict(zip(shown["Team"], shown["Blocked by fragmentation (GPU-hours)"]))
    assert got == pytest.approx(dict(zip(want["team"], want["fragmentation_gpu_h"])))


def test_pool_filter_keeps_one_pool(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "fragmentation", f_pools=["h100"], **WEEK)
    shown = dfx.frame_with(at, "Pool (GPU type)", "FGD rate (%)")
    assert set(shown["Pool (GPU type)"]) == {"h100"}
    rep = fragmentation.report(Snapshot(lab_db).cursor(), T0, T1, "day", by=("gpu_type",))
    h100 = rep.filter(pl.col("gpu_type") == "h100").sort("bucket")
    assert list(shown["FGD rate (%)"]) == pytest.approx((h100["fgd_rate"] * 100).to_list())
