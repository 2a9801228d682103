"""Alibaba cluster-trace-v2026-GenAI: per-pod GPU duty cycle and GPU memory, as telemetry.

``pod_gpu_duty_cycle_anon.csv`` (value %, timestamp_anon s, container_ip) is the NVML/DCGM GPU utilisation
of each serving pod; ``pod_gpu_memory_used_bytes_anon.csv`` (timestamp_anon, value bytes, container_ip) its
framebuffer use. Both go through the telemetry writer (ingest.telemetry_store) like DCGM readings:
duty cycle as ``DCGM_FI_DEV_GPU_UTIL`` (percent), memory as ``DCGM_FI_DEV_FB_USED`` (converted to MiB).
The trace names pods only (an MD5 of the container IP), not nodes or GPU indices: each pod is stored as its
own device, node ``pod-<first 12 hex digits>``, GPU 0, with the full hash in the ``pod`` label.
Timestamps are the trace's shifted ones (2022-09-11 onwards), used as UTC.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa

from ingest import telemetry_store as store
from ingest.errors import InputError
import ingest.traces.common as common

KIND = "alibaba-genai"
DEFAULT_CLUSTER = "genai"
FILES = {"pod_gpu_duty_cycle_anon": ("DCGM_FI_DEV_GPU_UTIL", 1.0),
         "pod_gpu_memory_used_bytes_anon": ("DCGM_FI_DEV_FB_USED", 1 / 1048576)}


def ingest_path(con, path: str | Path, cluster: str | None = None, **_) -> list[dict]:
    p = Path(path)
    files = [f for stem in FILES for f in (p / f"{stem}.csv.gz", p / f"{stem}.csv") if f.exists()] \
        if p.is_dir() else [p]
    if not files:
        raise InputError(str(p), f"no {' or '.join(FILES)} file here")
    cl = cluster or DEFAULT_CLUSTER
    common.ensure_cluster(con, cl, "Alibaba GenAI serving cluster (cluster-trace-v2026-GenAI)")
    return [ingest_file(con, f, cl) for f in files]


def ingest_file(con, path: Path, cluster: str) -> dict:
    stem = path.name.split(".")[0]
    if stem not in FILES:
        raise InputError(str(path), f"not a GenAI GPU telemetry file ({', '.join(FILES)})")
    metric, factor = FILES[stem]
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, required=("value", "timestamp_anon", "container_ip"))
    val = pl.col("value").cast(pl.Float64, strict=False)
    good, bad = common.split_bad(df, [
        ("container_ip", pl.col("container_ip").is_null() | pl.col("container_ip").is_in(["None", "NULL"]),
         pl.lit("no container (pod) hash")),
        ("value", val.is_null(), pl.concat_str([pl.lit("not a number: "), pl.col("value").fill_null("(empty)")])),
    ])
    opts = store.TelemetryOptions(cluster=cluster)
    pods = good["container_ip"].unique().sort().to_list()
    sid = {ip: i for i, ip in enumerate(pods)}
    series = []
    for ip in pods:
        labels = {"Hostname": f"pod-{ip[:12]}", "gpu": "0", "pod": ip}
        row = store.series_identity(metric, labels, opts, cluster)
        row.update(sid=sid[ip], series_text=f'{metric}{{pod="{ip}",gpu="0"}}')
        series.append(row)
    points = pa.table({
        "line_no": pa.array(good["line_no"].to_list(), pa.int64()),
        "sid": pa.array([sid[ip] for ip in good["container_ip"].to_list()], pa.int32()),
        "value": pa.array(good.select((val * factor).cast(pl.String))["value"].to_list(), pa.string()),
        "ts": pa.array(good["timestamp_anon"].to_list(), pa.string())})
    run = common.open_run(con, KIND, path, data, cluster, {"metric": metric})
    with run:
        run.lines_read = len(lines)
        run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        store.ingest_readings(con, run, points, store.series_table(series), f"trace:{KIND}", opts, ts_unit="s")
    summary = store.summary(con, run) if hasattr(store, "summary") else run.summary()
    summary.setdefault("pods", len(pods))
    return summary
