"""Alibaba cluster-trace-gpu-v2023 ("openb", the FGD paper's traces): node list + pod list.

Node lists (``sn,cpu_milli,memory_mib,gpu,model``) become the static inventory. Pod lists become ``jobs``
rows (one per pod, job_id = pod name) and exact ``trace_pods`` specs: fractional GPUs via ``gpu_milli`` (a
pod asking 460 milli-GPU holds ngpus = 0.46, gpu_milli = 460), the GPU-type constraint ``gpu_spec``, QoS,
and creation / scheduled / deletion times, which are seconds from the trace start: they are placed at
``--start`` (default 2023-01-02 00:00 UTC, a Monday; the trace publishes no date or time of day).

The sampled lists (cpu050, gpushare100, gpuspec33, multigpu50) reuse pod names with different pods, so each
goes to its own cluster, ``openb-<variant>``, with the node list loaded there too. multigpu50 has specs
only (no phase or times): its rows land in ``trace_pods`` and are not jobs.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

from ingest.errors import InputError
import ingest.traces.common as common

KIND = "alibaba-openb"
DEFAULT_START = dt.datetime(2023, 1, 2)
NODE_FILE = "openb_node_list_all_node.csv"
POD_FILE = "openb_pod_list_default.csv"
PHASES = {"Succeeded": "COMPLETED", "Failed": "FAILED", "Running": "CANCELLED", "Pending": "CANCELLED"}
INT = r"^\s*\d+\s*$"


def cluster_for(pod_file: Path) -> str:
    stem = pod_file.name.removesuffix(".gz").removesuffix(".csv")
    variant = stem.removeprefix("openb_pod_list_")
    return "openb" if variant in ("default", stem) else f"openb-{variant}"


def ingest_path(con, path: str | Path, cluster: str | None = None, start: dt.datetime | None = None,
                nodes: str | Path | None = None, **_) -> list[dict]:
    """Load a node list, a pod list (with its directory's node list), or a directory (all nodes + default pods)."""
    p = Path(path)
    if p.is_dir():
        node_file, pod_file = p / NODE_FILE, p / POD_FILE
        if not node_file.exists() or not pod_file.exists():
            raise InputError(str(p), f"expected {NODE_FILE} and {POD_FILE} in this directory")
    else:
        header = common.read_bytes(p).split(b"\n", 1)[0].decode("utf-8", "replace")
        if header.startswith("sn,"):
            node_file, pod_file = p, None
        elif header.startswith("name,"):
            pod_file = p
            node_file = Path(nodes) if nodes else (p.parent / NODE_FILE if (p.parent / NODE_FILE).exists() else None)
        else:
            raise InputError(str(p), "neither an openb node list (sn,...) nor a pod list (name,...)")
    if nodes and not p.is_dir():
        node_file = Path(nodes)
    cl = cluster or (cluster_for(pod_file) if pod_file else "openb")
    common.ensure_cluster(con, cl, "Alibaba cluster-trace-gpu-v2023 (openb)")
    out = []
    if node_file:
        out.append(ingest_nodes(con, node_file, cl))
    if pod_file:
        out.append(ingest_pods(con, pod_file, cl, start or DEFAULT_START))
    return out


def ingest_nodes(con, path: Path, cluster: str) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, required=("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    good, bad = common.split_bad(df, [
        ("sn", pl.col("sn").is_null(), pl.lit("empty node name")),
        ("cpu_milli", ~pl.col("cpu_milli").str.contains(INT), pl.lit("not a whole number of milli-CPUs")),
        ("memory_mib", ~pl.col("memory_mib").str.contains(INT), pl.lit("not a whole number of MiB")),
        ("gpu", ~pl.col("gpu").str.contains(INT), pl.lit("not a GPU count")),
    ])
    nodes = good.select(
        cluster=pl.lit(cluster), node=pl.col("sn"), gpu_type=pl.col("model"),
        gpus=pl.col("gpu").cast(pl.Int64), cpus=(pl.col("cpu_milli").cast(pl.Int64) / 1000).ceil().cast(pl.Int64),
        mem_bytes=pl.col("memory_mib").cast(pl.Int64) * 1048576,
        gres=pl.when(pl.col("gpu").cast(pl.Int64) > 0)
               .then(pl.concat_str([pl.lit("gpu:"), pl.col("model").fill_null("(null)"), pl.lit(":"), pl.col("gpu")]))
               .otherwise(None))
    run = common.open_run(con, KIND, path, data, cluster, {"part": "node list"})
    with run:
        run.lines_read = len(lines)
        run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        common.write_nodes(con, run, nodes)
        run.loaded = nodes.height
    return run.summary()


def ingest_pods(con, path: Path, cluster: str, start: dt.datetime) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, required=("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    timed = "creation_time" in df.columns
    for c in ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"):
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, pl.String).alias(c))
    def num(c):
        return pl.col(c).cast(pl.Int64, strict=False)
    checks = [
        ("name", pl.col("name").is_null(), pl.lit("empty pod name")),
        ("cpu_milli", num("cpu_milli").is_null() | (num("cpu_milli") < 0), pl.lit("not a number of milli-CPUs")),
        ("memory_mib", num("memory_mib").is_null() | (num("memory_mib") < 0), pl.lit("not a number of MiB")),
        ("num_gpu", num("num_gpu").is_null() | ~num("num_gpu").is_between(0, 64), pl.lit("not a GPU count")),
        ("gpu_milli", num("gpu_milli").is_null() | ~num("gpu_milli").is_between(0, 1000),
         pl.lit("not a per-GPU share in milli (0-1000)")),
    ]
    if timed:
        checks += [
            ("pod_phase", ~pl.col("pod_phase").is_in(list(PHASES)),
             pl.concat_str([pl.lit("unknown pod phase "), pl.col("pod_phase").fill_null("(empty)")])),
            ("creation_time", num("creation_time").is_null(), pl.lit("not a time in seconds")),
            ("deletion_time", num("deletion_time").is_null() & pl.col("deletion_time").is_not_null(),
             pl.lit("not a time in seconds")),
            ("scheduled_time", num("scheduled_time").is_null() & pl.col("scheduled_time").is_not_null(),
             pl.lit("not a time in seconds")),
            ("deletion_time", num("deletion_time") < num("creation_time"), pl.lit("deleted before it was created")),
            ("scheduled_time", num("scheduled_time") < num("creation_time"), pl.lit("scheduled before it was created")),
        ]
    good, bad = common.split_bad(df, checks)
    pods = good.select(
        "line_no", cluster=pl.lit(cluster), pod=pl.col("name"), cpu_milli=num("cpu_milli").cast(pl.Int32),
        memory_mib=num("memory_mib"), num_gpu=num("num_gpu").cast(pl.Int32), gpu_milli=num("gpu_milli").cast(pl.Int32),
        gpu_spec=pl.col("gpu_spec"), qos=pl.col("qos"), pod_phase=pl.col("pod_phase"),
        creation_s=num("creation_time"), scheduled_s=num("scheduled_time"), deletion_s=num("deletion_time"))
    run = common.open_run(con, KIND, path, data, cluster, {"part": "pod list", "start": start.isoformat()})
    with run:
        run.lines_read = len(lines)
        run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        # with times the pods are jobs, and write_jobs counts them; without, trace_pods is what they load into
        common.upsert(con, "trace_pods", ("cluster", "pod"),
                      pods.drop("line_no").with_columns(ingest_run_id=pl.lit(run.run_id, pl.Int64)),
                      None if timed else run)
        run.loaded = pods.height
        if timed:
            run.loaded -= common.write_jobs(con, run, _jobs(pods, start), lines)
        else:
            run.options["note"] = "pod specs without phase or times: trace_pods only, no jobs"
    return run.summary()


def _jobs(pods: pl.DataFrame, start: dt.datetime) -> pl.DataFrame:
    def at(c):
        return pl.lit(start) + pl.duration(seconds=pl.col(c))
    ran = pl.col("scheduled_s").is_not_null()
    share = pl.col("gpu_milli") < 1000
    single_type = pl.col("gpu_spec").is_not_null() & ~pl.col("gpu_spec").str.contains(r"\|", literal=False)
    ngpus = pl.col("num_gpu") * pl.when(share).then(pl.col("gpu_milli") / 1000).otherwise(1.0)
    return pods.select(
        "line_no", "cluster", job_id=pl.col("pod"), job_id_raw=pl.col("pod"), job_name=pl.col("pod"),
        qos=pl.col("qos"), state=pl.col("pod_phase").replace_strict(PHASES), state_raw=pl.col("pod_phase"),
        submit=at("creation_s"), eligible=at("creation_s"),
        start=pl.when(ran).then(at("scheduled_s")), end=at("deletion_s"),
        elapsed_s=pl.when(ran).then(pl.col("deletion_s") - pl.col("scheduled_s")).otherwise(0),
        nnodes=pl.when(ran).then(1), ncpus=(pl.col("cpu_milli") / 1000).ceil().cast(pl.Int32),
        req_cpus=(pl.col("cpu_milli") / 1000).ceil().cast(pl.Int32),
        ngpus=pl.when(ran).then(ngpus).otherwise(0.0), req_gpus=ngpus,
        gpu_milli=pl.when(share & (pl.col("num_gpu") > 0)).then(pl.col("gpu_milli")),
        gpu_type=pl.when(single_type).then(pl.col("gpu_spec")),
        mem_bytes=pl.when(ran).then(pl.col("memory_mib") * 1048576), req_mem_bytes=pl.col("memory_mib") * 1048576,
        extra=pl.when(pl.col("gpu_spec").is_not_null())
                .then(pl.concat_str([pl.lit('{"gpu_spec":"'), pl.col("gpu_spec"), pl.lit('"}')])),
        source=pl.lit(f"trace:{KIND}"))
