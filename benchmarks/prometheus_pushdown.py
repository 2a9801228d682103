"""Push-down telemetry (`ingest prometheus --aggregate`) against the raw pull, from one local Prometheus.

One UTC day of 1-minute DCGM readings (benchmarks/ingest_telemetry.py's synthetic site: back-to-back jobs starting
at any second, stalls at zero, a quarter of the nodes labelled with the job) is backfilled into Debian's
Prometheus; the same process then pulls it raw (the baseline) and as 5-minute aggregates, each into a fresh
warehouse, and prints for both: points transferred, MiB of JSON, query_range calls, seconds (median of --runs),
and the ratio. With --accuracy (default at <= 2,048 GPUs) it builds the efficiency marts from both and prints
how many jobs' mean activity agrees within 0.5 points and the idle-allocated GPU-hours of each.

``flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/prometheus_pushdown.py --gpus 1024`` and
``--gpus 16384 --jobs 320000 --runs 1``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import shutil
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import ingest_telemetry as site   # noqa: E402  (the synthetic day: jobs, activity, exporter values)


def generate(work: Path, n_gpus: int, n_jobs: int, families: list[str], seed: int = 7) -> dict:
    """jobs.psv and one OpenMetrics file of ``families`` for the day; cached by parameters."""
    params = {"gpus": n_gpus, "jobs": n_jobs, "families": families, "seed": seed, "v": 1}
    marker = work / "params.json"
    if marker.exists() and json.loads(marker.read_text()) == params:
        return json.loads((work / "stats.json").read_text())
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_nodes, minutes = n_gpus // 8, 1440
    jobs = site._jobs(n_nodes, minutes, n_jobs, rng)
    lines = ["JobID|JobIDRaw|Cluster|Partition|Account|User|Submit|Start|End|State|NNodes|NCPUS|AllocTRES|NodeList\n"]
    for j in jobs:
        s, e = site.DAY + dt.timedelta(minutes=j["start"]), site.DAY + dt.timedelta(minutes=j["end"])
        lines.append(f"{j['id']}|{j['id']}|big|gpu|acct{int(j['user'][1:]) % 10}|{j['user']}|"
                     f"{(s - dt.timedelta(minutes=3)):%Y-%m-%dT%H:%M:%S}|{s:%Y-%m-%dT%H:%M:%S}|{e:%Y-%m-%dT%H:%M:%S}|"
                     f"COMPLETED|1|{4 * len(j['gpus'])}|cpu={4 * len(j['gpus'])},gres/gpu={len(j['gpus'])},node=1|"
                     f"g{j['node']:04d}\n")
    (work / "jobs.psv").write_text("".join(lines))
    shutil.rmtree(work / "prom", ignore_errors=True)         # a cached backfill of other data
    labelled = set(range(n_nodes // 4))
    ts = [str(site.T0 + 60 * m) for m in range(minutes)]
    points = 0
    with open(work / "day.om", "w") as out:
        for fam in families:
            out.write(f"# HELP {fam} DCGM field.\n# TYPE {fam} gauge\n")
            for lo in range(0, n_nodes, 256):         # a slice of nodes at a time: bounded memory
                nodes = range(lo, min(n_nodes, lo + 256))
                act, owner = site._activity([dict(j, node=j["node"] - lo) for j in jobs if j["node"] in nodes],
                                            len(nodes), minutes)
                vals = site._metric_values(act)[fam]
                for k, node in enumerate(nodes):
                    for g in range(8):
                        base = (f'{fam}{{gpu="{g}",UUID="GPU-{node:04d}{g:04d}-0000-0000-0000-000000000000",'
                                f'modelName="NVIDIA H100 80GB HBM3",Hostname="g{node:04d}"')
                        v = vals[k, g]
                        if node in labelled:
                            lab = [f',hpc_job="{o}"}} ' if o else "} " for o in owner[k, g].tolist()]
                            out.write("".join(f"{base}{lab[m]}{v[m]} {ts[m]}\n" for m in range(minutes)))
                        else:
                            out.write("".join(f"{base}}} {v[m]} {ts[m]}\n" for m in range(minutes)))
                        points += minutes
        out.write("# EOF\n")
    stats = {"jobs": len(jobs), "points": points}
    (work / "stats.json").write_text(json.dumps(stats))
    marker.write_text(json.dumps(params))
    return stats


def start_store(work: Path):
    """Prometheus serving the day: backfilled once per generated day (``prom/backfilled`` marks a complete
    backfill), later runs start on the same blocks (backfilling 16,384 GPUs' day takes minutes)."""
    import prometheus_server
    prom_dir, marker = work / "prom", work / "prom" / "backfilled"
    t0 = time.perf_counter()
    if marker.exists():
        server = prometheus_server.start(work / "day.om", prom_dir, ready_timeout_s=1800, backfill=False)
        print(f"start on the cached backfill: {time.perf_counter() - t0:.0f} s")
        return server
    shutil.rmtree(prom_dir, ignore_errors=True)
    server = prometheus_server.start(work / "day.om", prom_dir, ready_timeout_s=1800)
    marker.write_text("")
    print(f"backfill + start: {time.perf_counter() - t0:.0f} s")
    return server


def pull(url: str, db: Path, work: Path, families: list[str], aggregate: int | None,
         max_query_points: int | None = None, slice_min: int = 1440) -> tuple[dict, object]:
    """One pull of the day into a fresh warehouse (jobs loaded first, untimed), in pulls of ``slice_min``
    minutes; returns (figures, connection)."""
    from ingest import prometheus, prometheus_pushdown, sacct, telemetry_store, warehouse
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    con = warehouse.connect(db)
    sacct.ingest_path(con, str(work / "jobs.psv"), sacct.SacctOptions())
    opts = telemetry_store.TelemetryOptions(cluster="big")
    tot = dict.fromkeys(("points", "bytes", "queries", "edge_points", "series"), 0)
    t0 = time.perf_counter()
    for lo, hi in _slices(slice_min, aggregate):
        q = prometheus.QueryOptions(url=url, start=site.DAY + dt.timedelta(minutes=lo),
                                    end=site.DAY + dt.timedelta(minutes=hi), step_s=60, metrics=tuple(families),
                                    timeout_s=600)
        if max_query_points:
            q.max_query_points = max_query_points
        s = prometheus_pushdown.ingest(con, q, opts, aggregate) if aggregate else prometheus.ingest(con, q, opts)
        assert s["rejected"] == 0, s["reject_examples"]
        for k in tot:
            tot[k] = max(tot[k], q.stats.get(k, 0)) if k == "series" else tot[k] + q.stats.get(k, 0)
    wall = time.perf_counter() - t0
    rows = con.sql("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
    return {"seconds": wall, "points": tot["points"], "mib": tot["bytes"] / 2**20, "queries": tot["queries"],
            "rows": rows, "minute_points": tot["edge_points"], "series": tot["series"]}, con


def _slices(slice_min: int, aggregate: int | None) -> list[tuple[float, float]]:
    """The day's minutes (0 .. 1439) as consecutive pulls of ``slice_min`` minutes, each its own ingest run (as a
    collector pulls: the cycles' runs commit one by one). A push-down slice after the first starts a minute
    later: its first interval ends ``aggregate`` after the previous slice's last (no interval pulled twice)."""
    out = []
    for lo in range(0, 1440, slice_min):
        hi = min(1439, lo + slice_min - 1)
        out.append((lo + (1 if aggregate and lo else 0), hi))
    return out


def efficiency(con) -> dict:
    """Efficiency marts built (full); per job id (mean activity, idle-allocated GPU-s). Keyed by Slurm's job id,
    not job_uid: two warehouses loading the same sacct file number jobs differently once the load is staged in
    parallel segments (at 16,384 GPUs only 127,680 of 327,680 uids matched)."""
    from models.marts import efficiency as mart
    mart.build(con, full=True)
    return {j: (a, i) for j, a, i in con.sql(
        """SELECT j.job_id, e.act_mean, e.idle_alloc_gpu_s FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)
           WHERE e.telemetry_gpu_s > 0""").fetchall()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--jobs", type=int, default=None, help="default: 20 per GPU")
    ap.add_argument("--families", default="DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    ap.add_argument("--interval", default="5m")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--accuracy", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--max-query-points", type=int, default=None,
                    help="both pulls' bound on points a query (default ingest.prometheus.MAX_QUERY_POINTS); windows "
                         "are sized as if every series had a point every minute, and a quarter of the synthetic "
                         "site's series carry a job label (a series per job: 94,000 series at 16,384 GPUs, 16,384 "
                         "of them live at a time), so the default makes windows of ~21 minutes there")
    ap.add_argument("--slice", default="1440m",
                    help="pull the day in consecutive ingest runs of this length (e.g. 2h; default: one run). One "
                         "run of 16,384 GPUs' day is one transaction whose temporary tables spilled past 30 GB")
    ap.add_argument("--workdir", default=os.environ.get("GPULEDGER_BENCH_DIR", "/tmp/gpuledger-bench-pushdown"))
    a = ap.parse_args()
    from ingest import prometheus_pushdown
    families = a.families.split(",")
    n_jobs = a.jobs or 20 * a.gpus
    interval = prometheus_pushdown.parse_interval(a.interval)
    slice_min = prometheus_pushdown.parse_interval(a.slice) // 60
    if slice_min * 60 % interval:
        raise SystemExit("--slice must be a multiple of --interval")
    work = Path(a.workdir) / f"g{a.gpus}-j{n_jobs}-{len(families)}f"
    t0 = time.perf_counter()
    st = generate(work, a.gpus, n_jobs, families)
    print(f"data: {a.gpus:,} GPUs, {st['jobs']:,} jobs, {st['points']:,} points ({len(families)} metric(s) x 1,440 "
          f"minutes) [{time.perf_counter() - t0:.0f} s to prepare]; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    server = start_store(work)
    res, cons = {"raw": [], "agg": []}, {}
    try:
        for r in range(a.runs):
            for mode, agg in (("raw", None), ("agg", interval)):
                fig, con = pull(server.url, work / f"{mode}.duckdb", work, families, agg, a.max_query_points,
                                slice_min)
                res[mode].append(fig)
                if cons.get(mode):
                    cons[mode].close()
                cons[mode] = con
                print(f"  run {r + 1} {mode}: {fig['series']:,} series, {fig['points']:,} points, "
                      f"{fig['mib']:,.1f} MiB, {fig['queries']} queries,"
                      f" {fig['seconds']:.1f} s, {fig['rows']:,} rows stored", flush=True)
    finally:
        server.stop()
    med = {m: statistics.median(f["seconds"] for f in res[m]) for m in res}
    raw, agg = res["raw"][0], res["agg"][0]
    print(f"raw pull: {raw['points']:,} points, {raw['mib']:,.1f} MiB, {med['raw']:.1f} s (median of {a.runs})")
    print(f"push-down {a.interval}: {agg['points']:,} points ({agg['minute_points']:,} of them minute readings of "
          f"mixed and handover intervals), {agg['mib']:,.1f} MiB, {med['agg']:.1f} s (median of "
          f"{a.runs}); points x{raw['points'] / agg['points']:.2f} fewer, bytes x{raw['mib'] / agg['mib']:.2f} fewer, "
          f"time x{med['raw'] / med['agg']:.2f} faster")
    if a.accuracy if a.accuracy is not None else a.gpus <= 2048:
        e_raw, e_agg = efficiency(cons["raw"]), efficiency(cons["agg"])
        both = sorted(set(e_raw) & set(e_agg))
        diff = np.array([abs(e_raw[j][0] - e_agg[j][0]) for j in both])
        idle_raw, idle_agg = sum(e_raw[j][1] for j in both) / 3600, sum(e_agg[j][1] for j in both) / 3600
        print(f"accuracy: {len(both):,} jobs with telemetry in both ({len(e_raw):,} raw, {len(e_agg):,} push-down); "
              f"mean activity within 0.5 pt: {(diff <= 0.005).mean():.2%} of jobs (max diff {diff.max() * 100:.2f} "
              f"pt); idle-allocated {idle_raw:,.1f} GPU-h raw vs {idle_agg:,.1f} push-down "
              f"({(idle_agg - idle_raw) / idle_raw:+.2%})")
    for c in cons.values():
        c.close()


if __name__ == "__main__":
    main()
