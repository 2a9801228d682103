"""`ingest job-gpus` on a large site's `scontrol -d -o show job`: what a collection every 5 minutes costs.

In one process: N running jobs (default 20,000, as slurmctld holds on a large site), 1-8 GPUs each, a tenth on two
nodes, a tenth pending (no indices), stored first in a fresh warehouse as `ingest sacct` would have them; then
their `scontrol -d -o show job` lines (one per job, ~1 KB as Slurm 22.05 prints them) loaded --repeat times
(medians): the first load (every job new) and a reload (nothing changes, as at each collection). Baseline: the
same text split into lines and scanned once by the detail regular expression (the least any parser does).
Target: a collection of 20,000 jobs within 5 s on this 2-core machine (a 5-minute interval leaves 98 % idle).

    .venv/bin/python benchmarks/job_gpus.py [--jobs N] [--repeat K]
"""
from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import job_gpus, warehouse  # noqa: E402
from ingest.lines import text_lines  # noqa: E402

T0 = dt.datetime(2026, 12, 1, 8, 0, 0)


def _record(i: int) -> str:
    """One job as `scontrol -d -o show job` prints it (fields as the real capture in tests/fixtures/slurm_shards)."""
    submit = (T0 + dt.timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%S")
    n = 1 + i % 8
    head = (f"JobId={i} JobName=job{i} UserId=u{i % 300}(1{i % 300:03d}) GroupId=g(100) MCS_label=N/A "
            f"Priority=10000 Nice=0 Account=a{i % 40} QOS=normal JobState={'PENDING' if i % 10 == 9 else 'RUNNING'} "
            f"Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
            f"RunTime=00:10:00 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime={submit} EligibleTime={submit} "
            f"AccrueTime={submit} StartTime={submit} EndTime=Unknown Deadline=N/A Partition=gpu "
            f"NodeList=n{i % 2000:04d} NumNodes=1 NumCPUs={4 * n} TRES=cpu={4 * n},gres/gpu={n} JOB_GRES=gpu:{n} ")
    if i % 10 == 9:
        detail = ""
    elif i % 10 == 0:
        detail = (f"  Nodes=n{i % 2000:04d} CPU_IDs=0-3 Mem=1000 GRES=gpu:h100:{n}(IDX:0-{n - 1}) "
                  f"  Nodes=n{(i + 1) % 2000:04d} CPU_IDs=0-3 Mem=1000 GRES=gpu:h100:{n}(IDX:0-{n - 1}) ")
    else:
        detail = f"  Nodes=n{i % 2000:04d} CPU_IDs=0-3 Mem=1000 GRES=gpu:h100:{n}(IDX:0-{n - 1}) "
    return head + detail + "MinCPUsNode=4 Features=(null) WorkDir=/home/u Power= TresPerNode=gres:gpu:h100"


def _store_jobs(con, n: int) -> None:
    con.execute(f"""INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, submit, start, state, source, ngpus,
                                      ingest_run_id)
                    SELECT i, 'c', i::VARCHAR, i::VARCHAR, TIMESTAMP '{T0}' + to_seconds(i),
                           TIMESTAMP '{T0}' + to_seconds(i), 'RUNNING', 'sacct', 1 + i % 8, 1
                    FROM range({n}) t(i)""")


def _median(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    data = "\n".join(_record(i) for i in range(a.jobs)).encode() + b"\n"
    base = _median(lambda: sum(len(job_gpus.DETAIL.findall(ln)) for ln in text_lines(data)), a.repeat)
    firsts, rows = [], 0
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory() as d:
            con = warehouse.connect(Path(d) / "w.duckdb")
            _store_jobs(con, a.jobs)
            t0 = time.perf_counter()
            s = job_gpus.load(con, data, "jobs.txt", cluster="c")
            firsts.append(time.perf_counter() - t0)
            reload = _median(lambda: job_gpus.load(con, data, "jobs.txt", cluster="c"), a.repeat)
            rows = con.sql("SELECT count(*) FROM job_gpu_indices").fetchall()[0][0]
            con.close()
    first = statistics.median(firsts)
    print(f"{a.jobs:,} jobs ({len(data) / 1e6:.1f} MB, {s['loaded']:,} with indices, {rows:,} devices): "
          f"baseline {base:.2f} s; first load {first:.2f} s ({first / base:.1f}x), "
          f"reload {reload:.2f} s ({reload / base:.1f}x)")


if __name__ == "__main__":
    main()
