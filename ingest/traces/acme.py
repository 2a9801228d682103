"""AcmeTrace (Shanghai AI Laboratory, NSDI'24; InternLM/AcmeTrace): the job traces of two LLM-development
clusters, ``trace_seren.csv`` and ``trace_kalos.csv`` (``data/job_trace/``).

Columns (the upstream README's schema): job_id, user (hashed, ``u...``), node_num, gpu_num, cpu_num, type (the
workload: Pretrain, SFT, Evaluation, Debug, MLLM, Other), state (COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL:
the job's status upon termination), submit_time, start_time, end_time (ISO times with their UTC offset, e.g.
``2023-03-01 00:18:22+08:00``), duration, queue, gpu_time (derived; not loaded); Kalos adds mem_per_pod_GB,
shared_mem_per_pod, fail_time, stop_time. The failure states are kept as Slurm's (NODE_FAIL is the loss report's
node failure, FAILED the job's own failure, TIMEOUT a timeout); ``type`` becomes the job name, so a governance
``[[checkpoints]]`` rule can name a workload type. The traces carry no node names: their jobs are unplaced (the
loss report lists them with their cause and counts 0 GPU-hours, and says so). Times are stored in UTC.

The job traces are not in ../shared/traces (only ``cluster_summary.csv``, the demo's calibration target); the
converter is tested on a hand-written file in the README's format (tests/fixtures/traces/acme).
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from ingest.errors import InputError
import ingest.traces.common as common

KIND = "acme"
STATES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL")
REQUIRED = ("job_id", "user", "node_num", "gpu_num", "cpu_num", "type", "state", "submit_time", "start_time",
            "end_time")
TIME_FMT = "%Y-%m-%d %H:%M:%S%:z"


def _cluster_of(p: Path) -> str:
    """trace_seren.csv -> seren, trace_kalos.csv -> kalos; any other name -> acme."""
    stem = p.name.split(".")[0]
    return stem[len("trace_"):] if stem.startswith("trace_") and len(stem) > len("trace_") else "acme"


def ingest_path(con, path: str | Path, cluster: str | None = None, **_) -> list[dict]:
    p = Path(path)
    files = sorted(p.glob("trace_*.csv*")) if p.is_dir() else [p]
    if not files:
        raise InputError(str(p), "no trace_*.csv file in this directory (AcmeTrace job traces)")
    out = []
    for f in files:
        cl = cluster or _cluster_of(f)
        common.ensure_cluster(con, cl, "AcmeTrace (InternLM/AcmeTrace), LLM development cluster")
        out.append(ingest_file(con, f, cl))
    return out


def _utc(c: str) -> pl.Expr:
    return (pl.col(c).str.strip_chars().str.strptime(pl.Datetime("us", "UTC"), TIME_FMT, strict=False)
            .dt.replace_time_zone(None))


def _int(c: str) -> pl.Expr:
    return pl.col(c).cast(pl.Float64, strict=False)


def ingest_file(con, path: Path, cluster: str) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, required=REQUIRED)
    checks = [("job_id", pl.col("job_id").is_null(), pl.lit("no job id")),
              ("state", ~pl.col("state").is_in(list(STATES)),
               pl.concat_str([pl.lit("unknown job state "), pl.col("state").fill_null("(empty)")])),
              ("submit_time", _utc("submit_time").is_null(), pl.lit("not a time with a UTC offset"))]
    for c in ("start_time", "end_time"):
        checks.append((c, pl.col(c).is_not_null() & _utc(c).is_null(), pl.lit("not a time with a UTC offset")))
    for c in ("node_num", "gpu_num", "cpu_num"):
        checks.append((c, _int(c).is_null() | (_int(c) < 0),
                       pl.concat_str([pl.lit("not a count: "), pl.col(c).fill_null("(empty)")])))
    good, bad = common.split_bad(df, checks)
    run = common.open_run(con, KIND, path, data, cluster, {"times": "ISO with UTC offset, stored as UTC"})
    with run:
        run.lines_read = len(lines)
        run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        run.loaded = good.height - common.write_jobs(con, run, _jobs(good, cluster), lines)
    return run.summary()


def _jobs(df: pl.DataFrame, cluster: str) -> pl.DataFrame:
    start, end = _utc("start_time"), _utc("end_time")
    return df.select(
        "line_no", cluster=pl.lit(cluster), job_id=pl.col("job_id"), job_id_raw=pl.col("job_id"),
        user=pl.col("user"), job_name=pl.col("type"), state=pl.col("state"), state_raw=pl.col("state"),
        submit=_utc("submit_time"), eligible=_utc("submit_time"), start=start,
        end=pl.when(start.is_not_null()).then(end),
        elapsed_s=pl.when(start.is_not_null() & end.is_not_null()).then((end - start).dt.total_seconds()),
        nnodes=_int("node_num").cast(pl.Int32), ncpus=_int("cpu_num").cast(pl.Int32),
        ngpus=_int("gpu_num"), source=pl.lit(f"trace:{KIND}"))
