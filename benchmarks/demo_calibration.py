"""Calibration of the synthetic demo cluster: our figures beside the published ones (docs/DEMO.md).

    python benchmarks/demo_calibration.py [--db data/demo.duckdb] [--markdown]

Reads the demo warehouse (building it with `gpuledger demo`'s defaults when missing) and computes, from the
ingested ``jobs`` table, the per-trace statistics that AcmeTrace's ``cluster_summary.csv`` publishes for
Seren, Kalos (Acme, NSDI'24), Philly (ATC'19), Helios (SC'21) and PAI (NSDI'22), with the same definitions:

- GPU jobs: jobs that requested GPUs; one job = its last instance (a requeued job counts once);
- run time = End - Start of jobs that ran; queue time = Start - Submit (Slurm records a job cancelled while
  pending with Start = its cancel time, so such waits count, as in Acme's Slurm-derived trace);
- complete / cancel / fail rates over finished jobs; fail = FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY and
  PREEMPTED (Acme: "TIMEOUT and NODE_FAIL ... are regarded as failed");
- GPU-time rates: GPUs x run time by final state, over every instance (time burnt by requeued attempts is
  counted under "fail").

The MIT Supercloud sample (../shared/traces) is converted with `ingest trace mit-supercloud` and measured the
same way, as one more published workload. A figure is "in range" when it lies between the lowest and highest
of Seren, Kalos, Philly and Helios (PAI's fractional GPUs make its GPU figures incomparable).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

SHARED = Path(os.environ.get("GPULEDGER_SHARED", ROOT.parent / "shared"))
TRACES = ("Seren", "Kalos", "Philly", "Helios", "PAI")
RANGE_OF = ("Seren", "Kalos", "Philly", "Helios")
#: (label, key in our figures, column of cluster_summary.csv, format)
ROWS = [
    ("median GPUs per job", "med_gpu", "med_gpu_num", "{:.0f}"),
    ("mean GPUs per job", "avg_gpu", "avg_gpu_num", "{:.2f}"),
    ("largest job (GPUs)", "max_gpu", "max_gpu", "{:.0f}"),
    ("median run time (s)", "med_run", "med_run_time_gpu", "{:,.0f}"),
    ("mean run time (s)", "avg_run", "avg_run_time_gpu", "{:,.0f}"),
    ("longest run (s)", "max_run", "max_run_time_gpu", "{:,.0f}"),
    ("median queue time (s)", "med_que", "med_que_time_gpu", "{:,.0f}"),
    ("mean queue time (s)", "avg_que", "avg_que_time_gpu", "{:,.0f}"),
    ("completed share of jobs", "complete", "complete_rate_gpu", "{:.3f}"),
    ("cancelled share of jobs", "cancel", "cancel_rate_gpu", "{:.3f}"),
    ("failed share of jobs", "fail", "fail_rate_gpu", "{:.3f}"),
    ("completed share of GPU time", "complete_t", "complete_rate_gpu_time", "{:.3f}"),
    ("cancelled share of GPU time", "cancel_t", "cancel_rate_gpu_time", "{:.3f}"),
    ("failed share of GPU time", "fail_t", "fail_rate_gpu_time", "{:.3f}"),
]
FAIL = ("FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "REQUEUED")

FIGURES_SQL = f"""
WITH inst AS (
    SELECT *, coalesce(req_gpus, ngpus) AS g FROM jobs WHERE coalesce(req_gpus, ngpus) > 0),
last AS (
    SELECT * FROM inst QUALIFY row_number() OVER (PARTITION BY cluster, job_id_raw ORDER BY submit DESC) = 1),
ran AS (
    SELECT *, epoch("end") - epoch(start) AS run FROM last WHERE start IS NOT NULL AND "end" IS NOT NULL
      AND ngpus > 0),
fin AS (SELECT * FROM last WHERE state NOT IN ('RUNNING', 'PENDING', 'SUSPENDED', 'REQUEUED')),
gt AS (
    SELECT state, ngpus * (epoch("end") - epoch(start)) AS gs FROM inst
    WHERE start IS NOT NULL AND "end" IS NOT NULL AND ngpus > 0)
SELECT
    (SELECT count(*) FROM last) AS jobs,
    (SELECT median(g) FROM last) AS med_gpu, (SELECT avg(g) FROM last) AS avg_gpu, (SELECT max(g) FROM last) AS max_gpu,
    (SELECT median(run) FROM ran) AS med_run, (SELECT avg(run) FROM ran) AS avg_run, (SELECT max(run) FROM ran) AS max_run,
    (SELECT median(epoch(start) - epoch(submit)) FROM last WHERE start IS NOT NULL) AS med_que,
    (SELECT avg(epoch(start) - epoch(submit)) FROM last WHERE start IS NOT NULL) AS avg_que,
    (SELECT quantile_cont(epoch(start) - epoch(submit), 0.95) FROM last WHERE start IS NOT NULL) AS p95_que,
    (SELECT avg((state = 'COMPLETED')::INT) FROM fin) AS complete,
    (SELECT avg((state = 'CANCELLED')::INT) FROM fin) AS cancel,
    (SELECT avg((state IN {FAIL})::INT) FROM fin) AS fail,
    (SELECT sum(gs) FILTER (WHERE state = 'COMPLETED') / sum(gs) FROM gt) AS complete_t,
    (SELECT sum(gs) FILTER (WHERE state = 'CANCELLED') / sum(gs) FROM gt) AS cancel_t,
    (SELECT sum(gs) FILTER (WHERE state IN {FAIL}) / sum(gs) FROM gt) AS fail_t,
    (SELECT avg((g = 1)::INT) FROM last) AS one_gpu,
    (SELECT avg((nnodes > 1)::INT) FROM last WHERE nnodes IS NOT NULL) AS multi_node
"""


def figures(con) -> dict:
    rel = con.sql(FIGURES_SQL)
    return dict(zip(rel.columns, [float(v) if v is not None else None for v in rel.fetchall()[0]]))


def published() -> dict[str, dict]:
    p = SHARED / "traces" / "acme" / "cluster_summary.csv"
    if not p.exists():
        return {}
    with open(p, newline="") as fh:
        return {r["id"]: {k: (float(v) if v not in ("", None) else None) for k, v in r.items() if k != "id"}
                for r in csv.DictReader(fh)}


def mit_figures() -> dict | None:
    f = SHARED / "traces" / "mit-supercloud-sample" / "slurm-log-queueing-clean.csv"
    if not f.exists():
        return None
    from ingest import traces, warehouse
    with tempfile.TemporaryDirectory() as d:
        con = warehouse.connect(Path(d) / "mit.duckdb")
        traces.ingest(con, "mit-supercloud", f)
        out = figures(con)
        con.close()
    return out


def table(ours: dict, pub: dict[str, dict], mit: dict | None) -> list[list[str]]:
    head = ["figure", "demo (ours)"] + [t for t in TRACES if t in pub] + (["MIT sample"] if mit else []) \
        + ["range Seren-Helios", "in range"]
    rows = [head]
    for label, key, col, fmt in ROWS:
        vals = {t: pub[t].get(col) for t in pub}
        rng = [vals[t] for t in RANGE_OF if vals.get(t) is not None]
        lo, hi = (min(rng), max(rng)) if rng else (None, None)
        o = ours.get(key)
        cell = lambda v: "" if v is None else fmt.format(v)  # noqa: E731
        inside = "" if lo is None or o is None else ("yes" if lo <= o <= hi else "no")
        rows.append([label, cell(o)] + [cell(vals.get(t)) for t in TRACES if t in pub]
                    + ([cell(mit.get(key))] if mit else []) + [f"{cell(lo)} - {cell(hi)}" if lo is not None else "",
                                                               inside])
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=str(ROOT / "data" / "demo.duckdb"))
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = ap.parse_args(argv)
    db = Path(a.db)
    if not db.exists():
        from models.demo import build, config
        build.build(db, config.for_scale(1.0), progress=lambda m: print(m, file=sys.stderr))
    con = duckdb.connect(str(db), read_only=True)
    ours = figures(con)
    rows = table(ours, published(), mit_figures())
    if a.markdown:
        print("| " + " | ".join(rows[0]) + " |")
        print("|" + "---|" * len(rows[0]))
        for r in rows[1:]:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print(f"\njobs {ours['jobs']:,.0f}; 1-GPU share {ours['one_gpu']:.3f}; multi-node share {ours['multi_node']:.3f}; "
          f"p95 queue {ours['p95_que']:,.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
