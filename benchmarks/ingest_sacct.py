"""Benchmark `gpuledger ingest sacct` against DuckDB's own read_csv of the same file.

Writes N realistic sacct --parsable2 lines in Open XDMoD's field order (default 1,000,000: ~20 % array
tasks, ~30 % step lines, multi-node jobs, typed/untyped/absent GPU TRES, ISO-local/offset/epoch times,
Unknown, D-HH:MM:SS/UNLIMITED/Partition_Limit durations, per-CPU/per-node ReqMem, 'CANCELLED by N',
'|' inside job names, pending array ranges, het components, a few bad lines), then measures, each in its
own process and --repeat times (medians reported):
  1. ingest into an empty warehouse, 2. a second ingest of the same file (a no-op merge),
  3. DuckDB read_csv of the file into a table (the baseline).
Prints input lines/s, the ratio to the baseline and each phase's peak RSS.

Targets (issue 2, this 2-core machine, 1M lines): >= 150,000 lines/s end to end, <= 4x the baseline,
peak RSS <= 2 GB; the re-ingest within the same bounds.

    .venv/bin/python benchmarks/ingest_sacct.py [--lines N] [--repeat K] [--keep]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(tempfile.gettempdir()) / "gpuledger-bench"

STATES = ["COMPLETED"] * 55 + ["FAILED"] * 15 + ["CANCELLED by 1234"] * 10 + ["TIMEOUT"] * 6 + ["RUNNING"] * 6 + \
         ["NODE_FAIL"] * 2 + ["PREEMPTED"] * 2 + ["OUT_OF_MEMORY"] * 2 + ["PENDING"] * 2


def _fmt_dur(s: int) -> str:
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _fmt_time(epoch: int, form: int) -> str:
    t = time.gmtime(epoch)
    if form == 0:
        return time.strftime("%Y-%m-%dT%H:%M:%S", t)
    if form == 1:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch + 3600)) + "+0100"
    return str(epoch)


def write_input(path: Path, n_lines: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    base = 1_767_225_600  # 2026-01-01
    out = []
    jid = 5_000_000
    written = 0
    while written < n_lines:
        jid += 1
        form = 0 if rng.random() < 0.9 else rng.choice([1, 2])
        gpus = rng.choice([1, 1, 1, 1, 2, 4, 8])
        nn = 1 if rng.random() < 0.9 else rng.choice([2, 4, 8])
        gtype = rng.choice(["a100", "h100"])
        first = rng.randint(1, 990)
        nodelist = f"gpu{first:04d}" if nn == 1 else (
            f"gpu[{first:04d}-{first + nn - 1:04d}]" if rng.random() < 0.7 else
            f"r1n[{first:04d}-{first + nn // 2 - 1:04d}],r2n[{first:04d}-{first + nn - nn // 2 - 1:04d}]")
        state = rng.choice(STATES)
        submit = base + rng.randint(0, 180 * 86400)
        wait = int(rng.expovariate(1 / 900))
        run = int(rng.paretovariate(1.2) * 300)
        start, end = submit + wait, submit + wait + run
        r = rng.random()
        jobid = str(jid) if r > 0.2 else f"{jid - rng.randint(1, 50)}_{rng.randint(0, 999)}"
        if r < 0.005:
            jobid = f"{jid}_[{rng.randint(1, 9)}-{rng.randint(10, 99)},{rng.randint(100, 200)}]"
            state = "PENDING"
        elif r > 0.995:
            jobid = f"{jid}+{rng.randint(0, 1)}"
        tot = gpus * nn
        tres_kind = rng.random()
        alloc = (f"billing={tot * 4},cpu={tot * 4},gres/gpu:{gtype}={tot},gres/gpu={tot},mem={tot * 64}G,node={nn}"
                 if tres_kind < 0.6 else f"billing={tot * 4},cpu={tot * 4},gres/gpu={tot},mem={tot * 64000}M,node={nn}"
                 if tres_kind < 0.8 else f"cpu={tot * 4},gres/gpu:{gtype}={tot},mem={tot * 64}G,node={nn}"
                 if tres_kind < 0.95 else f"billing={nn * 8},cpu={nn * 8},mem={nn * 32}G,node={nn}")
        req = f"billing={tot * 4},cpu={tot * 4},gres/gpu={tot},mem={tot * 64}G,node={nn}"
        start_s, end_s, elapsed = _fmt_time(start, form), _fmt_time(end, form), _fmt_dur(run)
        nodes = nodelist
        if state == "PENDING":
            start_s, end_s, elapsed, alloc, nodes = "Unknown", "Unknown", "00:00:00", "", "None assigned"
        elif state == "RUNNING":
            end_s = "Unknown"
        limit = rng.choice([_fmt_dur(rng.choice([3600, 14400, 86400, 259200])), "UNLIMITED", "Partition_Limit"])
        reqmem = rng.choice([f"{gpus * 8000}Mc", f"{gpus * 64}Gn", f"{gpus * 64}G"])
        name = f"train-{jid}" if rng.random() > 0.01 else f"sweep|lr={rng.random():.3f}"
        acct = f"team{jid % 12:02d}"
        user = f"user{jid % 317}"
        line = "|".join([jobid, str(jid), "bench", rng.choice(["gpu", "gpu-long", "debug"]), "normal", acct, acct,
                         str(5000 + jid % 12), user, str(10000 + jid % 317), _fmt_time(submit, form),
                         _fmt_time(submit, form), start_s, end_s, elapsed, rng.choice(["0:0", "1:0", "0:15"]), state,
                         str(nn), str(tot * 4), str(tot * 4), reqmem, req, alloc, limit, nodes, name])
        if rng.random() < 0.001:
            line = line.replace(_fmt_time(submit, form), "sometime", 1)  # a bad line, to be rejected
        out.append(line)
        written += 1
        if state not in ("PENDING",) and rng.random() < 0.43 and written < n_lines - 1:
            for step in ("batch", "extern") if rng.random() < 0.8 else ("batch", "extern", "0"):
                if written >= n_lines:
                    break
                out.append("|".join([f"{jobid}.{step}", f"{jid}.{step}", "bench", "", "", acct, acct, "", user, "",
                                     _fmt_time(submit, form), _fmt_time(submit, form), start_s, end_s, elapsed,
                                     "0:0", "COMPLETED", str(nn), str(tot * 4), str(tot * 4), reqmem, "",
                                     f"cpu={tot * 4},mem={tot * 64}G,node={nn}", "", nodes, step]))
                written += 1
    path.write_text("\n".join(out) + "\n")


def run_child(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Run a command in its own process; return (wall seconds, peak RSS in MB, stderr)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{err}")
    return wall, usage.ru_maxrss / 1024, err


BASELINE = """
import duckdb, sys
con = duckdb.connect()
con.execute("CREATE TABLE t AS SELECT * FROM read_csv(?, delim='|', header=false, all_varchar=true, quote='', "
            "escape='', null_padding=true, strict_mode=false, ignore_errors=true)", [sys.argv[1]])
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated input in the cache dir")
    args = ap.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    inp = CACHE / f"sacct-{args.lines}.psv"
    if not inp.exists():
        t0 = time.perf_counter()
        write_input(inp, args.lines)
        print(f"wrote {args.lines:,} lines ({inp.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
    gl = [sys.executable, "-m", "gpuledger"]
    phases = {"ingest": [], "re-ingest": [], "baseline read_csv": []}
    rss = {k: [] for k in phases}
    summary = ""
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "bench.duckdb"
            for phase in ("ingest", "re-ingest"):
                wall, mb, err = run_child([*gl, "--db", str(db), "ingest", "sacct", "--no-refresh", str(inp)])
                phases[phase].append(wall)
                rss[phase].append(mb)
                summary = err.strip().splitlines()[0]
        wall, mb, _ = run_child([sys.executable, "-c", BASELINE, str(inp)])
        phases["baseline read_csv"].append(wall)
        rss["baseline read_csv"].append(mb)
    base = statistics.median(phases["baseline read_csv"])
    print(f"input: {args.lines:,} lines; {summary}")
    print(f"{'phase':<20}{'median s':>10}{'lines/s':>12}{'x baseline':>12}{'peak RSS MB':>13}")
    for phase, walls in phases.items():
        med = statistics.median(walls)
        print(f"{phase:<20}{med:>10.2f}{args.lines / med:>12,.0f}{med / base:>12.2f}{max(rss[phase]):>13,.0f}"
              f"   runs: {', '.join(f'{w:.2f}' for w in walls)}")
    if not args.keep:
        inp.unlink()


if __name__ == "__main__":
    main()
