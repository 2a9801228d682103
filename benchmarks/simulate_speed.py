"""Simulator speed: replay N jobs on a large cluster with EASY backfill, and the FGD-paper placement protocol.

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/simulate_speed.py            # full scale
    .venv/bin/python benchmarks/simulate_speed.py --jobs 100000 --nodes 200 --placement-seeds 1   # quick

Targets (issue 8): 1,000,000 jobs on 2,000 nodes x 8 GPUs with EASY backfill <= 120 s and peak RSS <= 4 GB;
the openb placement protocol, 6 policies x 10 seeds on the default trace <= 120 s. Prints simulated days per
wall second. The workload is synthetic and seeded: Poisson arrivals sized for a target load, a job-size mix
of 1/2/4/8-GPU jobs and 2-4 node gangs, log-normal run times, time limits 1.2-4x the run time (users
over-ask, as in sacct data).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.simulation.simulate import Cluster, Policy, Workload, simulate  # noqa: E402


def synthetic(n_jobs: int, n_nodes: int, gpus: int, load: float, seed: int) -> tuple[Cluster, Workload]:
    rng = np.random.default_rng(seed)
    cluster = Cluster.from_arrays([gpus] * n_nodes, ["h100"] * n_nodes)
    sizes = np.array([1, 2, 4, 8, 8, 8, 8])
    probs = np.array([0.40, 0.15, 0.15, 0.22, 0.04, 0.03, 0.01])
    nn = np.array([1, 1, 1, 1, 2, 3, 4])
    pick = rng.choice(sizes.size, size=n_jobs, p=probs)
    run = np.minimum(rng.lognormal(mean=np.log(1800), sigma=1.4, size=n_jobs), 7 * 86400)
    limit = np.ceil(run * rng.uniform(1.2, 4.0, size=n_jobs) / 60) * 60
    gpu_s = (sizes[pick] * nn[pick] * run).mean()
    rate = load * n_nodes * gpus / gpu_s  # jobs per second for the target load
    submit = np.cumsum(rng.exponential(1 / rate, size=n_jobs))
    work = Workload.from_columns({"submit_s": submit, "run_s": run, "limit_s": limit,
                                  "gpus_per_node": sizes[pick].astype(float), "nnodes": nn[pick],
                                  "account": [f"a{i}" for i in rng.integers(0, 20, size=n_jobs)]})
    return cluster, work


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024


def bench_replay(args) -> None:
    cluster, work = synthetic(args.jobs, args.nodes, 8, args.load, 1)
    days = float(work.cols["submit_s"].max()) / 86400
    simulate(*synthetic(2000, 20, 8, 0.9, 2), Policy.parse("fifo-backfill"))  # compile / load the cache
    for name in args.policies.split(","):
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            res = simulate(cluster, work, Policy.parse(name, sample_dt_s=3600.0, bf_interval_s=args.bf_interval))
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        w = res.jobs.get_column("wait_s").drop_nulls()
        waited = (w > 0).mean()
        print(f"replay {name:22s} {args.jobs:>9,d} jobs {args.nodes} nodes x 8 GPUs, offered load "
              f"{100 * args.load:.0f} %, {days:.1f} days: median {med:7.1f} s of {len(times)} "
              f"({days / med:8.2f} simulated days per wall second), passes {res.passes:,d}, "
              f"p50/p95/mean wait {w.quantile(0.5) / 3600:.2f}/{w.quantile(0.95) / 3600:.2f}/{w.mean() / 3600:.2f} h, "
              f"{100 * waited:.0f} % of jobs waited, peak RSS {peak_rss_gb():.2f} GB")


def bench_placement(args) -> None:
    from models.simulation import placement
    trace = Path(args.trace)
    nodes, pods = placement.load_trace(trace)
    t0 = time.perf_counter()
    placement.run_protocol(nodes, pods, placement.POLICIES[:1], seeds=[42])  # compile
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    curves = placement.run_protocol(nodes, pods, placement.POLICIES, seeds=list(range(42, 42 + args.placement_seeds)))
    wall = time.perf_counter() - t0
    at130 = curves.filter(curves["arrived_pct"] == 130).group_by("policy").agg(
        __import__("polars").col("alloc_pct").mean()).sort("alloc_pct")
    print(f"placement protocol {trace.name}: {len(placement.POLICIES)} policies x {args.placement_seeds} seeds "
          f"in {wall:.1f} s (first-call compile {compile_s:.1f} s), peak RSS {peak_rss_gb():.2f} GB")
    for row in at130.iter_rows():
        print(f"  {row[0]:14s} GPU allocation at 130% demand: {row[1]:.2f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--load", type=float, default=0.98, help="offered GPU load (fraction of capacity)")
    ap.add_argument("--policies", default="fifo-backfill:best-fit")
    ap.add_argument("--bf-interval", type=float, default=30.0, help="seconds between backfill passes (Slurm's 30)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace", default=str(Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
                                           / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv"))
    ap.add_argument("--placement-seeds", type=int, default=10)
    ap.add_argument("--skip-placement", action="store_true")
    ap.add_argument("--skip-replay", action="store_true")
    args = ap.parse_args()
    if not args.skip_replay:
        bench_replay(args)
    if not args.skip_placement:
        bench_placement(args)


if __name__ == "__main__":
    main()
