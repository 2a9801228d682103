"""Replay validation, the figures of record in docs/SIMULATOR.md ("Validation by replay").

    .venv/bin/python benchmarks/replay_validation.py                        # all three, demo at data/demo.duckdb
    .venv/bin/python benchmarks/replay_validation.py --demo /tmp/demo.duckdb --skip-self

1. Self-consistency: a warehouse whose history is the simulator's own schedule (3,000 jobs, 7 days,
   24 h100 + 8 a100 nodes of 8 GPUs, 2-node gangs, FIFO + EASY backfill, best-fit) replayed with the true
   policy and with wrong ones.
2. The real Slurm 22.05 capture in tests/fixtures/slurm_real, ingested by the real ingestors: per job, in
   seconds.
3. The demo warehouse (`gpuledger demo`): its history comes from the generator's own Slurm-like scheduler
   (models/demo/scheduler.py), written as real sacct/scontrol/sacctmgr files and ingested.
4. Windows that start inside the history (self-consistency and demo), replayed from the cluster's state at their
   start and, as before that was loaded, from idle nodes (`--only-starts` prints only this table).
5. Advance reservations (`--only-reservations`): the demo's jobs around each reservation (its pool, submitted from
   a week before it to its end) and the jobs in it, replayed with the reservations and without (as before
   2026-12-08), and the self-consistency warehouse with two reservations.
Prints markdown tables (waits in hours unless said otherwise).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from ingest import sacct, slurm_events, slurm_nodes, warehouse  # noqa: E402
from models.simulation import whatif  # noqa: E402
from models.simulation.simulate import Cluster, Policy  # noqa: E402

COLS = ["size_class", "jobs", "median_abs_err_h", "mean_abs_err_h", "p90_abs_err_h", "observed_p50_h",
        "simulated_p50_h", "observed_p95_h", "simulated_p95_h", "observed_mean_h", "simulated_mean_h"]


def md(df: pl.DataFrame, fmt: str = "{:.2f}") -> str:
    rows = ["| " + " | ".join(df.columns) + " |", "|---" * df.width + "|"]
    for r in df.iter_rows():
        rows.append("| " + " | ".join(fmt.format(v) if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(rows)


def self_consistency() -> str:
    from sim_fixtures import build_warehouse, synthetic_jobs
    truth = Policy.parse("fifo-backfill", placement="best-fit")
    with tempfile.TemporaryDirectory() as d:
        con = warehouse.connect(Path(d) / "w.duckdb")
        cl = Cluster.from_arrays([8] * 32, ["h100"] * 24 + ["a100"] * 8, ["gpu"] * 32)
        build_warehouse(con, synthetic_jobs(3000, 11, n_pools=2, days=7), cl, truth)
        inp = whatif.load_inputs(con)
        con.close()
    rows = []
    for name, pol in [("fifo-backfill, best-fit (the truth)", truth),
                      ("fifo-backfill, first-fit", Policy.parse("fifo-backfill", placement="first-fit")),
                      ("fifo-backfill, best-fit, backfill at every event",
                       Policy.parse("fifo-backfill", placement="best-fit", bf_interval_s=0)),
                      ("priority-backfill, best-fit", Policy.parse("priority-backfill", placement="best-fit")),
                      ("fifo (no backfill), best-fit", Policy.parse("fifo", placement="best-fit"))]:
        _, s = whatif.validate_replay(inp, pol)
        a = s.row(0, named=True)
        big = s.filter(pl.col("size_class") == "9-16").row(0, named=True)
        rows.append((name, a["mean_abs_err_h"], f"{a['observed_p50_h']:.2f} / {a['simulated_p50_h']:.2f}",
                     f"{a['observed_p95_h']:.2f} / {a['simulated_p95_h']:.2f}",
                     f"{big['observed_p95_h']:.2f} / {big['simulated_p95_h']:.2f}"))
    df = pl.DataFrame(rows, schema=["replay policy", "MAE all (h)", "p50 obs / sim (h)", "p95 obs / sim (h)",
                                    "p95 of 9-16 GPU jobs obs / sim (h)"], orient="row")
    return md(df)


def _from_idle(inp: whatif.Inputs) -> whatif.Inputs:
    """The window as it was replayed before it held the cluster's state at its start: no job carried in, and
    measured to t1 even when the accounting ends before."""
    return replace(inp, jobs=inp.jobs.filter(~pl.col("carried")), horizon=None)


def _start_row(name: str, inp: whatif.Inputs, pol: Policy, observed_util: float | None) -> tuple:
    res, out = whatif.replay(inp, pol)
    _, s = whatif.validate_replay(inp, pol, (res, out))
    a = s.row(0, named=True)
    util = whatif.replay_utilization_pct(inp, res)
    return (name, a["jobs"], a["mean_abs_err_h"], a["p90_abs_err_h"],
            f"{a['observed_mean_h']:.2f} / {a['simulated_mean_h']:.2f}",
            f"{a['observed_p95_h']:.2f} / {a['simulated_p95_h']:.2f}",
            "" if observed_util is None else f"{observed_util:.1f} / {util:.1f}")


def window_starts(demo_path: Path | None) -> str:
    """Windows that start inside the history, replayed from the cluster's state at their start (jobs running
    then pinned to their nodes, jobs queued then first in line) and, as before, from idle nodes."""
    from sim_fixtures import build_warehouse, synthetic_jobs
    truth = Policy.parse("fifo-backfill", placement="best-fit")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        con = warehouse.connect(Path(d) / "w.duckdb")
        cl = Cluster.from_arrays([8] * 32, ["h100"] * 24 + ["a100"] * 8, ["gpu"] * 32)
        build_warehouse(con, synthetic_jobs(3000, 11, n_pools=2, days=7), cl, truth)
        for start in ("2026-03-04T07:43:00", "2026-03-06T19:07:30"):
            inp = whatif.load_inputs(con, start, None)
            for how, i in (("state at start", inp), ("idle nodes", _from_idle(inp))):
                rows.append(_start_row(f"self-consistency from {start}, {how}", i, truth, None))
        con.close()
    if demo_path is not None and demo_path.exists():
        con = duckdb.connect(str(demo_path), read_only=True)
        try:
            hz = con.sql("SELECT max(horizon) FROM tl_clusters").fetchall()[0][0]
            for days in (7, 35):
                start = (hz - timedelta(days=days)).replace(hour=0, minute=0, second=0, microsecond=0)
                inp = whatif.load_inputs(con, start.isoformat(), None)
                seen = whatif.observed_allocation_ratio_pct(con, inp)
                for how, i in (("state at start", inp), ("idle nodes", _from_idle(inp))):
                    rows.append(_start_row(f"demo from {start:%Y-%m-%d} to its horizon, {how}", i,
                                           Policy.parse("fifo-backfill"), seen))
        finally:
            con.close()
    df = pl.DataFrame(rows, schema=["window, replayed from", "jobs", "MAE (h)", "p90 abs err (h)",
                                    "mean wait obs / sim (h)", "p95 obs / sim (h)", "allocation ratio obs / sim (%)"],
                      orient="row")
    return md(df)


def real_capture() -> str:
    real = ROOT / "tests" / "fixtures" / "slurm_real"
    with tempfile.TemporaryDirectory() as d:
        con = warehouse.connect(Path(d) / "w.duckdb")
        sacct.ingest_path(con, str(real / "sacct-allocations.psv"), sacct.SacctOptions())
        slurm_nodes.ingest_path(con, str(real / "scontrol-show-node-o.txt"), as_of="2026-12-02T12:47:12")
        slurm_events.ingest_path(con, str(real / "sacctmgr-event.psv"))
        inp = whatif.load_inputs(con)
        ids = con.sql("SELECT job_uid, job_id, state, partition FROM jobs").pl()
        con.close()
    per_job, s = whatif.validate_replay(inp, Policy.parse("fifo-backfill"))
    jobs = per_job.join(ids, on="job_uid").sort("submit_s", "job_id").select(
        "job_id", "state", "partition", "gpus", (pl.col("observed_wait_h") * 3600).round(0).alias("observed_wait_s"),
        (pl.col("simulated_wait_h") * 3600).round(0).alias("simulated_wait_s"))
    summary = s.select(["size_class", "jobs"] + [(pl.col(c) * 3600).alias(c.replace("_h", "_s")) for c in COLS[2:]])
    return md(jobs, "{:.0f}") + "\n\n" + md(summary, "{:.1f}")


def demo(path: Path) -> str:
    con = duckdb.connect(str(path), read_only=True)
    try:
        t0 = time.perf_counter()
        inp = whatif.load_inputs(con)
        load_s = time.perf_counter() - t0
    finally:
        con.close()
    out = [f"{inp.jobs.height:,} jobs, {inp.cluster.size} nodes, [{inp.t0}, {inp.t1}); inputs loaded in "
           f"{load_s:.1f} s"]
    for name, pol in [("fifo-backfill (bf_interval 30 s, best-fit)", Policy.parse("fifo-backfill")),
                      ("fifo-backfill, bf_interval 60 s as the generator", Policy.parse("fifo-backfill",
                                                                                        bf_interval_s=60)),
                      ("fifo (no backfill)", Policy.parse("fifo"))]:
        t0 = time.perf_counter()
        _, s = whatif.validate_replay(inp, pol)
        out.append(f"\n**{name}** (replay {time.perf_counter() - t0:.1f} s)\n")
        out.append(md(s.select(COLS)))
    return "\n".join(out)


def _around(out: pl.DataFrame, resv: pl.DataFrame, pools: dict[str, str]) -> list[tuple]:
    """Per reservation: (name, jobs of its pool around it, their mean |error| h, observed / simulated mean wait h,
    jobs in it, their mean |error| h, observed / simulated mean wait h)."""
    o = out.filter(pl.col("observed_wait_s").is_not_null() & pl.col("feasible")).with_columns(
        ((pl.col("wait_s") - pl.col("observed_wait_s")).abs() / 3600).alias("err"),
        (pl.col("wait_s") / 3600).alias("w"), (pl.col("observed_wait_s") / 3600).alias("ow"))
    rows = []
    for r in resv.iter_rows(named=True):
        d = o.filter(pl.col("submit_s").is_between(r["start_s"] - 7 * 86400, r["end_s"])
                     & (pl.col("pool") == pools[r["name"]]))
        i = d.filter(pl.col("reservation") == r["name"])
        rows.append((r["name"], d.height, d["err"].mean(), d["ow"].mean(), d["w"].mean(), i.height, i["err"].mean(),
                     i["ow"].mean(), i["w"].mean()))
    return rows


def reservations(demo_path: Path) -> str:
    """The demo's reservations replayed with and without them (fifo-backfill, best-fit, bf_interval 30 s)."""
    con = duckdb.connect(str(demo_path), read_only=True)
    try:
        inp = whatif.load_inputs(con)
        pools = dict(con.sql("SELECT r.name, any_value(n.gpu_type) FROM reservations r JOIN nodes n "
                             "ON list_contains(string_split(r.nodes, ','), n.node) GROUP BY ALL").fetchall())
    finally:
        con.close()
    pol = Policy.parse("fifo-backfill")
    rows = []
    for on in (True, False):
        t0 = time.perf_counter()
        res, out = whatif._run(inp, whatif.Scenario(policy=pol, replay_reservations=on), inp.jobs, pol.seed)
        secs = time.perf_counter() - t0
        _, summary = whatif.validate_replay(inp, pol, (res, out))
        all_err = summary.filter(pl.col("size_class") == "all")["mean_abs_err_h"][0]
        rows += [("with" if on else "without", secs, all_err, *r) for r in _around(out, inp.reservations, pools)]
    df = pl.DataFrame(rows, orient="row", schema=[
        "reservations", "replay_s", "all_jobs_mean_abs_err_h", "reservation", "pool_jobs_around", "mean_abs_err_h",
        "observed_mean_h", "simulated_mean_h", "jobs_in_it", "in_it_mean_abs_err_h", "in_it_observed_mean_h",
        "in_it_simulated_mean_h"])
    return md(df)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", default=str(ROOT / "data" / "demo.duckdb"))
    ap.add_argument("--skip-self", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--only-starts", action="store_true", help="only the windows that start inside the history")
    ap.add_argument("--only-reservations", action="store_true", help="only the demo's advance reservations")
    args = ap.parse_args()
    if args.only_reservations:
        print("## Advance reservations (demo)\n\n" + reservations(Path(args.demo)) + "\n")
        return
    if args.only_starts:
        print("## Windows that start inside the history\n\n" + window_starts(Path(args.demo)) + "\n")
        return
    if not args.skip_self:
        print("## Self-consistency\n\n" + self_consistency() + "\n")
        print("## Windows that start inside the history\n\n" + window_starts(
            None if args.skip_demo else Path(args.demo)) + "\n")
    if not args.skip_real:
        print("## Real Slurm capture (seconds)\n\n" + real_capture() + "\n")
    if not args.skip_demo:
        if Path(args.demo).exists():
            print("## Demo warehouse\n\n" + demo(Path(args.demo)) + "\n")
            print("## Advance reservations (demo)\n\n" + reservations(Path(args.demo)) + "\n")
        else:
            print(f"## Demo warehouse\n\n{args.demo} does not exist: run `gpuledger demo --no-serve` first\n")


if __name__ == "__main__":
    main()
