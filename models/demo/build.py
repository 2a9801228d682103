"""Build a warehouse from the synthetic cluster through the real ingest path.

``generate`` samples the workload, node outages and runs the scheduler. ``write_inputs`` writes what a site
would hand us (governance.toml, ``scontrol show node -o`` snapshots, monthly ``sacct -P`` exports,
``sacctmgr show event``, ``scontrol show reservation -o`` taken while each reservation was active, DCGM exporter
OpenMetrics, ``squeue --iterate`` logs). ``load_inputs`` ingests them with
the same functions ``gpuledger ingest ...`` calls. ``build`` does all of it into a temporary file, refreshes the
marts and swaps the finished warehouse in by rename, so an interrupted build leaves the previous one intact.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ingest import (dcgm, governance, plausible, reservations, sacct, slurm_events, slurm_nodes, squeue,
                    telemetry_store, warehouse)
from models.demo import governance_writer, sacct_writer, slurm_writers, squeue_writer, telemetry
from models.demo.config import GENERATOR_VERSION, GPUS_PER_NODE, Config
from models.demo.generate import Progress, Synthetic, generate, month_windows
from models.pipeline import refresh as refresh_mod

#: Sources whose changes invalidate a built demo or benchmark warehouse.
CODE_FILES = ("models/demo/*.py", "ingest/sacct.py", "ingest/jobs_store.py", "ingest/slurm_sql.py",
              "ingest/hostlist.py", "ingest/slurm_nodes.py", "ingest/slurm_events.py", "ingest/governance.py",
              "ingest/dcgm.py", "ingest/telemetry_store.py", "ingest/squeue.py", "ingest/reservations.py",
              "ingest/warehouse/*.py",
              "ingest/warehouse/migrations/*.sql")
ROOT = Path(__file__).resolve().parents[2]


def code_version() -> str:
    """A short hash of the generator and ingestor sources (and GENERATOR_VERSION)."""
    h = hashlib.sha256(str(GENERATOR_VERSION).encode())
    for pattern in CODE_FILES:
        for p in sorted(ROOT.glob(pattern)):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


@dataclass
class Inputs:
    """Files written for one build, in the order they are ingested."""
    governance: Path
    nodes: list[tuple[Path, str]]     # (file, --as-of)
    sacct: list[Path]
    events: Path
    reservations: list[Path]                  # `scontrol show reservation -o`, one per reservation
    dcgm: list[Path]
    squeue: list[Path]                        # `squeue --iterate` logs, one per day


def write_inputs(syn: Synthetic, outdir: Path, progress: Progress | None = None) -> Inputs:
    say = progress or (lambda _m: None)
    cfg = syn.cfg
    outdir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    gov = outdir / "governance.toml"
    d_add = dt.datetime.fromtimestamp(syn.t_add, dt.timezone.utc).date()
    price_cut = dt.date(d_add.year + (d_add.month == 12), d_add.month % 12 + 1, 1)
    gov.write_text(governance_writer.governance_toml(cfg, price_cut), encoding="utf-8")
    nodes = []
    for label, when in (("start", syn.t0), ("capacity-added", syn.t_add), ("end", syn.t_end)):
        p = outdir / f"scontrol-show-node-{label}.txt"
        p.write_bytes(slurm_writers.scontrol_nodes(cfg, syn.layout, syn.inst, syn.outages, when))
        nodes.append((p, slurm_writers.iso(when)))
    frame = sacct_writer.instance_frame(cfg, syn.jobs, syn.users, syn.layout, syn.inst, syn.reservations)
    exports = []
    for a, b in month_windows(syn.t0, syn.t_end):
        p = outdir / f"sacct-{dt.datetime.fromtimestamp(a, dt.timezone.utc):%Y-%m}.psv"
        p.write_bytes(sacct_writer.export(frame, cfg.cluster, a, b, steps=cfg.job_steps,
                                          reservation=bool(cfg.reservations)))
        exports.append(p)
    events = outdir / "sacctmgr-show-event.psv"
    events.write_bytes(slurm_writers.sacctmgr_events(cfg, syn.layout, syn.outages, syn.t0, syn.t_add, syn.t_end))
    resv = []
    for r in syn.reservations:
        p = outdir / f"scontrol-show-reservation-{r.name}.txt"
        p.write_bytes(slurm_writers.scontrol_reservation(cfg, syn.layout, r))
        resv.append(p)
    dcgm_files = telemetry.write_openmetrics(syn, outdir) if cfg.telemetry_days > 0 else []
    queue = (squeue_writer.write_logs(frame, cfg.cluster, max(syn.t0, syn.t_end - cfg.squeue_days * 86400),
                                      syn.t_end, outdir) if cfg.squeue_days > 0 else [])
    syn.seconds["write"] = time.perf_counter() - t
    size = sum(p.stat().st_size for p in outdir.iterdir()) / 1e6
    say(f"wrote {len(exports)} sacct exports, {len(nodes)} node snapshots, events, {len(resv)} reservations, "
        f"{len(dcgm_files)} DCGM files, {len(queue)} squeue logs, governance ({size:,.0f} MB, "
        f"{syn.seconds['write']:.1f} s)")
    return Inputs(gov, nodes, exports, events, resv, dcgm_files, queue)


def load_inputs(con, syn: Synthetic, inputs: Inputs, progress: Progress | None = None) -> list[dict]:
    """Ingest the written files with the real ingestors (the code `gpuledger ingest ...` runs), with the
    plausibility window reaching the synthetic period's end: a benchmark year may run ahead of the clock."""
    end = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=syn.t_end + 2 * 86400)
    with plausible.replaying(f"2000-01-01..{end:%Y-%m-%dT%H:%M:%S}"):
        return _load_inputs(con, syn, inputs, progress)


def _load_inputs(con, syn: Synthetic, inputs: Inputs, progress: Progress | None) -> list[dict]:
    say = progress or (lambda _m: None)
    t = time.perf_counter()
    cluster = syn.cfg.cluster
    out = [governance.ingest_path(con, inputs.governance)]
    for path, as_of in inputs.nodes:
        out.append(slurm_nodes.ingest_path(con, str(path), fmt="scontrol", cluster=cluster, as_of=as_of))
    opts = sacct.SacctOptions(cluster=cluster, tz="UTC")
    for path in inputs.sacct:
        out.append(sacct.ingest_path(con, str(path), opts))
    out.append(slurm_events.ingest_path(con, str(inputs.events), cluster=cluster, tz="UTC"))
    for path in inputs.reservations:
        out.append(reservations.ingest_path(con, str(path), cluster=cluster, tz="UTC"))
    topts = telemetry_store.TelemetryOptions(cluster=cluster, interval_s=syn.cfg.telemetry_step_s)
    for path in inputs.dcgm:
        out.append(dcgm.ingest_path(con, str(path), topts, fmt="openmetrics"))
    for path in inputs.squeue:
        out.append(squeue.ingest_path(con, str(path), None, cluster=cluster, tz="UTC"))
    syn.seconds["ingest"] = time.perf_counter() - t
    read = sum(s.get("read", 0) for s in out)
    rejected = sum(s.get("rejected", 0) for s in out)
    say(f"ingested {len(out)} inputs, {read:,} lines, {rejected} rejected ({syn.seconds['ingest']:.1f} s)")
    return out


def config_json(cfg: Config) -> str:
    return json.dumps(dataclasses.asdict(cfg), default=str, sort_keys=True)


def record_build(con, syn: Synthetic, seconds: float | None) -> None:
    cfg = syn.cfg
    conf = config_json(cfg)
    gpus = sum(p.nodes + p.added for p in cfg.pools) * GPUS_PER_NODE
    con.execute("INSERT INTO synthetic_builds VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
        dt.datetime.now(dt.timezone.utc).replace(tzinfo=None), cfg.cluster, cfg.seed, cfg.scale, GENERATOR_VERSION,
        code_version(), dt.datetime.fromtimestamp(syn.t0, dt.timezone.utc).replace(tzinfo=None),
        dt.datetime.fromtimestamp(syn.t_end, dt.timezone.utc).replace(tzinfo=None), len(syn.layout), gpus,
        len(syn.jobs), len(syn.inst), conf, seconds])


def build_stamp(db_path: Path) -> dict | None:
    """(seed, scale, code_version) of the last synthetic build in ``db_path``, or None."""
    if not Path(db_path).exists():
        return None
    try:
        con = duckdb.connect(str(db_path), read_only=True)
    except duckdb.Error:
        return None
    try:
        rows = con.execute("SELECT seed, scale, code_version, cluster, config FROM synthetic_builds "
                           "ORDER BY built_at DESC LIMIT 1").fetchall()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return dict(zip(("seed", "scale", "code_version", "cluster", "config"), rows[0])) if rows else None


def is_up_to_date(db_path: Path, cfg: Config) -> bool:
    """True when ``db_path`` holds a build of exactly this configuration by exactly this code."""
    stamp = build_stamp(db_path)
    return bool(stamp) and stamp["config"] == config_json(cfg) and stamp["code_version"] == code_version()


def build(db_path: Path, cfg: Config, workdir: Path | None = None, progress: Progress | None = None,
          refresh: bool = True, keep_inputs: bool = False) -> dict:
    """Generate, write, ingest and refresh into a temporary warehouse, then rename it over ``db_path``.

    The serving snapshot is published for the final path. Returns timings (seconds) and counts.
    """
    say = progress or (lambda _m: None)
    t_all = time.perf_counter()
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_db = db_path.with_name(f"{db_path.name}.tmp-build{os.getpid()}")
    for p in (tmp_db, Path(str(tmp_db) + ".wal")):
        p.unlink(missing_ok=True)
    own_dir = workdir is None
    if not own_dir:
        work = Path(workdir)
    elif keep_inputs:   # data/demo.duckdb -> data/demo/inputs (git-ignored)
        work = db_path.parent / db_path.stem / "inputs"
        shutil.rmtree(work, ignore_errors=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="gpuledger-synthetic-"))
    try:
        syn = generate(cfg, say)
        inputs = write_inputs(syn, work, say)
        con = warehouse.connect(tmp_db)
        try:
            load_inputs(con, syn, inputs, say)
            if refresh:
                t = time.perf_counter()
                steps = refresh_mod.run(con, tmp_db, full=True, publish=False)
                syn.seconds["refresh"] = time.perf_counter() - t
                say("refreshed marts: " + ", ".join(f"{n} {s:.1f} s" for n, s in steps))
            record_build(con, syn, time.perf_counter() - t_all)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp_db, db_path)
        Path(str(tmp_db) + ".wal").unlink(missing_ok=True)
        con = warehouse.connect(db_path)
        try:
            warehouse.publish_serving(con, db_path)
        finally:
            con.close()
    finally:
        tmp_db.unlink(missing_ok=True)
        if own_dir and not keep_inputs:
            shutil.rmtree(work, ignore_errors=True)
    syn.seconds["total"] = time.perf_counter() - t_all
    return {"db": str(db_path), "jobs": len(syn.jobs), "instances": len(syn.inst), "nodes": len(syn.layout),
            "seconds": syn.seconds, "inputs": str(work) if (keep_inputs or not own_dir) else None}
