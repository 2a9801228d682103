"""Trace-driven scheduler simulator: the public API.

    from models.simulation.simulate import Cluster, Workload, Policy, simulate
    cluster = Cluster.from_arrays(node_gpus=[8, 8], node_pool=["h100", "h100"])
    work = Workload.from_columns({"submit_s": [0, 10], "run_s": [3600, 60], "gpus_per_node": [8, 4]})
    res = simulate(cluster, work, Policy.parse("fifo-backfill"))
    res.jobs          # polars: one row per job: submit_s, start_s, end_s, wait_s, requeues, ...
    res.samples       # polars: per pool and sample time: capacity, allocated and stranded GPUs

Model (details and validation in docs/SIMULATOR.md):
- Nodes belong to one pool (GPU type) and any number of partitions; capacity is GPUs per node (fractions
  allowed for GPU-sharing traces). Times are seconds from the workload's origin (``t0`` when built from
  the warehouse); GPUs are counts; a job holds ``nnodes`` distinct nodes x ``gpus_per_node`` from start to
  start + run time (run time is clipped to the time limit, as Slurm kills a job at its limit).
- Queue: FIFO by submit, or Slurm-like multifactor priority (age, fair share 2^(-U/S) on decayed usage,
  QOS, job size), recomputed every ``prio_calc_period`` seconds. At every event the main pass starts jobs
  in queue order; a job that does not fit blocks its eligibility class (pool x partition) for the rest of
  the pass and becomes that class's head, as Slurm's main scheduler skips a partition that is blocked.
- EASY backfill (Mu'alem & Feitelson 2001, as in Slurm's sched/backfill on time limits), every
  ``bf_interval_s``: each head gets a reservation at its shadow time on specific nodes (not shared with an
  earlier head's); a later job may start now if, on every node it takes, it ends (by its time limit)
  before that node's reservation, or uses only GPUs the reservation does not need. At most
  ``bf_max_job_test`` queued jobs are tried per pass (Slurm's bf_max_job_test, default 500).
- Placement: first-fit, best-fit, random, or FGD (fragmentation gradient descent on node-level stranded
  GPUs, METRICS.md §1.2) against the workload's own size mix.
- Node events: drain (no new jobs), down (running jobs are killed and requeued), up.
- Advance reservations (``reservations``: name, start_s, end_s, nodes): while one is active only the jobs that
  name it (``reservation``) run on its nodes, and only there; no other job starts on them if its time limit
  reaches into it. A reservation's job may start whatever its limit, and is killed at the reservation's end
  (+ ``resv_over_run_s``), as Slurm 22.05 does. Whole nodes are reserved; a job names the reservation's earliest
  window not over at submit.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from models.simulation import core

PLACEMENTS = {"first-fit": core.PLACE_FIRST_FIT, "best-fit": core.PLACE_BEST_FIT,
              "random": core.PLACE_RANDOM, "fgd": core.PLACE_FGD}
QUEUES = {"fifo": core.QUEUE_FIFO, "priority": core.QUEUE_PRIORITY}
EVENT_KINDS = {"drain": core.EV_DRAIN, "down": core.EV_DOWN, "up": core.EV_UP}
DAY = 86400.0


@dataclass(frozen=True)
class Policy:
    """Scheduler configuration. Defaults follow Slurm's (bf_max_job_test=500, bf_interval=30 s,
    PriorityMaxAge=7 days, PriorityDecayHalfLife=7 days, PriorityCalcPeriod=5 min); weights are typical site
    settings. ``bf_interval_s=0`` backfills at every event. ``resv_over_run_s``: how long a job in an advance
    reservation may run past its end (Slurm's ResvOverRun, default 0: killed at the end)."""
    queue: str = "fifo"
    backfill: bool = True
    placement: str = "best-fit"
    bf_max_job_test: int = 500
    seed: int = 0
    w_age: float = 1000.0
    w_fairshare: float = 10000.0
    w_qos: float = 1000.0
    w_size: float = 0.0
    max_age_s: float = 7 * DAY
    half_life_s: float = 7 * DAY
    prio_calc_period_s: float = 300.0
    requeue_on_failure: bool = True
    sample_dt_s: float = 3600.0
    bf_interval_s: float = 30.0
    resv_over_run_s: float = 0.0

    @classmethod
    def parse(cls, name: str, **kw) -> "Policy":
        """'fifo', 'fifo-backfill', 'priority', 'priority-backfill' (optionally ':first-fit' etc.)."""
        base, _, place = name.partition(":")
        queue, _, bf = base.partition("-")
        if queue not in QUEUES or bf not in ("", "backfill"):
            raise ValueError(f"unknown policy {name!r}: use fifo, fifo-backfill, priority or priority-backfill")
        if place and place not in PLACEMENTS:
            raise ValueError(f"unknown placement {place!r}: use one of {', '.join(PLACEMENTS)}")
        kw.setdefault("placement", place or cls.placement)
        return cls(queue=queue, backfill=bf == "backfill", **kw)


@dataclass
class Cluster:
    """Nodes: GPUs per node, pool (GPU type) and partitions of each node."""
    node_gpus: np.ndarray
    node_pool: np.ndarray            # int index into ``pools``
    pools: list[str]
    node_partitions: list[frozenset[str]]
    node_names: list[str]

    @classmethod
    def from_arrays(cls, node_gpus: Sequence[float], node_pool: Sequence[str] | None = None,
                    node_partitions: Sequence[str | Sequence[str] | None] | None = None,
                    node_names: Sequence[str] | None = None) -> "Cluster":
        gpus = np.asarray(node_gpus, dtype=np.float64)
        n = gpus.size
        pool_names = list(node_pool) if node_pool is not None else ["gpu"] * n
        pools = sorted({str(p) for p in pool_names})
        pidx = np.array([pools.index(str(p)) for p in pool_names], dtype=np.int64)
        parts = []
        for v in (node_partitions if node_partitions is not None else [None] * n):
            if v is None:
                parts.append(frozenset())
            elif isinstance(v, str):
                parts.append(frozenset(x.strip() for x in v.split(",") if x.strip()))
            else:
                parts.append(frozenset(v))
        names = list(node_names) if node_names is not None else [f"n{i:05d}" for i in range(n)]
        return cls(gpus, pidx, pools, parts, names)

    @property
    def size(self) -> int:
        return int(self.node_gpus.size)

    def gpus_by_pool(self) -> dict[str, float]:
        return {p: float(self.node_gpus[self.node_pool == i].sum()) for i, p in enumerate(self.pools)}

    def with_nodes(self, add: Mapping[str, int] | None = None, remove: Mapping[str, int] | None = None,
                   ) -> "Cluster":
        """A what-if copy: ``add`` N nodes to a pool (copies of that pool's most common node shape and
        partitions), ``remove`` N nodes from a pool (the last ones listed)."""
        keep = np.ones(self.size, dtype=bool)
        for pool, k in (remove or {}).items():
            idx = np.flatnonzero(self.node_pool == self._pool_index(pool))
            if k > idx.size:
                raise ValueError(f"cannot remove {k} nodes from pool {pool!r}: it has {idx.size}")
            keep[idx[idx.size - k:]] = False
        gpus = list(self.node_gpus[keep])
        pool = [self.pools[i] for i in self.node_pool[keep]]
        parts = [p for p, kk in zip(self.node_partitions, keep) if kk]
        names = [nm for nm, kk in zip(self.node_names, keep) if kk]
        for pname, k in (add or {}).items():
            idx = np.flatnonzero(self.node_pool == self._pool_index(pname)) if pname in self.pools else []
            if len(idx):
                shapes = [(float(self.node_gpus[i]), self.node_partitions[i]) for i in idx]
                g, pr = max(set(shapes), key=shapes.count)
            else:
                raise ValueError(f"pool {pname!r} has no nodes to copy the shape of; known: {self.pools}")
            for i in range(k):
                gpus.append(g)
                pool.append(pname)
                parts.append(pr)
                names.append(f"whatif-{pname}-{i:04d}")
        return Cluster.from_arrays(gpus, pool, [list(p) for p in parts], names)

    def _pool_index(self, pool: str) -> int:
        if pool not in self.pools:
            raise ValueError(f"unknown pool {pool!r}; pools: {', '.join(self.pools)}")
        return self.pools.index(pool)


@dataclass
class Workload:
    """Jobs, sorted by submit time. Columns (numpy arrays, one entry per job):
    submit_s, run_s, limit_s (NaN = no limit known: the run time is used), gpus_per_node, nnodes,
    pool (None = any), partition (None = any), account, team, qos_factor (0..1), job_uid, reservation (None, or
    the advance reservation it asks for, by name), and optionally
    ``nodes`` (None, or the names of the nodes a job must run on: a job already running when the workload
    starts) and ``queued_s`` (when it entered the queue, if before submit_s: a job already queued when the
    workload starts arrives at 0 but its priority's age counts from then)."""
    cols: dict = field(default_factory=dict)

    REQUIRED = ("submit_s", "run_s", "gpus_per_node")

    @classmethod
    def from_columns(cls, data: Mapping[str, Sequence] | pl.DataFrame) -> "Workload":
        df = data if isinstance(data, pl.DataFrame) else pl.DataFrame({k: list(v) for k, v in data.items()})
        for c in cls.REQUIRED:
            if c not in df.columns:
                raise ValueError(f"workload is missing column {c!r}")
        n = df.height
        defaults = {"limit_s": None, "nnodes": 1, "pool": None, "partition": None, "account": "default",
                    "team": None, "qos_factor": 0.0, "job_uid": None, "nodes": None, "reservation": None}
        for c, v in defaults.items():
            if c not in df.columns:
                df = df.with_columns(pl.lit(v).alias(c))
        df = df.with_columns(pl.col("submit_s").cast(pl.Float64), pl.col("run_s").cast(pl.Float64),
                             pl.col("limit_s").cast(pl.Float64), pl.col("gpus_per_node").cast(pl.Float64),
                             pl.col("nnodes").cast(pl.Int64), pl.col("qos_factor").cast(pl.Float64),
                             pl.col("pool").cast(pl.Utf8), pl.col("partition").cast(pl.Utf8),
                             pl.col("account").cast(pl.Utf8), pl.col("team").cast(pl.Utf8),
                             pl.col("reservation").cast(pl.Utf8))
        if df.get_column("job_uid").null_count() == n:
            df = df.with_columns(pl.int_range(0, n, dtype=pl.Int64).alias("job_uid"))
        df = df.sort("submit_s", "job_uid", maintain_order=True)
        cols = {c: df.get_column(c).to_numpy() for c in df.columns if c != "nodes"}
        cols["nodes"] = np.array([None if v is None else tuple(str(n) for n in v)
                                  for v in df.get_column("nodes").to_list()], dtype=object)
        return cls(cols)

    def __len__(self) -> int:
        return int(self.cols["submit_s"].size)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.cols)


@dataclass
class SimResult:
    jobs: pl.DataFrame
    samples: pl.DataFrame
    queue_samples: pl.DataFrame
    passes: int
    policy: Policy
    #: jobs naming an advance reservation that ``reservations`` lacks (or whose windows were all over at
    #: submit): simulated as ordinary jobs
    unmatched_reservation_jobs: int = 0


def node_events(cluster: Cluster, rows: Sequence[tuple[float, str | int, str]]) -> np.ndarray:
    """Events as a structured array from (time_s, node name or index, 'drain'|'down'|'up') tuples."""
    out = np.zeros(len(rows), dtype=[("t", "f8"), ("node", "i8"), ("kind", "i8")])
    for i, (t, node, kind) in enumerate(rows):
        out[i] = (float(t), node if isinstance(node, (int, np.integer)) else cluster.node_names.index(node),
                  EVENT_KINDS[kind])
    return np.sort(out, order=["t", "kind"])


def inject_failures(cluster: Cluster, horizon_s: float, per_node_per_day: float, repair_s: float,
                    seed: int = 0) -> np.ndarray:
    """Random node failures (Poisson per node, exponential repair), as events for ``simulate``."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(cluster.size):
        t = 0.0
        while per_node_per_day > 0:
            t += rng.exponential(DAY / per_node_per_day)
            if t >= horizon_s:
                break
            rows.append((t, n, "down"))
            t += rng.exponential(repair_s)
            rows.append((t, n, "up"))
    return node_events(cluster, rows)


def size_mix(gpus_per_node: np.ndarray, coverage: float = 0.95, max_sizes: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """The job-size distribution M used by FGD placement and the stranded-GPU measure: most frequent
    per-node GPU requests until ``coverage`` of jobs, renormalised (FGD's typical-pod rule, METRICS.md §1.1)."""
    if gpus_per_node.size == 0:
        return np.array([1.0]), np.array([1.0])
    vals, counts = np.unique(np.round(gpus_per_node, 6), return_counts=True)
    order = np.argsort(-counts, kind="stable")
    vals, counts = vals[order], counts[order]
    cum = np.cumsum(counts) / counts.sum()
    k = min(int(np.searchsorted(cum, coverage - 1e-12)) + 1, max_sizes, vals.size)
    return vals[:k].astype(np.float64), (counts[:k] / counts[:k].sum()).astype(np.float64)


#: Columns of ``simulate``'s ``reservations``: name, start_s and end_s (seconds, the workload's clock) and nodes
#: (a list of node names; names the cluster lacks are ignored).
RESERVATION_COLUMNS = ("name", "start_s", "end_s", "nodes")
RESERVATION_SCHEMA = {"name": pl.String, "start_s": pl.Float64, "end_s": pl.Float64, "nodes": pl.List(pl.String)}


def _windows(cluster: Cluster, resv: pl.DataFrame | None, asked: np.ndarray, submit: np.ndarray,
             pinned: np.ndarray | None):
    """Advance reservations for the kernel: (jresv, aw, nodes of each window, unmatched jobs, starts, ends).

    A job naming a reservation takes that name's earliest window not over at its submit that holds some of the
    cluster's nodes (``unmatched`` counts those with none: they run as ordinary jobs); a job pinned to its nodes
    (running when the workload starts) is bound by no window. ``aw`` = (ptr, start, end, window, cursor): each
    node's windows sorted by start, CSR by node (core._resv_ok); the windows' starts and ends are when the scheduler
    must look again."""
    J, N = submit.size, cluster.size
    jresv = np.full(J, core.RESV_NONE, dtype=np.int64)
    named = np.flatnonzero(np.array([a is not None for a in asked], dtype=bool)) if J else np.zeros(0, np.int64)
    if resv is None or resv.height == 0 or N == 0:
        aw = (np.zeros(N + 1, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(N, np.int64))
        return jresv, aw, [], int(named.size), np.zeros(0), np.zeros(0)
    r = resv.select(RESERVATION_COLUMNS).sort("start_s", "name", maintain_order=True)
    starts, ends = r["start_s"].cast(pl.Float64).to_numpy(), r["end_s"].cast(pl.Float64).to_numpy()
    index = {n: i for i, n in enumerate(cluster.node_names)}
    wnodes = [sorted({index[n] for n in (ns if ns is not None else []) if n in index}) for ns in r["nodes"].to_list()]
    by_name: dict[str, list[int]] = {}
    for i, name in enumerate(r["name"].to_list()):
        by_name.setdefault(name, []).append(i)
    unmatched = 0
    for j in named.tolist():   # a window with none of the cluster's nodes (licenses only, nodes removed) binds nobody
        w = next((i for i in by_name.get(asked[j], []) if ends[i] > submit[j] and wnodes[i]), None)
        unmatched += w is None
        jresv[j] = core.RESV_NONE if w is None else w
    if pinned is not None:
        jresv[np.array([p is not None for p in pinned], dtype=bool)] = core.RESV_EXEMPT
    rows = sorted((n, starts[i], ends[i], i) for i, ns in enumerate(wnodes) for n in ns)
    ptr = np.searchsorted(np.array([x[0] for x in rows], dtype=np.int64), np.arange(N + 1)).astype(np.int64)
    aw = (ptr, np.array([x[1] for x in rows], dtype=np.float64), np.array([x[2] for x in rows], dtype=np.float64),
          np.array([x[3] for x in rows], dtype=np.int64), ptr[:-1].copy())
    return jresv, aw, wnodes, unmatched, starts, ends


def _window_spans(n_nodes: int, aw: tuple, jcls: np.ndarray, cls_ptr: np.ndarray, cls_nodes: np.ndarray,
                  limit: np.ndarray, jresv: np.ndarray) -> np.ndarray:
    """Per eligibility class, [from, to) (seconds) in which an advance reservation on its nodes makes whether a job
    fits depend on its time limit: from the first window's start less the class's longest limit to the last
    window's end; empty for a reservation's own class (its jobs start whatever their limit) and a class without
    windows. There the kernel's backfill failure cache also keys on the failed job's end by its limit."""
    ptr, ws, we = aw[0], aw[1], aw[2]
    owner = np.repeat(np.arange(n_nodes), np.diff(ptr))
    first, last = np.full(n_nodes, np.inf), np.full(n_nodes, -np.inf)
    np.minimum.at(first, owner, ws)
    np.maximum.at(last, owner, we)
    n_cls = cls_ptr.size - 1
    longest, own = np.zeros(n_cls), np.zeros(n_cls, dtype=bool)
    np.maximum.at(longest, jcls, limit)
    own[jcls[jresv >= 0]] = True
    spans = np.zeros((n_cls, 2))
    for c in range(n_cls):
        nodes = cls_nodes[cls_ptr[c]:cls_ptr[c + 1]]
        if not own[c] and nodes.size and np.isfinite(first[nodes]).any():
            spans[c] = (first[nodes].min() - longest[c], last[nodes].max())
    return spans


def _classes(cluster: Cluster, pool: np.ndarray, part: np.ndarray, pinned: np.ndarray | None = None,
             nnodes: np.ndarray | None = None, jresv: np.ndarray | None = None, wnodes: list | None = None):
    """Eligibility classes: one per distinct (pool, partition, advance reservation window) a job asks for, with
    its node list (a window's: its nodes of that pool and partition); a job ``pinned`` to as many named nodes as
    it takes, all of which exist, has the class of exactly those nodes (else its pool's and partition's: a what-if
    removed one of them)."""
    resv = [None] * pool.size if jresv is None else [int(r) if r >= 0 else None for r in jresv.tolist()]
    keys = [(p, pt, None, r) for p, pt, r in zip(pool.tolist(), part.tolist(), resv)]
    index = {name: i for i, name in enumerate(cluster.node_names)}
    for i in ([] if pinned is None else np.flatnonzero(pinned != None).tolist()):   # noqa: E711 (elementwise)
        pin = pinned[i]
        if all(n in index for n in pin) and len(set(pin)) == (1 if nnodes is None else nnodes[i]):
            keys[i] = (None, None, tuple(sorted({index[n] for n in pin})), None)
    uniq = {}
    jcls = np.empty(len(keys), dtype=np.int64)
    for i, k in enumerate(keys):
        jcls[i] = uniq.setdefault(k, len(uniq))
    ptr = [0]
    nodes: list[int] = []
    for (p, pt, pin, r) in uniq:
        if pin is not None:
            nodes += list(pin)
            ptr.append(len(nodes))
            continue
        inside = None if r is None else set(wnodes[r])
        for n in range(cluster.size):
            if inside is not None and n not in inside:
                continue
            if p is not None and cluster.pools[cluster.node_pool[n]] != p:
                continue
            if pt is not None and pt not in cluster.node_partitions[n]:
                continue
            nodes.append(n)
        ptr.append(len(nodes))
    return jcls, np.array(ptr, dtype=np.int64), np.array(nodes, dtype=np.int64)


def simulate(cluster: Cluster, work: Workload, policy: Policy | None = None,
             events: np.ndarray | None = None, sample_window: tuple[float, float] | None = None,
             mix: tuple[np.ndarray, np.ndarray] | None = None, reservations: pl.DataFrame | None = None) -> SimResult:
    """Replay ``work`` on ``cluster`` under ``policy``, with the advance ``reservations`` (RESERVATION_COLUMNS).
    See the module docstring for the model."""
    policy = policy or Policy()
    c = work.cols
    J = len(work)
    submit = c["submit_s"].astype(np.float64)
    qfrom = np.fmin(c["queued_s"].astype(np.float64), submit) if "queued_s" in c else submit   # NaN: at submit
    limit = c["limit_s"].astype(np.float64).copy()
    run = c["run_s"].astype(np.float64).copy()
    limit = np.where(np.isnan(limit) | (limit <= 0), run, limit)
    run = np.minimum(np.maximum(run, 0.0), limit)
    gpn = c["gpus_per_node"].astype(np.float64)
    nnodes = np.maximum(c["nnodes"].astype(np.int64), 1)
    pool = np.array([None if v is None else str(v) for v in c["pool"]], dtype=object)
    part = np.array([None if v is None else str(v) for v in c["partition"]], dtype=object)
    asked = c["reservation"] if "reservation" in c else np.full(J, None, dtype=object)
    jresv, aw, wnodes, unmatched, w_start, w_end = _windows(cluster, reservations, asked, submit, c.get("nodes"))
    jcls, cls_ptr, cls_nodes = _classes(cluster, pool, part, c.get("nodes"), nnodes, jresv, wnodes)
    spans = _window_spans(cluster.size, aw, jcls, cls_ptr, cls_nodes, limit, jresv)
    jcap = np.full(J, np.inf)                 # a reservation's job is killed at its end (+ ResvOverRun)
    jcap[jresv >= 0] = w_end[jresv[jresv >= 0]] + policy.resv_over_run_s
    feasible = np.zeros(J, dtype=np.bool_)
    for k in range(cls_ptr.size - 1):
        nodes = cls_nodes[cls_ptr[k]:cls_ptr[k + 1]]
        sel = jcls == k
        if nodes.size:
            caps = np.sort(cluster.node_gpus[nodes])[::-1]
            feasible[sel] = (gpn[sel] <= caps[np.minimum(nnodes[sel], nodes.size) - 1] + 1e-9) \
                & (nnodes[sel] <= nodes.size) & (gpn[sel] > 0)
    accounts = c["account"]
    acct_names = sorted({str(a) for a in accounts})
    acct = np.array([acct_names.index(str(a)) for a in accounts], dtype=np.int64)
    shares = np.full(len(acct_names), 1.0 / max(len(acct_names), 1))
    qosf = np.clip(c["qos_factor"].astype(np.float64), 0.0, 1.0)
    mix_size, mix_prob = size_mix(gpn[feasible]) if mix is None else (np.asarray(mix[0], dtype=np.float64),
                                                                        np.asarray(mix[1], dtype=np.float64))
    ev = events if events is not None else np.zeros(0, dtype=[("t", "f8"), ("node", "i8"), ("kind", "i8")])
    if w_start.size:
        mk = np.zeros(2 * w_start.size, dtype=ev.dtype)
        mk["t"], mk["kind"] = np.concatenate([w_start, w_end]), core.EV_MARK
        ev = np.sort(np.concatenate([ev, mk]), order=["t", "kind"])

    t_lo, t_hi = sample_window if sample_window else (float(submit.min()) if J else 0.0,
                                                      float((submit + run).max()) if J else 0.0)
    dt = policy.sample_dt_s
    n_samp = int(max(0, np.ceil((t_hi - t_lo) / dt))) if dt > 0 else 0
    P = len(cluster.pools)
    samp_t = np.zeros(n_samp)
    samp_cap = np.zeros((n_samp, P))
    samp_alloc = np.zeros((n_samp, P))
    samp_strand = np.zeros((n_samp, P))
    samp_queue = np.zeros(n_samp)

    ip = np.array([QUEUES[policy.queue], int(policy.backfill), policy.bf_max_job_test,
                   PLACEMENTS[policy.placement], policy.seed, int(policy.requeue_on_failure)], dtype=np.int64)
    fp = np.array([policy.w_age, policy.w_fairshare, policy.w_qos, policy.w_size, policy.max_age_s,
                   policy.half_life_s, policy.prio_calc_period_s, dt, t_lo, t_hi,
                   float(cluster.node_gpus.sum()), policy.bf_interval_s], dtype=np.float64)
    first_start = np.full(J, np.nan)
    start = np.full(J, np.nan)
    end = np.full(J, np.nan)
    alloc_ptr = np.zeros(J + 1, dtype=np.int64)
    np.cumsum(nnodes, out=alloc_ptr[1:])
    alloc_node = np.full(int(alloc_ptr[-1]), -1, dtype=np.int64)
    nreq = np.zeros(J, dtype=np.int64)
    head_shadow = np.full(J, -1.0)
    passes, ns = core.simulate_kernel(
        cluster.node_gpus.astype(np.float64), np.ones(cluster.size, dtype=np.bool_), cluster.node_pool,
        P, cls_ptr, cls_nodes, submit, qfrom, run, limit, gpn, nnodes, jcls, acct, qosf, feasible, jresv, jcap, aw,
        spans, ev["t"].astype(np.float64), ev["node"].astype(np.int64), ev["kind"].astype(np.int64), shares,
        mix_size, mix_prob, ip, fp, first_start, start, end, alloc_ptr, alloc_node, nreq, head_shadow,
        samp_t, samp_cap, samp_alloc, samp_strand, samp_queue)

    first_node = np.where(alloc_ptr[:-1] < alloc_node.size, alloc_node[np.minimum(alloc_ptr[:-1],
                                                                                   max(alloc_node.size - 1, 0))], -1)
    jobs = pl.DataFrame({
        "job_uid": c["job_uid"], "submit_s": submit, "start_s": first_start, "last_start_s": start,
        "end_s": end, "run_s": run, "limit_s": limit, "gpus_per_node": gpn, "nnodes": nnodes,
        "gpus": gpn * nnodes, **{k: pl.Series(k, [None if v is None else str(v) for v in c[k].tolist()], pl.String)
                                 for k in ("pool", "partition", "account", "team")},   # all None: not Object
        "reservation": pl.Series("reservation", [None if v is None else str(v) for v in asked.tolist()], pl.String),
        "requeues": nreq, "feasible": feasible,
        "first_node": first_node, "head_shadow_s": np.where(head_shadow >= 0, head_shadow, np.nan),
    }, strict=False).with_columns((pl.col("start_s") - pl.col("submit_s")).alias("wait_s"))
    jobs = jobs.with_columns(pl.col(c).fill_nan(None) for c in ("start_s", "last_start_s", "end_s",
                                                                  "head_shadow_s", "wait_s"))
    rows = []
    for p in range(P):
        rows.append(pl.DataFrame({"t_s": samp_t[:ns], "pool": [cluster.pools[p]] * ns,
                                  "capacity_gpus": samp_cap[:ns, p], "allocated_gpus": samp_alloc[:ns, p],
                                  "stranded_gpus": samp_strand[:ns, p]}))
    samples = pl.concat(rows) if rows else pl.DataFrame()
    queue = pl.DataFrame({"t_s": samp_t[:ns], "queued_gpus": samp_queue[:ns]})
    result = SimResult(jobs, samples, queue, int(passes), policy, unmatched)
    result.alloc_ptr, result.alloc_node = alloc_ptr, alloc_node  # per-job node lists (last run)
    return result


__all__ = ["Cluster", "Workload", "Policy", "SimResult", "simulate", "node_events", "inject_failures",
           "size_mix", "PLACEMENTS", "QUEUES", "replace"]
