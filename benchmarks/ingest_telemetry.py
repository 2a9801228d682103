"""Telemetry ingest and attribution at the scale of a large site's day.

One UTC day of 1-minute DCGM readings for 1,024 GPUs x 8 metrics (~11.8 M points) in OpenMetrics files, and the
20,000 Slurm jobs that ran on those GPUs that day. Prints:

* points/s loading the files (``ingest dcgm`` path: parse, classify, fold, merge, rollup), median of --runs,
  beside a naive per-line Python parser on one file, in the same process (the baseline the vectorised parser
  replaces); target >= 500,000 points/s;
* attribution + efficiency mart build time for the 20,000 jobs (target <= 30 s);
* peak RSS of this process (target <= 4 GB);
* points/s over HTTP from a local Prometheus (Debian's package), backfilled with the same day via promtool.

Run the full scale under the shared lock: ``flock /tmp/gpuledger-heavy.lock .venv/bin/python
benchmarks/ingest_telemetry.py``. ``--gpus 128 --jobs 2500`` is a quick small run.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from models.marts import efficiency as efficiency_mart

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

DAY = dt.datetime(2026, 7, 14)
T0 = int((DAY - dt.datetime(1970, 1, 1)).total_seconds())
FAMILIES = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"]


# ---------------------------------------------------------------- the synthetic day

def _jobs(n_nodes: int, minutes: int, n_jobs: int, rng) -> list[dict]:
    """Back-to-back jobs: GPUs 0-3 of each node run 1-GPU jobs, GPUs 4-7 run 4-GPU jobs; trimmed to n_jobs."""
    timelines = [(n, [g]) for n in range(n_nodes) for g in range(4)] + [(n, [4, 5, 6, 7]) for n in range(n_nodes)]
    cycle = len(timelines) * minutes / (n_jobs * 1.08)       # aim a little over, then drop at random
    jobs = []
    for node, gpus in timelines:
        t = float(rng.exponential(5))
        while t < minutes - 1:
            dur = max(1.0, float(rng.lognormal(np.log(cycle * 0.8) - 0.405, 0.9)))   # mean 0.8 cycle
            end = min(float(minutes), t + dur)
            jobs.append({"node": node, "gpus": gpus, "start": round(t, 2), "end": round(end, 2)})
            t = end + float(rng.exponential(cycle * 0.12))
    keep = rng.choice(len(jobs), size=min(n_jobs, len(jobs)), replace=False)
    jobs = [jobs[i] for i in sorted(keep)]
    for i, j in enumerate(jobs):
        j["id"] = 100000 + i
        j["level"] = 0.0 if rng.random() < 0.05 else float(rng.beta(2.0, 1.2))
        j["stall"] = float(rng.uniform(5, 30)) if rng.random() < 0.15 else 0.0
        j["user"] = f"u{int(rng.integers(50)):02d}"
    return jobs


def _activity(jobs, n_nodes, minutes):
    """(activity[node, gpu, minute], job id[node, gpu, minute]) from the placement (0 = unallocated)."""
    act = np.zeros((n_nodes, 8, minutes))
    owner = np.zeros((n_nodes, 8, minutes), np.int64)
    m = np.arange(minutes)
    for j in jobs:
        lo, hi = int(np.ceil(j["start"])), int(np.ceil(j["end"]))
        sl = slice(lo, hi)
        wave = j["level"] * (0.9 + 0.1 * np.sin(m[sl] / 7.0 + j["id"]))
        wave[(m[sl] - lo) < j["stall"]] = 0.0
        for g in j["gpus"]:
            act[j["node"], g, sl] = np.clip(wave, 0, 1)
            owner[j["node"], g, sl] = j["id"]
    return act, owner


def _metric_values(act: np.ndarray) -> dict[str, np.ndarray]:
    """Exporter text of each metric for an activity array (strings, as the exporter prints them)."""
    busy = act > 0
    vals = {
        "DCGM_FI_DEV_GPU_UTIL": np.minimum(100, np.round(act * 115)).astype(int),
        "DCGM_FI_PROF_SM_ACTIVE": np.round(act, 4),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.round(np.minimum(1, act * 1.05), 4),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.round(act * 0.6, 4),
        "DCGM_FI_DEV_FB_USED": np.where(busy, 20000 + np.round(act * 40000), 0).astype(int),
        "DCGM_FI_DEV_POWER_USAGE": np.round(70 + 500 * act, 3),
        "DCGM_FI_DEV_GPU_TEMP": np.round(35 + 40 * act).astype(int),
        "DCGM_FI_DEV_XID_ERRORS": np.zeros(act.shape, int),
    }
    return {k: v.astype(str) for k, v in vals.items()}


def generate(work: Path, n_gpus: int, n_jobs: int, minutes: int, n_files: int, seed: int = 7) -> dict:
    """Write jobs.psv and n_files OpenMetrics files (whole day, a slice of the nodes each); cached by params."""
    params = {"gpus": n_gpus, "jobs": n_jobs, "minutes": minutes, "files": n_files, "seed": seed, "v": 4}
    marker = work / "params.json"
    if marker.exists() and json.loads(marker.read_text()) == params:
        return json.loads((work / "stats.json").read_text())
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_nodes = n_gpus // 8
    jobs = _jobs(n_nodes, minutes, n_jobs, rng)
    lines = ["JobID|JobIDRaw|Cluster|Partition|Account|User|Submit|Start|End|State|NNodes|NCPUS|AllocTRES|NodeList\n"]
    for j in jobs:
        s, e = DAY + dt.timedelta(minutes=j["start"]), DAY + dt.timedelta(minutes=j["end"])
        lines.append(f"{j['id']}|{j['id']}|big|gpu|acct{int(j['user'][1:]) % 10}|{j['user']}|"
                     f"{(s - dt.timedelta(minutes=3)):%Y-%m-%dT%H:%M:%S}|{s:%Y-%m-%dT%H:%M:%S}|{e:%Y-%m-%dT%H:%M:%S}|"
                     f"COMPLETED|1|{4 * len(j['gpus'])}|cpu={4 * len(j['gpus'])},gres/gpu={len(j['gpus'])},node=1|"
                     f"g{j['node']:04d}\n")
    (work / "jobs.psv").write_text("".join(lines))
    act, owner = _activity(jobs, n_nodes, minutes)
    labelled = set(range(n_nodes // 4))                     # a quarter of the nodes run the exporter's job map
    ts = [str(T0 + 60 * m) for m in range(minutes)]
    per_file = -(-n_nodes // n_files)
    points = 0
    for f in range(n_files):
        nodes = range(f * per_file, min(n_nodes, (f + 1) * per_file))
        vals = _metric_values(act[nodes.start:nodes.stop])
        with open(work / f"dcgm-{f:02d}.om", "w") as out:
            for fam in FAMILIES:
                out.write(f"# HELP {fam} DCGM field.\n# TYPE {fam} gauge\n")
                for k, node in enumerate(nodes):
                    for g in range(8):
                        base = (f'{fam}{{gpu="{g}",UUID="GPU-{node:04d}{g:04d}-0000-0000-0000-000000000000",'
                                f'device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",Hostname="g{node:04d}",'
                                f'DCGM_FI_DRIVER_VERSION="550.54.15"')
                        v = vals[fam][k, g]
                        if node in labelled:
                            lab = [f',hpc_job="{o}"}} ' if o else "} " for o in owner[node, g].tolist()]
                            out.write("".join(f"{base}{lab[m]}{v[m]} {ts[m]}\n" for m in range(minutes)))
                        else:
                            pre = base + "} "
                            out.write("".join(f"{pre}{v[m]} {ts[m]}\n" for m in range(minutes)))
                        points += minutes
            out.write("# EOF\n")
    stats = {"jobs": len(jobs), "points": points, "files": n_files,
             "bytes": sum(p.stat().st_size for p in work.glob("dcgm-*.om"))}
    (work / "stats.json").write_text(json.dumps(stats))
    marker.write_text(json.dumps(params))
    return stats


# ---------------------------------------------------------------- measurements

_NAIVE = re.compile(r'^([A-Za-z_:][\w:]*)\{(.*)\}\s+(\S+)(?:\s+(\S+))?$')


def naive_points_per_s(path: Path) -> float:
    """The per-line Python parser we do not use: regex each line, parse labels, build rows."""
    t0 = time.perf_counter()
    rows = []
    with open(path) as f:
        for line in f:
            m = _NAIVE.match(line.rstrip("\n"))
            if not m:
                continue
            labels = dict(kv.split("=", 1) for kv in m.group(2).split(","))
            rows.append((m.group(1), labels.get("Hostname"), labels.get("gpu"), float(m.group(3)),
                         float(m.group(4) or 0)))
    return len(rows) / (time.perf_counter() - t0)


def load_files(db: Path, work: Path) -> tuple[float, float, int, object]:
    """Fresh warehouse: jobs (untimed), then every OpenMetrics file (timed). Returns (wall s, cpu s, points, con)."""
    from ingest import dcgm, sacct, telemetry_store, warehouse
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    con = warehouse.connect(db)
    sacct.ingest_path(con, str(work / "jobs.psv"), sacct.SacctOptions())
    w0, c0 = time.perf_counter(), time.process_time()
    loaded = 0
    files = [str(f) for f in sorted(work.glob("dcgm-*.om"))]
    for s in dcgm.ingest_paths(con, files, telemetry_store.TelemetryOptions(cluster="big")):
        assert s["rejected"] == 0, s["reject_examples"]
        loaded += s["loaded"]
    return time.perf_counter() - w0, time.process_time() - c0, loaded, con


def attribution_time(con) -> tuple[float, dict]:
    from models.metrics import efficiency
    t0, c0 = time.perf_counter(), time.process_time()
    efficiency_mart.build(con, full=True)
    wall = time.perf_counter() - t0
    print(f"    attribution CPU {time.process_time() - c0:.1f} s")
    row = con.sql("""SELECT count(*), count(*) FILTER (WHERE method <> 'none'), sum(alloc_gpu_s) / 3600,
                            sum(telemetry_gpu_s) / 3600, sum(idle_alloc_gpu_s) / 3600 FROM gpu_efficiency_job""").fetchall()[0]
    return wall, dict(zip(["jobs", "with_telemetry", "alloc_gpu_h", "telemetry_gpu_h", "idle_alloc_gpu_h"], row))


def http_points_per_s(work: Path, db: Path) -> dict:
    import prometheus_server
    from ingest import prometheus, telemetry_store, warehouse
    om = work / "backfill-all.om"
    if not om.exists():
        with open(om, "w") as out:          # promtool 2.42 accepts families interleaved across the parts
            for f in sorted(work.glob("dcgm-*.om")):
                with open(f) as src:
                    for line in src:
                        if line != "# EOF\n":
                            out.write(line)
            out.write("# EOF\n")
    prom_dir = Path(tempfile.mkdtemp(prefix="gl-bench-prom-", dir=work))
    t0 = time.perf_counter()
    server = prometheus_server.start(om, prom_dir, ready_timeout_s=600)
    backfill = time.perf_counter() - t0
    try:
        for p in (db, Path(str(db) + ".wal")):
            p.unlink(missing_ok=True)
        con = warehouse.connect(db)
        q = prometheus.QueryOptions(url=server.url, start=DAY, end=DAY + dt.timedelta(minutes=1439), step_s=60)
        w0 = time.perf_counter()
        s = prometheus.ingest(con, q, telemetry_store.TelemetryOptions(cluster="big"))
        wall = time.perf_counter() - w0
    finally:
        server.stop()
    return {"points": s["loaded"], "seconds": wall, "points_per_s": s["loaded"] / wall, "queries": q.stats["queries"],
            "mib_received": q.stats.get("bytes", 0) / 2**20, "backfill_and_start_s": backfill}


def _rss() -> float:
    """Peak resident set size of this process so far, GiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _warm_up() -> None:
    """Import what the first ingest would import (DuckDB's Arrow registration pulls in pandas, which this
    environment recompiles on every start: PYTHONDONTWRITEBYTECODE), so it is not timed as ingest."""
    import duckdb
    import pyarrow as pa
    c = duckdb.connect()
    c.register("w", pa.table({"x": [1]}))
    c.sql("SELECT * FROM w").fetchall()
    c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--minutes", type=int, default=1440)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default=os.environ.get("GPULEDGER_BENCH_DIR", "/tmp/gpuledger-bench-telemetry"))
    ap.add_argument("--no-http", action="store_true")
    a = ap.parse_args()
    work = Path(a.workdir) / f"g{a.gpus}-j{a.jobs}-m{a.minutes}"
    t0 = time.perf_counter()
    st = generate(work, a.gpus, a.jobs, a.minutes, a.files)
    print(f"data: {st['jobs']:,} jobs, {st['points']:,} points in {st['files']} OpenMetrics files "
          f"({st['bytes'] / 2**20:,.0f} MiB) [{time.perf_counter() - t0:.0f} s to prepare]")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    _warm_up()
    naive = naive_points_per_s(sorted(work.glob("dcgm-*.om"))[0])
    walls, cpus, attrs = [], [], []
    for r in range(a.runs):
        wall, cpu, loaded, con = load_files(work / "bench.duckdb", work)
        walls.append(wall)
        cpus.append(cpu)
        aw, summary = attribution_time(con)
        attrs.append(aw)
        con.close()
        print(f"  run {r + 1}: files {loaded:,} points in {wall:.1f} s ({loaded / wall:,.0f} points/s, "
              f"{cpu:.1f} CPU-s); attribution {aw:.1f} s; peak RSS so far {_rss():.2f} GiB")
    med = statistics.median(walls)
    print(f"files: {st['points'] / med:,.0f} points/s (median of {a.runs}; target >= 500,000); "
          f"{st['points'] / statistics.median(cpus):,.0f} points per CPU-second; "
          f"naive per-line Python parser: {naive:,.0f} points/s (x{st['points'] / med / naive:.1f})")
    print(f"attribution + efficiency marts for {summary['jobs']:,} jobs: {statistics.median(attrs):.1f} s "
          f"(median; target <= 30 s); {summary['with_telemetry']:,} jobs with telemetry, "
          f"{summary['telemetry_gpu_h']:,.0f} of {summary['alloc_gpu_h']:,.0f} allocated GPU-h covered, "
          f"{summary['idle_alloc_gpu_h']:,.0f} idle-allocated")
    if not a.no_http:
        h = http_points_per_s(work, work / "bench-http.duckdb")
        print(f"http: {h['points']:,} points in {h['seconds']:.1f} s = {h['points_per_s']:,.0f} points/s from a local "
              f"Prometheus ({h['queries']} query_range calls, {h['mib_received']:,.0f} MiB JSON; backfill + start "
              f"{h['backfill_and_start_s']:.0f} s)")
    print(f"peak RSS: {_rss():.2f} GiB (target <= 4 GB)")


if __name__ == "__main__":
    main()
