"""MIT Supercloud: the slurmdbd job table as the dataset publishes it (``slurm-log*.csv``).

Columns are slurmdbd's ``*_job_table`` fields: epoch times (``time_submit``, ``time_eligible``, ``time_start``,
``time_end``; 0 = never), the integer job state (low byte: 0 pending ... 11 out of memory), ``timelimit`` in
minutes (4294967295 = infinite), ``tres_alloc``/``tres_req`` as ``id=count`` lists whose ids the dataset's
tres-mapping gives (1 cpu, 2 mem MB, 3 energy, 4 node, 5 billing, 1001 gpu:tesla, 1002 gpu:volta),
``nodelist`` as a Python list string, ``exit_code`` as a wait status, array ids with 4294967294 meaning "not
an array task". Anonymised ids arrive as floats (``16051200000000.0``); they are kept as their integer text.
"""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ingest import hostlist
from ingest.errors import InputError
import ingest.traces.common as common

KIND = "mit-supercloud"
DEFAULT_CLUSTER = "supercloud"
#: slurmdbd job states (slurm.h enum job_states); the low byte of the stored state.
STATES = {0: "PENDING", 1: "RUNNING", 2: "SUSPENDED", 3: "COMPLETED", 4: "CANCELLED", 5: "FAILED", 6: "TIMEOUT",
          7: "NODE_FAIL", 8: "PREEMPTED", 9: "BOOT_FAIL", 10: "DEADLINE", 11: "OUT_OF_MEMORY"}
#: TRES ids of the dataset's tres-mapping.txt: GPU ids carry their type.
TRES_GPU = {"1001": "tesla", "1002": "volta"}
NO_VAL = 4294967294
INFINITE = 4294967295
REQUIRED = ("id_job", "id_array_job", "id_array_task", "id_user", "nodes_alloc", "nodelist", "cpus_req", "exit_code",
            "partition", "state", "timelimit", "time_submit", "time_eligible", "time_start", "time_end",
            "tres_alloc", "tres_req")


def ingest_path(con, path: str | Path, cluster: str | None = None, **_) -> list[dict]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*slurm-log*.csv*"))
        if not files:
            raise InputError(str(p), "no slurm-log*.csv file in this directory")
    else:
        files = [p]
    cl = cluster or DEFAULT_CLUSTER
    common.ensure_cluster(con, cl, "MIT Supercloud (TX-Gaia), slurmdbd job table")
    return [ingest_file(con, f, cl) for f in files]


def _id(c: str) -> pl.Expr:
    """Anonymised ids come as floats: 16051200000000.0 -> '16051200000000'."""
    return pl.col(c).cast(pl.Float64, strict=False).round(0).cast(pl.Int64).cast(pl.String)


def _tres(c: str, key: str) -> pl.Expr:
    return pl.col(c).str.extract(rf"(?:^|,){key}=(\d+)", 1).cast(pl.Int64)


def _gpus(c: str) -> tuple[pl.Expr, pl.Expr]:
    counts = [_tres(c, k).fill_null(0) for k in TRES_GPU]
    total = sum(counts[1:], counts[0])
    types = pl.concat_str([pl.when(_tres(c, k).fill_null(0) > 0).then(pl.lit(t)) for k, t in TRES_GPU.items()],
                          separator="+", ignore_nulls=True)
    return total, pl.when(total > 0).then(types)


def _nodelist(text: str | None) -> str | None:
    if text is None:
        return None
    hosts = re.findall(r"'([^']*)'", text)
    return hostlist.compress(hosts) if hosts else None


def ingest_file(con, path: Path, cluster: str) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, required=REQUIRED)
    def num(c):
        return pl.col(c).cast(pl.Float64, strict=False)
    checks = [("id_job", num("id_job").is_null(), pl.lit("not a job id"))]
    for c in ("time_submit", "time_eligible", "time_start", "time_end", "state", "timelimit", "nodes_alloc",
              "cpus_req", "exit_code"):
        checks.append((c, num(c).is_null(), pl.concat_str([pl.lit("not a number: "), pl.col(c).fill_null("(empty)")])))
    checks.append(("state", ~(num("state").cast(pl.Int64, strict=False) % 256).is_in(list(STATES)),
                   pl.concat_str([pl.lit("unknown job state "), pl.col("state")])))
    checks.append(("nodelist", pl.col("nodelist").is_not_null() & ~pl.col("nodelist").str.contains(r"^\[.*\]$"),
                   pl.lit("not a Python list of node names")))
    good, bad = common.split_bad(df, checks)
    good = good.with_columns(nodelist=pl.col("nodelist").map_elements(_nodelist, return_dtype=pl.String))
    run = common.open_run(con, KIND, path, data, cluster, {"tres_gpu_ids": TRES_GPU})
    with run:
        run.lines_read = len(lines)
        run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        run.loaded = good.height - common.write_jobs(con, run, _jobs(good, cluster), lines)
    return run.summary()


def _ts(c: str) -> pl.Expr:
    v = pl.col(c).cast(pl.Float64).cast(pl.Int64)
    return pl.when(v > 0).then(pl.from_epoch(v, time_unit="s"))


def _jobs(df: pl.DataFrame, cluster: str) -> pl.DataFrame:
    state = (pl.col("state").cast(pl.Float64).cast(pl.Int64) % 256).replace_strict(STATES)
    task = pl.col("id_array_task").cast(pl.Float64).cast(pl.Int64)
    is_task = task.is_not_null() & (task < NO_VAL)
    ngpus, gtype = _gpus("tres_alloc")
    req_gpus, req_type = _gpus("tres_req")
    started = pl.col("time_start").cast(pl.Float64) > 0
    ended = pl.col("time_end").cast(pl.Float64) > 0
    limit = pl.col("timelimit").cast(pl.Float64).cast(pl.Int64)
    exit_status = pl.col("exit_code").cast(pl.Float64).cast(pl.Int64)
    kill = pl.col("kill_requid").cast(pl.Float64, strict=False).cast(pl.Int64, strict=False) \
        if "kill_requid" in df.columns else pl.lit(None, pl.Int64)
    job_id = pl.when(is_task).then(pl.concat_str([_id("id_array_job"), pl.lit("_"), task.cast(pl.String)])) \
        .otherwise(_id("id_job"))
    return df.select(
        "line_no", cluster=pl.lit(cluster), job_id=job_id, job_id_raw=_id("id_job"),
        array_job_id=pl.when(is_task).then(_id("id_array_job").cast(pl.Int64)), array_task_id=pl.when(is_task).then(task),
        user=_id("id_user"), partition=pl.col("partition"), state=state,
        state_raw=pl.col("state").cast(pl.Float64).cast(pl.Int64).cast(pl.String),
        cancelled_by_uid=pl.when((state == "CANCELLED") & (kill >= 0) & ~kill.is_in([NO_VAL, INFINITE])).then(kill),
        exit_code=(exit_status // 256).cast(pl.Int32), signal=(exit_status % 256).cast(pl.Int32),
        submit=_ts("time_submit"), eligible=_ts("time_eligible"), start=_ts("time_start"),
        end=pl.when(started & ended).then(_ts("time_end")),
        elapsed_s=pl.when(started & ended).then((pl.col("time_end").cast(pl.Float64) - pl.col("time_start").cast(pl.Float64)).cast(pl.Int64)),
        timelimit_s=pl.when(limit < NO_VAL).then(limit * 60), timelimit_raw=pl.col("timelimit"),
        nnodes=pl.col("nodes_alloc").cast(pl.Float64).cast(pl.Int32),
        ncpus=_tres("tres_alloc", "1").cast(pl.Int32), req_cpus=pl.col("cpus_req").cast(pl.Float64).cast(pl.Int32),
        ngpus=ngpus.cast(pl.Float64), req_gpus=req_gpus.cast(pl.Float64), gpu_type=gtype,
        mem_bytes=_tres("tres_alloc", "2") * 1048576, req_mem_bytes=_tres("tres_req", "2") * 1048576,
        billing=_tres("tres_alloc", "5").cast(pl.Float64), alloc_tres=pl.col("tres_alloc"), req_tres=pl.col("tres_req"),
        nodelist=pl.col("nodelist"), source=pl.lit(f"trace:{KIND}"))
