"""Microsoft Philly (ATC'19) and the Helios artifact's Philly series.

Inputs, each recognised by its name (or all of them in a directory):

- ``philly_node_sequence_minutely.csv[.gz]`` (time, active, total): nodes running at least one job, per
  minute (the series Helios' CES forecaster uses) -> ``trace_node_occupancy``;
- ``philly_vc_nodes.csv`` (vc, node num): virtual-cluster quotas -> ``trace_virtual_clusters``;
- ``cluster_machine_list[.csv]`` (machineId, number of GPUs, single GPU mem) -> the node inventory;
- ``cluster_job_log[.json]`` (the full job log): one ``jobs`` row per scheduling attempt. The first
  attempt keeps the job's submission time; a retry is a requeued instance submitted when the attempt before it
  ended (key: cluster, jobid, submit), and every attempt but the last ends REQUEUED. Status Pass / Killed /
  Failed -> COMPLETED / CANCELLED / FAILED; a last attempt without end is RUNNING. GPUs are the attempt's GPU
  list over its machines; the VC is the Slurm-like account.

Philly's timestamps are local time at the cluster (the GPU-utilisation file prints PDT/PST), read in
``--tz`` (default America/Los_Angeles) and stored as UTC. ``philly_runtime_from_alibaba.csv`` holds runtimes
only (no job records) and is refused with that reason.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl

from ingest import hostlist
from ingest.errors import InputError
import ingest.traces.common as common

KIND = "philly"
DEFAULT_CLUSTER = "philly"
DEFAULT_TZ = "America/Los_Angeles"
STATUS = {"Pass": "COMPLETED", "Killed": "CANCELLED", "Failed": "FAILED"}
TIME_FMT = "%Y-%m-%d %H:%M:%S"


def _kind_of(p: Path) -> str | None:
    name = p.name
    for prefix, kind in (("philly_node_sequence", "sequence"), ("philly_vc", "vcs"), ("cluster_machine_list", "machines"),
                         ("cluster_job_log", "joblog"), ("philly_runtime", "runtimes")):
        if name.startswith(prefix):
            return kind
    return None


def ingest_path(con, path: str | Path, cluster: str | None = None, tz: str | None = None, **_) -> list[dict]:
    p = Path(path)
    files = sorted(f for f in p.iterdir() if _kind_of(f) not in (None, "runtimes")) if p.is_dir() else [p]
    if not files:
        raise InputError(str(p), "no Philly trace file here (node sequence, VC list, machine list or job log)")
    cl = cluster or DEFAULT_CLUSTER
    zone = tz or DEFAULT_TZ
    common.ensure_cluster(con, cl, "Microsoft Philly (msr-fiddle/philly-traces)", tz=zone)
    out = []
    for f in files:
        kind = _kind_of(f)
        if kind == "runtimes":
            raise InputError(str(f), "holds job runtimes only (no job records); nothing to load")
        if kind is None:
            raise InputError(str(f), "not a Philly trace file this converter knows (see docs/TRACES.md)")
        out.append({"sequence": ingest_sequence, "vcs": ingest_vcs, "machines": ingest_machines,
                    "joblog": ingest_job_log}[kind](con, f, cl, zone))
    return out


def _local_to_utc(zone: str) -> pl.Expr:
    return (pl.col("_t").str.strptime(pl.Datetime("us"), TIME_FMT, strict=False)
            .dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
            .dt.convert_time_zone("UTC").dt.replace_time_zone(None))


def ingest_sequence(con, path: Path, cluster: str, zone: str) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, required=("time", "active", "total")).with_columns(_t=pl.col("time"))
    df = df.with_columns(ts=_local_to_utc(zone))
    a, t = pl.col("active").cast(pl.Int64, strict=False), pl.col("total").cast(pl.Int64, strict=False)
    good, bad = common.split_bad(df, [
        ("time", pl.col("ts").is_null(), pl.concat_str([pl.lit("cannot read time "), pl.col("time").fill_null("")])),
        ("active", a.is_null() | (a < 0), pl.lit("not a node count")),
        ("total", t.is_null() | (t < a), pl.lit("not a node count at least the active count")),
    ])
    rows = good.select(cluster=pl.lit(cluster), ts="ts", active_nodes=a.cast(pl.Int32), total_nodes=t.cast(pl.Int32))
    run = common.open_run(con, KIND, path, data, cluster, {"part": "node sequence", "tz": zone})
    with run:
        run.lines_read = len(lines)
        run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        common.upsert(con, "trace_node_occupancy", ("cluster", "ts"),
                      rows.with_columns(ingest_run_id=pl.lit(run.run_id, pl.Int64)), run)
        run.loaded = rows.height
    return run.summary()


def ingest_vcs(con, path: Path, cluster: str, zone: str) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    df = common.read_csv(path, data, required=("vc", "node num"))
    n = pl.col("node num").cast(pl.Int64, strict=False)
    good, bad = common.split_bad(df, [("vc", pl.col("vc").is_null(), pl.lit("empty VC name")),
                                      ("node num", n.is_null() | (n < 0), pl.lit("not a node count"))])
    rows = good.select(cluster=pl.lit(cluster), vc="vc", nodes=n.cast(pl.Int32))
    run = common.open_run(con, KIND, path, data, cluster, {"part": "virtual clusters"})
    with run:
        run.lines_read = len(lines)
        run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        common.upsert(con, "trace_virtual_clusters", ("cluster", "vc"),
                      rows.with_columns(ingest_run_id=pl.lit(run.run_id, pl.Int64)), run)
        run.loaded = rows.height
    return run.summary()


def ingest_machines(con, path: Path, cluster: str, zone: str) -> dict:
    data = common.read_bytes(path)
    lines = common.raw_lines(data)
    first = lines[0].split(",")[0].strip() if lines else ""
    header = first.lower().startswith("machine")
    df = common.read_csv(path, data, columns=None if header else ["machineId", "number of GPUs", "single GPU mem"])
    df = df.rename({c: c.strip() for c in df.columns})
    g = pl.col("number of GPUs").str.strip_chars().cast(pl.Int64, strict=False)
    good, bad = common.split_bad(df, [("machineId", pl.col("machineId").is_null(), pl.lit("empty machine id")),
                                      ("number of GPUs", g.is_null(), pl.lit("not a GPU count"))])
    mem = pl.col("single GPU mem").str.strip_chars()
    nodes = good.select(cluster=pl.lit(cluster), node=pl.col("machineId").str.strip_chars(), gpus=g,
                        gpu_type=pl.concat_str([pl.lit("gpu-"), mem.str.to_lowercase()]),
                        gres=pl.concat_str([pl.lit("gpu:"), g.cast(pl.String)]))
    run = common.open_run(con, KIND, path, data, cluster, {"part": "machine list"})
    with run:
        run.lines_read = len(lines)
        if header:
            run.skip("header line", 1, 1)
        common.reject(run, bad, lines)
        common.write_nodes(con, run, nodes)
        run.loaded = nodes.height
    return run.summary()


def _utc(text: str | None, zone: ZoneInfo, field: str) -> dt.datetime | None:
    """A job log's local time as naive UTC; one that is not ``TIME_FMT`` is a ValueError (field, reason)."""
    if not text or text == "None":
        return None
    try:
        local = dt.datetime.strptime(str(text).strip(), TIME_FMT).replace(tzinfo=zone)
    except ValueError:
        raise ValueError(field, f"cannot read time {text!r} (expected YYYY-MM-DD HH:MM:SS)") from None
    return local.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _attempt_rows(rec: dict, line_no: int, cluster: str, zone: ZoneInfo) -> list[dict]:
    """One staged row per attempt (or one row for a job that never ran)."""
    jobid, status = rec["jobid"], rec.get("status")
    submit = _utc(rec.get("submitted_time"), zone, "submitted_time")
    base = {"line_no": line_no, "cluster": cluster, "job_id": jobid, "job_id_raw": jobid, "user": rec.get("user"),
            "account": rec.get("vc"), "partition": rec.get("vc"), "state_raw": status,
            "source": f"trace:{KIND}"}
    attempts = rec.get("attempts") or []
    if not attempts:
        return [dict(base, submit=submit, eligible=submit, state=STATUS[status], ngpus=0.0)]
    rows, prev_end = [], None
    for k, a in enumerate(attempts):
        start, end = _utc(a.get("start_time"), zone, "start_time"), _utc(a.get("end_time"), zone, "end_time")
        last = k == len(attempts) - 1
        hosts = [d["ip"] for d in a.get("detail") or []]
        gpus = sum(len(d.get("gpus") or []) for d in a.get("detail") or [])
        sub = submit if k == 0 else (prev_end or start)
        state = (STATUS[status] if end is not None else "RUNNING") if last else "REQUEUED"
        if start is None:
            state = STATUS[status] if last else "REQUEUED"
        rows.append(dict(base, submit=sub, eligible=sub, start=start, end=end if start else None,
                         elapsed_s=int((end - start).total_seconds()) if start and end else None,
                         state=state, nnodes=len(hosts) or None, ngpus=float(gpus) if start else 0.0,
                         nodelist=hostlist.compress(hosts) if hosts else None))
        prev_end = end or prev_end
    return rows


def ingest_job_log(con, path: Path, cluster: str, zone_name: str) -> dict:
    data = common.read_bytes(path)
    try:
        records = json.loads(data)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"line {exc.lineno}: not JSON: {exc.msg}") from exc
    if not isinstance(records, list):
        raise InputError(str(path), "expected a JSON list of jobs")
    zone = ZoneInfo(zone_name)
    rows, bad = [], []
    for n, rec in enumerate(records, start=1):
        try:
            if not isinstance(rec, dict) or not rec.get("jobid"):
                raise ValueError("jobid", "no jobid")
            if rec.get("status") not in STATUS:
                raise ValueError("status", f"unknown status {rec.get('status')!r}")
            rows.extend(_attempt_rows(rec, n, cluster, zone))
        except ValueError as exc:
            field, why = exc.args if len(exc.args) == 2 else (None, str(exc))
            bad.append({"line_no": n, "field": field, "reason": f"job {n}: {why}"})
        except (KeyError, TypeError) as exc:
            bad.append({"line_no": n, "field": None, "reason": f"job {n}: malformed record ({exc})"})
    run = common.open_run(con, KIND, path, data, cluster, {"part": "job log", "tz": zone_name,
                                                           "records": "jobs (lines_read counts JSON records)",
                                                           "read_as": "job records"})
    with run:
        run.lines_read, run.stored_as = len(records), "job attempts"
        for b in bad:
            run.reject(b["line_no"], b["reason"], json.dumps(records[b["line_no"] - 1])[:2000], b["field"])
        implausible = 0
        if rows:
            raw = [json.dumps(r)[:2000] for r in records]
            implausible = common.write_jobs(con, run, pl.DataFrame(rows, infer_schema_length=None), raw)
        run.loaded = len(records) - len(bad) - implausible
    return run.summary()
