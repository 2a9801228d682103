"""What the synthetic cluster looks like: pools, partitions, teams, calendar, and how they grow with ``scale``.

Every number that shapes the workload lives here, so calibration (docs/DEMO.md) is a matter of editing one
file. Scale 1 is the demo: ~60 nodes of 8 GPUs (H100 and A100 pools), 3 partitions, 12 teams, 26 weeks.
Scale 100/3 is the benchmark year: 2,000 nodes, 52 weeks + 1 day, ~5,000,000 jobs.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

#: Bump when the generator's output changes for the same seed and scale (benchmark caches key on it).
GENERATOR_VERSION = 6

GPUS_PER_NODE = 8

#: Runtime kinds: (median seconds, lognormal sigma) of the work a job would do if nothing stopped it.
#: quick = smoke tests and crashing scripts, dev = debugging and notebooks, train = training runs,
#: long = multi-day training. Calibrated against the medians and means in docs/DEMO.md.
KINDS = ("quick", "dev", "train", "long")
KIND_RUNTIME = {"quick": (45.0, 1.2), "dev": (900.0, 1.1), "train": (5.0 * 3600, 1.3), "long": (40.0 * 3600, 0.7)}

#: Job sizes in GPUs; sizes above 8 are gangs of whole 8-GPU nodes.
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class Pool:
    """A GPU type: nodes named ``{prefix}-NNN`` with 8 GPUs each."""
    name: str            # pool and gres type, e.g. h100
    model: str           # DCGM modelName label
    prefix: str
    nodes: int           # nodes present at the start
    added: int           # nodes added by the capacity addition
    cpus: int
    mem_mib: int
    fb_mib: int          # framebuffer per GPU
    tdp_w: float


@dataclass(frozen=True)
class Partition:
    name: str
    pools: tuple[str, ...]
    max_time_s: int
    preemptible: bool = False


@dataclass(frozen=True)
class Team:
    """One team: who submits what, how much, and how well it uses the GPUs it gets."""
    name: str
    display: str
    account: str
    cost_center: str
    users: int
    share: float                    # share of submissions (before growth and bursts)
    entitlement: float              # share of the cluster the team is entitled to (governance)
    h100: float                     # probability a normal job asks for the H100 partition
    sizes: tuple[float, ...]        # weights over SIZES
    kinds: tuple[float, float, float, float]  # weights over KINDS
    array_prob: float = 0.05        # share of submissions that are job arrays
    array_mean: float = 10.0        # mean tasks per array
    preempt: float = 0.0            # share of jobs sent to the preemptible partition
    util: float = 0.6               # mean SM activity of this team's busy jobs (0..1)
    idle_jobs: float = 0.05         # share of jobs that hold GPUs and barely touch them (notebooks, sims)
    stall_jobs: float = 0.05        # share of jobs that stall on data for long stretches
    growth: float = 1.4             # submission rate at the end of the period / at the start
    fail: float = 1.0               # multiplier on failure probabilities
    deadlines: tuple[int, ...] = () # day offsets of conference deadlines (submission bursts before them)
    qos: str = "normal"


@dataclass(frozen=True)
class ReservationSpec:
    """An advance reservation a team makes: whole nodes of one pool for a few days (models/demo/reservation_plan.py).
    It starts ``before_end_days`` before the export at 10:17 site time, so its edges fall on no hour or day."""
    name: str
    team: str             # its account owns the reservation
    pool: str
    nodes: int            # at scale 1 (at least one node at any scale)
    before_end_days: int
    days: float
    main_share: float     # the run it was made for works this share of the reservation's remaining time


def default_reservations() -> tuple[ReservationSpec, ...]:
    """A pretraining run's week on four H100 nodes ending two days before the export (inside the telemetry and
    queue windows), and an evaluation sprint on two A100 nodes three weeks earlier; neither is used to the full."""
    return (ReservationSpec("llm-pt-run", "llm-pretrain", "h100", 4, 9, 7.0, 0.8),
            ReservationSpec("safety-evals", "safety", "a100", 2, 20, 4.0, 0.5))


def default_pools(scale: float) -> tuple[Pool, ...]:
    def n(x: float) -> int:
        return max(1, round(x * scale))
    return (
        Pool("h100", "NVIDIA H100 80GB HBM3", "h100", n(24), n(8), cpus=224, mem_mib=2_064_000, fb_mib=81_559,
             tdp_w=700.0),
        Pool("a100", "NVIDIA A100-SXM4-80GB", "a100", n(28), 0, cpus=256, mem_mib=1_031_000, fb_mib=81_920,
             tdp_w=400.0),
    )


def default_partitions() -> tuple[Partition, ...]:
    return (
        Partition("h100", ("h100",), 7 * 86400),
        Partition("a100", ("a100",), 7 * 86400),
        Partition("preempt", ("h100", "a100"), 2 * 86400, preemptible=True),
    )


#: size weights over SIZES: 1, 2, 4, 8, 16, 32, 64, 128, 256, 512
_S_SINGLE = (0.86, 0.06, 0.04, 0.04, 0, 0, 0, 0, 0, 0)
_S_SMALL = (0.66, 0.10, 0.11, 0.10, 0.02, 0.01, 0, 0, 0, 0)
_S_MID = (0.50, 0.10, 0.12, 0.18, 0.06, 0.03, 0.01, 0, 0, 0)
_S_BIG = (0.30, 0.05, 0.10, 0.25, 0.12, 0.10, 0.05, 0.02, 0.007, 0.003)


def default_teams() -> tuple[Team, ...]:
    return (
        Team("llm-pretrain", "LLM Pretraining", "llm_pt", "CC-4100", 8, 0.05, 0.22, 0.70, _S_BIG,
             (0.25, 0.15, 0.35, 0.25), util=0.82, idle_jobs=0.02, stall_jobs=0.03, growth=1.7, fail=0.8),
        Team("llm-finetune", "LLM Fine-tuning", "llm_ft", "CC-4100", 14, 0.11, 0.14, 0.55, _S_MID,
             (0.35, 0.20, 0.40, 0.05), array_prob=0.12, array_mean=8, util=0.70, growth=1.6),
        Team("vision", "Computer Vision", "vision", "CC-4200", 16, 0.13, 0.10, 0.25, _S_SMALL,
             (0.35, 0.25, 0.37, 0.03), array_prob=0.15, array_mean=16, preempt=0.06, util=0.62,
             deadlines=(130,)),
        Team("speech", "Speech", "speech", "CC-4200", 9, 0.07, 0.07, 0.25, _S_SMALL,
             (0.35, 0.25, 0.37, 0.03), array_prob=0.08, util=0.66, growth=1.2),
        Team("recsys", "Recommendation", "recsys", "CC-4300", 10, 0.09, 0.08, 0.10, _S_SINGLE,
             (0.30, 0.30, 0.38, 0.02), array_prob=0.10, util=0.40, stall_jobs=0.35, growth=1.3),
        Team("robotics", "Robotics Simulation", "robotics", "CC-4400", 9, 0.07, 0.06, 0.20, _S_SINGLE,
             (0.30, 0.35, 0.33, 0.02), util=0.18, idle_jobs=0.35, stall_jobs=0.10, growth=1.2),
        Team("research", "Fundamental Research", "research", "CC-4500", 22, 0.16, 0.10, 0.30, _S_SMALL,
             (0.40, 0.25, 0.32, 0.03), array_prob=0.18, array_mean=20, preempt=0.15, util=0.58,
             deadlines=(45, 130), fail=1.2),
        Team("safety", "Safety & Evals", "safety", "CC-4500", 7, 0.06, 0.05, 0.50, _S_SMALL,
             (0.45, 0.25, 0.28, 0.02), array_prob=0.25, array_mean=12, util=0.55, growth=2.0),
        Team("bioml", "Bio ML", "bioml", "CC-4600", 8, 0.06, 0.06, 0.15, _S_SMALL,
             (0.30, 0.25, 0.40, 0.05), array_prob=0.06, util=0.45, stall_jobs=0.30, growth=1.3),
        Team("inference", "Inference Platform", "infer", "CC-4700", 6, 0.07, 0.05, 0.40, _S_SINGLE,
             (0.55, 0.20, 0.25, 0.00), util=0.50, idle_jobs=0.10, growth=1.5, qos="high"),
        Team("infra", "ML Infrastructure", "infra", "CC-4800", 5, 0.04, 0.03, 0.40, _S_SMALL,
             (0.60, 0.20, 0.20, 0.00), util=0.35, fail=1.5, growth=1.0),
        Team("students", "University Partners", "academic", "CC-4900", 24, 0.09, 0.04, 0.05, _S_SINGLE,
             (0.35, 0.40, 0.24, 0.01), array_prob=0.05, preempt=0.35, util=0.25, idle_jobs=0.45,
             stall_jobs=0.10, fail=1.3, growth=1.1, deadlines=(45,)),
    )


@dataclass(frozen=True)
class Config:
    """Everything the generator needs; deterministic for (config, seed)."""
    seed: int = 1
    scale: float = 1.0
    cluster: str = "orion"
    tz: str = "America/Los_Angeles"          # the site's zone: diurnal and weekly cycles follow local time
    start: dt.date = dt.date(2026, 1, 5)     # a Monday
    days: int = 182
    pools: tuple[Pool, ...] = field(default_factory=lambda: default_pools(1.0))
    partitions: tuple[Partition, ...] = field(default_factory=default_partitions)
    teams: tuple[Team, ...] = field(default_factory=default_teams)
    jobs_per_gpu_day: float = 1.0            # job allocations (array tasks count) per GPU per day
    add_day: int | None = None               # day of the capacity addition (default: mid-period)
    node_mtbf_days: float = 60.0             # mean time between hard failures of a node
    lemon_nodes: float = 0.05                # share of nodes that fail 5x as often
    drain_per_node_year: float = 4.0         # admin drains per node per year
    holidays: tuple[dt.date, ...] = ()       # default: US holidays inside the period
    telemetry_days: int = 7                  # DCGM history written for the last N days (0 = none)
    telemetry_step_s: int = 600              # one reading per GPU and metric every 10 minutes (keeps the demo fast)
    squeue_days: int = 7                     # squeue snapshots (every 15 minutes) for the last N days (0 = none)
    reservations: tuple[ReservationSpec, ...] = field(default_factory=default_reservations)
    job_steps: bool = True                   # write .batch/.extern/.0 step lines in sacct output

    @property
    def end(self) -> dt.date:
        return self.start + dt.timedelta(days=self.days)

    @property
    def capacity_add_day(self) -> int:
        return self.days // 2 if self.add_day is None else self.add_day

    def max_gang(self, pool: Pool) -> int:
        """Largest gang (GPUs) a pool takes: a quarter of its nodes, at least two nodes."""
        return max(2, pool.nodes // 4) * GPUS_PER_NODE


def for_scale(scale: float = 1.0, seed: int = 1, **overrides) -> Config:
    """The demo cluster at ``scale``: nodes grow linearly; from scale 2 up the period is a year (365 days)."""
    if scale <= 0:
        raise ValueError("scale must be positive")
    if overrides.get("days", 1) < 1:
        raise ValueError("days must be at least 1")
    days = 182 if scale < 2 else 365
    cfg = Config(seed=seed, scale=scale, days=days, pools=default_pools(scale))
    if scale >= 2:
        # a year: the job rate that gives 5,000,000 jobs at 2,000 nodes (the benchmark year); a site this big keeps
        # its telemetry in Prometheus and exports accounting with --allocations in XDMoD's fields (the ingest
        # benchmarks' format: no Reservation column, so no reservations)
        cfg = replace(cfg, telemetry_days=0, squeue_days=0, job_steps=False, reservations=(),
                      jobs_per_gpu_day=YEAR_JOBS / _year_gpu_days())
    return replace(cfg, **overrides) if overrides else cfg


YEAR_SCALE = 100 / 3     # 2,000 nodes
YEAR_JOBS = 5_000_000


def _year_gpu_days() -> float:
    """GPU-days of capacity of the 2,000-node year (the capacity addition at mid-year included)."""
    pools = default_pools(YEAR_SCALE)
    base = sum(p.nodes for p in pools) * GPUS_PER_NODE
    added = sum(p.added for p in pools) * GPUS_PER_NODE
    return float(base * (365 // 2) + (base + added) * (365 - 365 // 2))


def us_holidays(start: dt.date, end: dt.date) -> tuple[dt.date, ...]:
    """US federal holidays plus the end-of-year break inside [start, end)."""
    out = []
    for y in range(start.year, end.year + 1):
        def nth(month, weekday, n):
            d = dt.date(y, month, 1)
            d += dt.timedelta(days=(weekday - d.weekday()) % 7)
            return d + dt.timedelta(weeks=n - 1)
        def last(month, weekday):
            d = dt.date(y, month + 1, 1) - dt.timedelta(days=1) if month < 12 else dt.date(y, 12, 31)
            return d - dt.timedelta(days=(d.weekday() - weekday) % 7)
        thanksgiving = nth(11, 3, 4)
        days = [dt.date(y, 1, 1), nth(1, 0, 3), nth(2, 0, 3), last(5, 0), dt.date(y, 6, 19), dt.date(y, 7, 4),
                nth(9, 0, 1), thanksgiving, thanksgiving + dt.timedelta(days=1)]
        days += [dt.date(y, 12, d) for d in range(24, 32)]
        out += [d for d in days if start <= d < end]
    return tuple(sorted(set(out)))
