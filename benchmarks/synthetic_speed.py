"""Speed of the synthetic workload generator: sampling, scheduling and writing, per job.

    python benchmarks/synthetic_speed.py [--runs 3] [--scale 1] [--days 182]

Prints the median CPU seconds (time.process_time, so a shared machine's load does not inflate them) of
each phase over --runs runs, microseconds per job, and the process's peak RSS. The scheduler is the only
per-job Python loop; the year (`--scale 33.33 --days 365`, ~5M jobs) costs about (jobs x us/job) of CPU.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from models.demo import config, faults, layout, sacct_writer, scheduler, workload  # noqa: E402


def one_run(cfg) -> dict:
    out = {}
    rng = np.random.default_rng(cfg.seed)
    c = time.process_time()
    jobs, users = workload.sample_jobs(cfg, rng)
    t0, t1 = workload.epoch(cfg.start, cfg.tz), workload.epoch(cfg.end, cfg.tz)
    lay = layout.make_layout(cfg, t0, t0 + cfg.capacity_add_day * 86400)
    outs = faults.sample_outages(cfg, rng, lay.since, t0, t1)
    out["sample"] = time.process_time() - c
    c = time.process_time()
    inst = scheduler.schedule(cfg, jobs, lay, outs, t1, rng)
    out["schedule"] = time.process_time() - c
    c = time.process_time()
    frame = sacct_writer.instance_frame(cfg, jobs, users, lay, inst)
    n_bytes = len(sacct_writer.export(frame, cfg.cluster, t0, t1, steps=cfg.job_steps))
    out["write sacct"] = time.process_time() - c
    out["jobs"], out["instances"], out["bytes"] = len(jobs), len(inst), n_bytes
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--days", type=int)
    a = ap.parse_args(argv)
    cfg = config.for_scale(a.scale, **({"days": a.days} if a.days else {}))
    runs = [one_run(cfg) for _ in range(a.runs)]
    jobs = runs[0]["jobs"]
    print(f"scale {a.scale:g}, {cfg.days} days, {len(layout.make_layout(cfg, 0, 0)):,} nodes: {jobs:,} jobs, "
          f"{runs[0]['instances']:,} instances, sacct export {runs[0]['bytes'] / 1e6:,.0f} MB")
    for phase in ("sample", "schedule", "write sacct"):
        med = statistics.median(r[phase] for r in runs)
        print(f"  {phase:12s} {med:7.2f} s CPU (median of {a.runs})  {med / jobs * 1e6:6.1f} us/job")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
