"""Sampling the job stream: who submits what, when, how big, for how long, and how it would end.

Vectorised with numpy (no per-job Python): submission times come from an inhomogeneous Poisson process
whose intensity is the product of a diurnal and weekly cycle in the site's local time, holidays, a growth
trend, day-to-day noise and per-team conference-deadline bursts. Each submission is a job or a job array.
Each job gets a size, a runtime kind, the work it would do if nothing stopped it, a time limit, and the way
it ends if the scheduler lets it run (completed, failed, out of memory, cancelled by its user, timeout).
Node failures, preemption and queue waits are not decided here: the scheduler produces them.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo

import numpy as np

from models.demo.config import GPUS_PER_NODE, KIND_RUNTIME, KINDS, SIZES, Config, us_holidays

BIN_S = 300  # intensity grid (seconds)

#: Relative submission rate by local hour (0-23) and weekday (Mon..Sun).
DIURNAL = np.array([0.45, 0.38, 0.33, 0.30, 0.30, 0.33, 0.42, 0.60, 0.85, 1.10, 1.30, 1.40,
                    1.30, 1.40, 1.50, 1.50, 1.45, 1.35, 1.15, 1.00, 0.90, 0.80, 0.70, 0.55])
WEEKLY = np.array([1.05, 1.08, 1.08, 1.02, 0.90, 0.42, 0.48])
HOLIDAY = 0.35

#: Planned end states (before the scheduler adds NODE_FAIL / PREEMPTED / REQUEUED / pending cancels).
COMPLETED, FAILED, OUT_OF_MEMORY, CANCELLED, TIMEOUT = range(5)
PLAN_STATES = ("COMPLETED", "FAILED", "OUT_OF_MEMORY", "CANCELLED", "TIMEOUT")
#: (fail, out of memory, user cancel while running) probabilities by runtime kind.
OUTCOME = {"quick": (0.32, 0.02, 0.06), "dev": (0.16, 0.02, 0.14), "train": (0.12, 0.01, 0.38),
           "long": (0.14, 0.01, 0.55)}
#: Time limits users pick (seconds).
LIMIT_MENU = np.array([600, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 12 * 3600, 86400, 2 * 86400,
                       3 * 86400, 5 * 86400, 7 * 86400])
FAIL_EXIT = np.array([1, 1, 1, 1, 1, 1, 2, 2, 127, 137, 139, 255])
JOB_NAMES = {"quick": ("test", "smoke", "debug", "check_env", "unit"),
             "dev": ("jupyter", "bash", "dev", "interactive", "notebook"),
             "train": ("train", "finetune", "sweep", "eval", "train_ddp"),
             "long": ("pretrain", "train_big", "pretrain_moe")}
NAME_LIST = tuple(n for k in KINDS for n in JOB_NAMES[k])


@dataclass
class Users:
    name: list[str]
    uid: np.ndarray
    team: np.ndarray


@dataclass
class Jobs:
    """One row per job allocation (array tasks are rows), sorted by submit time. Times are UTC epoch seconds."""
    job_id: np.ndarray        # JobIDRaw (int64)
    array_id: np.ndarray      # array master id, -1 when not an array
    task: np.ndarray          # array task index, -1
    array_last: np.ndarray    # bool: last task of its array (it carries the master id)
    submit: np.ndarray
    team: np.ndarray
    user: np.ndarray          # index into Users
    partition: np.ndarray     # index into config.partitions
    qos: np.ndarray           # index into QOS
    gpus: np.ndarray
    nodes: np.ndarray
    kind: np.ndarray          # index into KINDS
    work_s: np.ndarray        # seconds of work if nothing stops it
    limit_s: np.ndarray       # time limit (seconds)
    plan: np.ndarray          # planned end state (index into PLAN_STATES)
    run_s: np.ndarray         # seconds it runs if started and not killed (plan applied)
    exit_code: np.ndarray
    patience_s: np.ndarray    # the user cancels it if it waits longer (inf = never)
    requeue: np.ndarray       # bool: may be requeued after a node failure or preemption
    util: np.ndarray          # mean SM activity while busy (0..1)
    idle: np.ndarray          # bool: holds GPUs and barely uses them
    stall: np.ndarray         # bool: stalls on data for long stretches
    name: np.ndarray          # index into NAME_LIST
    cpus: np.ndarray
    mem_mib: np.ndarray
    typed_req: np.ndarray     # bool: asked for a GPU type (--gres=gpu:h100:N) rather than --gres=gpu:N
    resv: np.ndarray          # the reservation it was submitted into (models/demo/reservation_plan.py), -1 = none

    def __len__(self) -> int:
        return len(self.submit)


QOS = ("normal", "high", "debug")


def epoch(d: dt.date, tz: str) -> int:
    """UTC epoch seconds of local midnight on ``d``."""
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=ZoneInfo(tz)).timestamp())


def _local_hours(t0: int, nbins: int, tz: str) -> tuple[np.ndarray, np.ndarray]:
    """Local hour (0-23) and local date ordinal of every BIN_S bin starting at t0 (UTC epoch)."""
    zone = ZoneInfo(tz)
    hours = (nbins * BIN_S) // 3600 + 2
    offs = np.array([dt.datetime.fromtimestamp(t0 + h * 3600, zone).utcoffset().total_seconds()
                     for h in range(hours)], dtype=np.int64)
    t = t0 + np.arange(nbins, dtype=np.int64) * BIN_S
    local = t + offs[(t - t0) // 3600]
    return (local // 3600) % 24, local // 86400


def calendar_weight(cfg: Config) -> tuple[np.ndarray, int]:
    """Site-wide relative submission rate per BIN_S bin and the UTC epoch of the first bin."""
    t0 = epoch(cfg.start, cfg.tz)
    nbins = (epoch(cfg.end, cfg.tz) - t0) // BIN_S
    hour, day = _local_hours(t0, nbins, cfg.tz)
    weekday = (day + 3) % 7  # 1970-01-01 was a Thursday
    w = DIURNAL[hour] * WEEKLY[weekday]
    holidays = cfg.holidays or us_holidays(cfg.start, cfg.end)
    hol = np.array([(h - dt.date(1970, 1, 1)).days for h in holidays], dtype=np.int64)
    w = np.where(np.isin(day, hol), w * HOLIDAY, w)
    return w, t0


def capacity_gpus_by_day(cfg: Config) -> np.ndarray:
    base = sum(p.nodes for p in cfg.pools) * GPUS_PER_NODE
    added = sum(p.added for p in cfg.pools) * GPUS_PER_NODE
    return np.where(np.arange(cfg.days) >= cfg.capacity_add_day, base + added, base).astype(float)


def make_users(cfg: Config) -> Users:
    first = "abcdefghjklmnprstvwyz"
    last = ("chen", "patel", "garcia", "kim", "nguyen", "smith", "muller", "rossi", "tanaka", "silva", "kowalski",
            "ivanova", "okafor", "haddad", "larsen", "novak", "dubois", "cohen", "singh", "moreau", "walsh")
    names, teams = [], []
    seen = set()
    for ti, team in enumerate(cfg.teams):
        for u in range(team_users(cfg, team)):
            k = len(names)
            name = first[(k * 7) % len(first)] + last[(k * 5 + ti) % len(last)]
            if name in seen:
                name = f"{name}{k}"
            seen.add(name)
            names.append(name)
            teams.append(ti)
    return Users(names, 20000 + np.arange(len(names), dtype=np.int64), np.array(teams, dtype=np.int16))


def team_users(cfg: Config, team) -> int:
    """Users of a team: the configured number at scale 1, growing as scale**0.7 (big sites have more people)."""
    return max(1, round(team.users * max(1.0, cfg.scale) ** 0.7))


def _team_rate(cfg: Config, ti: int, w: np.ndarray, day_noise: np.ndarray, rng) -> np.ndarray:
    team = cfg.teams[ti]
    nb = len(w)
    frac = np.arange(nb) / nb
    rate = w * team.growth ** frac
    days = np.arange(nb) * BIN_S // 86400
    rate = rate * day_noise[days] * np.exp(rng.normal(0, 0.2, cfg.days))[days]
    for d in team.deadlines:
        if d >= cfg.days:
            continue
        dd = days - d
        burst = np.where((dd >= -14) & (dd < 0), 1 + 1.0 * (dd + 15) / 14, 1.0)
        burst = np.where((dd >= 0) & (dd < 3), 0.6, burst)
        rate = rate * burst
    return rate


def _limits(work: np.ndarray, under: np.ndarray, max_s: np.ndarray, rng) -> np.ndarray:
    """Time limits from LIMIT_MENU: above work x margin, or (users who underestimate) just below the work."""
    margin = np.exp(rng.normal(np.log(2.0), 0.5, len(work)))
    above = np.searchsorted(LIMIT_MENU, work * np.maximum(margin, 1.05))
    below = np.searchsorted(LIMIT_MENU, work) - 1
    idx = np.where(under & (below >= 0), below, above)
    lim = LIMIT_MENU[np.clip(idx, 0, len(LIMIT_MENU) - 1)]
    return np.minimum(lim, max_s)


def sample_jobs(cfg: Config, rng: np.random.Generator) -> tuple[Jobs, Users]:
    """The job stream of ``cfg`` (deterministic for the generator state)."""
    users = make_users(cfg)
    w, t0 = calendar_weight(cfg)
    nb = len(w)
    day_noise = np.exp(rng.normal(0, 0.12, cfg.days))
    total_jobs = cfg.jobs_per_gpu_day * capacity_gpus_by_day(cfg).sum()
    shares = np.array([t.share for t in cfg.teams])
    shares = shares / shares.sum()
    sub_t, sub_team, sub_k = [], [], []
    for ti, team in enumerate(cfg.teams):
        rate = _team_rate(cfg, ti, w, day_noise, rng)
        tasks_per_sub = 1 + team.array_prob * (team.array_mean - 1)
        lam = rate / rate.sum() * total_jobs * shares[ti] / tasks_per_sub
        counts = rng.poisson(lam)
        n = int(counts.sum())
        t = t0 + np.repeat(np.arange(nb, dtype=np.int64) * BIN_S, counts) + rng.integers(0, BIN_S, n)
        is_arr = rng.random(n) < team.array_prob
        # 1 + geometric(1 / (mean - 1)) has mean `array_mean` and at least 2 tasks
        k = np.where(is_arr, np.minimum(1 + rng.geometric(1 / max(team.array_mean - 1, 1.01), n), 1000), 1)
        sub_t.append(t)
        sub_team.append(np.full(n, ti, np.int16))
        sub_k.append(k)
    t = np.concatenate(sub_t)
    order = np.argsort(t, kind="stable")
    t, team, k = t[order], np.concatenate(sub_team)[order], np.concatenate(sub_k)[order]
    return _expand(cfg, rng, users, t, team, k), users


def _expand(cfg: Config, rng, users: Users, sub_t, sub_team, sub_k) -> Jobs:
    """Submissions -> one row per job allocation, with every attribute sampled."""
    nsub = len(sub_t)
    # Job ids: a submission takes one id; an array takes one id per task, its master id going to the last task.
    first_id = 4_200_001
    ids_start = first_id + np.concatenate([[0], np.cumsum(sub_k)[:-1]]).astype(np.int64)
    sub = np.repeat(np.arange(nsub), sub_k)
    n = len(sub)
    pos = np.arange(n) - np.repeat(np.cumsum(sub_k) - sub_k, sub_k)
    k = sub_k[sub]
    is_arr = k > 1
    job_id = np.where(~is_arr | (pos == k - 1), ids_start[sub], ids_start[sub] + pos + 1)
    array_id = np.where(is_arr, ids_start[sub], -1)
    task = np.where(is_arr, pos, -1)
    team = sub_team[sub]
    submit = sub_t[sub]
    teams = cfg.teams
    tp = lambda attr: np.array([getattr(tm, attr) for tm in teams])  # noqa: E731

    # user: Zipf-like activity inside the team, the same user for every task of an array
    nusers = np.array([team_users(cfg, tm) for tm in teams])
    team_first = np.concatenate([[0], np.cumsum(nusers)[:-1]])
    zipf_u = rng.random(nsub)
    user_in_team = np.floor(nusers[sub_team] * zipf_u ** 1.8).astype(np.int64)
    user = (team_first[sub_team] + user_in_team)[sub]

    # partition: preemptible share, else the team's pool preference; arrays stay on one partition
    part_names = [p.name for p in cfg.partitions]
    p_h100, p_a100, p_pre = part_names.index("h100"), part_names.index("a100"), part_names.index("preempt")
    u = rng.random(nsub)
    sub_part = np.where(u < tp("preempt")[sub_team], p_pre,
                        np.where(rng.random(nsub) < tp("h100")[sub_team], p_h100, p_a100))
    partition = sub_part[sub].astype(np.int8)

    # size: per-team weights; arrays and preemptible jobs stay within a node (arrays mostly 1 GPU)
    size_w = np.array([tm.sizes for tm in teams], dtype=float)
    cum = np.cumsum(size_w / size_w.sum(axis=1, keepdims=True), axis=1)
    sub_size_idx = (rng.random(nsub)[:, None] > cum[sub_team]).sum(axis=1)
    sub_size_idx = np.where(sub_k > 1, np.minimum(sub_size_idx, 2) * (rng.random(nsub) < 0.3), sub_size_idx)
    sub_size_idx = np.where(sub_part == p_pre, np.minimum(sub_size_idx, 3), sub_size_idx)
    sizes = np.array(SIZES)[sub_size_idx]
    pool_of_part = {i: p.pools for i, p in enumerate(cfg.partitions)}
    max_gang = np.array([min(cfg.max_gang(pl) for pl in cfg.pools if pl.name in pool_of_part[i])
                         for i in range(len(cfg.partitions))])
    sizes = np.minimum(sizes, max_gang[sub_part])
    gpus = sizes[sub].astype(np.int32)
    nodes = np.maximum(1, gpus // GPUS_PER_NODE).astype(np.int32)

    # runtime kind: team mix; gangs lean to long runs; every task of an array has the same kind
    kind_w = np.array([tm.kinds for tm in teams], dtype=float)
    kcum = np.cumsum(kind_w / kind_w.sum(axis=1, keepdims=True), axis=1)
    sub_kind = (rng.random(nsub)[:, None] > kcum[sub_team]).sum(axis=1)
    gang = sizes > GPUS_PER_NODE
    sub_kind = np.where(gang & (rng.random(nsub) < 0.4), np.minimum(sub_kind + 1, 3), sub_kind)
    kind = sub_kind[sub].astype(np.int8)

    idle = rng.random(n) < tp("idle_jobs")[team]
    kind = np.where(idle & (kind != 3), 1, kind).astype(np.int8)  # idle holders are interactive sessions
    stall = ~idle & (rng.random(n) < tp("stall_jobs")[team])

    med = np.array([KIND_RUNTIME[kd][0] for kd in KINDS])[kind]
    sig = np.array([KIND_RUNTIME[kd][1] for kd in KINDS])[kind]
    med = med * np.where(idle, 4.0, 1.0) * (1 + 0.15 * np.log2(gpus))
    sub_noise = rng.normal(0, 1, nsub)[sub]  # array tasks share most of their runtime
    z = np.where(is_arr, 0.85 * sub_noise + 0.5 * rng.normal(0, 1, n), rng.normal(0, 1, n))
    work = np.clip(med * np.exp(sig * z), 5, 30 * 86400)

    pmax = np.array([p.max_time_s for p in cfg.partitions])[partition]
    qos = np.where(tp("qos")[team] == "high", 1, 0)
    debug = (kind == 0) & (rng.random(n) < 0.35) & (qos == 0)
    qos = np.where(debug, 2, qos).astype(np.int8)
    pmax = np.where(debug, 3600, pmax)
    under = rng.random(n) < np.where(idle, 0.6, 0.05)
    limit = _limits(work, under, pmax, rng)

    plan, run_s, exit_code = _outcomes(cfg, rng, team, kind, work, limit)
    patience = np.where(rng.random(n) < 0.4, np.exp(rng.normal(np.log(8 * 3600), 1.0, n)), np.inf)
    requeue = (kind != 1) & (rng.random(n) < 0.8)

    base_util = tp("util")[team]
    util = np.clip(rng.beta(8, 3, n) * base_util / (8 / 11), 0.02, 0.98)
    util = np.where(idle, rng.uniform(0.0, 0.06, n), util)
    names = np.array([NAME_LIST.index(JOB_NAMES[KINDS[kd]][0]) for kd in range(len(KINDS))])
    per_kind = np.array([len(JOB_NAMES[kd]) for kd in KINDS])
    name = names[kind] + (rng.integers(0, 1 << 30, nsub)[sub] % per_kind[kind])
    # CPUs and memory in proportion to GPUs, never more than the smallest node the partition may use holds
    pools_of = [[pl for pl in cfg.pools if pl.name in part.pools] for part in cfg.partitions]
    node_cpus = np.array([min(pl.cpus for pl in pp) for pp in pools_of])[partition]
    node_mem = np.array([min(pl.mem_mib for pl in pp) for pp in pools_of])[partition]
    per_gpu_node = np.minimum(gpus, GPUS_PER_NODE)
    cpus = np.minimum(per_gpu_node * np.where(rng.random(nsub) < 0.5, 16, 24)[sub], node_cpus) * nodes
    mem_node = np.minimum(per_gpu_node * np.where(rng.random(nsub) < 0.6, 96_000, 120_000)[sub],
                          (node_mem * 0.9).astype(np.int64) // 1000 * 1000)
    mem = mem_node * nodes
    typed = (rng.random(nsub) < 0.55)[sub]
    return Jobs(job_id=job_id.astype(np.int64), array_id=array_id.astype(np.int64), task=task.astype(np.int64),
                array_last=is_arr & (pos == k - 1), submit=submit.astype(np.int64), team=team, user=user,
                partition=partition, qos=qos, gpus=gpus, nodes=nodes, kind=kind, work_s=work,
                limit_s=limit.astype(np.int64), plan=plan, run_s=run_s, exit_code=exit_code,
                patience_s=patience, requeue=requeue, util=util, idle=idle, stall=stall,
                name=name.astype(np.int16), cpus=cpus.astype(np.int32), mem_mib=mem.astype(np.int64),
                typed_req=typed, resv=np.full(n, -1, np.int8))


def _outcomes(cfg: Config, rng, team, kind, work, limit):
    """Planned end state, run time (s) and exit code of every job, if it runs undisturbed."""
    n = len(work)
    fail_mult = np.array([t.fail for t in cfg.teams])[team]
    probs = np.array([OUTCOME[k] for k in KINDS])[kind]
    p_fail = np.minimum(probs[:, 0] * fail_mult, 0.8)
    u = rng.random(n)
    plan = np.full(n, COMPLETED, np.int8)
    plan = np.where(u < p_fail, FAILED, plan)
    plan = np.where((u >= p_fail) & (u < p_fail + probs[:, 1]), OUT_OF_MEMORY, plan)
    plan = np.where((u >= p_fail + probs[:, 1]) & (u < p_fail + probs[:, 1] + probs[:, 2]), CANCELLED, plan)
    # failures come early (crashes at start-up dominate); cancels anywhere in the run
    frac = np.where(plan == CANCELLED, rng.uniform(0.2, 1.0, n), rng.beta(0.6, 3.0, n))
    stop = np.where(plan == COMPLETED, work, np.maximum(1.0, work * frac))
    overrun = rng.integers(0, 90, n)
    timeout = stop > limit
    plan = np.where(timeout, TIMEOUT, plan).astype(np.int8)
    run_s = np.where(timeout, limit + overrun, np.ceil(stop)).astype(np.int64)
    exit_code = np.where(plan == FAILED, FAIL_EXIT[rng.integers(0, len(FAIL_EXIT), n)], 0).astype(np.int16)
    return plan, run_s, exit_code
