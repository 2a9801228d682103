"""numpy kernels for piecewise-constant quantities over time: running sums by group and integrals per hour.

Window-function cumulative sums and per-hour splitting of intervals (generate_series + GROUP BY) cost
microseconds a row in DuckDB; these are linear passes over arrays. Times are epoch microseconds (int64).
"""
from __future__ import annotations

import math

import numpy as np

HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US


def group_cumsum(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sum of ``x`` restarting wherever ``starts`` is True (rows sorted by group)."""
    c = np.cumsum(x)
    before = c - x
    return c - before[np.maximum.accumulate(np.where(starts, np.arange(len(x)), 0))]


#: Most (group x hour) cells one pass holds in memory (per rate: 8 bytes each); more groups go in batches.
MAX_CELLS = 4_000_000


def hour_integrals(group: np.ndarray, t0: np.ndarray, t1: np.ndarray, rates: dict[str, np.ndarray],
                   period_us: int = HOUR_US) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Integrate rates held on intervals [t0, t1) (epoch microseconds) per group and UTC hour (or another
    ``period_us``, e.g. DAY_US: UTC days).

    Each interval adds rate x its microseconds inside its first and last period, and rate x one period to every
    period between (through a difference array). Returns (group, period start in epoch microseconds,
    {name: rate-seconds}) for every (group, period) any interval touches; ``group`` are non-negative integers.
    Memory stays bounded: groups are integrated in batches of at most MAX_CELLS (group x period) cells."""
    keep = t1 > t0
    group, t0, t1 = group[keep], t0[keep], t1[keep]
    rates = {k: v[keep] for k, v in rates.items()}
    if not len(group):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), {k: np.zeros(0) for k in rates}
    hours = int((t1.max() - 1) // period_us - t0.min() // period_us) + 2
    per_batch = max(1, MAX_CELLS // hours)
    dense = dense_unique(group)
    if len(dense[0]) <= per_batch:
        return _period_integrals(group, t0, t1, rates, period_us, dense)
    order = np.argsort(group, kind="stable")
    group, t0, t1 = group[order], t0[order], t1[order]
    rates = {k: v[order] for k, v in rates.items()}
    firsts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    bounds = np.r_[firsts[::per_batch], len(group)]
    parts = [_period_integrals(group[a:b], t0[a:b], t1[a:b], {k: v[a:b] for k, v in rates.items()}, period_us)
             for a, b in zip(bounds[:-1], bounds[1:])]
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            {k: np.concatenate([p[2][k] for p in parts]) for k in rates})


def dense_unique(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(group, return_inverse=True)`` for non-negative integers: by counting when they are dense (a
    sort of millions of rows costs more than the integration it feeds), else by sorting."""
    top = int(group.max()) + 1 if len(group) else 0
    if top > 4 * len(group) + 1_000_000:
        return np.unique(group, return_inverse=True)
    present = np.bincount(group, minlength=top) > 0
    return np.flatnonzero(present), (np.cumsum(present) - 1)[group]


def _period_integrals(group, t0, t1, rates, period, dense=None):
    base = int(t0.min()) // period
    h0, h1 = t0 // period - base, (t1 - 1) // period - base
    nh = int(h1.max()) + 2
    ugroup, grow = dense if dense is not None else dense_unique(group)
    key0, key1 = grow * nh + h0, grow * nh + h1
    same = h0 == h1
    first = np.where(same, t1, (h0 + base + 1) * period) - t0          # microseconds in the first period
    last = np.where(same, 0, t1 - (h1 + base) * period)                # ... in the last one (if another)
    between = (~same) * period
    size = len(ugroup) * nh
    out, touched = {}, np.zeros(size, bool)
    touched[key0] = True
    touched[key1] = True
    for name, v in rates.items():
        part = np.bincount(key0, v * first, size) + np.bincount(key1, v * last, size)
        diff = np.bincount(key0 + 1, v * between, size + 1)[:size] - np.bincount(key1, v * between, size)
        out[name] = (part + np.cumsum(diff.reshape(len(ugroup), nh), axis=1).ravel()) / 1e6
    full = np.cumsum(np.bincount(key0 + 1, between, size + 1)[:size].reshape(len(ugroup), nh)
                     - np.bincount(key1, between, size).reshape(len(ugroup), nh), axis=1).ravel() > 0
    idx = np.flatnonzero(touched | full)
    return ugroup[idx // nh], (base + idx % nh) * period, {k: v[idx] for k, v in out.items()}


def decayed_day_integrals(group: np.ndarray, t0: np.ndarray, t1: np.ndarray, w: np.ndarray,
                          half_life_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group and UTC day D that intervals [t0, t1) (epoch microseconds, weight ``w``) touch: the sum of
    w x integral over the interval's part in D of 2^((t - D) / half-life) dt, in weight-seconds.

    Decaying to any later time T multiplies a day's value by 2^(-(T - D) / half-life), so a daily rollup of
    these answers exponentially decayed usage (Slurm's PriorityDecayHalfLife) at any time exactly. Intervals
    are split at midnights (one row per interval and day it covers). Returns (group, day start in epoch
    microseconds, value)."""
    keep = t1 > t0
    group, t0, t1, w = group[keep], t0[keep], t1[keep], w[keep]
    if not len(group):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    d0 = t0 // DAY_US
    n = (t1 - 1) // DAY_US - d0 + 1
    idx = np.repeat(np.arange(len(t0)), n)
    day = d0[idx] + np.arange(len(idx)) - np.repeat(np.cumsum(n) - n, n)
    a = (np.maximum(t0[idx], day * DAY_US) - day * DAY_US) / 1e6
    z = (np.minimum(t1[idx], (day + 1) * DAY_US) - day * DAY_US) / 1e6
    k = math.log(2) / half_life_s
    # 2^(z/h) - 2^(a/h) written with expm1: exact for short pieces too
    val = w[idx] * np.exp(k * a) * np.expm1(k * (z - a)) / k
    dmin = int(day.min())
    span = int(day.max()) - dmin + 1
    key, inv = dense_unique(group[idx].astype(np.int64) * span + (day - dmin))
    return key // span, (key % span + dmin) * DAY_US, np.bincount(inv, val, len(key))
