"""What resolving GPU shards and MPS shares (ingest/gpu_shares.py) adds to `ingest sacct` and `ingest nodes`.

In one process, on a fresh warehouse with 512 nodes (half offering shards): N staged sacct rows (default
2,000,000) with 30 % CPU-only jobs and 0 % or 1 % share jobs (a quarter of them never started: resolved from
their partition's nodes), each measured --repeat times (medians):
  baseline  one scan of the staged rows' TRES strings (the shared-GPU note's query before share jobs were resolved),
  staged    resolve_staged, its notes and one read of the view it gives the merge, as `ingest sacct` runs them,
  stored    resolve_stored over a jobs table of the same rows, as `ingest nodes` runs it after a listing.
Prints milliseconds and the ratio to the baseline. Target: the usual case (no share job) no slower than that scan;
with 1 % share jobs under a second per 2M rows (ingest itself takes ~10 s for that many lines).

    .venv/bin/python benchmarks/gpu_shares.py [--rows N] [--repeat K]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import gpu_shares, warehouse  # noqa: E402

NODES = 512


def _setup(con, rows: int, share_pct: float) -> None:
    """Nodes n000..n511 (8 GPUs; even ones 128 shards), a staged table and a jobs/job_nodes copy of it."""
    con.execute(f"""INSERT INTO nodes (cluster, node, partitions, gpu_type, gpus, cpus, mem_bytes, gres, features,
                                       valid_from, valid_to, ingest_run_id)
                    SELECT 'c', printf('n%03d', i), 'p', 'l4', 8, 64, 0,
                           CASE WHEN i % 2 = 0 THEN 'gpu:l4:8,shard:128' ELSE 'gpu:l4:8' END, NULL, NULL, NULL, 1
                    FROM range({NODES}) t(i)""")
    every = int(round(100 / share_pct)) if share_pct else 0
    share = f"i % {every} = 0" if every else "false"
    pend = f"{share} AND i % {4 * every} = 0" if every else "false"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE stg AS
        SELECT line_no, job_id, cluster, submit, CASE WHEN NOT pend THEN submit END AS start, 'p' AS "partition",
               ngpus, gpu_milli, CASE WHEN NOT pend THEN tres END AS alloc_tres, tres AS req_tres,
               nullif(ngpus, 0) AS req_gpus, CASE WHEN NOT pend THEN nodelist END AS nodelist
        FROM (SELECT i AS line_no, i::VARCHAR AS job_id, 'c' AS cluster,
                     TIMESTAMP '2026-03-01' + to_seconds(i) AS submit, {pend} AS pend,
                     CASE WHEN {share} OR i % 10 < 3 THEN 0.0 ELSE 2.0 END AS ngpus, NULL::INTEGER AS gpu_milli,
                     CASE WHEN {share} THEN 'billing=1,cpu=1,gres/shard=' || (1 + i % 16) || ',mem=8G,node=1'
                          WHEN i % 10 < 3 THEN 'billing=8,cpu=8,mem=64G,node=1'
                          ELSE 'billing=8,cpu=8,gres/gpu:l4=2,gres/gpu=2,mem=64G,node=1' END AS tres,
                     printf('n%03d', (i * 2) % {NODES}) AS nodelist
              FROM range({rows}) t(i))""")
    con.execute("""CREATE OR REPLACE TEMP TABLE _nodelist_map AS
                   SELECT DISTINCT nodelist, nodelist AS node, 0 AS idx, 1 AS n FROM stg
                   WHERE nodelist IS NOT NULL""")


def _stored(con) -> None:
    con.execute("DELETE FROM job_nodes")
    con.execute("DELETE FROM jobs")
    con.execute("""INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, submit, start, state, source, "partition",
                                     ngpus, gpu_milli, req_gpus, alloc_tres, req_tres, nodelist, ingest_run_id)
                   SELECT line_no, cluster, job_id, job_id, submit, start,
                          CASE WHEN start IS NULL THEN 'PENDING' ELSE 'COMPLETED' END, 'sacct', "partition", ngpus,
                          gpu_milli, req_gpus, alloc_tres, req_tres, nodelist, 1
                   FROM stg""")
    con.execute("""INSERT INTO job_nodes (job_uid, cluster, job_id_raw, submit, node, gpus_on_node)
                   SELECT line_no, cluster, job_id, submit, nodelist, ngpus FROM stg WHERE nodelist IS NOT NULL""")


#: one scan of every staged row's TRES (what the shared-GPU note before this module cost: 58 ms per 2M rows)
SCAN = "SELECT count(*) FROM stg WHERE strpos(alloc_tres, 'gres/shard') > 0 OR strpos(alloc_tres, 'gres/mps') > 0"


def _staged(con) -> None:
    """As `ingest sacct` runs it: resolve, then the merge reads the view once (here: a count over it), then drop."""
    table, _ = gpu_shares.resolve_staged(con, "stg")
    con.sql(f"SELECT sum(ngpus) FROM {table}").fetchall()
    gpu_shares.drop_staged(con)


def _time(fn, repeat: int, before=None) -> float:
    out = []
    for _ in range(repeat):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    for pct in (0.0, 1.0):
        with tempfile.TemporaryDirectory() as d:
            con = warehouse.connect(Path(d) / "w.duckdb")
            _setup(con, a.rows, pct)
            base = _time(lambda: con.sql(SCAN).fetchall(), a.repeat)
            staged = _time(lambda: _staged(con), a.repeat)
            stored = _time(lambda: gpu_shares.resolve_stored(con, 2), a.repeat, before=lambda: _stored(con))
            resolved, asks = con.sql("""
                SELECT count(*) FILTER (ngpus > 0 AND gpu_milli IS NOT NULL),
                       count(*) FILTER (start IS NULL AND req_gpus > 0) FROM jobs""").fetchall()[0]
            con.close()
        print(f"{a.rows:,} rows, {pct:g} % share jobs ({resolved:,} started and {asks:,} not, resolved): "
              f"baseline {base:.1f} ms, "
              f"staged {staged:.1f} ms ({staged / base:.1f}x), stored {stored:.1f} ms ({stored / base:.1f}x)")


if __name__ == "__main__":
    main()
