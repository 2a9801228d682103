"""Advance reservations of the synthetic cluster, and the jobs submitted into them.

A team reserves whole nodes of one pool for a few days (config.ReservationSpec), as an operator does with
``scontrol create reservation starttime=... duration=... nodes=... accounts=...`` ``ADVANCE_S`` ahead: from then
no job starts on those nodes unless its time limit ends before the reservation starts, and from its start until
its end the nodes take only the reservation's jobs (models/demo/scheduler.py).

What goes into it: the run it was made for, the owner's first non-array job in the pool's partition submitted in
its first ``MAIN_WITHIN`` seconds, reshaped to a gang of all its nodes with the time limit set to the reservation's
remaining time, working ``main_share`` of it and completing; and the owner's other jobs for that pool submitted
during it that fit in it (non-array, at most its GPUs, time limit ending by its end), but for a few whose users
forget ``--reservation`` (``FORGET``) and queue with everyone else. What its GPUs do not run is the reserved idle
that ``report reservations`` charges to the owner.

The choice of jobs draws from its own generator (seeded by the config's seed), so adding reservations leaves the
rest of the workload's random stream as it was.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo

import numpy as np

from models.demo.config import GPUS_PER_NODE, KINDS, Config
from models.demo.layout import Layout
from models.demo.workload import COMPLETED, JOB_NAMES, NAME_LIST, Jobs

#: Share of the eligible jobs whose users forget ``--reservation``.
FORGET = 0.15
#: The run a reservation is made for is submitted within this many seconds of its start.
MAIN_WITHIN = 6 * 3600
#: A reservation is created this long before it starts: the partitions' longest time limit, so that no job is
#: still running on its nodes when it starts (as sites create them, unless with IGNORE_JOBS).
ADVANCE_S = 7 * 86400
#: Local time of day a reservation starts (10:17: on no hour, so no edge is aligned to one).
START_LOCAL = dt.time(10, 17)


@dataclass(frozen=True)
class Reservation:
    """One reservation. Times are UTC epoch seconds (``created``: when it was made, before ``start``);
    ``nodes`` are layout indices (all of pool ``pool``)."""
    name: str
    team: int            # index into cfg.teams
    pool: int            # index into cfg.pools
    partition: int       # index into cfg.partitions: the pool's own (non-preemptible) partition
    nodes: tuple[int, ...]
    created: int
    start: int
    end: int
    main_share: float    # the share of its remaining time the run it was made for works

    @property
    def gpus(self) -> int:
        return len(self.nodes) * GPUS_PER_NODE


def plan(cfg: Config, layout: Layout, t0: int, t_end: int) -> tuple[Reservation, ...]:
    """The configured reservations that fall inside [t0, t_end), on the highest-numbered nodes of their pool
    that exist at their start (at most half of them)."""
    zone = ZoneInfo(cfg.tz)
    last_day = dt.datetime.fromtimestamp(t_end, zone).date()
    teams = [t.name for t in cfg.teams]
    pools = [p.name for p in cfg.pools]
    out = []
    for spec in cfg.reservations:
        day = last_day - dt.timedelta(days=spec.before_end_days)
        start = int(dt.datetime.combine(day, START_LOCAL, zone).timestamp())
        end = start + int(spec.days * 86400)
        if start < t0 or end > t_end:
            continue
        p = pools.index(spec.pool)
        lo, hi = layout.pool_range[p]
        present = [n for n in range(lo, hi) if layout.since[n] <= start]
        if not present:
            continue
        k = min(max(1, round(spec.nodes * cfg.scale)), max(1, len(present) // 2))
        part = next(i for i, q in enumerate(cfg.partitions) if q.pools == (spec.pool,) and not q.preemptible)
        out.append(Reservation(spec.name, teams.index(spec.team), p, part, tuple(present[-k:]),
                               max(t0, start - ADVANCE_S), start, end, spec.main_share))
    return tuple(out)


def submit_into(cfg: Config, jobs: Jobs, resv: tuple[Reservation, ...]) -> np.ndarray:
    """Reshape each reservation's main run in ``jobs`` (in place) and return the reservation (index into
    ``resv``) each job is submitted into, -1 for none (see the module's doc)."""
    out = np.full(len(jobs), -1, np.int8)
    rng = np.random.default_rng([cfg.seed, 0x5E5])
    for r, res in enumerate(resv):
        owner = (jobs.team == res.team) & (jobs.partition == res.partition) & (jobs.array_id < 0)
        first = np.flatnonzero(owner & (jobs.submit >= res.start) & (jobs.submit < res.start + MAIN_WITHIN))
        if len(first):
            _main_run(cfg, jobs, res, int(first[0]))
        fits = owner & (jobs.submit >= res.start) & (jobs.submit + jobs.limit_s <= res.end) & (jobs.gpus <= res.gpus)
        chosen = fits & (rng.random(len(jobs)) >= FORGET)
        if len(first):
            chosen[first[0]] = True
        out[chosen] = r
    return out


def _main_run(cfg: Config, jobs: Jobs, res: Reservation, k: int) -> None:
    """Job k becomes the run reservation ``res`` was made for: all its GPUs, limited to its remaining time."""
    pool = cfg.pools[res.pool]
    nodes = len(res.nodes)
    limit = (res.end - int(jobs.submit[k])) // 60 * 60
    jobs.gpus[k], jobs.nodes[k] = res.gpus, nodes
    jobs.limit_s[k] = limit
    jobs.work_s[k] = res.main_share * limit
    jobs.run_s[k] = int(np.ceil(res.main_share * limit))
    jobs.plan[k], jobs.exit_code[k] = COMPLETED, 0
    jobs.kind[k] = KINDS.index("long")
    jobs.name[k] = NAME_LIST.index(JOB_NAMES["long"][0])
    jobs.idle[k] = jobs.stall[k] = False
    jobs.patience_s[k] = np.inf
    jobs.cpus[k] = min(GPUS_PER_NODE * 24, pool.cpus) * nodes
    jobs.mem_mib[k] = min(GPUS_PER_NODE * 120_000, int(pool.mem_mib * 0.9) // 1000 * 1000) * nodes


def names(resv: tuple[Reservation, ...], idx: np.ndarray) -> list[str | None]:
    """Reservation name per job index value (None for -1): sacct's and squeue's Reservation column."""
    table = [r.name for r in resv]
    return [table[i] if i >= 0 else None for i in idx.tolist()]
