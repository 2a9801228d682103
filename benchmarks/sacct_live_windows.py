"""Benchmark the live sacct read's windows on the real Slurm of tests/slurm (root; `GL_SLURM_DIR`, cluster up:
`tests/slurm/up.sh`): what one window costs, and so what a catch-up or a first read under slurmdbd's
MaxQueryTimeRange costs.

In this process, --repeat times (medians), each into a fresh warehouse:
1. baseline: `ingest_live` over the last day as one read (the window as large as the span), as before windows;
2. the same day in windows of --window seconds (default 1 hour: 24 reads, no doubling: the window is pinned);
3. `sdiag` alone (what every read now asks first).
Prints seconds per read, the ratio of 2 to 1, and the projected first read over 50 empty years under a 60-day
MaxQueryTimeRange (the windows it takes at 45 days, times the per-window cost).

    GL_SLURM_DIR=/tmp/gpuledger-slurm .venv/bin/python benchmarks/sacct_live_windows.py [--repeat K] [--window S]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import sacct, sacct_live, warehouse  # noqa: E402


def _read(window_s: int, since: dt.datetime, pinned: bool) -> tuple[float, int]:
    """Seconds and reads of one ingest_live from ``since`` into a fresh warehouse."""
    with tempfile.TemporaryDirectory() as d:
        con = warehouse.connect(Path(d) / "w.duckdb")
        keep = sacct_live._Span.after
        if pinned:                       # every window as given: no doubling over the quiet test cluster
            sacct_live._Span.after = lambda self, lines: None
        try:
            t = time.perf_counter()
            got = sacct_live.ingest_live(con, sacct.SacctOptions(cluster="glcluster"), window_s=window_s,
                                         since=f"{since:%Y-%m-%dT%H:%M:%S}")
            return time.perf_counter() - t, got["windows"]
        finally:
            sacct_live._Span.after = keep
            con.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--window", type=int, default=3600)
    args = ap.parse_args(argv)
    state = Path(os.environ.get("GL_SLURM_DIR", "/tmp/gpuledger-slurm"))
    os.environ["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    since = warehouse.utcnow().replace(microsecond=0) - dt.timedelta(days=1)
    one, many, sdiag = [], [], []
    for _ in range(args.repeat):
        s, n1 = _read(86400 + 3600, since, pinned=False)
        one.append(s)
        s, n = _read(args.window, since, pinned=True)
        many.append(s / n)
        t = time.perf_counter()
        sacct_live.dbd_queue("sdiag", None)
        sdiag.append(time.perf_counter() - t)
    per = statistics.median(many)
    first = 50 * 365 / 45
    print(f"one read of a day: {statistics.median(one):.3f} s ({n1} read); in windows of {args.window} s: "
          f"{per:.3f} s per read, {n} reads, {per * n:.3f} s ({per * n / statistics.median(one):.1f}x)")
    print(f"sdiag: {statistics.median(sdiag) * 1000:.1f} ms; a first read over 50 empty years under a 60-day "
          f"MaxQueryTimeRange: ~{first:.0f} windows of 45 days, ~{first * per:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
