"""GPU telemetry of the synthetic cluster, written as DCGM-exporter OpenMetrics (what a Prometheus export gives).

Every GPU reports every ``telemetry_step_s`` over the last ``telemetry_days`` days, except while its node is
down (the exporter is down with it). A GPU running a job reads its job's activity: the team's typical SM
activity for that job, a slow start while data loads, noise, half-hour stretches near zero for jobs that stall
on data, and near zero throughout for jobs that merely hold GPUs (notebooks, simulators that run on CPUs).
Series carry the labels dcgm-exporter sets (gpu, UUID, device, modelName, Hostname) and, on a GPU in use,
``hpc_job`` as dcgm-exporter's HPC job mapping writes it.

Reliability evidence (docs/DEMO.md, "Failures, XIDs and slow nodes"): a few *slow nodes* (:data:`SLOW_NODE_SHARE`
of the nodes, chosen by a hash so no random stream of the year moves) run every job at :data:`SLOW_FACTOR` of
its activity and power above idle; ``DCGM_FI_DEV_XID_ERRORS`` reads 0, except on one GPU of a node in the
:data:`XID_LEAD_S` before a hardware failure whose reason names a GPU fault (Xid 79, Xid 48, ECC, NVLink:
the XID that reason stands for), on a failing job's GPUs in its last reading for a share of failed jobs
(application XIDs 13/31/43), and rarely a row-remapping XID 63 that kills nothing. One file per day keeps memory bounded; values are
computed with numpy and the text is built with Polars.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
import numpy as np
import polars as pl

from models.demo import faults
from models.demo.config import GPUS_PER_NODE
from models.demo.generate import Synthetic
from models.demo.scheduler import STATES

_FAILED = STATES.index("FAILED")

METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
)
#: Share of nodes that are slow (a degraded NIC or cooling: its GPUs wait), and how much of a job's activity
#: and power above idle they reach.
SLOW_NODE_SHARE, SLOW_FACTOR = 0.05, 0.55
#: The XID a hardware failure's reason stands for (faults.DOWN_REASONS); others name no GPU fault.
REASON_XID = {"GPU Xid 79: fallen off the bus": 79, "NHC: ECC uncorrectable errors on GPU": 48,
              "GPU Xid 48: double bit ECC error": 48, "NVLink error": 74}
XID_LEAD_S = 1200                # the XID is read in the readings this long before the node goes down
APP_XID_SHARE = 0.3              # failed jobs whose last reading carries an application XID
APP_XIDS = (13, 31, 43)
REMAP_XID_PER_GPU_DAY = 0.002    # XID 63 (row remapping) per GPU and day, harmless
DRIVER = "550.54.15"
IDLE_W = {"h100": 72.0, "a100": 56.0}


def gpu_uuid(cluster: str, node: str, gpu: int) -> str:
    h = hashlib.sha1(f"{cluster}/{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A cheap deterministic hash of two integer arrays to [0, 1)."""
    x = (a.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (b.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9))
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(29)
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def slow_nodes(n_nodes: int) -> np.ndarray:
    """Node indices of the slow nodes (a hash of the index: the same nodes at every build of a layout)."""
    return np.nonzero(_mix(np.arange(n_nodes), np.full(n_nodes, 7919)) < SLOW_NODE_SHARE)[0]


def _xids(syn: "Synthetic", gg: np.ndarray, t: np.ndarray, i: np.ndarray, busy: np.ndarray, step: int) -> np.ndarray:
    """The XID each reading carries (0 = none): before GPU-fault failures, at failed jobs' ends, rare remaps."""
    xid = np.zeros(len(gg), np.int64)
    o = syn.outages
    down = np.nonzero(o.kind == faults.DOWN)[0]
    down = down[(o.start[down] > t.min(initial=0)) & (o.start[down] - XID_LEAD_S <= t.max(initial=0))]
    codes = np.array([REASON_XID.get(faults.DOWN_REASONS[r], 0) for r in o.reason[down]], np.int64)
    for n, s, c in zip(o.node[down][codes > 0], o.start[down][codes > 0], codes[codes > 0]):
        g = n * GPUS_PER_NODE + int(_mix(np.array([n]), np.array([s]))[0] * GPUS_PER_NODE)
        xid[(gg == g) & (t >= s - XID_LEAD_S) & (t < s)] = c
    inst = syn.inst
    ii = np.maximum(i, 0)
    last = busy & (inst.end[ii] > 0) & (t + step >= inst.end[ii]) & (inst.state[ii] == _FAILED)
    pick = _mix(inst.job[ii], inst.start[ii]) < APP_XID_SHARE
    app = last & pick                    # every GPU of the failing job reports it in its last reading
    xid[app] = np.array(APP_XIDS)[(_mix(inst.job[ii[app]], np.full(app.sum(), 3)) * len(APP_XIDS)).astype(int)]
    remap = (xid == 0) & (_mix(gg, t // 86400 + 17) < REMAP_XID_PER_GPU_DAY) & (t % 86400 < step)
    xid[remap] = 63
    return xid


def day_samples(syn: "Synthetic", d0: int, step: int, per_day: int) -> pl.DataFrame:
    """One row per (GPU, sample time) in [d0, d0 + per_day * step) with the values every metric reports."""
    inst, jobs, lay = syn.inst, syn.jobs, syn.layout
    ngpu = len(lay) * GPUS_PER_NODE
    times = d0 + np.arange(per_day, dtype=np.int64) * step
    occ = np.full((ngpu, per_day), -1, np.int64)
    start = inst.start[inst.gpu_inst]
    end = np.where(inst.end[inst.gpu_inst] < 0, syn.t_end, inst.end[inst.gpu_inst])
    k_lo = np.clip(-((d0 - start) // step), 0, per_day)           # ceil((start - d0) / step)
    k_hi = np.clip(-((d0 - end) // step), 0, per_day)
    sel = (start >= 0) & (k_hi > k_lo)
    lens = (k_hi - k_lo)[sel]
    g = (inst.gpu_node[sel].astype(np.int64) * GPUS_PER_NODE + inst.gpu_index[sel])
    rows = np.repeat(np.arange(len(lens)), lens)
    k = np.repeat(k_lo[sel], lens) + (np.arange(len(rows)) - np.repeat(np.cumsum(lens) - lens, lens))
    occ[np.repeat(g, lens), k] = inst.gpu_inst[sel][rows]
    present = (lay.since[:, None] <= times[None, :])
    o = syn.outages
    for n, s, e in zip(o.node[o.kind == faults.DOWN], o.start[o.kind == faults.DOWN], o.end[o.kind == faults.DOWN]):
        if s < times[-1] + step and e > d0:
            present[n, (times >= s) & (times < e)] = False
    present = np.repeat(present, GPUS_PER_NODE, axis=0)
    gg, kk = np.nonzero(present)
    i = occ[gg, kk]
    busy = i >= 0
    j = np.where(busy, inst.job[np.maximum(i, 0)], 0)
    t = times[kk]
    jid = jobs.job_id[j]
    since_start = t - np.where(busy, inst.start[np.maximum(i, 0)], t)
    noise = _mix(gg, t) - 0.5
    sm = jobs.util[j] * np.where(since_start < 600, 0.25, 1.0) + 0.12 * noise
    stall = jobs.stall[j] & (_mix(jid, t // 1800) < 0.45)   # half-hour stretches waiting on data
    sm = np.where(stall, 0.02 + 0.02 * (noise + 0.5), sm)
    burst = jobs.idle[j] & (_mix(jid, t // 600) < 0.04)
    sm = np.where(burst, 0.45, sm)
    node_of = gg // GPUS_PER_NODE
    sm = np.where(np.isin(node_of, slow_nodes(len(lay))), sm * SLOW_FACTOR, sm)
    sm = np.where(busy, np.clip(sm, 0.0, 0.99), 0.0)
    util = np.where(sm > 0.005, np.minimum(100.0, np.round(100 * (sm + (1 - sm) * 0.45))), 0.0)
    node = gg // GPUS_PER_NODE
    pool = lay.pool[node]
    fb_total = np.array([p.fb_mib for p in syn.cfg.pools])[pool]
    fb_frac = np.where(jobs.idle[j], 0.05 + 0.2 * _mix(jid, jid), 0.35 + 0.6 * _mix(jid, jid + 7))
    fb = np.where(busy, np.round(fb_total * fb_frac * (0.97 + 0.03 * (noise + 0.5))), 0.0)
    idle_w = np.array([IDLE_W.get(p.name, 60.0) for p in syn.cfg.pools])[pool]
    tdp = np.array([p.tdp_w for p in syn.cfg.pools])[pool]
    power = np.round(idle_w + (tdp - idle_w) * sm ** 0.9 + 3 * noise, 3)
    return pl.DataFrame({"g": gg.astype(np.int32), "t": t, "job": np.where(busy, jid, -1), "util": util,
                         "sm": np.round(sm, 4), "fb": fb, "power": power, "xid": _xids(syn, gg, t, i, busy, step)})


def _prefixes(syn: "Synthetic", metric: str) -> pl.Series:
    lay, cfg = syn.layout, syn.cfg
    out = []
    for n, name in enumerate(lay.names):
        model = cfg.pools[lay.pool[n]].model
        for x in range(GPUS_PER_NODE):
            out.append(f'{metric}{{gpu="{x}",UUID="{gpu_uuid(cfg.cluster, name, x)}",device="nvidia{x}",'
                       f'modelName="{model}",Hostname="{name}",DCGM_FI_DRIVER_VERSION="{DRIVER}"')
    return pl.Series(out)


def write_openmetrics(syn: "Synthetic", outdir: Path) -> list[Path]:
    """One OpenMetrics file per day of the telemetry window; returns the paths in time order."""
    cfg = syn.cfg
    step = cfg.telemetry_step_s
    per_day = 86400 // step
    first = max(syn.t0, syn.t_end - cfg.telemetry_days * 86400)
    first -= first % step
    prefixes = {m: _prefixes(syn, m) for m, _ in METRICS}
    paths = []
    d0 = first
    while d0 < syn.t_end:
        n = min(per_day, -(-(syn.t_end - d0) // step))
        df = day_samples(syn, d0, step, n)
        chunks = []
        for metric, help_text in METRICS:
            col = {"DCGM_FI_DEV_GPU_UTIL": "util", "DCGM_FI_PROF_SM_ACTIVE": "sm", "DCGM_FI_DEV_FB_USED": "fb",
                   "DCGM_FI_DEV_POWER_USAGE": "power", "DCGM_FI_DEV_XID_ERRORS": "xid"}[metric]
            value = pl.col(col).cast(pl.Int64).cast(pl.String) if col in ("util", "fb", "xid") else pl.col(col).cast(pl.String)
            lines = df.select(pl.concat_str([
                prefixes[metric].gather(df["g"]),
                pl.when(pl.col("job") >= 0).then(pl.concat_str([pl.lit(',hpc_job="'), pl.col("job").cast(pl.String),
                                                                 pl.lit('"')])).otherwise(pl.lit("")),
                pl.lit("} "), value, pl.lit(" "), pl.col("t").cast(pl.String)]).alias("line"))["line"]
            chunks.append(f"# HELP {metric} {help_text}\n# TYPE {metric} gauge\n")
            chunks.append(lines.str.join("\n").item() + "\n")
        path = outdir / f"dcgm-{d0}.om"
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(chunks)
            fh.write("# EOF\n")
        paths.append(path)
        d0 += per_day * step
    return paths
