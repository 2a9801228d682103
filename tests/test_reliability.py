"""Node reliability (models/metrics/reliability.py): outages with MTBF and MTTR, the jobs an outage killed,
repeat offenders by a one-sided binomial test with Benjamini-Hochberg correction; hand-computed, through the
real ingestors and the real refresh."""
from __future__ import annotations

import datetime as dt
import math

import numpy as np
import polars as pl
import pytest

from models.metrics import reliability
from models.pipeline import refresh
from tests.timeline_fixtures import Job, load

NODES = [("gpu01", 8, "a100", "a100"), ("gpu02", 8, "a100", "a100"), ("gpu03", 8, "a100", "a100"),
         ("gpu04", 8, "h100", "h100")]


def T(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(f"2024-{s}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two days of March 2024. gpu01 fails twice (DOWN 10:00-12:30 on the 1st, 08:00-09:00 on the 2nd) and a
    NODE_FAIL job ends with the first; gpu01 ends 5 of its 10 one-hour jobs FAILED, gpu02 and gpu03 none of 10."""
    from ingest import warehouse
    path = tmp_path_factory.mktemp("rel") / "w.duckdb"
    con = warehouse.connect(path)
    jobs = [Job(1, "a", "ml", "a100", 8, ["gpu01"], start=T("03-01 07:13:00"), end=T("03-01 10:00:30"),
                state="NODE_FAIL")]
    k = 2
    for n, node in enumerate(("gpu01", "gpu02", "gpu03")):
        for i in range(10):
            s = T("03-01 13:00") + dt.timedelta(hours=i)
            jobs.append(Job(k, "u", "ml", "a100", 1, [node], start=s, end=s + dt.timedelta(minutes=50),
                            state="FAILED" if node == "gpu01" and i % 2 == 0 else "COMPLETED"))
            k += 1
    events = [("gpu01", T("03-01 10:00"), T("03-01 12:30"), "DOWN", "Not responding"),
              ("gpu01", T("03-02 08:00"), T("03-02 09:00"), "DOWN", "GPU Xid 79: fallen off the bus"),
              ("gpu04", T("03-02 10:00"), T("03-02 11:00"), "MAINT", "firmware")]
    load(con, "tc", jobs, NODES, events, as_of="2024-01-01T00:00:00", refresh=False)
    refresh.run(con, path, publish=False)
    yield con
    con.close()


def test_outages_mtbf_mttr(cluster):
    """The window runs to 03-03 00:00, but the last thing known of the cluster is gpu04's MAINT ending 03-02 11:00
    (jobs end 03-01 22:50): node-hours stop there, 35 per node, not 48 (13 hours nobody observed)."""
    w = (T("03-01 00:00"), T("03-03 00:00"))
    nodes = {r["node"]: r for r in reliability.nodes(cluster, *w).iter_rows(named=True)}
    g1 = nodes["gpu01"]
    assert (g1["outages"], g1["node_h"], g1["down_h"]) == (2, 35.0, 3.5)
    assert g1["mttr_h"] == pytest.approx(1.75) and g1["mtbf_h"] == pytest.approx(17.5)
    assert (g1["jobs_killed"], g1["lost_gpu_h"] * 3600) == (1, pytest.approx(8 * (2 * 3600 + 47 * 60 + 30)))
    assert nodes["gpu02"]["outages"] == 0 and nodes["gpu02"]["mtbf_h"] is None
    assert nodes["gpu04"]["outages"] == 0          # MAINT is planned: not a failure
    pools = {r["gpu_type"]: r for r in reliability.nodes(cluster, *w, by="gpu_type").iter_rows(named=True)}
    assert (pools["a100"]["nodes"], pools["a100"]["outages"], pools["a100"]["mtbf_h"]) == (3, 2, pytest.approx(52.5))
    out = reliability.outages(cluster, *w)
    assert out.height == 3
    first = out.row(0, named=True)
    assert (first["node"], first["class"], first["jobs_killed"], first["hours"]) == ("gpu01", "down", 1, 2.5)
    assert out.filter(out["node"] == "gpu04")["class"].to_list() == ["planned_down"]


def test_an_outage_open_at_the_end_of_the_data_counts_its_hours_to_there_not_to_the_window_end(tmp_path):
    """gpu01 goes DOWN at 03-01 20:00 and is still down in the last snapshot (03-02 06:30); a month-long window
    counts 10.5 down hours and 30.5 node-hours (03-01 00:00 to the snapshot), not 724 and 744."""
    from ingest import warehouse
    path = tmp_path / "w.duckdb"
    con = warehouse.connect(path)
    jobs = [Job(1, "a", "ml", "a100", 8, ["gpu01"], start=T("03-01 07:13:00"), end=T("03-01 20:00:30"),
                state="NODE_FAIL"),
            Job(2, "a", "ml", "a100", 8, ["gpu02"], start=T("03-01 09:00:00"), end=T("03-01 18:00:00"))]
    load(con, "tc", jobs, NODES, [("gpu01", T("03-01 20:00"), None, "DOWN", "Not responding")],
         as_of="2024-03-02T06:30:00", refresh=False)
    refresh.run(con, path, publish=False)
    w = (T("03-01 00:00"), T("04-01 00:00"))
    g1 = reliability.nodes(con, *w).filter(pl.col("node") == "gpu01").row(0, named=True)
    assert (g1["outages"], g1["down_h"], g1["node_h"], g1["mtbf_h"]) == (1, 10.5, 30.5, 30.5)
    assert reliability.outages(con, *w)["hours"].to_list() == [10.5]
    assert reliability.observed_until(con, *w) == {"tc": T("03-02 06:30")}       # what `report reliability` notes
    assert reliability.observed_until(con, T("03-01 00:00"), T("03-02 00:00")) == {}   # whole days, all known
    con.close()


def test_repeat_offender_is_significant_not_counted(cluster):
    """gpu01: 11 jobs ended (10 + the NODE_FAIL one), 6 failed; pool a100: 31 jobs, 6 failed. p = P(X >= 6 | 11,
    6/31), BH over the pool's 3 nodes: q = 3p (the smallest p). gpu02/gpu03: no failure, p = 1."""
    df = reliability.offenders(cluster, T("03-01 00:00"), T("03-03 00:00"))
    rows = {r["node"]: r for r in df.iter_rows(named=True)}
    g1 = rows["gpu01"]
    assert (g1["jobs"], g1["failed"]) == (11, 6)
    rate = 6 / 31
    p = sum(math.comb(11, k) * rate ** k * (1 - rate) ** (11 - k) for k in range(6, 12))
    assert g1["pool_rate"] == pytest.approx(rate) and g1["p_value"] == pytest.approx(p)
    assert g1["q_value"] == pytest.approx(min(1.0, 3 * p))
    assert g1["flagged"] == (3 * p <= 0.05)
    assert rows["gpu02"]["p_value"] == 1.0 and not rows["gpu02"]["flagged"]


def test_bh_qvalues_hand_computed():
    q = reliability.bh_qvalues(np.array([0.01, 0.04, 0.03, 0.2]))
    assert q == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.2])


def test_views_without_telemetry_say_so(cluster, tmp_path):
    assert not reliability.has_telemetry(cluster)
    assert reliability.gpus(cluster).is_empty() and reliability.slow_nodes(cluster).is_empty()


def test_throttle_remap_and_ecc_readings_become_gpu_events(con):
    """DCGM clock-throttle reasons keep the slowdown bits: 0x1 (idle) is no event, 0x41 (HW thermal + idle) read
    for three minutes is one event with code 0x40, and again after a clear; a row-remap failure and an ECC
    double-bit counter step are events too. Re-ingesting the same text changes nothing; every line is loaded."""
    from tests.telemetry_fixtures import at, load_readings, readings
    thr = {m: (0x41 if 10 <= m < 13 or m == 20 else 1) for m in range(0, 25)}
    text = readings({("n1", "0", None, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"): thr,
                     ("n1", "0", None, "DCGM_FI_DEV_ROW_REMAP_FAILURE"): {m: int(m >= 15) for m in range(0, 25)},
                     ("n1", "1", None, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): {m: (2 if m >= 5 else 0) for m in range(25)},
                     ("n1", "0", None, "DCGM_FI_DEV_XID_ERRORS"): {m: (94 if m == 16 else 0) for m in range(25)}})
    s = load_readings(con, text)
    assert (s["loaded"], s["rejected"], s["read"]) == (100, 0, 100 + s["skipped"])
    load_readings(con, text, name="again.om")
    ev = con.sql("SELECT gpu, kind, ts, code FROM gpu_events ORDER BY kind, ts").fetchall()
    assert ev == [("1", "ecc_dbe", at(5), 2), ("0", "row_remap_failure", at(15), 1),
                  ("0", "throttle", at(10), 0x40), ("0", "throttle", at(20), 0x40), ("0", "xid", at(16), 94)]
    # the telemetry rows hold only sample columns: no row for minutes that had event readings alone
    assert con.sql("SELECT count(*) FROM gpu_samples").fetchall()[0][0] == 25
    g = reliability.gpus(con, at(0), at(60)).sort("gpu")
    assert g.select("gpu", "xid_events", "memory", "codes", "throttle_events", "row_remap_failures",
                    "ecc_dbe_events").rows() == [("0", 1, 1, "94", 2, 1, 0), ("1", 0, 0, "", 0, 0, 1)]
