"""STL and MSTL decompositions (Cleveland et al. 1990; Bandara, Hyndman & Bergmeir 2021), vectorised with numpy.

STL splits a series into trend, seasonal and remainder with loess smoothers; MSTL repeats STL once per season
length (e.g. 24 and 168 for hourly demand: the daily and the weekly cycle) so that several cycles are taken out
one after the other. The MSTL forecaster then forecasts the seasonally adjusted series (trend + remainder) with
the Theta models (models/theta.py) and adds each seasonal component's last cycle (its seasonal naive forecast),
as R's ``forecast::stlf`` / statsforecast's MSTL do with a non-seasonal trend model.

Loess with tricube weights over the q nearest neighbours, as in the STL Fortran code (netlib ``stl``):
degree 0 for the cycle-subseries, 1 for the low-pass and trend smoothers (R's defaults). Every smoothed value is a weighted sum of q neighbours, so one smoother is a (targets x q) weight
matrix built once per (length, q) and applied to every row (every cycle-subseries) with one gather. Inner loop
without robustness weights (two passes), as R's ``mstl`` with its defaults. Units are those of the series.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


def _odd(x: float) -> int:
    n = int(math.ceil(x))
    return n if n % 2 else n + 1


@lru_cache(maxsize=256)
def loess_op(n: int, q: int, extend: bool, degree: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (targets, min(q, n)): the loess of degree 0 or 1 of a length-n series at
    positions 0..n-1, or with ``extend`` at -1..n (one step beyond each end, as STL's cycle-subseries smoother
    needs).

    Weights: tricube of |j - x| / h, h the distance to the farthest of the q nearest points (+ (q - n)/2 when
    q > n), then the local linear fit's hat row w_j·(1 + (x - a)(j - a)/b) / Σw, a the weighted mean position,
    b the weighted spread (left out when the points do not spread, as the Fortran code does)."""
    at = np.arange(-1, n + 1, dtype=float) if extend else np.arange(n, dtype=float)
    w = min(q, n)
    left = np.clip(np.round(at).astype(int) - (w - 1) // 2, 0, n - w)
    j = left[:, None] + np.arange(w)
    h = np.maximum(at - left, left + w - 1 - at) + (max(q - n, 0) // 2)
    r = np.abs(j - at[:, None]) / np.maximum(h, 1e-12)[:, None]
    wt = np.where(r <= 0.999, np.where(r <= 0.001, 1.0, (1 - r ** 3) ** 3), 0.0)
    wt /= wt.sum(axis=1, keepdims=True)
    if degree == 0:
        j.setflags(write=False)
        wt.setflags(write=False)
        return j, wt
    a = (wt * j).sum(axis=1)
    b = (wt * (j - a[:, None]) ** 2).sum(axis=1)
    ok = np.sqrt(b) > 0.001 * (n - 1)
    lin = 1 + (at - a)[:, None] * (j - a[:, None]) / np.where(ok, b, 1.0)[:, None]
    wt = np.where(ok[:, None], wt * lin, wt)
    j.setflags(write=False)
    wt.setflags(write=False)
    return j, wt


def loess(x: np.ndarray, q: int, extend: bool = False, degree: int = 1) -> np.ndarray:
    """Loess of each row of x (..., n) (see `loess_op`)."""
    j, wt = loess_op(x.shape[-1], q, extend, degree)
    return np.einsum("...tk,tk->...t", x[..., j], wt)


def _ma(x: np.ndarray, k: int) -> np.ndarray:
    c = np.r_[0.0, np.cumsum(x)]
    return (c[k:] - c[:-k]) / k


def _cycle_smooth(x: np.ndarray, m: int, ns: int) -> np.ndarray:
    """STL step 2: loess of every cycle-subseries (positions k, k+m, ...), each extended one cycle at both ends;
    returns C of length n + 2m (C[t + m] is the smoothed value at time t, t = -m .. n+m-1). Degree 0 (local
    means), R's ``stl`` default and statsforecast's MSTL setting: a local line extrapolated one cycle beyond
    the end makes the last cycle, which the forecast repeats, swing with the subseries' ends."""
    n = len(x)
    out = np.empty(n + 2 * m)
    full = n // m                                       # subseries k < n % m have one point more
    for length, ks in ((full + 1, np.arange(n % m)), (full, np.arange(n % m, m))):
        if len(ks) == 0 or length == 0:
            continue
        rows = x[ks[:, None] + m * np.arange(length)]
        sm = loess(rows, ns, extend=True, degree=0)      # (len(ks), length + 2): at -1 .. length
        out[ks[:, None] + m * np.arange(length + 2)] = sm
    return out


@dataclass
class Decomposition:
    trend: np.ndarray
    seasonal: np.ndarray        # (k, n): one row per season length, in ``periods`` order
    remainder: np.ndarray
    periods: tuple[int, ...]


def stl(y: np.ndarray, m: int, ns: int = 11, inner: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(seasonal, trend) of y with period m, seasonal loess window ns (odd), low-pass window the next odd
    number >= m, trend window the next odd >= 1.5m/(1 - 1.5/ns) (Cleveland et al.'s defaults)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    ns = _odd(max(ns, 7))
    nl, nt = _odd(m), _odd(1.5 * m / (1 - 1.5 / ns))
    trend = np.zeros(n)
    seasonal = np.zeros(n)
    for _ in range(inner):
        c = _cycle_smooth(y - trend, m, ns)
        low = loess(_ma(_ma(_ma(c, m), m), 3), nl)
        seasonal = c[m:m + n] - low
        trend = loess(y - seasonal, nt)
    return seasonal, trend


def mstl(y: np.ndarray, periods: tuple[int, ...], iterate: int = 2) -> Decomposition:
    """MSTL: STL once per period (shortest first, seasonal windows 11, 15, ... as R's ``mstl``), repeated
    ``iterate`` times, each pass re-estimating a component from the series less the others. Periods with fewer
    than two full cycles in y are left out."""
    y = np.asarray(y, dtype=float)
    periods = tuple(sorted(p for p in periods if p > 1 and len(y) >= 2 * p))
    seasonal = np.zeros((len(periods), len(y)))
    if not periods:
        trend = loess(y, _odd(max(len(y) // 10, 3))) if len(y) > 3 else y.copy()
        return Decomposition(trend, seasonal, y - trend, periods)
    adjusted = y.copy()
    trend = y
    for _ in range(iterate if len(periods) > 1 else 1):
        for i, m in enumerate(periods):
            adjusted = adjusted + seasonal[i]
            seasonal[i], trend = stl(adjusted, m, ns=7 + 4 * (i + 1))
            adjusted = adjusted - seasonal[i]
    return Decomposition(trend, seasonal, adjusted - trend, periods)


def seasonal_forecast(dec: Decomposition, h: int) -> np.ndarray:
    """Sum over components of each one's last cycle repeated (seasonal naive of the seasonal component)."""
    n = dec.seasonal.shape[1]
    out = np.zeros(h)
    j = np.arange(h)
    for row, m in zip(dec.seasonal, dec.periods):
        out += row[n - m + j % m]
    return out


def seasonal_strength(y: np.ndarray, m: int) -> float:
    """Wang, Smith & Hyndman (2006): max(0, 1 - var(R)/var(S + R)) from STL; 0 with under two cycles or a
    constant series."""
    y = np.asarray(y, dtype=float)
    if m < 2 or len(y) < 2 * m or np.ptp(y) == 0:
        return 0.0
    s, t = stl(y, m)
    r = y - s - t
    v = float(np.var(s + r))
    return max(0.0, 1 - float(np.var(r)) / v) if v > 0 else 0.0
