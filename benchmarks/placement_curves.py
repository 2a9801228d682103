"""The FGD-paper placement protocol on every openb trace variant: the figures of record in docs/SIMULATOR.md.

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/placement_curves.py            # 5 traces x 6 x 10
    .venv/bin/python benchmarks/placement_curves.py --seeds 2 --traces default --no-figures     # quick look

Writes docs/simulator_openb_curves.csv (mean over seeds per trace, policy and arrived %), the figures
docs/simulator_openb_alloc.png and docs/simulator_openb_frag.png (plotly + kaleido, the ``bench`` extra), and
prints the markdown tables of the document: allocation at 130 % arrived demand (mean, 95 % t half-width over
seeds) per trace and policy, and the default trace's curve at 50-130 %.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models.simulation import placement  # noqa: E402

TRACES = ["default", "cpu050", "gpushare100", "gpuspec33", "multigpu50"]
TRACE_DIR = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023-openb"


def run(traces: list[str], seeds: int, tie_break: str, popularity: float) -> dict[str, pl.DataFrame]:
    out = {}
    for name in traces:
        nodes, pods = placement.load_trace(TRACE_DIR / f"openb_pod_list_{name}.csv")
        t0 = time.perf_counter()
        out[name] = placement.run_protocol(nodes, pods, seeds=list(range(42, 42 + seeds)), tie_break=tie_break,
                                           popularity=popularity)
        print(f"{name}: {len(placement.POLICIES)} policies x {seeds} seeds in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    return out


def table_130(curves: dict[str, pl.DataFrame]) -> str:
    rows = ["| trace | " + " | ".join(placement.POLICIES) + " |", "|---" * (len(placement.POLICIES) + 1) + "|"]
    for name, c in curves.items():
        s = placement.summary_at(c, 130)
        best = s["alloc_pct"].max()
        cells = []
        for pol, a, h in s.select("policy", "alloc_pct", "ci95_halfwidth").iter_rows():
            cell = f"{a:.2f}" if math.isnan(h) else f"{a:.2f} ± {h:.2f}"
            cells.append(f"**{cell}**" if a == best else cell)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def table_curve(c: pl.DataFrame, points=(50, 80, 90, 100, 110, 120, 130)) -> str:
    mean = c.group_by("policy", "arrived_pct").agg(pl.col("alloc_pct").mean())
    rows = ["| policy | " + " | ".join(f"{p} %" for p in points) + " |", "|---" * (len(points) + 1) + "|"]
    for pol in placement.POLICIES:
        d = dict(mean.filter(pl.col("policy") == pol).select("arrived_pct", "alloc_pct").iter_rows())
        rows.append(f"| {pol} | " + " | ".join(f"{d[p]:.2f}" for p in points) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--tie-break", default="name", choices=placement.TIE_BREAKS)
    ap.add_argument("--popularity", type=float, default=placement.POPULARITY)
    ap.add_argument("--no-figures", action="store_true")
    ap.add_argument("--out-dir", default=str(ROOT / "docs"))
    args = ap.parse_args()
    curves = run(args.traces.split(","), args.seeds, args.tie_break, args.popularity)
    out = Path(args.out_dir)
    mean = pl.concat([c.group_by("policy", "arrived_pct").agg(pl.col("alloc_pct", "frag_rate_pct").mean())
                      .with_columns(pl.lit(n).alias("trace")) for n, c in curves.items()])
    mean.select("trace", "policy", "arrived_pct", pl.col("alloc_pct").round(3), pl.col("frag_rate_pct").round(3)) \
        .sort("trace", "policy", "arrived_pct").write_csv(out / "simulator_openb_curves.csv")
    if not args.no_figures:
        from dashboards import placement_charts as sim_figures
        sim_figures.write_placement_png(curves, out / "simulator_openb_alloc.png", "alloc_pct")
        sim_figures.write_placement_png(curves, out / "simulator_openb_frag.png", "frag_rate_pct")
    print(table_130(curves))
    if "default" in curves:
        print()
        print(table_curve(curves["default"]))


if __name__ == "__main__":
    main()
