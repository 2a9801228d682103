"""models/kernels/demand_measures.py: the expected run time of work not finished, against a brute force.

A job not finished counts the mean run time of the finished jobs of its partition (else cluster) that ran at least
as long as it has, else its time limit; never above the limit nor below what it has run. The kernel takes the
shorter runs out by whole minutes and then within the job's own minute; the runs here sit in a few minutes so
that ties and same-minute runs on both sides of a threshold are common.
"""
from __future__ import annotations

import datetime as dt

from hypothesis import given, settings, strategies as st

from ingest import warehouse
from models.kernels.demand_measures import measures

HZ = dt.datetime(2024, 3, 10)
DAY = dt.datetime(2024, 3, 9)


def expected_s(finished: dict[str, list[int]], partition: str, ran: int, limit: int | None) -> float:
    """The rule, written out: the partition's finished runs >= ran, else the cluster's, else the limit."""
    for pool in (finished.get(partition, []), [r for runs in finished.values() for r in runs]):
        longer = [r for r in pool if r >= ran]
        if longer:
            est = sum(longer) / len(longer)
            break
    else:
        est = limit if limit is not None else 0
    return max(ran, min(limit if limit is not None else 1e18, est))


runs_st = st.lists(st.integers(55, 250), max_size=12)     # 55 s to 4 min 10 s: a few minutes, many ties
open_st = st.tuples(st.sampled_from(["p1", "p2"]), st.one_of(st.just(0), st.integers(1, 300)),
                    st.one_of(st.none(), st.integers(60, 400)))


@settings(max_examples=40)
@given(st.dictionaries(st.sampled_from(["p1", "p2"]), runs_st), st.lists(open_st, min_size=1, max_size=6))
def test_work_not_finished_counts_the_mean_of_the_finished_runs_that_lasted_as_long(finished, open_jobs):
    con = warehouse.connect(":memory:")
    try:
        rows, uid = [], 0
        for part, runs in finished.items():
            for r in runs:
                uid += 1
                start = DAY - dt.timedelta(days=1)
                rows.append((uid, part, "COMPLETED", start, start, start + dt.timedelta(seconds=r), float(r), None))
        for part, ran, limit in open_jobs:
            uid += 1
            start = HZ - dt.timedelta(seconds=ran) if ran else None       # ran 0: pending, submitted on DAY
            rows.append((uid, part, "RUNNING" if ran else "PENDING", DAY, start, None, None, limit))
        con.execute("""CREATE TEMP TABLE _demand_jobs (job_uid BIGINT, cluster VARCHAR, partition VARCHAR,
                           team VARCHAR, pool VARCHAR, state VARCHAR, submit TIMESTAMP, eligible TIMESTAMP,
                           left_queue TIMESTAMP, start TIMESTAMP, "end" TIMESTAMP, elapsed_s DOUBLE,
                           timelimit_s BIGINT, ngpus BIGINT, req_gpus BIGINT, hz TIMESTAMP)""")
        con.executemany("""INSERT INTO _demand_jobs VALUES (?, 'c', ?, 't', 'a100', ?, ?, ?, ?, ?, ?, ?, ?, 1, 1,
                                                            ?)""",
                        [(u, p, state, sub, sub, st_ or HZ, st_, end, el, lim, HZ)
                         for u, p, state, sub, st_, end, el, lim in rows])
        got = measures(con, "day", [], DAY, HZ, peak=False, served=False, rounded=False)
        want = sum(expected_s(finished, part, ran, limit) for part, ran, limit in open_jobs) / 3600
        want_est = sum(expected_s(finished, part, ran, limit) - ran for part, ran, limit in open_jobs) / 3600
        day = got.filter(got["ts"] == DAY)
        assert abs(day["demanded_gpu_hours"][0] - want) < 1e-9
        assert abs(day["estimated_gpu_hours"][0] - want_est) < 1e-9
    finally:
        con.close()
