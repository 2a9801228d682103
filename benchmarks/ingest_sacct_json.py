"""Benchmark `gpuledger ingest sacct` of `sacct --json` against the same jobs as `--parsable2` text.

Writes N job records (default 100,000) in the shape of slurmrestd v0.0.41 (numbers as {set, infinite, number},
states as lists, TRES lists, array tasks, a nested batch step each: about 2.5 KB a job, as Slurm prints them),
and the parsable text `sacct_json.to_sacct_text` makes of them. Then, in this process, --repeat times (medians):
1. the JSON into an empty warehouse, 2. Python's json.loads of the document (the baseline: what any reader of
it in Python pays before looking at a job), 3. the same jobs as text into an empty warehouse (the sacct path
alone), 4. the conversion alone. Prints jobs/s and the ratios.

Target (this 2-core machine, 100,000 jobs): the JSON ingest within 2x json.loads of the same document.

    .venv/bin/python benchmarks/ingest_sacct_json.py [--jobs N] [--repeat K]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import sacct, sacct_json, warehouse  # noqa: E402

T0 = 1767225600
STATES = ["COMPLETED"] * 60 + ["FAILED"] * 15 + ["CANCELLED"] * 10 + ["TIMEOUT"] * 7 + ["RUNNING"] * 5 + ["PENDING"] * 3


def _n(v):
    return {"set": True, "infinite": False, "number": v}


def _record(i: int, rng: random.Random) -> dict:
    state = rng.choice(STATES)
    submit = T0 + i * 7
    start = 0 if state == "PENDING" else submit + rng.randint(0, 3600)
    end = 0 if state in ("PENDING", "RUNNING") else start + rng.randint(60, 86400)
    gpus = rng.choice([0, 1, 1, 2, 4, 8, 16])
    tres = [{"type": "cpu", "name": "", "id": 1, "count": 8 * max(gpus, 1)},
            {"type": "mem", "name": "", "id": 2, "count": 64000},
            {"type": "node", "name": "", "id": 4, "count": max(1, gpus // 8)}]
    if gpus:
        tres += [{"type": "gres", "name": "gpu", "id": 1001, "count": gpus},
                 {"type": "gres", "name": "gpu:h100", "id": 1002, "count": gpus}]
    array = rng.random() < 0.2
    return {
        "job_id": 1000 + i, "name": f"train-{i % 97}", "cluster": "big", "partition": "gpu", "qos": "normal",
        "account": f"team{i % 12}", "group": "ml", "user": f"u{i % 300}", "allocation_nodes": max(1, gpus // 8),
        "array": {"job_id": 900 if array else 0, "task_id": _n(i) if array else {"set": False, "number": 0},
                  "limits": {"max": {"running": {"tasks": 0}}}, "task": ""},
        "het": {"job_id": 0, "job_offset": {"set": False, "infinite": False, "number": 0}},
        "state": {"current": [state], "reason": "None"},
        "time": {"submission": submit, "eligible": submit, "start": start, "end": end,
                 "elapsed": max(0, end - start) if end else 0, "limit": _n(1440), "suspended": 0},
        "exit_code": {"status": ["SUCCESS" if state != "FAILED" else "ERROR"],
                      "return_code": _n(0 if state != "FAILED" else 1), "signal": {"id": {"set": False}}},
        "nodes": "None assigned" if not start else f"gpu{i % 500:04d}", "required": {"CPUs": 8 * max(gpus, 1)},
        "reservation": {"id": 0, "name": ""},
        "tres": {"requested": tres, "allocated": tres if start else []},
        "steps": [{"step": {"id": f"{1000 + i}.batch", "name": "batch"}, "state": [state],
                   "time": {"elapsed": 0, "start": _n(start), "end": _n(end)}, "nodes": {"count": 1, "range": "x"},
                   "tres": {"requested": {"max": [], "min": [], "average": [], "total": []},
                            "allocated": tres}}]}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _ingest(data: bytes, name: str, tmp: Path, k: int) -> None:
    con = warehouse.connect(tmp / f"{name}-{k}.duckdb")
    s = sacct.ingest_bytes(con, data, name, sacct.SacctOptions(cluster="big", tz="UTC",
                                                              fields=None if name.endswith(".json") else
                                                              ",".join(sacct_json.FIELDS)))
    con.close()
    assert s["rejected"] == 0 and s["loaded"] == s["read"], s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(1)
    doc = json.dumps({"jobs": [_record(i, rng) for i in range(args.jobs)], "meta": {}, "errors": []}).encode()
    text = sacct_json.to_sacct_text(doc, "jobs.json")
    print(f"{args.jobs:,} jobs: JSON {len(doc) / 2**20:,.0f} MB, as parsable text {len(text) / 2**20:,.1f} MB")
    runs = {"json": [], "loads": [], "text": [], "convert": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for k in range(args.repeat):
            runs["json"].append(_timed(lambda: _ingest(doc, "jobs.json", tmp, k)))
            runs["loads"].append(_timed(lambda: json.loads(doc)))
            runs["text"].append(_timed(lambda: _ingest(text, "jobs.psv", tmp, k)))
            runs["convert"].append(_timed(lambda: sacct_json.to_sacct_text(doc, "jobs.json")))
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, label in (("json", "JSON ingest"), ("loads", "json.loads (baseline)"), ("text", "same jobs as text"),
                     ("convert", "JSON -> text")):
        print(f"{label:24s} median {med[k]:6.2f} s  {args.jobs / med[k]:10,.0f} jobs/s  (runs: "
              + ", ".join(f"{x:.2f}" for x in runs[k]) + ")")
    print(f"ratio JSON ingest / json.loads: {med['json'] / med['loads']:.2f}x (target <= 2x); "
          f"JSON ingest / text ingest: {med['json'] / med['text']:.2f}x")


if __name__ == "__main__":
    main()
