"""How long the scheduled reports take on the 5,000,000-job synthetic year (issue 19 part 4): the weekly manager
report as HTML (the Overview's reads + charts + template) and as PDF (headless chromium), and a team lead's
note, each cold (the dashboards' caches cleared and a new snapshot connection per run; medians of ``--runs``).

Baseline, in the same process: the Overview's headline reads alone (``reports.headline``: what the page's tiles
compute for the week and the week before), cold. The ratio weekly HTML / baseline is what the charts and the
template add; PDF is timed on the rendered HTML (chromium start + print).

Reads the serving snapshot of ``--db`` only (never writes; the year's cached warehouse with its marts:
``benchmarks/_year.py --marts`` prints the path; its ``.serving`` beside it must be published). Heavy: run as

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/reports_speed.py --db YEAR.duckdb [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dashboards import reports  # noqa: E402  -- first: it quiets Streamlit's warnings outside a server
from dashboards import pdf, queries  # noqa: E402
import streamlit as st  # noqa: E402


def cold() -> str:
    """Clear the dashboards' caches and the snapshot connection; the snapshot's version."""
    st.cache_data.clear()
    st.cache_resource.clear()
    queries.current().close()
    return queries.current().version


def timed(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        version = cold()
        t0 = time.perf_counter()
        out = fn(version)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--team", help="the team note's team (default: the first team of the governance file)")
    args = ap.parse_args()
    os.environ["GPULEDGER_DB"] = str(args.db)
    version = queries.current().version
    cat = queries.catalogue(version)
    f = reports.last_complete_week(cat.horizon)
    team = args.team or cat.all_teams[0]
    print(f"snapshot {version} of {args.db.name}: {cat.jobs:,} jobs, horizon {cat.horizon}; week "
          f"{reports.week_label(f)} ({f.span_text()}); team {team}; medians of {args.runs} cold runs")
    base, rows = timed(lambda v: reports.headline(v, f), args.runs)
    html_s, r = timed(lambda v: reports.weekly(v, f), args.runs)
    t = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        data = pdf.html_to_pdf(r.html)
        t.append(time.perf_counter() - t0)
    pdf_s = statistics.median(t)
    note_s, _ = timed(lambda v: reports.team_note(v, f, team), args.runs)
    print(f"{'baseline: the Overview headline reads':<44} {base:8.2f} s  ({len(rows)} figures)")
    print(f"{'weekly report, HTML':<44} {html_s:8.2f} s  x{html_s / base:.2f} of baseline  ({len(r.html):,} bytes)")
    print(f"{'weekly report, PDF from that HTML':<44} {pdf_s:8.2f} s  ({len(data):,} bytes)")
    print(f"{'team note, HTML':<44} {note_s:8.2f} s  x{note_s / base:.2f} of baseline")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
