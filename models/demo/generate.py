"""The synthetic cluster's workload, outages and schedule, sampled for one configuration (deterministic for its
seed); models/demo/build.py writes them as a site's inputs."""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from models.demo import faults, layout as layout_mod, reservation_plan as resv_mod, scheduler, workload
from models.demo.config import Config

Progress = Callable[[str], None]


@dataclass
class Synthetic:
    cfg: Config
    jobs: workload.Jobs
    users: workload.Users
    layout: layout_mod.Layout
    outages: faults.Outages
    reservations: tuple[resv_mod.Reservation, ...]
    inst: scheduler.Instances
    t0: int          # period start (UTC epoch s)
    t_add: int       # capacity addition
    t_end: int       # export time
    seconds: dict = field(default_factory=dict)


def generate(cfg: Config, progress: Progress | None = None) -> Synthetic:
    """Sample the workload and outages and run them through the scheduler (deterministic for cfg.seed)."""
    say = progress or (lambda _m: None)
    rng = np.random.default_rng(cfg.seed)
    t = time.perf_counter()
    jobs, users = workload.sample_jobs(cfg, rng)
    t0 = workload.epoch(cfg.start, cfg.tz)
    t_end = workload.epoch(cfg.end, cfg.tz)
    t_add = t0 + cfg.capacity_add_day * 86400 + 10 * 3600   # mid-morning, when the new racks come online
    lay = layout_mod.make_layout(cfg, t0, t_add)
    out = faults.sample_outages(cfg, rng, lay.since, t0, t_end)
    resv = resv_mod.plan(cfg, lay, t0, t_end)
    jobs.resv = resv_mod.submit_into(cfg, jobs, resv)
    secs = {"sample": time.perf_counter() - t}
    say(f"sampled {len(jobs):,} jobs on {len(lay):,} nodes ({secs['sample']:.1f} s); scheduling ...")
    t = time.perf_counter()
    inst = scheduler.schedule(cfg, jobs, lay, out, t_end, rng, resv)
    secs["schedule"] = time.perf_counter() - t
    say(f"scheduled {len(inst):,} job instances ({secs['schedule']:.1f} s)")
    return Synthetic(cfg, jobs, users, lay, out, resv, inst, t0, t_add, t_end, secs)


def month_windows(t0: int, t1: int) -> list[tuple[int, int]]:
    """Calendar months (UTC) covering [t0, t1), clipped to it: the windows of monthly sacct exports."""
    out, a = [], t0
    while a < t1:
        d = dt.datetime.fromtimestamp(a, dt.timezone.utc)
        nxt = dt.datetime(d.year + (d.month == 12), d.month % 12 + 1, 1, tzinfo=dt.timezone.utc)
        b = min(int(nxt.timestamp()), t1)
        out.append((a, b))
        a = b
    return out


