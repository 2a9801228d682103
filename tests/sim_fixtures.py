"""Helpers for the simulator tests: a small warehouse whose 'observed' history is a known schedule."""
from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from models.simulate import Cluster, Policy, Workload, simulate

T0 = datetime(2026, 3, 2)


def synthetic_jobs(n: int, seed: int, n_pools: int = 1, days: float = 3.0) -> dict:
    """Integer-second jobs (so warehouse timestamps round-trip exactly) on pools h100 / a100."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.integers(0, int(days * 86400), size=n))
    run = rng.integers(60, 6 * 3600, size=n)
    limit = (run * rng.uniform(1.0, 3.0, size=n)).astype(int) + 60
    gpn = rng.choice([1, 2, 4, 8], size=n, p=[0.4, 0.2, 0.2, 0.2]).astype(float)
    nn = np.where((gpn == 8) & (rng.random(n) < 0.2), 2, 1)
    pool = rng.choice(["h100", "a100"][:n_pools], size=n)
    return {"job_uid": np.arange(n), "submit_s": submit.astype(float), "run_s": run.astype(float),
            "limit_s": limit.astype(float), "gpus_per_node": gpn, "nnodes": nn, "pool": pool,
            "account": rng.choice(["acct_a", "acct_b", "acct_c"], size=n),
            "team": rng.choice(["vision", "nlp"], size=n)}


def build_warehouse(con, cols: dict, cluster: Cluster, policy: Policy, events=None) -> None:
    """Write nodes and jobs whose starts are the simulator's own schedule of ``cols`` on ``cluster``."""
    res = simulate(cluster, Workload.from_columns(cols), policy, events)
    for i in range(cluster.size):
        con.execute("INSERT INTO nodes (cluster, node, partitions, gpu_type, gpus, ingest_run_id) "
                    "VALUES ('c1', ?, 'gpu', ?, ?, 0)",
                    [cluster.node_names[i], cluster.pools[cluster.node_pool[i]], int(cluster.node_gpus[i])])
    j = res.jobs
    rows = []
    for r in j.iter_rows(named=True):
        if r["start_s"] is None:
            continue
        sub = T0 + timedelta(seconds=r["submit_s"])
        st = T0 + timedelta(seconds=r["start_s"])
        rows.append((int(r["job_uid"]), "c1", str(r["job_uid"]), str(r["job_uid"]), "COMPLETED", "test", 0,
                     sub, st, st + timedelta(seconds=r["run_s"]), int(r["run_s"]), int(r["limit_s"]),
                     int(r["nnodes"]), float(r["gpus"]), r["pool"], r["account"], r["team"], "gpu", "normal"))
    con.executemany(
        'INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, state, source, ingest_run_id, submit, start, "end", '
        'elapsed_s, timelimit_s, nnodes, ngpus, gpu_type, account, team, partition, qos) '
        'VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)', rows)
    return res
