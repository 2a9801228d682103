"""Write the synthetic cluster's inventory, outages and reservations as ``scontrol show node -o``, ``sacctmgr show
event`` and ``scontrol show reservation -o``.

Node snapshots report each node's state at the snapshot time as slurmctld would (IDLE / MIXED / ALLOCATED,
``+DRAIN`` while drained, DOWN with its reason), with Gres, CfgTRES and AllocTRES as Slurm 22.05 prints them.
The event listing is ``TZ=UTC sacctmgr -P show event All_Time`` with its default columns, as the real Slurm in
tests/fixtures/slurm_real/sacctmgr-event.psv prints them: cluster-level rows ("Cluster Registered TRES": at the
start and at the capacity addition) and one row per node DOWN or DRAIN period, End ``Unknown`` while open.
"""
from __future__ import annotations

import datetime as dt

import numpy as np

from ingest import hostlist
from models.demo import faults
from models.demo.config import GPUS_PER_NODE, Config
from models.demo.faults import Outages
from models.demo.layout import Layout
from models.demo.reservation_plan import Reservation
from models.demo.scheduler import Instances

EVENT_HEADER = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"   # as Slurm 22.05 prints it
ADMIN_UIDS = {"root": 0, "slurm": 64030, "opsadmin": 1050}


def iso(t: int) -> str:
    return dt.datetime.fromtimestamp(int(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def gpus_in_use(layout: Layout, inst: Instances, t: int) -> np.ndarray:
    """GPUs allocated on each node at time t (UTC epoch s)."""
    start = inst.start[inst.gpu_inst]
    end = inst.end[inst.gpu_inst]
    live = (start >= 0) & (start <= t) & ((end < 0) | (end > t))
    return np.bincount(inst.gpu_node[live], minlength=len(layout))


def _out_at(outages: Outages, t: int, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node: outage kind at t (-1 none) and the outage row index."""
    kind = np.full(n_nodes, -1)
    row = np.full(n_nodes, -1)
    live = np.flatnonzero((outages.start <= t) & (outages.end > t))
    kind[outages.node[live]] = outages.kind[live]
    row[outages.node[live]] = live
    return kind, row


def scontrol_nodes(cfg: Config, layout: Layout, inst: Instances, outages: Outages, t: int) -> bytes:
    """``scontrol show node -o`` as printed at time t: nodes that have joined by then, one line each."""
    used = gpus_in_use(layout, inst, t)
    kind, row = _out_at(outages, t, len(layout))
    lines = []
    for n, name in enumerate(layout.names):
        if layout.since[n] > t:
            continue
        pool = cfg.pools[layout.pool[n]]
        g = int(used[n])
        cpus_alloc = min(pool.cpus, g * (pool.cpus // GPUS_PER_NODE))
        mem_alloc = g * (pool.mem_mib // GPUS_PER_NODE)
        base = "IDLE" if g == 0 else "ALLOCATED" if g == GPUS_PER_NODE else "MIXED"
        reason = ""
        if kind[n] == faults.DOWN:
            state = "DOWN"
            r = row[n]
            reason = f" Reason={faults.DOWN_REASONS[outages.reason[r]]} [root@{iso(outages.start[r])}]"
        elif kind[n] == faults.DRAIN:
            r = row[n]
            state = f"{base}+DRAIN"
            reason = (f" Reason={faults.DRAIN_REASONS[outages.reason[r]]} "
                      f"[{faults.ADMINS[outages.user[r]]}@{iso(outages.start[r])}]")
        else:
            state = base
        gtype = pool.name
        feats = f"{pool.name},ib,nvlink"
        boot = iso(max(int(layout.since[n]) - 3 * 86400, 0))
        lines.append(
            f"NodeName={name} Arch=x86_64 CoresPerSocket={pool.cpus // 4} CPUAlloc={cpus_alloc} "
            f"CPUEfctv={pool.cpus} CPUTot={pool.cpus} CPULoad={cpus_alloc * 0.93:.2f} AvailableFeatures={feats} "
            f"ActiveFeatures={feats} Gres=gpu:{gtype}:{GPUS_PER_NODE}(S:0-1) NodeAddr={name} NodeHostName={name} "
            f"Version=22.05.8 OS=Linux 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023 "
            f"RealMemory={pool.mem_mib} AllocMem={mem_alloc} FreeMem={pool.mem_mib - mem_alloc} Sockets=2 Boards=1 "
            f"State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
            f"Partitions={layout.partitions[n]} BootTime={boot} SlurmdStartTime={boot} LastBusyTime={iso(t)} "
            f"CfgTRES=cpu={pool.cpus},mem={pool.mem_mib}M,billing={pool.cpus},gres/gpu={GPUS_PER_NODE},"
            f"gres/gpu:{gtype}={GPUS_PER_NODE} "
            f"AllocTRES=" + (f"cpu={cpus_alloc},mem={mem_alloc}M,gres/gpu={g},gres/gpu:{gtype}={g}" if g else "")
            + f" CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
            + reason)
    return ("\n".join(lines) + "\n").encode()


def sacctmgr_events(cfg: Config, layout: Layout, outages: Outages, t0: int, t_add: int, t_export: int) -> bytes:
    """``sacctmgr -P show event All_Time`` as printed at ``t_export``."""
    lines = [EVENT_HEADER]
    before = sum(1 for s in layout.since if s <= t0)
    lines.append(f"{cfg.cluster}||{iso(t0)}|{iso(t_add) if t_add < t_export else 'Unknown'}||Cluster Registered TRES|")
    if t_add < t_export and before < len(layout.names):
        lines.append(f"{cfg.cluster}||{iso(t_add)}|Unknown||Cluster Registered TRES|")
    for n, k, s, e, r, u in zip(outages.node.tolist(), outages.kind.tolist(), outages.start.tolist(),
                                outages.end.tolist(), outages.reason.tolist(), outages.user.tolist()):
        if s >= t_export:
            continue
        end = iso(e) if e <= t_export else "Unknown"
        if k == faults.DOWN:
            state, reason, user = "DOWN", faults.DOWN_REASONS[r], "root"
        else:
            state, reason, user = "DRAIN", faults.DRAIN_REASONS[r], faults.ADMINS[u]
        lines.append(f"{cfg.cluster}|{layout.names[n]}|{iso(s)}|{end}|{state}|{reason}|{user}({ADMIN_UIDS[user]})")
    return ("\n".join(lines) + "\n").encode()


def _duration(seconds: int) -> str:
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    return (f"{d}-" if d else "") + f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}"


def scontrol_reservation(cfg: Config, layout: Layout, res: Reservation) -> bytes:
    """``TZ=UTC scontrol show reservation -o`` taken while ``res`` is active: one line as Slurm 22.05 prints it
    (tests/fixtures/slurm_waiting/scontrol-show-reservation-o.txt): whole nodes named, so TRES lists only the
    cores and Flags SPEC_NODES; owned by the team's account."""
    cores = cfg.pools[res.pool].cpus * len(res.nodes)
    nodes = hostlist.compress([layout.names[n] for n in res.nodes])
    line = (f"ReservationName={res.name} StartTime={iso(res.start)} EndTime={iso(res.end)} "
            f"Duration={_duration(res.end - res.start)} Nodes={nodes} NodeCnt={len(res.nodes)} CoreCnt={cores} "
            f"Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu={cores} Users=(null) "
            f"Groups=(null) Accounts={cfg.teams[res.team].account} Licenses=(null) State=ACTIVE "
            f"BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)")
    return (line + "\n").encode()
