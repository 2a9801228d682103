"""Bagged Theta for histories too short to backtest (Bergmeir, Hyndman & Benítez 2016).

"Bagging exponential smoothing methods using STL decomposition and Box-Cox transformation" (IJF 32(2)): the
history is Box-Cox transformed (lambda in [0, 1] by Guerrero's method), split by STL into season, trend and
remainder, and the remainder resampled by a moving block bootstrap (blocks of two seasons); each bootstrapped
series (season + trend + resampled remainder, transformed back) is forecast, and the forecasts are aggregated.
The first series is the history itself.

Why here: a pool a few weeks old cannot be backtested at the horizon asked, so no combination can be weighed
and one model forecasts it (Theta, the single method that needs the least data). Its smoothing weight and line,
fitted on 30-45 noisy days, follow the last few days: Philly's first daily h = 28 fold ends on two days of 391
and 412 active nodes after four weeks near 300, Theta (alpha 0.91) forecast 409 and the month after ran at 312.
In the bootstraps those two days' excess is remainder, resampled through the history; the median of their
forecasts, 337, does not hang on them (docs/FORECAST.md, run 20).

Aggregation is the median of the bootstrapped forecasts, not the mean (the reference implementations' choice):
transformed back from Box-Cox the forecasts are skewed, and a few bootstraps whose line runs away pull a mean
(Kourentzes, Barrow & Crone 2014 on ensemble operators). Needs STL, so at least two seasons and one period;
shorter histories are forecast by Theta unbagged. Units are those of the series; deterministic (fixed seed).
"""
from __future__ import annotations

import numpy as np

from models.forecasting.mstl import stl
from models.forecasting.theta import ThetaPaths, theta_matrix

#: Bootstrapped series per forecast, the history itself included (Bergmeir et al.'s 100).
BOOTSTRAPS = 100
LAMBDAS = np.linspace(0.0, 1.0, 101)
SEED = 20161


def can_bag(n: int, m: int) -> bool:
    """Whether a history of n periods with season m can be bagged: STL needs more than two full seasons."""
    return m > 1 and n >= 2 * m + 1


def guerrero_lambda(y: np.ndarray, m: int) -> float:
    """Box-Cox lambda in [0, 1] that makes the standard deviation of season-long blocks most nearly proportional
    to a power of their mean (Guerrero 1993: the lambda minimising the coefficient of variation of
    sd_b / mean_b^(1 - lambda) over the blocks, the most recent whole blocks). 1 (no transform) for a history
    with zeros or negatives, where the log and small lambdas are not defined or explode."""
    k = max(m, 2)
    blocks = len(y) // k
    if blocks < 2 or y.min() <= 0:
        return 1.0
    x = y[len(y) - blocks * k:].reshape(blocks, k)
    mean, sd = x.mean(axis=1), x.std(axis=1, ddof=1)
    if not np.any(sd > 0):
        return 1.0                   # flat blocks: nothing to stabilise
    ratio = sd[None, :] / mean[None, :] ** (1 - LAMBDAS[:, None])
    cv = ratio.std(axis=1, ddof=1) / ratio.mean(axis=1)
    return float(LAMBDAS[int(np.argmin(cv))])


def box_cox(y: np.ndarray, lam: float) -> np.ndarray:
    return np.log(y) if lam == 0 else (y ** lam - 1) / lam


def inv_box_cox(z: np.ndarray, lam: float) -> np.ndarray:
    """Inverse of `box_cox`; values below the transform's range (lam·z + 1 < 0) map to 0."""
    return np.exp(z) if lam == 0 else np.maximum(lam * z + 1, 0.0) ** (1 / lam)


def block_bootstrap(rem: np.ndarray, block: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """k resamples (k, n) of rem: blocks of ``block`` consecutive values from random starts, joined, and a
    random offset into the first block dropped, so that block edges do not always fall on the same periods."""
    n = len(rem)
    nblocks = n // block + 2
    starts = rng.integers(0, n - block + 1, size=(k, nblocks))
    joined = rem[(starts[:, :, None] + np.arange(block)).reshape(k, -1)]
    cols = rng.integers(0, block, size=k)[:, None] + np.arange(n)
    return np.take_along_axis(joined, cols, axis=1)


def bootstrap_series(y: np.ndarray, m: int, k: int = BOOTSTRAPS, seed: int = SEED) -> tuple[np.ndarray, float]:
    """(k series (k, n), the Box-Cox lambda): y itself first, then k - 1 bootstraps of it (module docstring);
    non-negative when y is."""
    lam = guerrero_lambda(y, m)
    z = box_cox(y, lam) if lam != 1.0 else y.astype(float)
    seasonal, trend = stl(z, m)
    rem = z - seasonal - trend
    resampled = seasonal + trend + block_bootstrap(rem, 2 * m, k - 1, np.random.default_rng(seed))
    out = inv_box_cox(resampled, lam) if lam != 1.0 else resampled
    if y.min() >= 0:
        out = np.maximum(out, 0.0)
    return np.vstack([y[None, :], out]), lam


def bagged_fit(y: np.ndarray, m: int, h: int, k: int = BOOTSTRAPS) -> tuple[ThetaPaths, float]:
    """(Theta's forecast of the history itself, the first of the bootstrapped series, with its point forecast
    replaced by the median of all k series' forecasts h steps ahead (never below 0 when the history is not);
    the Box-Cox lambda) of a history that `can_bag`. The sd and detail stay those of the history's own fit."""
    y = np.asarray(y, dtype=float)
    series, lam = bootstrap_series(y, m, k)
    fc = theta_matrix(series, m, h)
    point = np.median(fc.point, axis=0)
    return ThetaPaths((np.maximum(point, 0.0) if y.min() >= 0 else point)[None, :], fc.sd[:1], fc.detail[:1]), lam


def bagged_theta(y: np.ndarray, m: int, h: int, k: int = BOOTSTRAPS) -> tuple[np.ndarray, float]:
    """(median over the bootstrapped series of their Theta forecasts h steps ahead, the Box-Cox lambda): the point
    forecast of `bagged_fit`."""
    fit, lam = bagged_fit(y, m, h, k)
    return fit.point[0], lam
