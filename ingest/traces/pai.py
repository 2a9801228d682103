"""Alibaba cluster-trace-gpu-v2020 (PAI): machine specs now; job, task and instance tables when present.

The tables are header-less CSVs; column names come from the ``*.header`` file next to each, else from the
README. ``pai_machine_spec`` (machine, gpu_type, cap_cpu, cap_mem GB, cap_gpu) becomes the inventory.

Jobs (``pai_job_table``: job_name, inst_id, user, status, start_time = submission, end_time) get their GPUs,
CPUs, memory and GPU types from ``pai_task_table`` (plan_gpu is percent of a GPU per instance, so a task
of 2 instances at plan_gpu 50 holds 1 GPU), their start (the earliest task start) and machines from
``pai_instance_table``. Times are seconds; the README says that read as Unix time in Asia/Shanghai they
keep the original time of day and weekday with fake dates, so they are stored as that instant shifted by a
whole number of weeks (default: so the trace starts in July 2020, its real period; ``--start`` picks
another week), which keeps both.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

from ingest.errors import InputError
import ingest.traces.common as common
from ingest import hostlist

KIND = "alibaba-pai-2020"
DEFAULT_CLUSTER = "pai"
COLUMNS = {
    "pai_machine_spec": ["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"],
    "pai_job_table": ["job_name", "inst_id", "user", "status", "start_time", "end_time"],
    "pai_task_table": ["job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu",
                       "plan_mem", "plan_gpu", "gpu_type"],
    "pai_instance_table": ["job_name", "task_name", "inst_name", "worker_name", "inst_id", "status", "start_time",
                           "end_time", "machine"],
}
STATUS = {"Terminated": "COMPLETED", "Failed": "FAILED", "Running": "RUNNING", "Waiting": "PENDING"}
REAL_START = dt.datetime(2020, 7, 1)


def _file(p: Path, table: str) -> Path | None:
    for cand in (p / f"{table}.csv", p / f"{table}.csv.gz"):
        if cand.exists():
            return cand
    return None


def _columns(path: Path, table: str) -> list[str]:
    header = path.parent / f"{table}.header"
    if header.exists():
        names = [c.strip() for c in header.read_text(encoding="utf-8").strip().split(",")]
        if names and all(names):
            return names
    return COLUMNS[table]


def ingest_path(con, path: str | Path, cluster: str | None = None, start: dt.datetime | None = None, **_
                ) -> list[dict]:
    p = Path(path)
    if not p.is_dir():
        table = p.name.split(".")[0]
        if table not in COLUMNS:
            raise InputError(str(p), f"not a PAI table ({', '.join(COLUMNS)}); give the file or its directory")
        p = p.parent
    cl = cluster or DEFAULT_CLUSTER
    common.ensure_cluster(con, cl, "Alibaba PAI GPU cluster (cluster-trace-gpu-v2020)")
    out = []
    spec = _file(p, "pai_machine_spec")
    if spec:
        out.append(ingest_machines(con, spec, cl))
    job = _file(p, "pai_job_table")
    if job:
        out.append(ingest_jobs(con, p, job, cl, start))
    if not out:
        raise InputError(str(p), "no pai_machine_spec.csv or pai_job_table.csv here")
    return out


def ingest_machines(con, path: Path, cluster: str) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, columns=_columns(path, "pai_machine_spec"))
    def num(c):
        return pl.col(c).cast(pl.Float64, strict=False)
    good, bad = common.split_bad(df, [
        ("machine", pl.col("machine").is_null(), pl.lit("empty machine name")),
        ("cap_cpu", num("cap_cpu").is_null(), pl.lit("not a CPU count")),
        ("cap_mem", num("cap_mem").is_null(), pl.lit("not a memory size in GB")),
        ("cap_gpu", num("cap_gpu").is_null(), pl.lit("not a GPU count")),
    ])
    nodes = good.select(
        cluster=pl.lit(cluster), node=pl.col("machine"),
        gpu_type=pl.when(num("cap_gpu") > 0).then(pl.col("gpu_type")),
        gpus=num("cap_gpu").cast(pl.Int64), cpus=num("cap_cpu").cast(pl.Int64),
        mem_bytes=(num("cap_mem") * 1024 ** 3).cast(pl.Int64),
        gres=pl.when(num("cap_gpu") > 0).then(pl.concat_str([pl.lit("gpu:"), pl.col("gpu_type"), pl.lit(":"),
                                                                num("cap_gpu").cast(pl.Int64).cast(pl.String)])))
    run = common.open_run(con, KIND, path, data, cluster, {"part": "machine spec"})
    with run:
        run.lines_read = len(lines)
        common.reject(run, bad, lines)
        common.write_nodes(con, run, nodes)
        run.loaded = nodes.height
    return run.summary()


def week_shift(first_s: float, start: dt.datetime | None) -> int:
    """Seconds to add to trace times: whole weeks, landing the first time in the week of ``start``."""
    target = (start or REAL_START).replace(tzinfo=dt.timezone.utc).timestamp()
    return int(round((target - first_s) / (7 * 86400))) * 7 * 86400


def ingest_jobs(con, d: Path, job_path: Path, cluster: str, start: dt.datetime | None) -> dict:
    data = common.read_bytes(job_path)
    lines = common.raw_lines(data)
    jobs = common.read_csv(job_path, data, columns=_columns(job_path, "pai_job_table"))
    def num(c):
        return pl.col(c).cast(pl.Float64, strict=False)
    good, bad = common.split_bad(jobs, [
        ("job_name", pl.col("job_name").is_null(), pl.lit("empty job name")),
        ("status", ~pl.col("status").is_in(list(STATUS)), pl.concat_str([pl.lit("unknown status "),
                                                                          pl.col("status").fill_null("(empty)")])),
        ("start_time", num("start_time").is_null(), pl.lit("not a time in seconds")),
        ("end_time", num("end_time").is_null() & pl.col("end_time").is_not_null(), pl.lit("not a time in seconds")),
    ])
    tasks = _task_totals(d)
    inst = _instance_placement(d)
    shift = week_shift(float(good.select(num("start_time").min()).item() or 0), start)
    staged = _jobs(good, tasks, inst, cluster, shift)
    run = common.open_run(con, KIND, job_path, data, cluster,
                          {"part": "job table", "week_shift_s": shift, "tasks": tasks is not None,
                           "instances": inst is not None})
    with run:
        run.lines_read = len(lines)
        common.reject(run, bad, lines)
        run.loaded = good.height - common.write_jobs(con, run, staged, lines)
    return run.summary()


def _task_totals(d: Path) -> pl.DataFrame | None:
    f = _file(d, "pai_task_table")
    if f is None:
        return None
    t = common.read_csv(f, common.read_bytes(f), columns=_columns(f, "pai_task_table"))
    def num(c):
        return pl.col(c).cast(pl.Float64, strict=False)
    inst = num("inst_num").fill_null(1)
    return t.group_by("job_name").agg(
        task_start=num("start_time").min(),
        gpus=(inst * num("plan_gpu").fill_null(0) / 100).sum(),
        cpus=(inst * num("plan_cpu").fill_null(0) / 100).sum(),
        mem_gb=(inst * num("plan_mem").fill_null(0)).sum(),
        gpu_types=pl.col("gpu_type").drop_nulls().unique().sort().str.join("+"))


def _instance_placement(d: Path) -> pl.DataFrame | None:
    f = _file(d, "pai_instance_table")
    if f is None:
        return None
    i = common.read_csv(f, common.read_bytes(f), columns=_columns(f, "pai_instance_table"))
    return i.filter(pl.col("machine").is_not_null()).group_by("job_name").agg(
        inst_start=pl.col("start_time").cast(pl.Float64, strict=False).min(),
        machines=pl.col("machine").unique().sort()).with_columns(
        nodelist=pl.col("machines").map_elements(lambda m: hostlist.compress(list(m)), return_dtype=pl.String),
        nnodes=pl.col("machines").list.len()).drop("machines")


def _jobs(jobs: pl.DataFrame, tasks, inst, cluster: str, shift: int) -> pl.DataFrame:
    df = jobs
    if tasks is not None:
        df = df.join(tasks, on="job_name", how="left")
    else:
        df = df.with_columns(task_start=pl.lit(None, pl.Float64), gpus=pl.lit(None, pl.Float64),
                             cpus=pl.lit(None, pl.Float64), mem_gb=pl.lit(None, pl.Float64),
                             gpu_types=pl.lit(None, pl.String))
    if inst is not None:
        df = df.join(inst, on="job_name", how="left")
    else:
        df = df.with_columns(inst_start=pl.lit(None, pl.Float64), nodelist=pl.lit(None, pl.String),
                             nnodes=pl.lit(None, pl.UInt32))
    def ts(e):
        return pl.from_epoch((e + shift).cast(pl.Int64), time_unit="s")
    submit = pl.col("start_time").cast(pl.Float64)
    started_s = pl.coalesce(pl.col("task_start"), pl.col("inst_start"))
    state = pl.col("status").replace_strict(STATUS)
    final = state.is_in(["COMPLETED", "FAILED"])
    end_s = pl.col("end_time").cast(pl.Float64, strict=False)
    return df.select(
        "line_no", cluster=pl.lit(cluster), job_id=pl.col("job_name"), job_id_raw=pl.col("job_name"),
        user=pl.col("user"), state=state, state_raw=pl.col("status"), submit=ts(submit), eligible=ts(submit),
        start=pl.when(started_s.is_not_null()).then(ts(started_s)),
        end=pl.when(final & started_s.is_not_null() & end_s.is_not_null()).then(ts(end_s)),
        elapsed_s=pl.when(final & started_s.is_not_null() & end_s.is_not_null()).then((end_s - started_s).cast(pl.Int64)),
        nnodes=pl.col("nnodes").cast(pl.Int32), ncpus=pl.col("cpus").ceil().cast(pl.Int32),
        ngpus=pl.when(started_s.is_not_null()).then(pl.col("gpus")).otherwise(0.0).fill_null(0.0),
        req_gpus=pl.col("gpus"), gpu_type=pl.col("gpu_types").replace("", None),
        mem_bytes=(pl.col("mem_gb") * 1024 ** 3).cast(pl.Int64), nodelist=pl.col("nodelist"),
        job_name=pl.col("job_name"), extra=pl.concat_str([pl.lit('{"inst_id":"'), pl.col("inst_id"), pl.lit('"}')]),
        source=pl.lit(f"trace:{KIND}"))
