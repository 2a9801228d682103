"""`gpuledger ingest job-gpus`: which GPUs (device indices) each job holds, from ``scontrol -d show job`` (the
multi-line form or ``-o``) or slurmrestd's ``/slurm/v0.0.XX/jobs`` (``gres_detail``), into ``job_gpu_indices``, so
that telemetry attribution is exact by GPU index (models/kernels/attribution.py) where it would otherwise share a
node's devices among the jobs on it.

Slurm keeps the indices only while slurmctld remembers a job (running, or ended within MinJobAge); accounting
does not store them. So they are collected live (``--live``, or the service's ``job-gpus`` source every few
minutes), as Princeton's jobstats prolog or dcgm-exporter's HPC job mapping collect them.

Each record (``JobId=...``) gives per node group ``Nodes=HOSTLIST CPU_IDs=... Mem=... GRES=gpu:a100:2(IDX:0-1)``;
a job on GPU shards or MPS shares shows the GPU they are on (``GRES=shard:4(IDX:0)``). The index is the device key
of the node's telemetry (``gpu_samples.gpu``: DCGM's and nvidia-smi's index, which is Slurm's when gres.conf
lists the devices in that order, as AutoDetect=nvml does). A record is matched with the stored job by (cluster,
JobId = ``job_id_raw``, SubmitTime = ``submit``). Every line is loaded (a record's first line), skipped (the
rest of a record, blank lines, a record without GPU indices: pending, or no GPUs) or rejected (a job the
warehouse does not hold yet: load its accounting first; an unreadable field). A live collection, repeated every
few minutes, skips a job not loaded yet instead (the next one reads it again). Key: (cluster, job_uid, node,
gpu): loading the same output again changes nothing.
"""
from __future__ import annotations

import hashlib
import re

import pyarrow as pa

from ingest import plausible, warehouse
from ingest.hostlist import HostlistError, expand
from ingest.inputs import read_input, run_slurm, slurm_cluster_name
from ingest.lines import text_lines
from ingest.slurm_json import looks_like_json, meta_cluster, record_lines, records, utc_text
from ingest.squeue import NULLS

#: One node group of a job's detail: its hosts and GRES (scontrol -d prints CPU_IDs and Mem between them)
DETAIL = re.compile(r"(?:^|\s)Nodes=(\S+)\s+CPU_IDs=\S*\s+Mem=\S*\s+GRES=(\S*)")
#: A GPU-holding entry of that GRES: ``gpu:a100:2(IDX:0-1)``, ``gpu:1(IDX:3)``, ``shard:4(IDX:0)``
GRES_IDX = re.compile(r"(?:^|,)(?:gpu|shard|mps)(?::[^:(),]+)*\(IDX:([^)]*)\)", re.IGNORECASE)
#: What ``--live`` runs (times then print in UTC)
LIVE_COMMAND = ("scontrol", "-d", "-o", "show", "job")


def _records(lines: list[str]):
    """(line numbers, text) per ``JobId=`` record (indented and whitespace-only lines continue it); other lines
    as (line, kind)."""
    rec = None
    for i, line in enumerate(lines, start=1):
        if line.startswith("JobId="):
            if rec:
                yield rec
            rec = ([i], line)
        elif rec and line[:1].isspace():
            rec = (rec[0] + [i], rec[1] + " " + line.strip())
        else:
            if rec:
                yield rec
                rec = None
            yield (i, "blank" if not line.strip() else "none" if line.startswith("No jobs") else "stray")
    if rec:
        yield rec


def indices(spec: str) -> list[int]:
    """``0-1,3`` -> [0, 1, 3]; ``N/A`` -> []. Raises ValueError."""
    out = []
    for part in spec.split(","):
        if part in ("", "N/A"):
            continue
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _rows(text: str, tz: str | None, window: plausible.Window) -> list[tuple]:
    """(job_id_raw, submit, node, gpu) of one record; ValueError('field\\x1freason') when unreadable."""
    def fail(f, why):
        raise ValueError(f"{f}\x1f{why}")
    job = re.match(r"JobId=(\d+)", text)
    if job is None:
        fail("JobId", "no numeric JobId")
    raw = re.search(r"(?:^|\s)SubmitTime=(\S+)", text)
    if raw is None or raw.group(1) in NULLS:
        fail("SubmitTime", "no submit time")
    try:
        submit = warehouse.parse_time(raw.group(1), "SubmitTime", tz)
    except ValueError:
        fail("SubmitTime", f"cannot read time {raw.group(1)!r}")
    if not window.contains(submit):
        fail("SubmitTime", window.reason(raw.group(1)))
    out = []
    for nodes, gres in DETAIL.findall(text):
        try:
            hosts = expand(nodes)
            devs = [d for m in GRES_IDX.finditer(gres) for d in indices(m.group(1))]
        except (HostlistError, ValueError) as exc:
            fail("Nodes" if isinstance(exc, HostlistError) else "GRES", f"cannot read {nodes} GRES={gres}: {exc}")
        out += [(job.group(1), submit, h, str(d)) for h in hosts for d in sorted(set(devs))]
    return out


def _parse(lines: list[str], tz: str | None, window: plausible.Window):
    """(rows with their first line, skips [(line, reason)], rejects [(line, field, reason)])."""
    rows, skips, rejects = [], [], []
    for item in _records(lines):
        if not isinstance(item[0], list):
            if item[1] == "stray":
                rejects.append((item[0], None, "not part of a JobId= record of `scontrol -d show job`"))
            else:
                skips.append((item[0], "blank line" if item[1] == "blank" else "no jobs line"))
            continue
        nos, text = item
        try:
            got = _rows(text, tz, window)
        except ValueError as exc:
            f, _, why = str(exc).partition("\x1f")
            rejects.append((nos[0], f, why))
            skips += [(n, "continuation of a rejected record") for n in nos[1:]]
            continue
        if not got:
            skips += [(n, "no GPU indices (pending, no GPUs, or printed without -d)") for n in nos]
            continue
        rows += [(nos[0], *r) for r in got]
        skips += [(n, "continuation line") for n in nos[1:]]
    return rows, skips, rejects


def _json_line(job: dict) -> str:
    """One job of slurmrestd's ``/slurm/v0.0.XX/jobs`` as the one-line record `scontrol -d -o show job` prints:
    ``gres_detail`` holds one GRES text per node of its allocation, in the allocation's order."""
    alloc = ((job.get("job_resources") or {}).get("nodes") or {}).get("allocation") or []
    hosts = [a["name"] for a in alloc] if alloc else expand(job["nodes"]) if job.get("nodes") else []
    groups = " ".join(f"Nodes={h} CPU_IDs= Mem= GRES={g}" for h, g in zip(hosts, job.get("gres_detail") or []))
    return f"JobId={job['job_id']} SubmitTime={utc_text(job.get('submit_time'))} {groups}".rstrip()


def _json_lines(data: bytes, name: str) -> tuple[list[str], str | None]:
    """slurmrestd's job list as `scontrol -d -o show job` lines (times in UTC; a job we cannot read becomes a line
    the checks reject, its place kept), and the cluster its ``meta`` names."""
    doc, items = records(data, name, "jobs", "slurmrestd /slurm/.../jobs (the live jobs, with gres_detail)")
    return record_lines(items, _json_line, _unreadable), meta_cluster(doc)


def _unreadable(n: int, job, exc: Exception) -> str:
    """A record the checks reject (no numeric JobId), naming its place and what went wrong."""
    return f"JobId=unreadable-record-{n}:{type(exc).__name__}"


_SCHEMA = pa.schema([("line_no", pa.int64()), ("job_id_raw", pa.string()), ("submit", pa.timestamp("us")),
                     ("node", pa.string()), ("gpu", pa.string())])


def load(con, data: bytes, source_name: str, cluster: str | None = None, tz: str | None = None,
         live: bool = False) -> dict:
    """Load one ``scontrol -d show job`` listing in one transaction; returns the run summary. ``live``: a
    collection repeated every few minutes, where a job whose accounting is not loaded yet is skipped (the next
    collection reads it again) rather than quarantined at every collection."""
    is_json, json_cluster = looks_like_json(data), None
    if is_json:
        lines, json_cluster = _json_lines(data, source_name)
        tz = "UTC"
    else:
        lines = text_lines(data)
    default = cluster or json_cluster or warehouse.only_cluster(con) or "default"
    rows, skips, rejects = _parse(lines, tz, plausible.window())
    tbl = pa.table(list(zip(*rows)) if rows else [[] for _ in _SCHEMA], schema=_SCHEMA)
    options = {"tz": tz or "UTC", **({"format": "json", "read_as": "job records"} if is_json else {})}
    run = warehouse.IngestRun(con, "job-gpus", source_name, sha256=hashlib.sha256(data).hexdigest(),
                              nbytes=len(data), cluster=default, options=options)
    with run:
        run.lines_read = len(lines)
        con.register("_jg_in", tbl)
        try:
            missing = _match(con, default)
            if live:
                skips += [(ln, "job not in the warehouse yet (its accounting comes later; read again at the next "
                               "collection)") for ln, _, _ in missing]
            else:
                rejects += missing
            run.inserted, run.updated, run.unchanged = _store(con, default, run.run_id)
        finally:
            con.unregister("_jg_in")
            con.execute("DROP TABLE IF EXISTS _jg")
        run.mark_lines(lines, skips, rejects)
        run.loaded = len(lines) - run.skipped - run.rejected
    summary = run.summary()
    summary["reject_examples"] = [f"{source_name}:{ln}: " + (f"field {f}: " if f else "") + r
                                  for ln, f, r in rejects[:10]]
    return summary


def _match(con, cluster: str) -> list[tuple]:
    """``_jg``: the input's rows with the stored job's uid (the latest of a requeued key); rejects for records
    whose job the warehouse does not hold."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _jg AS
                   SELECT i.*, j.job_uid FROM _jg_in i LEFT JOIN (
                       SELECT job_id_raw, submit, max(job_uid) AS job_uid FROM jobs WHERE cluster = $c GROUP BY ALL
                   ) j USING (job_id_raw, submit)""", {"c": cluster})
    missing = con.sql("""SELECT DISTINCT line_no, job_id_raw, submit FROM _jg WHERE job_uid IS NULL
                         ORDER BY line_no""").fetchall()
    return [(ln, "JobId", f"job {job} submitted {submit:%Y-%m-%d %H:%M:%S} is not in the warehouse (cluster "
                          f"{cluster}): load its accounting first (ingest sacct, or sacct --live)")
            for ln, job, submit in missing]


def _store(con, cluster: str, run_id: int) -> tuple[int, int, int]:
    """Replace the indices of each matched job whose set differs from the stored one; (new, changed, same) jobs."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _jg_sets AS
        WITH new AS (SELECT job_uid, list(DISTINCT node || ':' || gpu ORDER BY node || ':' || gpu) AS s
                     FROM _jg WHERE job_uid IS NOT NULL GROUP BY job_uid),
             old AS (SELECT job_uid, list(DISTINCT node || ':' || gpu ORDER BY node || ':' || gpu) AS s
                     FROM job_gpu_indices WHERE job_uid IN (SELECT job_uid FROM new) GROUP BY job_uid)
        SELECT new.job_uid, old.s IS NULL AS is_new, old.s IS NOT NULL AND old.s <> new.s AS changed
        FROM new LEFT JOIN old USING (job_uid)""")
    new, changed, same = con.sql("""SELECT count(*) FILTER (is_new), count(*) FILTER (changed),
                                           count(*) FILTER (NOT is_new AND NOT changed) FROM _jg_sets""").fetchall()[0]
    con.execute("""DELETE FROM job_gpu_indices
                   WHERE job_uid IN (SELECT job_uid FROM _jg_sets WHERE changed)""")
    con.execute("""INSERT INTO job_gpu_indices
                   SELECT DISTINCT $c, job_uid, node, gpu, 'scontrol', $run FROM _jg
                   WHERE job_uid IN (SELECT job_uid FROM _jg_sets WHERE is_new OR changed)""",
                {"c": cluster, "run": run_id})
    con.execute("DROP TABLE _jg_sets")
    return new, changed, same


def ingest_path(con, path: str, cluster: str | None = None, tz: str | None = None) -> dict:
    data, name = read_input(path)
    return load(con, data, name, cluster=cluster, tz=tz)


def ingest_live(con, cluster: str | None = None) -> dict:
    """Run :data:`LIVE_COMMAND` (TZ=UTC) and load what it prints; without ``cluster``, the controller's ClusterName
    (the listing names none), else the warehouse's only cluster."""
    cluster = cluster or slurm_cluster_name() or warehouse.only_cluster(con)
    return load(con, run_slurm(list(LIVE_COMMAND), 120), " ".join(LIVE_COMMAND), cluster=cluster, tz="UTC",
                live=True)
