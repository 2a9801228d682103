"""Write the synthetic job history as real ``sacct --parsable2`` exports.

Each file is what ``TZ=UTC sacct --allusers --duplicates --parsable2 --format=<XDMoD's list> -S a -E b`` run at
time ``b`` prints: jobs active in [a, b) in the state they had at ``b`` (RUNNING with End=Unknown, PENDING with
Start=Unknown, pending array tasks folded into one ``A_[i-j]`` record), requeued instances as separate records
with their own Submit, ``CANCELLED by UID``, job steps (``.batch`` on the first node, ``.extern``, ``.0`` for
srun) unless ``--allocations``. Field formats follow tests/fixtures/realbox/sacct-allocations.psv (a real
Slurm 22.05): typed and untyped GPU TRES, ``None assigned`` for jobs that never ran, ``Partition_Limit``-free
time limits as ``D-HH:MM:SS``. Rows are built with Polars expressions, not per-job Python.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from ingest import hostlist
from ingest.sacct import XDMOD_FIELDS
from models.demo import scheduler as sch
from models.demo.config import Config
from models.demo.layout import Layout
from models.demo.reservation_plan import Reservation, names as reservation_names
from models.demo.workload import NAME_LIST, QOS, Jobs, Users

HEADER = ("JobID|JobIDRaw|Cluster|Partition|QOS|Account|Group|GID|User|UID|Submit|Eligible|Start|End|Elapsed|"
          "ExitCode|State|NNodes|NCPUS|ReqCPUS|ReqMem|ReqTRES|AllocTRES|Timelimit|NodeList|JobName")
assert [h.lower() for h in HEADER.split("|")] == list(XDMOD_FIELDS)
FORMAT = ",".join(HEADER.split("|"))

#: state of the .batch step for each job-level state (a TIMEOUT/cancelled job's batch step is CANCELLED 0:15)
BATCH_STATE = {"COMPLETED": "COMPLETED", "FAILED": "FAILED", "OUT_OF_MEMORY": "OUT_OF_MEMORY",
               "CANCELLED": "CANCELLED", "TIMEOUT": "CANCELLED", "NODE_FAIL": "CANCELLED",
               "PREEMPTED": "CANCELLED", "REQUEUED": "CANCELLED", "RUNNING": "RUNNING"}
SRUN_NAMES = ("python", "torchrun", "python3", "bash", "accelerate")


def instance_frame(cfg: Config, jobs: Jobs, users: Users, layout: Layout, inst: sch.Instances,
                   reservations: tuple[Reservation, ...] = ()) -> pl.DataFrame:
    """One row per job instance with everything an export needs (times as epoch seconds, -1 = none);
    ``reservations`` are what ``jobs.resv`` indexes (the generated ``Synthetic.reservations``)."""
    j = inst.job
    if len(j) and int(jobs.resv[j].max()) >= len(reservations):
        raise ValueError("jobs were submitted into reservations: pass them (Synthetic.reservations)")
    part_names = [p.name for p in cfg.partitions]
    pool_names = [p.name for p in cfg.pools]
    first_node, nodelist = _nodelists(layout, inst)
    node_pool = layout.pool[np.maximum(first_node, 0)]
    team = jobs.team[j]
    return pl.DataFrame({
        "i": np.arange(len(inst)),
        "raw": jobs.job_id[j],
        "array_id": jobs.array_id[j],
        "task": jobs.task[j],
        "partition": np.array(part_names)[jobs.partition[j]],
        "qos": np.array(QOS)[jobs.qos[j]],
        "account": np.array([t.account for t in cfg.teams])[team],
        "gid": 5000 + team.astype(np.int64),
        "user": np.array(users.name)[jobs.user[j]],
        "uid": users.uid[jobs.user[j]],
        "submit": inst.submit, "eligible": inst.eligible, "start": inst.start, "end": inst.end,
        "state": np.array(sch.STATES)[inst.state],
        "exit_code": jobs.exit_code[j].astype(np.int64),
        "nnodes": jobs.nodes[j].astype(np.int64), "cpus": jobs.cpus[j].astype(np.int64),
        "gpus": jobs.gpus[j].astype(np.int64), "mem_mib": jobs.mem_mib[j],
        "gpu_type": pl.Series(np.where(first_node >= 0, np.array(pool_names, dtype=object)[node_pool], None).tolist(),
                              dtype=pl.String),
        "req_type": pl.Series(np.where(jobs.typed_req[j] & (jobs.partition[j] < len(pool_names)),
                                       np.array(part_names, dtype=object)[jobs.partition[j]], None).tolist(),
                              dtype=pl.String),
        "limit_s": jobs.limit_s[j],
        "name": np.array(NAME_LIST)[jobs.name[j]],
        "nodelist": pl.Series(nodelist.tolist(), dtype=pl.String),
        "first_node": pl.Series(np.where(first_node >= 0, np.array(layout.names, dtype=object)[np.maximum(first_node, 0)],
                                         None).tolist(), dtype=pl.String),
        "srun": (jobs.kind[j] >= 2) | (jobs.nodes[j] > 1),
        "resv": pl.Series(reservation_names(reservations, jobs.resv[j]), dtype=pl.String),
    })


def _nodelists(layout: Layout, inst: sch.Instances) -> tuple[np.ndarray, np.ndarray]:
    """First node index (-1 = never ran) and compressed nodelist (None = never ran) per instance."""
    n = len(inst)
    first = np.full(n, -1, np.int64)
    names = np.array(layout.names, dtype=object)
    out = np.full(n, None, dtype=object)
    if not len(inst.gpu_inst):
        return first, out
    gi, gn = inst.gpu_inst, inst.gpu_node
    change = np.concatenate([[True], (gi[1:] != gi[:-1]) | (gn[1:] != gn[:-1])])
    ui, un = gi[change], gn[change]           # (instance, node) pairs in allocation order
    starts = np.concatenate([[True], ui[1:] != ui[:-1]])
    first[ui[starts]] = un[starts]
    nn = np.bincount(ui, minlength=n)
    single = (nn == 1)
    out[single] = names[np.maximum(first[single], 0)]
    # pairs are grouped by instance (allocation order), so each gang's nodes are one contiguous run
    bounds = np.flatnonzero(starts).tolist() + [len(ui)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a > 1:
            out[ui[a]] = hostlist.compress(list(names[un[a:b]]))
    return first, out


def slurm_time(col: str) -> pl.Expr:
    """Epoch seconds as Slurm prints a time under TZ=UTC (``2026-01-05T08:00:00``); ``Unknown`` for -1."""
    return (pl.when(pl.col(col) >= 0)
            .then(pl.from_epoch(pl.col(col).clip(0), time_unit="s").dt.strftime("%Y-%m-%dT%H:%M:%S"))
            .otherwise(pl.lit("Unknown")))


def _dur(expr: pl.Expr) -> pl.Expr:
    """Seconds as Slurm prints durations: [D-]HH:MM:SS."""
    d = expr // 86400
    z = lambda e: e.cast(pl.String).str.zfill(2)  # noqa: E731
    hms = pl.concat_str([z((expr % 86400) // 3600), z((expr % 3600) // 60), z(expr % 60)], separator=":")
    return pl.when(d > 0).then(pl.concat_str([d.cast(pl.String), hms], separator="-")).otherwise(hms)


def slurm_mem(expr: pl.Expr) -> pl.Expr:
    """MiB as Slurm prints memory: whole GiB as ``120G``, else ``1500M``."""
    return (pl.when(expr % 1024 == 0).then(pl.concat_str([(expr // 1024).cast(pl.String), pl.lit("G")]))
            .otherwise(pl.concat_str([expr.cast(pl.String), pl.lit("M")])))


def _tres(typed: pl.Expr | None, billing: bool = True) -> pl.Expr:
    parts = []
    if billing:
        parts += [pl.lit("billing="), pl.col("cpus").cast(pl.String), pl.lit(",")]
    parts += [pl.lit("cpu="), pl.col("cpus").cast(pl.String), pl.lit(",")]
    gpu = pl.concat_str([pl.lit("gres/gpu="), pl.col("gpus").cast(pl.String), pl.lit(",")])
    if typed is not None:
        typed_part = pl.concat_str([pl.lit("gres/gpu:"), typed, pl.lit("="), pl.col("gpus").cast(pl.String),
                                    pl.lit(",")])
        gpu = pl.concat_str([typed_part.fill_null(""), gpu])
    parts += [gpu, pl.lit("mem="), slurm_mem(pl.col("mem_mib")), pl.lit(",node="),
              pl.col("nnodes").cast(pl.String)]
    return pl.concat_str(parts)


def as_of(frame: pl.DataFrame, a: int, b: int) -> pl.DataFrame:
    """Instances active in [a, b), with the state, end and elapsed time sacct would print at time b."""
    f = frame.filter((pl.col("submit") < b) & ((pl.col("end") >= a) | (pl.col("end") < 0)))
    started = (pl.col("start") >= 0) & (pl.col("start") < b)
    ended = started & (pl.col("end") >= 0) & (pl.col("end") < b)
    cancelled_waiting = (pl.col("start") < 0) & (pl.col("end") >= 0) & (pl.col("end") < b)
    return f.with_columns(
        state=pl.when(ended | cancelled_waiting).then(pl.col("state"))
               .when(started).then(pl.lit("RUNNING")).otherwise(pl.lit("PENDING")),
        start=pl.when(started).then(pl.col("start")).otherwise(-1),
        end=pl.when(ended | cancelled_waiting).then(pl.col("end")).otherwise(-1),
        elapsed=pl.when(ended).then(pl.col("end") - pl.col("start"))
                  .when(started).then(b - pl.col("start")).otherwise(0),
        ran=started,
    )


def _fold_pending_arrays(f: pl.DataFrame) -> pl.DataFrame:
    """Pending tasks of one array print as one record ``A_[3-7,9]`` carrying the array's id as JobIDRaw."""
    pend = (pl.col("state") == "PENDING") & (pl.col("array_id") >= 0)
    rest = f.filter(~pend)
    grp = f.filter(pend)
    if grp.height == 0:
        return rest
    folded = (grp.sort("task").group_by(["array_id", "submit"], maintain_order=True)
              .agg(pl.all().first(), pl.col("task").alias("tasks"))
              .with_columns(raw=pl.col("array_id"), task=pl.lit(-1, pl.Int64),
                            spec=pl.col("tasks").map_elements(_ranges, return_dtype=pl.String))
              .drop("tasks"))
    return pl.concat([rest, folded.select(rest.columns + ["spec"])], how="diagonal")


def _ranges(tasks) -> str:
    tasks = sorted(tasks)
    out, lo = [], tasks[0]
    for prev, cur in zip(tasks, tasks[1:] + [None]):
        if cur != prev + 1:
            out.append(str(lo) if lo == prev else f"{lo}-{prev}")
            lo = cur
    return ",".join(out)


def export(frame: pl.DataFrame, cluster: str, a: int, b: int, steps: bool = True,
           reservation: bool = False) -> bytes:
    """The bytes of one sacct export for window [a, b) taken at time b (UTC), header line included; with
    ``reservation`` one more field, Reservation (as `gpuledger ingest sacct --live` asks for it; empty on steps)."""
    f = _fold_pending_arrays(as_of(frame, a, b))
    if "spec" not in f.columns:
        f = f.with_columns(spec=pl.lit(None, pl.String))
    jobid = (pl.when(pl.col("spec").is_not_null())
             .then(pl.concat_str([pl.col("array_id").cast(pl.String), pl.lit("_["), pl.col("spec"), pl.lit("]")]))
             .when(pl.col("task") >= 0)
             .then(pl.concat_str([pl.col("array_id").cast(pl.String), pl.lit("_"), pl.col("task").cast(pl.String)]))
             .otherwise(pl.col("raw").cast(pl.String)))
    state_txt = (pl.when(pl.col("state") == "CANCELLED")
                 .then(pl.concat_str([pl.lit("CANCELLED by "), pl.col("uid").cast(pl.String)]))
                 .otherwise(pl.col("state")))
    exit_txt = (pl.when(pl.col("state") == "FAILED").then(pl.concat_str([pl.col("exit_code").cast(pl.String), pl.lit(":0")]))
                .when(pl.col("state") == "OUT_OF_MEMORY").then(pl.lit("0:125"))
                .otherwise(pl.lit("0:0")))
    # Slurm 22.05 prints a job cancelled while pending with Start = End = the cancel time (tests/fixtures/slurm_real)
    start_txt = pl.when(pl.col("ran")).then(slurm_time("start")).when(pl.col("state") == "CANCELLED") \
        .then(slurm_time("end")).otherwise(pl.lit("Unknown"))
    f = f.with_columns(jobid=jobid, state_txt=state_txt, exit_txt=exit_txt, start_txt=start_txt,
                       end_txt=slurm_time("end"), submit_txt=slurm_time("submit"),
                       elig_txt=slurm_time("eligible"),
                       elapsed_txt=_dur(pl.col("elapsed")), limit_txt=_dur(pl.col("limit_s")),
                       order=pl.col("i") * 4)
    c = lambda v: pl.lit(v)  # noqa: E731
    s = lambda col: pl.col(col).cast(pl.String)  # noqa: E731
    alloc_line = pl.concat_str([
        s("jobid"), s("raw"), c(cluster), s("partition"), s("qos"), s("account"), s("account"), s("gid"),
        s("user"), s("uid"), s("submit_txt"), s("elig_txt"), s("start_txt"), s("end_txt"), s("elapsed_txt"),
        s("exit_txt"), s("state_txt"), s("nnodes"), s("cpus"), s("cpus"), slurm_mem(pl.col("mem_mib")),
        _tres(pl.col("req_type")),
        pl.when(pl.col("ran")).then(_tres(pl.col("gpu_type"))).otherwise(c("")),
        s("limit_txt"),
        pl.when(pl.col("ran")).then(pl.col("nodelist")).otherwise(c("None assigned")), s("name")],
        separator="|")
    if reservation:
        alloc_line = pl.concat_str([alloc_line, pl.col("resv").fill_null("")], separator="|")
    parts = [f.select(order=pl.col("order"), line=alloc_line)]
    if steps:
        parts += _steps(f.filter(pl.col("ran")), cluster, reservation)
    lines = pl.concat(parts).sort("order", maintain_order=True)["line"]
    header = HEADER + ("|Reservation" if reservation else "")
    return (header + "\n" + lines.str.join("\n").item() + ("\n" if len(lines) else "")).encode()


def _steps(f: pl.DataFrame, cluster: str, reservation: bool = False) -> list[pl.DataFrame]:
    """.batch (first node), .extern (all nodes) and, for srun jobs, .0 lines of started instances (with
    ``reservation``, an empty Reservation field last: steps print none)."""
    s = lambda col: pl.col(col).cast(pl.String)  # noqa: E731
    c = lambda v: pl.lit(v)  # noqa: E731
    batch_state = pl.col("state").replace_strict(BATCH_STATE, default=pl.col("state"))
    running = pl.col("state") == "RUNNING"
    killed = pl.col("state").is_in(["CANCELLED", "TIMEOUT", "PREEMPTED", "REQUEUED"])
    node_fail = pl.col("state") == "NODE_FAIL"
    # steps of a job whose node died are CANCELLED with no exit code (tests/fixtures/slurm_real/sacct-steps.psv)
    step_exit = pl.when(node_fail).then(c("")).when(killed).then(c("0:15")).otherwise(pl.col("exit_txt"))
    per_node = f.with_columns(cpus=pl.col("cpus") // pl.col("nnodes"), gpus=pl.col("gpus") // pl.col("nnodes"),
                              mem_mib=pl.col("mem_mib") // pl.col("nnodes"), nnodes=pl.lit(1))

    def line(df, suffix, name, state, exit_, nodes, tres):
        return df.select(order=pl.col("order") + {"batch": 1, "extern": 2, "0": 3}[suffix], line=pl.concat_str([
            pl.concat_str([s("jobid"), c("." + suffix)]), pl.concat_str([s("raw"), c("." + suffix)]), c(cluster),
            c(""), c(""), s("account"), s("account"), s("gid"), c(""), c(""), s("start_txt"), s("start_txt"),
            s("start_txt"), s("end_txt"), s("elapsed_txt"), exit_, state, s("nnodes"), s("cpus"), s("cpus"),
            c(""), c(""), tres, c(""), nodes, name, *([c("")] if reservation else [])], separator="|"))

    out = [
        line(per_node, "batch", c("batch"), batch_state, step_exit, pl.col("first_node"),
             _tres(pl.col("gpu_type"), billing=False)),
        line(f, "extern", c("extern"), pl.when(running).then(c("RUNNING")).when(node_fail).then(c("CANCELLED"))
             .otherwise(c("COMPLETED")), pl.when(node_fail).then(c("")).otherwise(c("0:0")),
             pl.col("nodelist"), _tres(pl.col("gpu_type"))),
    ]
    srun = f.filter(pl.col("srun"))
    if srun.height:
        names = pl.lit(list(SRUN_NAMES)).list.get(pl.col("raw") % len(SRUN_NAMES))
        out.append(line(srun, "0", names, batch_state, step_exit, pl.col("nodelist"),
                        _tres(pl.col("gpu_type"), billing=False)))
    return out
