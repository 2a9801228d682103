"""numpy kernels for piecewise-constant quantities over time: running sums by group and integrals per hour.

Window-function cumulative sums and per-hour splitting of intervals (generate_series + GROUP BY) cost
microseconds a row in DuckDB; these are linear passes over arrays. Times are epoch microseconds (int64).
"""
from __future__ import annotations

import numpy as np

HOUR_US = 3_600_000_000


def group_cumsum(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sum of ``x`` restarting wherever ``starts`` is True (rows sorted by group)."""
    c = np.cumsum(x)
    before = c - x
    return c - before[np.maximum.accumulate(np.where(starts, np.arange(len(x)), 0))]


def hour_integrals(group: np.ndarray, t0: np.ndarray, t1: np.ndarray, rates: dict[str, np.ndarray]
                   ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Integrate rates held on intervals [t0, t1) (epoch microseconds) per group and UTC hour.

    Each interval adds rate x its microseconds inside its first and last hour, and rate x one hour to every hour
    between (through a difference array). Returns (group, hour start in epoch microseconds, {name: rate-seconds})
    for every (group, hour) any interval touches; ``group`` are small non-negative integers."""
    keep = t1 > t0
    group, t0, t1 = group[keep], t0[keep], t1[keep]
    if not len(group):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), {k: np.zeros(0) for k in rates}
    base = int(t0.min()) // HOUR_US
    h0, h1 = t0 // HOUR_US - base, (t1 - 1) // HOUR_US - base
    nh = int(h1.max()) + 2
    ugroup, grow = np.unique(group, return_inverse=True)
    key0, key1 = grow * nh + h0, grow * nh + h1
    same = h0 == h1
    first = np.where(same, t1, (h0 + base + 1) * HOUR_US) - t0          # microseconds in the first hour
    last = np.where(same, 0, t1 - (h1 + base) * HOUR_US)                # ... in the last hour (if another)
    between = (~same) * HOUR_US
    size = len(ugroup) * nh
    out, touched = {}, np.zeros(size, bool)
    touched[key0] = True
    touched[key1] = True
    for name, v in rates.items():
        v = v[keep]
        part = np.bincount(key0, v * first, size) + np.bincount(key1, v * last, size)
        diff = np.bincount(key0 + 1, v * between, size + 1)[:size] - np.bincount(key1, v * between, size)
        out[name] = (part + np.cumsum(diff.reshape(len(ugroup), nh), axis=1).ravel()) / 1e6
    full = np.cumsum(np.bincount(key0 + 1, between, size + 1)[:size].reshape(len(ugroup), nh)
                     - np.bincount(key1, between, size).reshape(len(ugroup), nh), axis=1).ravel() > 0
    idx = np.flatnonzero(touched | full)
    return ugroup[idx // nh], (base + idx % nh) * HOUR_US, {k: v[idx] for k, v in out.items()}
