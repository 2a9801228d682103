"""What the collector can collect: one registered kind per source, each a thin call of the ingestor the CLI's
``gpuledger ingest ...`` command uses (no parsing here), plus the config keys it accepts.

Registering a new kind (say ``squeue`` snapshots) is one function and one entry of :data:`KINDS`::

    def collect_squeue(con, where: Where, opts: dict) -> dict:
        data, name = run_command(where.command(opts["command"]), opts["timeout"])
        return squeue.ingest_bytes(con, data, name, cluster=where.cluster)      # the ingestor's run summary

    KINDS["squeue"] = SourceKind("squeue", collect_squeue, interval="5m", keys={
        "command": Key("str", "squeue --all ...", "squeue command line"), "timeout": TIMEOUT})

A collect function opens no transaction of its own (the ingestor's ``IngestRun`` is the transaction), returns the
ingestor's summary (``run_id``, ``loaded``, ``skipped``, ``rejected``, optional ``error``) and raises for a failed
collection (``InputError``, ``OSError``, a DuckDB error): the loop records it and backs off. The config section
``[clusters.<kind>]`` (or ``[<kind>]`` for a kind with ``scope="global"``) then accepts ``enabled``, ``interval``
and the kind's keys, and the Data health page and /metrics show it without further change.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb

from ingest import governance, inputs, job_gpus, prometheus, reservations, sacct, sacct_live, slurm_events
from ingest import prometheus_pushdown, slurm_nodes, squeue, telemetry_store
from ingest import warehouse
from ingest.errors import InputError

#: the cluster of a source collected once for all clusters (governance) in ``source_status``
GLOBAL = "*"


@dataclass(frozen=True)
class Key:
    """One config key: its type (duration = whole seconds, str, strings, bool, int, port, path), default (None:
    required, except for durations) and meaning."""
    type: str
    default: Any
    help: str = ""
    choices: tuple = ()                 # the values a "str" key may take (empty: any)


@dataclass(frozen=True)
class Where:
    """Where a source collects: the cluster's name (as the warehouse and Slurm call it) and the environment its
    commands need (``SLURM_CONF`` of a cluster whose config is not the host's default)."""
    cluster: str
    env: tuple[tuple[str, str], ...] = ()

    def command(self, cmd: str) -> list[str]:
        """``cmd`` as an argument list, run through ``env NAME=VALUE`` when the cluster sets variables."""
        args = shlex.split(cmd)
        return (["env", *(f"{k}={v}" for k, v in self.env)] if self.env else []) + args


@dataclass(frozen=True)
class SourceKind:
    name: str
    collect: Callable[[duckdb.DuckDBPyConnection, Where, dict], dict]
    interval: str                       # default interval between collections
    keys: dict[str, Key] = field(default_factory=dict)
    scope: str = "cluster"              # "cluster": under [[clusters]]; "global": a top-level table
    watermark: str | None = None        # its ``watermarks.source``: the time up to which its data is complete


def run_command(argv: list[str], timeout_s: int) -> tuple[bytes, str]:
    """(stdout, the command line as a name) of a scheduler command; a missing command, a non-zero exit or a
    timeout is an InputError in one line (its first stderr line) naming the command line."""
    name = " ".join(argv)
    return inputs.run_command(argv, timeout_s, name), name


# ---------------------------------------------------------------- the kinds

TIMEOUT = Key("duration", 300, "seconds a command or request may take before the collection fails")


#: Seconds of sacct windows per collection during a catch-up.
SACCT_BUDGET_S = 120


def collect_sacct(con, where: Where, opts: dict) -> dict:
    """`ingest sacct --live`: sacct from the cluster's watermark (minus sacct_live.LIVE_OVERLAP_S) to now in windows,
    then the open jobs they left out by id; the counts are every run's. A catch-up longer than SACCT_BUDGET_S
    goes on in the next collection (due at once), so the cycle refreshes and publishes what it has meanwhile."""
    cmd = " ".join(where.command(opts["command"]))      # ingest_live splits it at spaces
    sdiag = " ".join(where.command(opts["sdiag"])) if opts["sdiag"].strip() else None
    return sacct_live.ingest_live(con, sacct.SacctOptions(cluster=where.cluster), sacct_cmd=cmd,
                                  timeout_s=opts["timeout"], sdiag_cmd=sdiag, window_s=opts["window"],
                                  budget_s=SACCT_BUDGET_S)


def collect_nodes(con, where: Where, opts: dict) -> dict:
    """`ingest nodes`: a `scontrol show node -o` (or sinfo) snapshot as of now."""
    data, name = run_command(where.command(opts["command"]), opts["timeout"])
    return slurm_nodes.ingest_bytes(con, data, name, fmt=opts["format"], cluster=where.cluster,
                                    retire_missing=opts["retire_missing"])


def collect_events(con, where: Where, opts: dict) -> dict:
    """`ingest events`: `sacctmgr -P show event` (the merge makes re-reading known events a no-op)."""
    data, name = run_command(where.command(opts["command"]), opts["timeout"])
    return slurm_events.ingest_bytes(con, data, name, cluster=where.cluster)


def collect_squeue(con, where: Where, opts: dict) -> dict:
    """`ingest squeue --live`: one snapshot of the queue as of now (UTC), in the format gpuledger fixes
    (squeue.LIVE_FORMAT); each pending job's reason holds until the next snapshot (docs/METRICS.md)."""
    at = warehouse.utcnow().replace(microsecond=0)
    argv = ["env", "SLURM_TIME_FORMAT=standard", *where.command(opts["command"]),
            "--all", "--array", "--Format", squeue.LIVE_FORMAT]
    data, name = run_command(argv, opts["timeout"])
    return squeue.load(con, data, at, name, cluster=where.cluster, tz="UTC")


def collect_reservations(con, where: Where, opts: dict) -> dict:
    """`ingest reservations`: the reservations `scontrol show reservation -o` lists now (owner, nodes, GPUs)."""
    data, name = run_command(["env", "SLURM_TIME_FORMAT=standard", *where.command(opts["command"])],
                             opts["timeout"])
    return reservations.load(con, data, name, cluster=where.cluster, tz="UTC")


def collect_job_gpus(con, where: Where, opts: dict) -> dict:
    """`ingest job-gpus --live`: the GPUs each job slurmctld remembers holds (`scontrol -d -o show job`); a job
    the warehouse does not hold yet is skipped and read again at the next collection (collect sacct first)."""
    data, name = run_command(["env", "SLURM_TIME_FORMAT=standard", *where.command(opts["command"])],
                             opts["timeout"])
    return job_gpus.load(con, data, name, cluster=where.cluster, tz="UTC", live=True)


def prometheus_window(mark: dt.datetime | None, now: dt.datetime, opts: dict) -> tuple[dt.datetime, dt.datetime]:
    """The next pull [start, end], both on the step grid: from the watermark minus ``overlap`` (the first time:
    ``lookback`` before now) to the last step boundary before now, but at most ``max_window`` (at least one step)
    past the watermark, so that each pull advances and a catch-up goes in bounded windows."""
    step = opts["step"]

    def floor(t: dt.datetime) -> dt.datetime:
        epoch = int(t.replace(tzinfo=dt.timezone.utc).timestamp())
        return dt.datetime.fromtimestamp(epoch - epoch % step, dt.timezone.utc).replace(tzinfo=None)
    start = floor(mark - dt.timedelta(seconds=opts["overlap"]) if mark else now - dt.timedelta(seconds=opts["lookback"]))
    ahead = dt.timedelta(seconds=max(step, opts["max_window"]))
    end = min(floor(now), floor((mark or start) + ahead))
    return start, max(start, end)


def collect_prometheus(con, where: Where, opts: dict) -> dict:
    """`ingest prometheus` over the next window (:func:`prometheus_window`); the watermark moves to its end once
    loaded. Readings merge per device-minute, so the overlap re-read counts nothing twice."""
    start, end = prometheus_window(warehouse.get_watermark(con, "prometheus", where.cluster), warehouse.utcnow(), opts)
    q = prometheus.QueryOptions(url=opts["url"], start=start, end=end, step_s=opts["step"], match=opts["match"] or None,
                                metrics=tuple(opts["metrics"]) or tuple(telemetry_store.METRICS),
                                timeout_s=float(opts["timeout"]), retries=opts["retries"])
    topts = telemetry_store.TelemetryOptions(cluster=where.cluster, keep_raw_days=opts["keep_raw_days"] or None)
    summary = prometheus_pushdown.ingest(con, q, topts, opts["aggregate"]) if opts.get("aggregate") else \
        prometheus.ingest(con, q, topts)
    warehouse.set_watermark(con, "prometheus", where.cluster, end)
    summary["more"] = (warehouse.utcnow() - end).total_seconds() >= 2 * opts["step"]   # still catching up
    return summary


def collect_governance(con, where: Where, opts: dict) -> dict:
    """`ingest governance`, only when the file's content differs from the last one loaded (by SHA-256)."""
    path = Path(opts["path"])
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    last = con.execute("SELECT sha256 FROM ingest_runs WHERE source = 'governance' AND status = 'ok' "
                       "ORDER BY run_id DESC LIMIT 1").fetchall()
    if last and last[0][0] == hashlib.sha256(data).hexdigest():
        return {"run_id": None, "loaded": 0, "skipped": 0, "rejected": 0, "unchanged_file": True}
    return governance.ingest_path(con, path)


#: Every kind the collector knows, by the name its config table and status rows use.
KINDS: dict[str, SourceKind] = {
    "sacct": SourceKind("sacct", collect_sacct, "5m", {
        "command": Key("str", "sacct", "the sacct command (gpuledger adds its own options)"),
        "sdiag": Key("str", "sdiag", "the sdiag command: while its 'DBD Agent queue size' is not 0 (or it cannot "
                     "say) the watermark stays, since slurmctld has records that slurmdbd will get late; \"\" not "
                     "to ask"),
        "window": Key("duration", sacct_live.WINDOW_S, "the span of a catch-up's first sacct read (later ones sized "
                      "by the lines read; a span slurmdbd's MaxQueryTimeRange refuses is halved by itself)"),
        "timeout": Key("duration", 900, TIMEOUT.help)}, watermark="sacct-live"),
    "nodes": SourceKind("nodes", collect_nodes, "15m", {
        "command": Key("str", "scontrol show node -o", "`scontrol show node [-o]`, an sinfo command with Gres, or "
                       "one printing a JSON node list (scontrol show nodes --json, slurmrestd /slurm/.../nodes)"),
        "format": Key("str", "auto", "auto, scontrol, sinfo or json", choices=slurm_nodes.FORMATS),
        "retire_missing": Key("bool", False, "nodes absent from a snapshot leave the inventory"),
        "timeout": TIMEOUT}),
    "events": SourceKind("events", collect_events, "15m", {
        "command": Key("str", "sacctmgr -P show event All_Time", "sacctmgr event listing, -P with its header"),
        "timeout": TIMEOUT}),
    "squeue": SourceKind("squeue", collect_squeue, "5m", {
        "command": Key("str", "squeue", "the squeue command (gpuledger adds --all --array --Format ...)"),
        "timeout": Key("duration", 120, TIMEOUT.help)}),
    "reservations": SourceKind("reservations", collect_reservations, "15m", {
        "command": Key("str", "scontrol show reservation -o", "`scontrol show reservation [-o]`"),
        "timeout": TIMEOUT}),
    "job-gpus": SourceKind("job-gpus", collect_job_gpus, "5m", {
        "command": Key("str", "scontrol -d -o show job", "`scontrol -d show job [-o]` (-d prints the GPU indices)"),
        "timeout": TIMEOUT}),
    "prometheus": SourceKind("prometheus", collect_prometheus, "5m", {
        "url": Key("str", None, "Prometheus base URL (credentials from $GPULEDGER_PROM_TOKEN or "
                                "$GPULEDGER_PROM_USER/$GPULEDGER_PROM_PASSWORD)"),
        "metrics": Key("strings", [], "DCGM metrics to pull (default: every one gpuledger uses)"),
        "match": Key("str", "", 'extra label matchers, e.g. {cluster="alpha"}'),
        "step": Key("duration", 60, "query resolution (stored rows are >= 1 minute)"),
        "lookback": Key("duration", 3600, "how far back the first pull reaches"),
        "overlap": Key("duration", 300, "re-read before the watermark (late scrapes)"),
        "max_window": Key("duration", 6 * 3600, "at most this far past the watermark per collection (catch-up in steps)"),
        "retries": Key("int", 1, "retries of a transient HTTP failure inside one collection"),
        "keep_raw_days": Key("int", 0, "prune raw rows older than N days after loading (0: keep)"),
        "aggregate": Key("duration", None, "push-down: per-GPU aggregates per this interval, e.g. 5m (unset: raw pull)"),
        "timeout": Key("duration", 60, "seconds per HTTP request")}, watermark="prometheus"),
    "governance": SourceKind("governance", collect_governance, "1m", {
        "path": Key("path", None, "the governance TOML; reloaded when its content changes")}, scope="global"),
}
