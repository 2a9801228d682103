"""Helpers for the simulator tests: a small warehouse whose 'observed' history is a known schedule."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import polars as pl

from models.simulation.simulate import Cluster, Policy, Workload, simulate

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


def build_warehouse(con, cols: dict, cluster: Cluster, policy: Policy, events=None,
                    reservations: pl.DataFrame | None = None) -> None:
    """Write nodes and jobs whose starts are the simulator's own schedule of ``cols`` on ``cluster``
    (one set-based INSERT each: row-by-row inserts made this fixture slow), and the advance ``reservations``
    (simulate's columns) as `ingest reservations` would, the jobs' reservation in jobs.extra as sacct's."""
    res = simulate(cluster, Workload.from_columns(cols), policy, events, reservations=reservations)
    if reservations is not None:
        r = reservations.with_columns((pl.lit(T0) + pl.duration(seconds=pl.col("start_s"))).alias("s"),
                                      (pl.lit(T0) + pl.duration(seconds=pl.col("end_s"))).alias("e"),
                                      pl.col("nodes").list.join(",").alias("n"))
        con.register("sim_resv", r.select("name", "s", "e", "n"))
        con.execute('INSERT INTO reservations (cluster, name, start, "end", nodelist, nodes, source, ingest_run_id) '
                    "SELECT 'c1', name, s, e, n, n, 'scontrol', 0 FROM sim_resv")
        con.unregister("sim_resv")
    nodes = pl.DataFrame({"node": cluster.node_names, "pool": [cluster.pools[p] for p in cluster.node_pool],
                          "gpus": cluster.node_gpus.astype(int)})
    con.register("sim_nodes", nodes)
    con.execute("INSERT INTO nodes (cluster, node, partitions, gpu_type, gpus, ingest_run_id) "
                "SELECT 'c1', node, 'gpu', pool, gpus, 0 FROM sim_nodes")
    con.unregister("sim_nodes")
    j = res.jobs.with_row_index("row").filter(pl.col("start_s").is_not_null()).with_columns(
        pl.col("job_uid").cast(pl.Int64), pl.col("job_uid").cast(pl.Utf8).alias("jid"),
        (pl.lit(T0) + pl.duration(seconds=pl.col("submit_s"))).alias("sub"),
        (pl.lit(T0) + pl.duration(seconds=pl.col("start_s"))).alias("st"),
        (pl.lit(T0) + pl.duration(seconds=pl.col("start_s") + pl.col("run_s"))).alias("en"),
        pl.col("run_s").cast(pl.Int64), pl.col("limit_s").cast(pl.Int64),
        pl.when(pl.col("reservation").is_not_null()).then(pl.format('{{"reservation": "{}"}}', pl.col("reservation")))
        .alias("extra"))
    con.register("sim_jobs", j.select("job_uid", "jid", "sub", "st", "en", "run_s", "limit_s", "nnodes", "gpus",
                                      "pool", "account", "team", "extra"))
    con.execute(
        'INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, state, source, ingest_run_id, submit, start, "end", '
        'elapsed_s, timelimit_s, nnodes, ngpus, gpu_type, account, team, partition, qos, extra) '
        "SELECT job_uid, 'c1', jid, jid, 'COMPLETED', 'test', 0, sub, st, en, run_s, limit_s, nnodes, gpus, pool, "
        "account, team, 'gpu', 'normal', extra FROM sim_jobs")
    con.unregister("sim_jobs")
    # the nodes each job ran on (the simulator's last run of it), as sacct's NodeList gives them
    ptr, nodes = res.alloc_ptr, res.alloc_node
    rows = [(u, cluster.node_names[int(nodes[k])], float(g)) for r, u, g, n in
            j.select("row", "job_uid", "gpus_per_node", "nnodes").iter_rows() for k in range(ptr[r], ptr[r] + int(n))]
    con.register("sim_nodes", pl.DataFrame(rows, schema=["job_uid", "node", "g"], orient="row"))
    con.execute("INSERT INTO job_nodes SELECT job_uid, 'c1', job_uid::VARCHAR, NULL, node, g FROM sim_nodes")
    con.unregister("sim_nodes")
    return res
