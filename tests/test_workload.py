"""The simulator's workload from the warehouse (models/simulation/workload.py): which jobs a window holds and
what each runs, by hand, on a window whose edges are not aligned to an hour."""
from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from models.simulation import whatif
from models.simulation import workload as sw

T0, T1 = datetime(2026, 3, 2, 6, 30), datetime(2026, 3, 4, 13, 15)

# uid, job_id, state, submit, eligible, start, end, limit_s, nnodes, ngpus, req_gpus, gpu_type, partition, spec
JOBS = [
    (1, "1", "COMPLETED", "2026-03-01 00:00", None, "2026-03-01 00:10", "2026-03-01 05:00", 86400, 1, 8, 8, "h100",
     "p", None),                                                       # over before t0: not in the window
    (2, "2", "COMPLETED", "2026-03-01 20:00", None, "2026-03-01 22:00", "2026-03-02 08:00", 86400, 2, 16, 16,
     "h100", "p", None),                                               # running at t0: carried, pinned
    (3, "3", "COMPLETED", "2026-03-02 05:00", None, "2026-03-02 07:00", "2026-03-02 09:00", 86400, 1, 4, 4, "h100",
     "p", None),                                                       # queued at t0: carried, arrives at 0
    (4, "4", "COMPLETED", "2026-03-02 10:00", "2026-03-02 10:30", "2026-03-02 11:00", "2026-03-02 12:00", 7200, 1,
     2, 2, None, "q", None),                                           # the window's; pool from its node
    (5, "5", "COMPLETED", "2026-03-04 08:00", None, "2026-03-04 08:00", "2026-03-04 10:00", 86400, 1, 1, 1, "h100",
     "p", None),                                                       # its end is the horizon
    (6, "6", "RUNNING", "2026-03-04 07:30", None, "2026-03-04 08:00", None, 172800, 1, 8, 8, "h100", "p", None),
    (7, "7_[0-3%2]", "PENDING", "2026-03-04 09:00", None, None, None, 14400, 1, 0, 2, None, "p,q", "0-3%2"),
    (8, "8", "CANCELLED", "2026-03-03 00:00", None, None, "2026-03-03 01:00", 3600, 1, 0, 8, "h100", "p", None),
    (10, "10", "PENDING", "2026-03-02 06:00", None, None, None, None, 1, 0, 8, None, "q", None),
]


@pytest.fixture
def held(con):
    con.execute("INSERT INTO nodes (cluster, node, partitions, gpu_type, gpus, ingest_run_id) VALUES "
                "('c1', 'n1', 'p', 'h100', 8, 0), ('c1', 'n2', 'p', 'h100', 8, 0), ('c1', 'n3', 'q', 'a100', 8, 0)")
    for uid, jid, state, sub, elig, st, en, lim, nn, g, rg, gt, part, spec in JOBS:
        elapsed = None if st is None or en is None else \
            int((datetime.fromisoformat(en) - datetime.fromisoformat(st)).total_seconds())
        con.execute('INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, state, source, ingest_run_id, submit, '
                    'eligible, start, "end", elapsed_s, timelimit_s, nnodes, ngpus, req_gpus, gpu_type, partition, '
                    "account, team, qos, array_task_spec) VALUES (?, 'c1', ?, ?, ?, 'test', 0, ?, ?, ?, ?, ?, ?, ?, "
                    "?, ?, ?, ?, 'acct', 'ml', 'normal', ?)",
                    [uid, jid, jid, state, sub, elig, st, en, elapsed, lim, nn, g, rg, gt, part, spec])
    con.execute("INSERT INTO job_nodes VALUES (2, 'c1', '2', NULL, 'n2', 8), (2, 'c1', '2', NULL, 'n1', 8), "
                "(4, 'c1', '4', NULL, 'n3', 2), (6, 'c1', '6', NULL, 'n1', 8)")
    return con


def test_the_window_holds_its_own_jobs_the_queue_at_the_horizon_and_the_cluster_at_its_start(held):
    jobs = sw.load_jobs(held, T0, T1)
    rows = {r["job_uid"]: r for r in jobs.iter_rows(named=True)}
    # 1 ended before t0, 8 was cancelled while it waited: neither takes capacity in the window
    assert sorted(rows) == [-700003, -700002, -700001, 2, 3, 4, 5, 6, 7, 10]
    assert jobs["submit_s"].to_list() == sorted(jobs["submit_s"].to_list())
    b = rows[2]     # running at t0 since 22:00 the day before: arrives at its start, runs its whole run, pinned
    assert (b["carried"], b["submit_s"], b["run_s"], b["observed_wait_s"]) == (True, -30600.0, 36000.0, None)
    assert (b["nodes"], b["gpus_per_node"], b["nnodes"]) == (["n1", "n2"], 8.0, 2)
    c = rows[3]     # queued at t0 since 05:00: arrives at 0, its priority's age from 1.5 h before
    assert (c["carried"], c["submit_s"], c["queued_s"], c["run_s"], c["nodes"]) == (True, 0.0, -5400.0, 7200.0, None)
    assert rows[10]["queued_s"] == -1800.0
    assert all(rows[u]["queued_s"] is None for u in (2, 4, 5, 6, 7))
    k = rows[10]    # queued at t0 and still at the horizon: the mean of its partition's finished runs (4's 1 h)
    assert (k["carried"], k["submit_s"], k["run_s"], k["estimated_s"], k["pool"]) == (True, 0.0, 3600.0, 3600.0,
                                                                                        "a100")
    d = rows[4]     # eligible at 10:30 (4 h after t0), started 11:00; pool from the node it ran on
    assert (d["carried"], d["submit_s"], d["observed_wait_s"], d["run_s"], d["pool"]) == (False, 14400.0, 1800.0,
                                                                                          3600.0, "a100")
    # 6 has run 2 h at the horizon (10:00): partition p's finished runs of at least 2 h are 1's 4 h 50 min, 2's
    # 10 h, 3's 2 h and 5's 2 h: their mean 16,950 s; 9,750 s of it not observed
    e = rows[6]
    assert (e["submit_s"], e["observed_wait_s"], e["run_s"], e["estimated_s"]) == (176400.0, 1800.0, 16950.0, 9750.0)
    # the pending array record's four tasks, each 2 GPUs in its first partition's pool, capped by the 4 h limit
    tasks = [rows[u] for u in (7, -700001, -700002, -700003)]
    assert {(t["submit_s"], t["run_s"], t["estimated_s"], t["gpus"], t["pool"], t["partition"], t["observed_wait_s"])
            for t in tasks} == {(181800.0, 14400.0, 14400.0, 2.0, "h100", "p", None)}


def test_a_job_finished_without_an_end_ran_its_elapsed_time_as_the_timeline_counts_it(held):
    """Some exports give a finished job its elapsed time but no end: it ended at start + elapsed (the timeline's
    definition, models/definitions/jobs_sql.py), so it is neither running at the horizon nor in the cluster at t0
    when that end is before it."""
    for uid, sub in ((11, "2026-03-02 12:00"), (12, "2026-03-01 10:00")):
        held.execute("INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, state, source, ingest_run_id, submit, "
                     "start, elapsed_s, timelimit_s, nnodes, ngpus, req_gpus, gpu_type, partition) VALUES "
                     "(?, 'c1', ?, ?, 'COMPLETED', 'test', 0, ?, ?, 5400, 86400, 1, 1, 1, 'h100', 'p')",
                     [uid, str(uid), str(uid), sub, sub])
    rows = {r["job_uid"]: r for r in sw.load_jobs(held, T0, T1).iter_rows(named=True)}
    assert (rows[11]["run_s"], rows[11]["estimated_s"], rows[11]["carried"]) == (5400.0, 0.0, False)
    assert 12 not in rows                                  # ended 03-01 11:30, before t0


def test_what_is_measured_ends_at_the_horizon_and_counts_say_what_the_window_holds(held):
    inp = whatif.load_inputs(held, T0.isoformat(), T1.isoformat())
    assert inp.horizon == datetime(2026, 3, 4, 10, 0)
    assert inp.end_s == 2 * 86400 + 3.5 * 3600          # 06:30 to 10:00 two days later, not to t1 (13:15)
    assert inp.days == 3 and inp.whole_days == 2         # replications draw from the two whole days
    assert inp.counts() == {"jobs": 7, "queued_at_horizon": 4, "carried": 3, "reservations": 0, "in_reservations": 0,
                            "reservation_not_loaded": 0}    # queued: 4, 5, 6 and 7's four tasks
    assert sw.horizon(held, "c1") == inp.horizon and sw.horizon(held, "elsewhere") is None


def test_a_replication_draws_whole_days_only_not_the_one_the_horizon_cuts():
    """Day 2 is cut by the horizon after its first hours: drawn into a whole slot it would make that day light."""
    jobs = pl.DataFrame({"job_uid": list(range(9)), "submit_s": [d * 86400.0 + 3600 * i for d in range(3)
                                                                   for i in range(3)],
                         "day": [d for d in range(3) for _ in range(3)], "carried": [False] * 9})
    drawn = pl.concat([sw.resample_days(jobs, 3, 1.0, seed, whole=2) for seed in range(30)])
    assert set(drawn["day"].to_list()) == {0, 1}
    assert set(pl.concat([sw.resample_days(jobs, 3, 1.0, s) for s in range(30)])["day"].to_list()) == {0, 1, 2}


def test_a_replication_resamples_the_window_s_days_and_keeps_the_carried_jobs_once(held):
    jobs = sw.load_jobs(held, T0, T1)
    for seed in range(5):
        got = sw.resample_days(jobs, 3, 2.0, seed)
        carried = got.filter(pl.col("carried"))
        assert sorted(carried["submit_s"].to_list()) == [-30600.0, 0.0, 0.0]
        assert got["job_uid"].n_unique() == got.height
