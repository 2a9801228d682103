"""Demand forecasts with honest uncertainty: seasonal naive, ETS, Theta, ARIMA, MSTL and their combination.

numpy and scipy only. One series at a time (`forecast_series`) or a long table of many (`forecast_table`).
For each series every candidate is scored by a rolling-origin backtest (mean MASE over horizons 1..H); the
forecast combines the candidates the backtest does not show clearly worse than the best, weighted by inverse
MASE (no preferred model), unless selecting the best single clearly beats that combination out of sample;
its 80 % and 95 % prediction intervals are calibrated on the backtest's standardised errors (split conformal
with the finite-sample correction), and the backtest coverage of those intervals (leave-one-origin-out, so
not in-sample) is reported beside them. Gaps, zeros, short histories and level shifts are handled and
explained in ``notes``. Equations and sources: docs/FORECAST.md, which
follows ../shared/METRICS.md §4 (FPP3 §8, Hyndman et al. 2008 Table 6.1, statsmodels' ETS log-likelihood,
the M4 Theta benchmark code). Units are those of the input series (GPU-hours per bucket, GPUs, ...).
"""
from __future__ import annotations

import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import t as student_t

from models.forecasting.arima import arima_detail, arima_paths, auto_arima, fit_order
from models.forecasting.bagging import BOOTSTRAPS, bagged_fit, can_bag
from models.forecasting.ets import ETS_FORMS, ets_detail, ets_point, ets_sd, ets_states, ets_theta, fit_ets_forms
from models.forecasting.mstl import mstl, seasonal_forecast
from models.forecasting.theta import theta_paths, theta_rows

Z = {80: 1.2815515655446004, 95: 1.959963984540054}
LEVELS = (80, 95)
# Season length per frequency: weekly cycle for daily data, daily cycle for hourly data (METRICS.md §4).
SEASON = {"hour": 24, "day": 7, "week": 52, "month": 12}
# Season lengths MSTL takes out: hourly demand has a daily and a weekly cycle.
SEASONS = {"hour": (24, 168), "day": (7,), "week": (52,), "month": (12,)}
STEP = {"hour": np.timedelta64(1, "h"), "day": np.timedelta64(1, "D"), "week": np.timedelta64(7, "D")}


# ----------------------------------------------------------------------------- seasonal naive

def snaive(y: np.ndarray, m: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    """ŷ_{T+j} = y_{T+j-m(k+1)}, k = ⌊(j-1)/m⌋; sd_j = sigma·√(k+1), sigma² the mean squared seasonal
    difference (FPP3 §5.5). With fewer than m+1 points it is the naive (last value) method."""
    if len(y) <= m:
        m = 1
    j = np.arange(1, h + 1)
    point = y[len(y) - m + (j - 1) % m]
    diffs = y[m:] - y[:-m]
    sigma = math.sqrt(float(np.mean(diffs * diffs))) if len(diffs) else float("nan")
    return point, sigma * np.sqrt((j - 1) // m + 1)


# ----------------------------------------------------------------------------- errors

def mase_scale(y: np.ndarray, m: int) -> float:
    """In-sample mean absolute seasonal difference (M4's MASE denominator); lag 1 when the history is shorter
    than a season or flat at lag m; the mean level, then 1, when the series is constant."""
    for lag in (m, 1):
        if len(y) > lag:
            s = float(np.mean(np.abs(y[lag:] - y[:-lag])))
            if s > 0:
                return s
    s = float(np.mean(np.abs(y))) if len(y) else 0.0
    return s if s > 0 else 1.0


def smape(actual: np.ndarray, point: np.ndarray) -> np.ndarray:
    """200·|y - ŷ| / (|y| + |ŷ|), defined as 0 where both are 0 (zero demand forecast as zero is exact)."""
    den = np.abs(actual) + np.abs(point)
    return np.where(den > 0, 200 * np.abs(actual - point) / np.where(den > 0, den, 1), 0.0)


# ----------------------------------------------------------------------------- candidates

SINGLES = ("SeasonalNaive", "ETS", "Theta", "ARIMA", "MSTL")
CANDIDATES = (*SINGLES, "Combination")
KEEP_LEVEL = 0.8                        # one-sided confidence that a single is worse than the best, to drop it
SELECT_LEVEL = 0.95                     # one-sided confidence that selecting one single beats the combination
MIN_ORIGINS = 12


@dataclass
class Paths:
    """Forecasts of one candidate from K origins: point and model sd, each (K, h); ``warm`` what a refit on
    more data starts from (ETS: form -> parameters; ARIMA: the fit), ``weights`` a combination's members."""
    point: np.ndarray
    sd: np.ndarray
    detail: str = ""
    warm: object = None
    weights: dict = field(default_factory=dict)


#: ETS and ARIMA are fitted, and MSTL decomposed, on at most this many seasons before an origin (8 weeks of
#: hourly data, 56 weeks of daily): the cost grows with the length, and older cycles say little about the next.
FIT_SEASONS = 56


def _window(o: int, m: int) -> int:
    """First index of the fitting window that ends at origin o."""
    return max(0, o - FIT_SEASONS * max(m, 1))


def _ets_paths(y, m, origins, h, warm) -> Paths | None:
    forms = ETS_FORMS if not warm else tuple(warm)
    a = _window(origins[0], m)
    fits = fit_ets_forms(y[a:origins[0]], m, forms, warm=warm)
    if not fits:
        return None
    fit = min(fits.values(), key=lambda f: f.aicc)
    states = ets_states(fit, y[a:], [o - a for o in origins])
    return Paths(np.array([ets_point(fit, s, h) for s in states]), np.tile(ets_sd(fit, h), (len(origins), 1)),
                 ets_detail(fit), {fit.form: ets_theta(fit)})


def _arima_paths(y, m, origins, h, warm) -> Paths | None:
    """auto_arima at the first origin (or the warm fit's order refitted on y[:origins[0]], starting from its
    coefficients; kept as it is when the refit is not stationary), then its errors run on through y."""
    a = _window(origins[0], m)
    if warm is None:
        fit = auto_arima(y[a:origins[0]], m)
    else:
        fit = fit_order(y[a:origins[0]], warm.order, warm.cond, start=warm.coef) or warm
    if fit is None:
        return None
    point, sd = arima_paths(fit, y[a:], [o - a for o in origins], h)
    return Paths(point, np.tile(sd, (len(origins), 1)), arima_detail(fit), fit)


def _mstl_paths(y, periods, origins, h) -> Paths | None:
    """MSTL at every origin: each history decomposed (`models.mstl`), its seasonally adjusted part forecast by
    Theta (all origins in one matrix) and each seasonal component's last cycle added back."""
    decs = [mstl(y[_window(o, min(periods)):o], periods) for o in origins]
    if not decs[0].periods:
        return None
    fc = theta_rows([d.trend + d.remainder for d in decs], h)
    point = fc.point + np.array([seasonal_forecast(d, h) for d in decs])
    detail = f"MSTL periods {','.join(map(str, decs[-1].periods))}, trend {fc.detail[-1]}"
    return Paths(point, fc.sd, detail)


def candidate_paths(y: np.ndarray, m: int, origins: list[int], h: int, only: tuple[str, ...] = SINGLES,
                    warm: dict | None = None, periods: tuple[int, ...] | None = None) -> dict[str, Paths]:
    """The single candidates' forecasts from each origin (forecast of y[o:o+h] from y[:o]); ``only`` limits
    the set. Seasonal naive, Theta and MSTL are refitted at every origin (Theta for all origins at once);
    ETS (chosen by AICc) and ARIMA (stepwise order search) are fitted at the first origin and their states or
    errors then run on through later data with those parameters ("rolling origin with updating", Tashman
    2000), which keeps many series within the speed budget. With one origin at len(y) this is the final
    forecast; ``warm`` (a backtest's ETS forms and ARIMA fit) refits those only, starting from them.
    ``periods``: MSTL's season lengths (default m alone)."""
    warm = warm or {}
    out: dict[str, Paths] = {}
    if "SeasonalNaive" in only:
        sn = [snaive(y[:o], m, h) for o in origins]
        short = "naive: history shorter than a season" if origins[0] <= m else ""
        out["SeasonalNaive"] = Paths(np.array([p for p, _ in sn]), np.array([s for _, s in sn]), short)
    if "ETS" in only:
        out["ETS"] = _ets_paths(y, m, origins, h, warm.get("ETS"))
    if "Theta" in only:
        th = theta_paths(y, m, origins, h)
        out["Theta"] = Paths(th.point, th.sd, th.detail[-1]) if th is not None else None
    if "ARIMA" in only:
        out["ARIMA"] = _arima_paths(y, m, origins, h, warm.get("ARIMA"))
    if "MSTL" in only and min(origins) >= 3:
        out["MSTL"] = _mstl_paths(y, periods or (m,), origins, h)
    nonneg = bool(len(y) and y.min() >= 0)
    return {k: _clip(v, nonneg) for k, v in out.items() if v is not None}


def _clip(paths: Paths, nonneg: bool) -> Paths:
    if nonneg:
        paths.point = np.maximum(paths.point, 0.0)
    return paths


#: The model of a history too short to backtest at h: Theta, bagged where the history allows (`bagging`).
FALLBACK = "Theta"


def fallback_paths(y: np.ndarray, m: int, origins: list[int], h: int, k: int = BOOTSTRAPS) -> Paths | None:
    """The fallback's forecasts of y[o:o+h] from y[:o] per origin: Theta's, with the point forecast of each
    origin whose history `can_bag` replaced by bagged Theta's over k bootstrapped histories (the sd stays
    Theta's: the calibration that follows measures the bagged forecast's own errors against it). Theta is fitted
    on such a history once, as the first of its bootstrapped series (`bagged_fit`)."""
    if min(origins) < 3:
        return None
    plain = [o for o in origins if not can_bag(o, m)]
    rows = {}
    if plain:
        th = theta_paths(y, m, plain, h)
        rows = {o: (th.point[i], th.sd[i], th.detail[i]) for i, o in enumerate(plain)}
    for o in origins:
        if can_bag(o, m):
            fit = bagged_fit(y[:o], m, h, k)[0]
            rows[o] = (fit.point[0], fit.sd[0], f"{fit.detail[0]}; bagged over {k} bootstraps (median)")
    point, sd, detail = zip(*(rows[o] for o in origins))
    return _clip(Paths(np.array(point), np.array(sd), detail[-1]), bool(len(y) and y.min() >= 0))


def n_independent(k: int, step: int, horizon: int) -> float:
    """Independent forecast windows among k backtest origins ``step`` apart with windows of ``horizon``
    periods: together they cover (k-1)·step + horizon periods, i.e. 1 + (k-1)·step/horizon windows that do
    not overlap (k when the windows do not overlap at all)."""
    return min(float(k), 1 + (k - 1) * step / max(horizon, 1))


def clearly_worse(d: np.ndarray, n_eff: float, level: float = KEEP_LEVEL) -> bool | None:
    """Whether per-origin differences d = MASE(other) - MASE(reference) show the other worse with one-sided
    confidence ``level`` (paired t-test counting n_eff independent origins); None when n_eff <= 2 (too few
    independent origins to test)."""
    if n_eff <= 2:
        return None
    mean, sd = float(np.mean(d)), float(np.std(d, ddof=1))
    t = mean / (sd / math.sqrt(n_eff)) if sd > 0 else (math.inf if mean > 0 else 0.0)
    return t >= float(student_t.ppf(level, n_eff - 1))


#: Origins a single must lose at, every one of them, to be left out without a test (`dominated`).
DOMINATED_ORIGINS = 3


def dominated(d: np.ndarray) -> bool:
    """Whether per-origin differences d = MASE(other) - MASE(best) are positive at every origin, with at least
    DOMINATED_ORIGINS origins. The t-test of `clearly_worse` needs more than two independent windows; long
    horizons on short histories (28 days from 5 origins a week apart) have fewer, and then a model that loses
    at every origin was averaged in with a fifth of the weight. Losing everywhere is the evidence that is
    left: a sign test's 2^-K (0.125 at K = 3) if the origins were independent, weaker as they overlap, and the
    dropped model is still a candidate at the next refresh."""
    d = np.asarray(d, float)
    return len(d) >= DOMINATED_ORIGINS and bool(np.all(d > 0))


def combination_weights(mase_o: dict[str, np.ndarray], step: int = 1, horizon: int = 1) -> dict[str, float]:
    """Weights (summing to 1) of the singles that the backtest does not show clearly worse than the best one.

    ``mase_o``: per candidate, the mean MASE at each backtest origin. The best single is the lowest mean;
    another is left out when its per-origin MASE exceeds the best's with one-sided confidence KEEP_LEVEL
    (paired t-test on the differences, counting n_eff = 1 + (K-1)·step/horizon independent origins because
    the forecast windows of successive origins overlap when the horizon exceeds the step), or when it is
    worse than the best at every one of at least three origins (`dominated`). The others are weighted
    by inverse mean MASE. So a model that loses at every origin gets nothing, and models the backtest cannot
    tell apart are averaged (the combination "puzzle": averages of comparable forecasts beat picking one on a
    few noisy origins). With two independent origins or fewer the t-test cannot tell them apart: every single
    not dominated is kept."""
    singles = {c: np.asarray(v, float) for c, v in mase_o.items() if c in SINGLES and np.all(np.isfinite(v))}
    if not singles:
        return {}
    mean = {c: float(v.mean()) for c, v in singles.items()}
    best = min(mean, key=lambda c: (mean[c], SINGLES.index(c)))
    n_eff = n_independent(len(singles[best]), step, horizon)
    keep = [best] + [c for c, v in singles.items() if c != best and not clearly_worse(v - singles[best], n_eff)
                     and not dominated(v - singles[best])]
    if mean[best] <= 0:
        return {best: 1.0}
    inv = {c: mean[best] / mean[c] for c in keep}          # 1/MASE relative to the best: no overflow near 0
    total = sum(inv.values())
    return {c: v / total for c, v in sorted(inv.items(), key=lambda kv: -kv[1])}


def combine(members: dict[str, Paths], weights: dict[str, float]) -> Paths:
    """Weighted mean of the members' forecasts and of their sds (weights summing to 1)."""
    point = sum(w * members[c].point for c, w in weights.items())
    sd = sum(w * members[c].sd for c, w in weights.items())
    detail = " + ".join(f"{w:.2f} {c}" for c, w in weights.items())
    parts = "; ".join(f"{c}: {members[c].detail}" for c in weights if members[c].detail)
    return Paths(point, sd, detail + (f" ({parts})" if parts else ""), weights=dict(weights))


# ----------------------------------------------------------------------------- backtest, selection, calibration

@dataclass
class Backtest:
    """Rolling-origin backtest of every candidate on the series' own history.

    ``coverage`` is that of the calibrated intervals, each origin calibrated on the other origins only
    (leave-one-origin-out), so it is an out-of-sample estimate; ``coverage_raw`` is the model-based interval's.
    The combination's score is out-of-sample too: at each origin its members and weights come from the other
    origins' errors."""
    horizon: int
    origins: list[int]
    mase: dict[str, float]
    mase_by_h: dict[str, np.ndarray]
    smape: dict[str, float]
    coverage: dict[str, dict[int, float]]
    coverage_raw: dict[str, dict[int, float]]
    scale: dict[str, dict[int, float]]
    warm: dict = field(default_factory=dict)
    mase_o: dict[str, np.ndarray] = field(default_factory=dict)    # per origin: mean MASE over horizons 1..hb
    step: int = 1                                                 # periods between origins
    weights: dict[str, float] = field(default_factory=dict)       # the combination's, from every origin
    selection_o: np.ndarray | None = None    # per origin: MASE of the single selected on the other origins
    absu: dict[str, np.ndarray] = field(default_factory=dict)    # per candidate: sorted |error / model sd|
    basis: dict[str, str] = field(default_factory=dict)          # per candidate: "model" or "level" (`band_basis`)


def calibrated(bt: Backtest | None, name: str) -> bool:
    """Whether the backtest has enough errors of ``name`` to calibrate its intervals (three origins, ten errors),
    and its factors are numbers (`_calibrate`: not where the model claimed no uncertainty for the errors that
    set the quantile)."""
    return (bt is not None and name in bt.absu and len(bt.origins) >= 3 and bt.absu[name].size >= 10
            and all(math.isfinite(v) for v in bt.scale.get(name, {}).values()))


def backtest_origins(n: int, m: int, h: int, max_origins: int = 28) -> tuple[list[int], int]:
    """Origins (training lengths) and the backtest horizon hb = min(h, what the history allows).

    Origins step by min(hb, m) back from n - hb, at least max(MIN_ORIGINS, ⌈4m/hb⌉) of them (so short
    horizons still see a few seasons of errors), each keeping at least two seasons of training data."""
    min_train = max(2 * m, 8)
    hb = min(h, n - min_train)
    if hb < 1:
        return [], 0
    k = min(max_origins, max(MIN_ORIGINS, math.ceil(4 * m / hb)))
    step = max(1, min(hb, m))
    last = n - hb
    return sorted(last - i * step for i in range(k) if last - i * step >= min_train), hb


def conformal_rank(n: int, level: float) -> int:
    """0-based rank of the split-conformal quantile of n scores at coverage ``level``: the ⌈(n+1)·level⌉-th
    smallest (the finite-sample correction; the largest when that exceeds n)."""
    return min(n, math.ceil((n + 1) * level - 1e-9)) - 1


def _factor(q: float, lv: int) -> float:
    """c_L = q_L / z_L, infinite when the quantile is an error the model gave no sd for (`OUT_OF_ANY_BAND`): no
    width calibrates that (the factor used to be 1e12/z_L, and bands of 1e11 GPUs were drawn)."""
    return q / Z[lv] if q < OUT_OF_ANY_BAND else math.inf


def _calibrate(absu: np.ndarray) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """Scale factors c_L = q_L(|u|)/z_L of the standardised errors u = e/sd (rows = origins), q_L the
    split-conformal quantile with the finite-sample correction (`conformal_rank`), the raw coverage, and the
    leave-one-origin-out coverage of the calibrated intervals."""
    scale, cov, raw = {}, {}, {}
    k = absu.shape[0]
    # row i: the errors of every origin but i (leave-one-origin-out), for all origins at once, sorted
    others = (np.sort(np.broadcast_to(absu, (k, *absu.shape))[~np.eye(k, dtype=bool)].reshape(k, -1), axis=1)
              if k >= 3 else None)
    ordered = np.sort(absu, axis=None)
    for lv in LEVELS:
        raw[lv] = float(np.mean(absu <= Z[lv]))
        if k < 3 or absu.size < 10:
            scale[lv], cov[lv] = 1.0, raw[lv]
            continue
        scale[lv] = _factor(float(ordered[conformal_rank(ordered.size, lv / 100)]), lv)
        cov[lv] = float(np.mean(absu <= others[:, conformal_rank(others.shape[1], lv / 100)][:, None]))
    return scale, cov, raw


def _loo_combination(paths: dict[str, Paths], mase_o: dict[str, np.ndarray], step: int, horizon: int) -> Paths:
    """The combination at each origin with members and weights from the other origins' MASE only."""
    k = len(next(iter(mase_o.values())))
    point = np.empty_like(next(iter(paths.values())).point)
    sd = np.empty_like(point)
    for i in range(k):
        w = combination_weights({c: np.delete(v, i) for c, v in mase_o.items()}, step, horizon)
        point[i] = sum(wc * paths[c].point[i] for c, wc in w.items())
        sd[i] = sum(wc * paths[c].sd[i] for c, wc in w.items())
    return Paths(point, sd)


def _loo_selection(paths: dict[str, Paths], mase_o: dict[str, np.ndarray]) -> np.ndarray:
    """The forecasts of selecting the best single at each origin from the other origins' MASE only (the
    selection scored out of sample, like the combination)."""
    singles = [c for c in SINGLES if c in mase_o and c in paths and np.all(np.isfinite(mase_o[c]))]
    k = len(mase_o[singles[0]])
    point = np.empty_like(paths[singles[0]].point)
    for i in range(k):
        best = min(singles, key=lambda c: (float(np.delete(mase_o[c], i).mean()), SINGLES.index(c)))
        point[i] = paths[best].point[i]
    return point


#: Exponent of the level ratio that brings each origin's backtest errors to the current level (`level_factor`):
#: 0.5, errors growing with the square root of the level (count-like demand: variance ∝ level).
LEVEL_POWER = 0.5
#: ... kept within [1/3, 3]: a pool that grew from almost nothing (level 0.1 to 100) would otherwise give its
#: early errors 30 times their weight and bands far wider than any error it ever made.
LEVEL_CLIP = 3.0


def level_factor(y: np.ndarray, origins: list[int], m: int) -> np.ndarray:
    """(K, 1) factors (L_now / L_o)^LEVEL_POWER that scale each backtest origin's standardised errors to the
    level the forecast starts from: L_o the mean of the season before origin o, L_now that of the last season.

    Why: demand's errors grow with its level, and the models' sd does not follow it between origins (ETS and
    ARIMA keep the sd of their fit at the first origin, Theta's is the RMSE over the whole history), so on a
    growing series the early origins' errors, divided by that sd, understate what the forecast from today's
    level will make. Only for non-negative series (levels of demand); 1 where a level is 0; within
    [1/LEVEL_CLIP, LEVEL_CLIP]."""
    if len(y) == 0 or y.min() < 0:
        return np.ones((len(origins), 1))
    now, lv = levels(y, [len(y)], m)[0], levels(y, origins, m)
    ok = (lv > 0) & (now > 0)
    f = np.where(ok, (now / np.where(ok, lv, 1.0)) ** LEVEL_POWER, 1.0)
    return np.clip(f, 1 / LEVEL_CLIP, LEVEL_CLIP)[:, None]


def levels(y: np.ndarray, origins: list[int], m: int) -> np.ndarray:
    """The level at each origin o: the mean of the season before it (y[o-m:o]), in the series' unit."""
    w = max(m, 1)
    return np.array([float(np.mean(y[max(0, o - w):o])) if o > 0 else 0.0 for o in origins])


def level_sd(y: np.ndarray, origins: list[int], m: int, sd: np.ndarray) -> np.ndarray:
    """(K, h) scale of the level basis: L_o^LEVEL_POWER x the model's growth over the steps, sd_j / sd_1 (√j
    where the model's sd_1 is 0). The errors of count-like demand grow as the square root of its level; this
    scale keeps that and the model's shape over the horizon, not the model's sd itself (`band_basis`)."""
    sd = np.atleast_2d(np.asarray(sd, dtype=float))
    steps = np.sqrt(np.arange(1, sd.shape[1] + 1))[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        growth = np.where(sd[:, :1] > 0, sd / sd[:, :1], steps)
    growth = np.where(np.isfinite(growth), growth, steps)
    return levels(y, origins, m)[:, None] ** LEVEL_POWER * growth


#: The model's sd is taken as not measuring its errors when the backtest's 95 % factor exceeds this: the errors
#: were more than ten times what the model claimed. On the accuracy benchmark's folds the chosen model's factors
#: are 0.7-2.4 hourly and 1.8-10.1 daily (openb's stepwise growth 7.6-10.1), on a pool that sat at one GPU for
#: five weeks 19-142 (run 13, docs/FORECAST.md).
SD_FAILS = 10.0


def band_basis(y, origins, m, err, sd, absu, factor95: float) -> tuple[str, np.ndarray]:
    """Which scale a candidate's bands are calibrated on: "model", its errors over its own sd (``absu``, times the
    level factor), or, where that sd failed by an order of magnitude (``factor95``, its 95 % factor, > SD_FAILS,
    or errors where it claimed none), "level", its errors over `level_sd`. Returns (basis, its scores); the
    backtest keeps the model's sd when the level's scores do not calibrate to a finite factor either.

    The case: demand flat for weeks gives the model an sd of 0.03 GPUs, its next errors of 1-3 GPUs calibrate a
    factor of 50, and that factor times today's sd (0.5) drew a band 50 GPUs wide for a pool using 4. The
    backtest cannot tell the two scales apart there (its origins all sit on the flat stretch, where both give
    narrow bands); what fails is carrying the model's factor to an sd of another size. Below the threshold the
    model's sd is kept: choosing by the backtest's interval score everywhere made the real daily bands too
    narrow (run 13). Series with negatives have no level law: "model"."""
    if len(y) == 0 or y.min() < 0 or factor95 <= SD_FAILS:
        return "model", absu
    return "level", standardised(err, level_sd(y, origins, m, sd), np.ones((len(origins), 1)))


#: The standardised error of an error where the model claimed no uncertainty (sd 0): out of any band.
OUT_OF_ANY_BAND = 1e12


def standardised(err: np.ndarray, sd: np.ndarray, lf: np.ndarray) -> np.ndarray:
    """|error / model sd| per origin and step, times the origin's level factor (`level_factor`); an error where
    the model claimed no uncertainty (sd 0) counts as out of any band (`OUT_OF_ANY_BAND`)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        absu = np.where(sd > 0, np.abs(err) / sd * lf, np.where(err == 0, 0.0, OUT_OF_ANY_BAND))
    return np.nan_to_num(absu, nan=OUT_OF_ANY_BAND)


def backtest(y: np.ndarray, m: int, h: int, max_origins: int = 28,
             periods: tuple[int, ...] | None = None) -> Backtest | None:
    origins, hb = backtest_origins(len(y), m, h, max_origins)
    if len(origins) < 2:
        return None
    paths = candidate_paths(y, m, origins, hb, periods=periods)
    actual = np.array([y[o:o + hb] for o in origins])
    scales = np.array([mase_scale(y[:o], m) for o in origins])[:, None]
    bt = Backtest(hb, origins, {}, {}, {}, {}, {}, {}, {c: p.warm for c, p in paths.items() if p.warm is not None},
                  step=origins[1] - origins[0])
    for name, p in paths.items():
        bt.mase_o[name] = (np.abs(actual - p.point) / scales).mean(axis=1)
    if len(origins) >= 3 and len(paths) > 1 and any(np.all(np.isfinite(v)) for v in bt.mase_o.values()):
        selected = _loo_selection(paths, bt.mase_o)
        bt.selection_o = (np.abs(actual - selected) / scales).mean(axis=1)
        paths["Combination"] = _loo_combination(paths, bt.mase_o, bt.step, hb)
    lf = level_factor(y, origins, m)
    for name, p in paths.items():
        err = actual - p.point
        mase_oh = np.abs(err) / scales
        bt.mase_by_h[name] = mase_oh.mean(axis=0)
        bt.mase_o[name] = mase_oh.mean(axis=1)
        bt.mase[name] = float(mase_oh.mean())
        bt.smape[name] = float(smape(actual, p.point).mean())
        absu = standardised(err, p.sd, lf)
        bt.scale[name], bt.coverage[name], bt.coverage_raw[name] = _calibrate(absu)
        bt.absu[name] = np.sort(absu, axis=None)      # on the model's sd: what pooled calibration compares
        basis, scores = band_basis(y, origins, m, err, p.sd, absu, bt.scale[name][95])
        bt.basis[name] = "model"
        if basis == "level":
            scale, cov, _ = _calibrate(scores)       # once; the model's sd stays if this calibrates nothing either
            if all(math.isfinite(v) for v in scale.values()):
                bt.scale[name], bt.coverage[name], bt.basis[name] = scale, cov, "level"
    bt.weights = combination_weights(bt.mase_o, bt.step, hb)
    return bt


#: Origins a calibration needs (`calibrated` asks as much of a backtest).
CAL_ORIGINS = 3


def calibration_origins(n: int, m: int, h: int) -> tuple[list[int], int]:
    """Origins and horizon hb of the longest backtest (hb <= h) a history of n periods allows with CAL_ORIGINS
    origins: stepping by min(hb, m) back from n - hb, each keeping two seasons (as `backtest_origins`), up to
    MIN_ORIGINS of them. ([], 0) when not even hb = 1 allows three."""
    min_train = max(2 * m, 8)
    for hb in range(min(h, n - min_train), 0, -1):
        step = min(hb, m)
        origins = [n - hb - i * step for i in range(MIN_ORIGINS) if n - hb - i * step >= min_train]
        if len(origins) >= CAL_ORIGINS:
            return origins[::-1], hb
    return [], 0


def short_calibration(y: np.ndarray, m: int, h: int, name: str, periods: tuple[int, ...] | None = None,
                      bag: bool = False) -> tuple[dict[int, float], int, int] | None:
    """Scale factors c_L (`_calibrate`) of single candidate ``name`` from a backtest at the longest
    horizon hb <= h the history allows (`calibration_origins`), with hb and the number of origins; None when
    it allows none, or fewer than 10 errors. For a history too short to backtest at h: its own errors over the
    near steps say how far the model's sd understates them (the finite-sample rule only knows a line's). With
    ``bag`` the fallback is backtested bagged, as it forecasts (`fallback_paths`)."""
    origins, hb = calibration_origins(len(y), m, h)
    if name not in SINGLES or len(origins) < CAL_ORIGINS or len(origins) * hb < 10:
        return None
    if bag and name == FALLBACK:
        p = fallback_paths(y, m, origins, hb)
    else:
        p = candidate_paths(y, m, origins, hb, only=(name,), periods=periods).get(name)
    if p is None:
        return None
    actual = np.array([y[o:o + hb] for o in origins])
    absu = standardised(actual - p.point, p.sd, level_factor(y, origins, m))
    scale = _calibrate(absu)[0]
    if not all(math.isfinite(v) for v in scale.values()):
        return None
    return scale, hb, len(origins)


def choose(bt: Backtest) -> tuple[str, str]:
    """What to forecast with, and why. No model is preferred: only the backtest's errors decide.

    The default is the combination of the singles the backtest does not show clearly worse than the best
    (`combination_weights`; one single when the others all lose clearly). Selecting the best single instead
    is a strategy the backtest scores too, out of sample like the combination (at each origin the single
    chosen on the other origins): the best single is used only when that selection beats the combination
    with one-sided confidence SELECT_LEVEL (`clearly_worse`, the same paired test as for the members; a
    stricter level because a wrong switch loses the average's robustness). With too few independent origins
    to test, the combination stays. The reason lists every member's weight and backtest MASE."""
    singles = {c: v for c, v in bt.mase.items() if c in SINGLES}
    comb_o = bt.mase_o.get("Combination")
    if singles and comb_o is not None and bt.selection_o is not None:
        best = min(singles, key=lambda c: (singles[c], SINGLES.index(c)))
        d = comb_o - bt.selection_o
        if clearly_worse(d, n_independent(len(d), bt.step, bt.horizon), SELECT_LEVEL):
            return best, (f"{best}, the best single in the backtest ({len(bt.origins)} origins, horizons "
                          f"1..{bt.horizon}, MASE {singles[best]:.3g}): selecting the best single beat the "
                          f"combination clearly out of sample (MASE {float(np.mean(bt.selection_o)):.3g} against "
                          f"{float(np.mean(comb_o)):.3g})")
    members = ", ".join(f"{c} {w:.2f} (MASE {bt.mase[c]:.3g})" for c, w in bt.weights.items())
    dropped = sorted(c for c in bt.mase if c in SINGLES and c not in bt.weights)
    return "Combination", (f"combination of the candidates not clearly worse than the best in the backtest "
                           f"({len(bt.origins)} origins, horizons 1..{bt.horizon}): {members}"
                           + (f"; left out as clearly worse: {', '.join(dropped)}" if dropped else ""))


# ----------------------------------------------------------------------------- one clean series

@dataclass
class Result:
    """Forecast of h periods after the history: point and interval bounds per level, in the series' unit."""
    point: np.ndarray
    lo: dict[int, np.ndarray]
    hi: dict[int, np.ndarray]
    model: str
    detail: str = ""
    backtest: Backtest | None = None
    notes: list[str] = field(default_factory=list)
    weights: dict = field(default_factory=dict)
    sd: np.ndarray | None = None           # the model's sd per step (before any calibration)
    calibration: str = "none"    # backtest | finite-sample | short-backtest | pooled | cross-series | none (no interval)
    n: int = 0                             # periods of history fitted
    bagged: bool = False                   # the fallback, bagged (`fallback_paths`)


def _flat(value: float, h: int, model: str, note: str, width: float = float("nan")) -> Result:
    point = np.full(h, value)
    return Result(point, {lv: point - width for lv in LEVELS}, {lv: point + width for lv in LEVELS},
                  model, notes=[note])


def _final_paths(y, m, h, chosen, bt, periods, bag: bool = False) -> tuple[str, Paths | None]:
    """The chosen candidate refitted on the whole history; a combination refits its members; with ``bag`` the
    fallback is bagged (`fallback_paths`)."""
    n = len(y)
    warm = bt.warm if bt else None
    if bag and chosen == FALLBACK:
        return chosen, fallback_paths(y, m, [n], h)
    if chosen != "Combination":
        return chosen, candidate_paths(y, m, [n], h, only=(chosen,), warm=warm, periods=periods).get(chosen)
    members = candidate_paths(y, m, [n], h, only=tuple(bt.weights), warm=warm, periods=periods)
    weights = {c: w for c, w in bt.weights.items() if c in members}
    total = sum(weights.values())
    if not total:
        return chosen, None
    return chosen, combine(members, {c: w / total for c, w in weights.items()})


def forecast_values(y: np.ndarray, m: int, h: int, max_origins: int = 28, force: str | None = None,
                    bt: Backtest | None = None, periods: tuple[int, ...] | None = None) -> Result:
    """Forecast a regular, gap-free history y (oldest first) h periods ahead with the backtest-chosen candidate
    (or the one ``force`` names, still calibrated on the backtest; ``bt`` reuses a backtest of this same y, m
    and h: the benchmark uses both). ``periods``: the season lengths MSTL takes out (default m)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n == 0:
        return _flat(float("nan"), h, "none", "no history: nothing to forecast")
    if not np.any(y):
        return _flat(0.0, h, "Zero", f"all {n} periods are zero: no demand to forecast", 0.0)
    if n < 3:
        return _flat(float(y[-1]), h, "Naive", f"only {n} period(s) of history: last value carried forward, "
                                               "no interval can be estimated")
    notes = []
    if n < 2 * m:
        notes.append(f"short history ({n} periods < two seasons of {m}): no seasonal ETS, Theta not deseasonalised")
    bt = bt or backtest(y, m, h, max_origins, periods)
    bag = bt is None and force is None and can_bag(n, m)
    if bt is None:
        chosen = force if force in SINGLES else FALLBACK     # no backtest, no weights: one single model
        notes.append(f"history too short to backtest ({n} periods): {chosen} used (the single method that "
                     "needs the least data), coverage unknown"
                     + (f"; bagged: the median of its forecasts of {BOOTSTRAPS} bootstrapped histories (Box-Cox, "
                        "STL, moving blocks of two seasons)" if bag else ""))
    else:
        chosen = force if force in bt.mase else None
        if chosen is None:
            chosen, why = choose(bt)
            notes.append(f"model {why}")
        if bt.horizon < h:
            notes.append(f"backtest covers horizons 1..{bt.horizon} of {h}; beyond it the model's own "
                         "variance growth is used, scaled by the backtest calibration")
    chosen, final = _final_paths(y, m, h, chosen, bt, periods, bag)
    if final is None:                        # the chosen model cannot be fitted on this history
        chosen, final = "SeasonalNaive", candidate_paths(y, m, [n], h, only=("SeasonalNaive",))["SeasonalNaive"]
    point, sd = final.point[0], final.sd[0]
    if not np.any(sd > 0):
        notes.append(f"{chosen} fits the history exactly (sd 0): its own band has no width, and nothing in this "
                     "history says how far the forecast may be off")
    res = Result(point, {}, {}, chosen, final.detail, bt, notes, final.weights, sd, "backtest", n, bag)
    if calibrated(bt, chosen):
        if bt.basis.get(chosen) == "level":
            notes.append(f"intervals scaled by the level (the square root of the last season's mean) and {chosen}'s "
                         f"growth over the steps, not by its sd: in the backtest its errors were over {SD_FAILS:g} "
                         "times the sd it claimed")
            return _bounded(point, level_sd(y, [n], m, sd[None, :])[0], bt.scale[chosen], True, res)
        return _bounded(point, sd, bt.scale[chosen], y.min() >= 0, res)
    short = short_calibration(y, m, h, chosen, periods, bag)
    if short is not None:
        # The history's own errors at the steps it can backtest, not a line's textbook band: on the synthetic
        # short hold-outs (run 8) the wider of the two covered 86-87 % at 80, this alone 85 %, the textbook 75-78 %
        scale, hb, k = short
        res.calibration = "short-backtest"
        notes.append(f"intervals calibrated on {'bagged ' if bag else ''}{chosen}'s backtest errors at horizons "
                     f"1..{hb} from {k} origins (the longest backtest the history allows); beyond step {hb} the "
                     "model's own variance growth, scaled by that calibration")
        return _bounded(point, sd, scale, y.min() >= 0, res)
    res.calibration = "finite-sample"
    notes.append("intervals not calibrated by a backtest (too few origins, or errors where the model claimed no "
                 "uncertainty): the model's variance widened for the "
                 f"estimation error of a trend fitted to {n} periods, Student-t quantiles with {max(n - 2, 1)} "
                 "degrees of freedom")
    return _bounded(point, *finite_sample_interval(sd, n), y.min() >= 0, res)


def finite_sample_interval(sd: np.ndarray, n: int) -> tuple[np.ndarray, dict[int, float]]:
    """(sd, scale per level) of a forecast the backtest cannot calibrate, fitted on n periods.

    A model's own sd_h treats its parameters as known, which on a short history they are not. The textbook
    prediction interval of a linear trend fitted by least squares to t = 1..n adds the estimation error of the
    line at t = n + h, σ²·(1/n + (n + h − t̄)²/Sxx) with t̄ = (n+1)/2 and Sxx = n(n² − 1)/12, and takes Student-t
    quantiles with n − 2 degrees of freedom (σ estimated). Every fallback model extrapolates a level and a
    trend at most, so that term, with σ = sd_1 (the one-step sd), is added to the model's variance, and the
    scale per level is t_{n−2, (1+L)/2} / z_L. With many periods both corrections vanish."""
    sd = np.asarray(sd, dtype=float)
    n = max(int(n), 2)
    x0 = n + np.arange(1, len(sd) + 1) - (n + 1) / 2
    sxx = n * (n * n - 1) / 12
    wide = np.sqrt(sd ** 2 + sd[0] ** 2 * (1 / n + x0 ** 2 / sxx))
    df = max(n - 2, 1)
    return wide, {lv: float(student_t.ppf(0.5 + lv / 200, df)) / Z[lv] for lv in LEVELS}


def _bounded(point, sd, scale, nonneg: bool, res: Result) -> Result:
    """Bounds ŷ ± z_L·c_L·sd per level; for demand (non-negative histories) lower bounds are clipped at 0."""
    return _set_bounds(point, {lv: Z[lv] * scale[lv] * sd for lv in LEVELS}, nonneg, res)


def _set_bounds(point, half: dict[int, np.ndarray], nonneg: bool, res: Result) -> Result:
    for lv in LEVELS:
        res.lo[lv] = np.maximum(point - half[lv], 0.0) if nonneg else point - half[lv]
        res.hi[lv] = point + half[lv]
    if nonneg and np.any(point - half[95] < 0) and not any(n.startswith("lower bounds clipped") for n in res.notes):
        res.notes.append("lower bounds clipped at 0 (demand cannot be negative)")
    return res


# ----------------------------------------------------------------------------- pooled calibration (many series)

#: Calibrated series a table needs before their pooled errors calibrate the others.
POOL_MIN_SERIES = 3


def pooled_scale(results: list[Result]) -> tuple[dict[int, float], int] | None:
    """Scale factors c_L = q_L/z_L of the standardised backtest errors |e/sd| pooled over every series of a
    table whose own backtest calibrated its forecast (each series' chosen model), q_L the split-conformal
    quantile with the finite-sample correction, and how many series were pooled; None with fewer than
    POOL_MIN_SERIES. The errors are divided by each model's own sd, so series of any size and unit pool: the
    factors say how much the models' variances understate the errors on this kind of series (the pooled,
    "global" conformal calibration of many related series)."""
    pools = [r.backtest.absu[r.model] for r in results if r.calibration == "backtest" and calibrated(r.backtest, r.model)]
    if len(pools) < POOL_MIN_SERIES:
        return None
    every = np.sort(np.concatenate(pools))
    scale = {lv: _factor(float(every[conformal_rank(every.size, lv / 100)]), lv) for lv in LEVELS}
    return (scale, len(pools)) if all(math.isfinite(v) for v in scale.values()) else None


def apply_pooled(res: Result, pooled: tuple[dict[int, float], int], nonneg: bool) -> Result:
    """Bounds of a forecast its own backtest could not calibrate: per step the wider of its own interval (the
    finite-sample one, `finite_sample_interval`, or that of a shorter backtest, `short_calibration`) and the
    pooled calibration applied to the model's sd (the pooled
    errors come from longer histories, whose parameters are better known, so they alone could be too narrow
    for a short series; the finite-sample rule alone misses what the models get wrong on this kind of series)."""
    if res.calibration not in ("finite-sample", "short-backtest") or res.sd is None:
        return res
    scale, k = pooled
    # hi - point: the half-width `forecast_values` set (finite-sample, or the short backtest's calibration)
    half = {lv: np.fmax(res.hi[lv] - res.point, Z[lv] * scale[lv] * res.sd) for lv in LEVELS}
    res.calibration = "pooled"
    res.notes.append(f"intervals at least as wide as the backtest errors of the {k} calibrated series of this table "
                     f"pooled (factors {scale[80]:.3g} at 80 %, {scale[95]:.3g} at 95 % of the model sd)")
    return _set_bounds(res.point, half, nonneg, res)


# ----------------------------------------------------------------------------- cross-series calibration (short series)

#: Windows of the table's longer series that calibrate one short series (`cross_windows`), at most.
CROSS_WINDOWS = 40
#: Bootstraps of a bagged fallback fitted on such a window (the forecast itself takes BOOTSTRAPS): a noisier
#: median of the same forecaster, whose errors are if anything larger, at a fifth of the cost (docs/FORECAST.md
#: run 20: 40 windows of 100 bootstraps at h = 90 took 1.3 s per short series, in the parent process).
WINDOW_BOOTSTRAPS = 20
#: Whether `forecast_table` calibrates short series on the longer ones (`cross_series`); a module setting so
#: that the benchmarks can measure the rule off and on in one process.
CROSS_SERIES = True


def cross_windows(n: int, lengths: list[int], m: int, h: int, limit: int = CROSS_WINDOWS) -> list[tuple[int, int]]:
    """(series index, origin o) of windows y_s[o-n:o] → y_s[o:o+h] cut from longer series of the given lengths:
    per series up to MIN_ORIGINS origins stepping back by min(h, m) from len - h while n periods precede them,
    taken round-robin (each series' most recent window first, then the next ones), so that many series give
    one window each before one series gives many: other series say more about a new one than more windows of one."""
    step = max(1, min(h, m))
    per = [[ln - h - i * step for i in range(MIN_ORIGINS) if ln - h - i * step >= n] for ln in lengths]
    out = []
    for i in range(max((len(p) for p in per), default=0)):
        out += [(s, p[i]) for s, p in enumerate(per) if i < len(p)]
    return out[:limit]


def window_paths(hist: np.ndarray, name: str, weights: dict, m: int, h: int,
                 periods: tuple[int, ...] | None, bag: bool = False) -> Paths | None:
    """Candidate ``name`` fitted on ``hist`` alone, forecasting h: a single, or the combination of the members
    ``weights`` names with those weights (renormalised over the members that can be fitted); with ``bag`` the
    fallback bagged, as the short series was forecast (`fallback_paths`)."""
    if bag and name == FALLBACK:
        return fallback_paths(hist, m, [len(hist)], h, WINDOW_BOOTSTRAPS)
    if name in SINGLES:
        return candidate_paths(hist, m, [len(hist)], h, only=(name,), periods=periods).get(name)
    if name != "Combination" or not weights:
        return None
    members = candidate_paths(hist, m, [len(hist)], h, only=tuple(weights), periods=periods)
    total = sum(w for c, w in weights.items() if c in members)
    return combine(members, {c: w / total for c, w in weights.items() if c in members}) if total else None


def cross_calibration(n: int, name: str, longer: list[np.ndarray], m: int, h: int,
                      periods: tuple[int, ...] | None = None, weights: dict | None = None,
                      bag: bool = False) -> tuple[dict[int, float], int, int] | None:
    """Scale factors c_L (`_calibrate`: conformal quantile of |error / model sd| over z_L) of candidate ``name``
    fitted on n periods and forecasting h, from the table's longer series cut to that length (`cross_windows`):
    at each window the model is fitted on the n periods before the origin alone, as on the short series, and
    its errors at steps 1..h are divided by its own sd_j. Returns (factors, windows, series), None with fewer
    than CAL_ORIGINS windows. A window whose model claims no uncertainty (sd_j <= 0, e.g. a flat stretch) is
    skipped: its errors cannot be standardised, and counting them as out of any band would make the factor
    unbounded.

    Why: a series too short to backtest at h knows nothing of its own errors beyond the few steps it can
    backtest (`short_calibration`), nor of how a model fitted on n periods fares at h steps; the table's other
    series, cut to n periods, show that at every step up to h. A combination (``weights``: its members and
    weights) is fitted on each window with the same members and weights (`window_paths`)."""
    wins = cross_windows(n, [len(y) for y in longer], m, h)
    rows, used = [], set()
    for s, o in wins:
        p = window_paths(longer[s][o - n:o], name, weights or {}, m, h, periods, bag)
        if p is not None and np.all(p.sd[0] > 0):
            rows.append(standardised(longer[s][o:o + h] - p.point[0], p.sd[0], np.ones(1)))
            used.add(s)
    if len(rows) < CAL_ORIGINS:
        return None
    return _calibrate(np.array(rows))[0], len(rows), len(used)


def start_level(y: np.ndarray, m: int) -> float:
    """The level a forecast from the end of y starts from: the mean of its last season (of all of y if shorter)."""
    return float(np.mean(y[-max(m, 1):])) if len(y) else 0.0


def cross_level(n: int, name: str, longer: list[np.ndarray], m: int, h: int,
                periods: tuple[int, ...] | None = None, weights: dict | None = None,
                bag: bool = False) -> tuple[dict[int, float], int, int] | None:
    """Quantiles q_L of |e_j| / (L·√j) of candidate ``name`` fitted on n periods of the table's longer series
    (`cross_windows`), L the window's `start_level`, e_j its error at step j; q_L the split-conformal quantile
    (`conformal_rank`). For a forecast whose model claims no uncertainty at all (sd 0: it fits a flat history
    exactly), which no factor of its sd can widen: the other series' errors relative to their level are the
    only scale left (demand's errors grow with its level and, as a level that moves in steps, about as √j).
    Returns (quantiles, windows, series), None with fewer than CAL_ORIGINS windows."""
    rows, used = [], set()
    growth = np.sqrt(np.arange(1, h + 1))
    for s, o in cross_windows(n, [len(y) for y in longer], m, h):
        hist = longer[s][o - n:o]
        p = window_paths(hist, name, weights or {}, m, h, periods, bag) if start_level(hist, m) > 0 else None
        if p is not None:
            rows.append(np.abs(longer[s][o:o + h] - p.point[0]) / (start_level(hist, m) * growth))
            used.add(s)
    if len(rows) < CAL_ORIGINS:
        return None
    u = np.sort(np.concatenate(rows))
    return {lv: float(u[conformal_rank(u.size, lv / 100)]) for lv in LEVELS}, len(rows), len(used)


def apply_cross_level(res: Result, cross: tuple[dict[int, float], int, int], level: float, nonneg: bool) -> Result:
    """Bounds q_L·level·√j per step j (`cross_level`) of a forecast whose model sd is 0 at every step."""
    q, k, s = cross
    j = np.sqrt(np.arange(1, len(res.point) + 1))
    res.calibration = "cross-series"
    res.notes.append(f"the model claims no uncertainty (it fits the history exactly): intervals from {res.model}'s "
                     f"errors in {k} windows of {res.n} periods cut from {s} longer series of this table, relative "
                     f"to their level ({q[80]:.3g} at 80 %, {q[95]:.3g} at 95 % of the level × √step)")
    return _set_bounds(res.point, {lv: q[lv] * level * j for lv in LEVELS}, nonneg, res)


def apply_cross(res: Result, cross: tuple[dict[int, float], int, int], nonneg: bool) -> Result:
    """Bounds of a forecast its own backtest could not calibrate at h: per step the wider of its own interval
    (finite-sample or short-backtest) and the cross-series calibration (`cross_calibration`) on the model's sd."""
    if res.calibration not in ("finite-sample", "short-backtest") or res.sd is None:
        return res
    scale, k, s = cross
    half = {lv: np.fmax(res.hi[lv] - res.point, Z[lv] * scale[lv] * res.sd) for lv in LEVELS}
    res.calibration = "cross-series"
    res.notes.append(f"intervals at least as wide as {res.model}'s errors at horizons 1..{len(res.point)} in {k} "
                     f"windows of {res.n} periods cut from {s} longer series of this table (factors "
                     f"{scale[80]:.3g} at 80 %, {scale[95]:.3g} at 95 % of the model sd)")
    return _set_bounds(res.point, half, nonneg, res)


def cross_series(done: list, m: int, h: int, periods: tuple[int, ...] | None) -> None:
    """Cross-series calibration (`apply_cross`) of every forecast of a table (the (prepared, result, ...) of
    `forecast_table`) that its own backtest could not calibrate at h, and bands relative to the level
    (`apply_cross_level`) for one whose model sd is 0 (positive levels only), from the table's series with at
    least n + h periods of history. Such a series is then not widened to the pooled errors (`apply_pooled`):
    those come from full-length backtests, these from the same length and horizon."""
    if not CROSS_SERIES:
        return
    for prep, res, *_ in done:
        if res.sd is None:
            continue
        flat = not np.any(res.sd > 0)          # the model claims no uncertainty: only the level is left (above)
        if not flat and res.calibration not in ("finite-sample", "short-backtest"):
            continue
        longer = [p.y for p, r, *_ in done if len(p.y) >= res.n + h and r.model not in ("Zero", "none")]
        nonneg = bool(len(prep.y) and prep.y.min() >= 0)
        if flat and longer and start_level(prep.y, m) > 0:
            cross = cross_level(res.n, res.model, longer, m, h, periods, res.weights, res.bagged)
            if cross is not None:
                apply_cross_level(res, cross, start_level(prep.y, m), nonneg)
        elif not flat and longer:
            cross = cross_calibration(res.n, res.model, longer, m, h, periods, res.weights, res.bagged)
            if cross is not None:
                apply_cross(res, cross, nonneg)


# ----------------------------------------------------------------------------- level shifts

def detect_level_shift(y: np.ndarray, m: int, ratio: float = 8.0, rel: float = 0.3) -> tuple[int, float, float] | None:
    """The largest abrupt level change: (index of the first period at the new level, median before, median after).

    Compares the w = max(m, 7) periods before and after each point (a whole season, so the seasonal pattern
    cancels; `prepare` passes the longest season, a week of hourly data, so that an outage of a few hours is not
    taken for a new level). The jump at a point is the smaller of the change of the windows' means and of their
    medians: a level shift moves both, and the mean's change peaks where the new level starts; a burst of fewer
    than half a window's periods (one day at seven times the level) moves the mean only, and is not a new level.
    A shift is reported when the largest jump is ``ratio`` times the median jump (abrupt against the series' own
    drift) and changes the level by at least ``rel`` (30 %)."""
    w = max(m, 7)
    n = len(y)
    if n < 4 * w:
        return None
    c = np.r_[0.0, np.cumsum(y)]
    t = np.arange(w, n - w + 1)
    windows = np.median(np.lib.stride_tricks.sliding_window_view(y, w), axis=1)    # windows[k] = y[k:k+w]
    before, after = windows[t - w], windows[t]
    mean_jump = np.abs((c[t + w] - 2 * c[t] + c[t - w]) / w)
    jump = np.minimum(mean_jump, np.abs(after - before))
    i = int(np.argmax(jump))
    # a series mostly at one value (an intermittent pool, zero on most days) has the same median in most windows:
    # the median jump is 0 and any jump would pass as abrupt; the means' changes measure its usual variation
    typical = float(np.median(jump)) or float(np.median(mean_jump))
    big = max(abs(before[i]), abs(after[i]))
    if big == 0 or jump[i] < rel * big or (typical > 0 and jump[i] < ratio * typical):
        return None
    return int(t[i]), float(before[i]), float(after[i])


# ----------------------------------------------------------------------------- timestamps, gaps, many series

EVERY = {"hour": "1h", "day": "1d", "week": "1w", "month": "1mo"}


def infer_freq(ts: np.ndarray) -> str:
    """hour, day, week or month from the median spacing of sorted distinct timestamps (finer data → hour)."""
    u = np.unique(ts.astype("datetime64[s]"))
    if len(u) < 2:
        return "day"
    step = float(np.median(np.diff(u).astype(np.int64)))
    for name, secs in (("hour", 3600 * 1.5), ("day", 86400 * 1.5), ("week", 86400 * 10)):
        if step <= secs:
            return name
    return "month"


def future_index(last: np.datetime64, freq: str, h: int) -> np.ndarray:
    if freq == "month":
        start = last.astype("datetime64[M]")
        return (start + np.arange(1, h + 1)).astype("datetime64[us]")
    return (last.astype("datetime64[us]") + STEP[freq] * np.arange(1, h + 1)).astype("datetime64[us]")


def fill_gaps(y: np.ndarray, m: int) -> tuple[np.ndarray, int, int]:
    """Fill NaNs with the value one season earlier when known, else by linear interpolation (ends: nearest).
    Returns (filled, number filled, longest run)."""
    miss = np.isnan(y)
    if not miss.any():
        return y, 0, 0
    out = y.copy()
    for i in np.flatnonzero(miss):
        if m > 1 and i >= m and not np.isnan(out[i - m]):
            out[i] = out[i - m]
    rest = np.isnan(out)
    if rest.any() and (~rest).any():
        idx = np.arange(len(out))
        out[rest] = np.interp(idx[rest], idx[~rest], out[~rest])
    runs = np.diff(np.r_[0, miss.astype(int), 0])
    longest = int((np.flatnonzero(runs == -1) - np.flatnonzero(runs == 1)).max())
    return out, int(miss.sum()), longest


@dataclass
class Prepared:
    """The history a forecast is fitted on, and what was done to get it (``notes``); ``idle_since``: the first
    period (UTC bucket start) of a trailing run of zeros long enough to say the series has no demand now
    (`idle_periods`), else None."""
    ts: np.ndarray
    y: np.ndarray
    freq: str
    notes: list[str]
    idle_since: np.datetime64 | None = None


#: Periods in four weeks, per frequency: a bound on how long a run of zeros must be to say "no demand now".
FOUR_WEEKS = {"hour": 672, "day": 28, "week": 4, "month": 1}


def idle_periods(freq: str) -> int:
    """Trailing zero periods after which a series with earlier demand has none now: its longest season (a week of
    hourly or daily data; a weekend or a night is not idle), but at most four weeks (weekly data: 4 weeks, not a
    year) and at least 2 periods (monthly data)."""
    return max(2, min(max(SEASONS.get(freq, (SEASON[freq],))), FOUR_WEEKS[freq]))


def idle_start(y: np.ndarray, freq: str) -> int | None:
    """Where the trailing run of zeros of y starts when it says the series has no demand now: at least
    `idle_periods` long and longer than any run of zeros between its earlier demand (a pool that submits every
    other week is not retired after one quiet week); None otherwise, or when y has no demand at all."""
    nz = np.flatnonzero(y != 0)
    if not len(nz):
        return None
    longest_gap = int((np.diff(nz) - 1).max()) if len(nz) > 1 else 0
    trailing = len(y) - 1 - int(nz[-1])
    return int(nz[-1]) + 1 if trailing >= max(idle_periods(freq), longest_gap + 1) else None


def period_label(t) -> str:
    """A period's start as the notes print it (UTC): the date, with the time unless it is midnight."""
    return str(np.datetime64(t, "m")).replace("T00:00", "").replace("T", " ")


def backtest_span(m: int, h: int, max_origins: int = 28) -> int:
    """Periods a history needs for the full backtest (`backtest_origins`) at horizon min(h, 4m): two seasons
    of training, the horizon, and the origins min(hb, m) apart."""
    hb = min(h, 4 * m)
    k = min(max_origins, max(MIN_ORIGINS, math.ceil(4 * m / hb)))
    return max(2 * m, 8) + hb + (k - 1) * max(1, min(hb, m))


def detect_outliers(y: np.ndarray, m: int, k: float = 6.0, times: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Bursts and outages: periods far above, or far below, their season position both a cycle before and a
    cycle after. Returns (mask, usual value), the usual value being the median of the same season position in
    the two cycles either side (the same weekday of the weeks around a day); the mask is True where y is one.

    A burst is more than ``times`` (3) times both neighbours of its season position (a cycle earlier and a cycle
    later); an outage (a maintenance day, a scheduler down) is less than 1/``times`` of both. Either is also
    ``k`` (6) robust standard deviations (1.4826 × the median absolute deviation of the differences from the usual
    values) away from its usual value: one day at a hundred times the level or at zero, not the busy or quiet
    days of a bursty pool. A period in the last cycle has no later neighbour, and a climbing or falling series
    is near its later one: neither is an outlier (whether a new level has begun is the level-shift rule's
    question, asked after outliers are replaced)."""
    n = len(y)
    near = np.full((4, n), np.nan)
    for j, cycles in enumerate((-2, -1, 1, 2)):
        src = np.arange(n) + cycles * m
        ok = (src >= 0) & (src < n)
        near[j, ok] = y[src[ok]]
    both_sides = ~np.isnan(near[1]) & ~np.isnan(near[2])
    usual = np.where(both_sides, np.nanmedian(np.where(both_sides, near, 0.0), axis=0), y)
    excess = y - usual
    scale = 1.4826 * float(np.median(np.abs(excess[both_sides] - np.median(excess[both_sides])))) \
        if both_sides.any() else 0.0
    lo, hi = np.fmin(near[1], near[2]), np.fmax(near[1], near[2])
    burst = (y > times * np.fmax(hi, 0.0)) & (excess > k * scale)
    outage = (times * y < lo) & (-excess > k * scale)
    return both_sides & (burst | outage) & (scale > 0), usual


def outlier_values(y: np.ndarray, mask: np.ndarray, usual: np.ndarray, m: int) -> np.ndarray:
    """What an outlier is replaced by: its season position's usual value (`detect_outliers`) moved by how far the
    periods around it (the season-long window centred on it, outliers left out) stand from their own usual
    values (the median of those differences): the season from the cycles either side, the level from the
    outlier's own neighbourhood, as R's tsclean carries the seasonally adjusted series across an outlier. The
    usual value alone ignores where the level is: Philly's outage day of 70 active nodes, in a week running about
    45 below the weeks around it, read 372. Where the window has nothing left, the usual value."""
    at = np.flatnonzero(mask)
    if not len(at):
        return y
    half = m // 2
    idx = at[:, None] + np.arange(-half, half + 1)[None, :]
    ok = (idx >= 0) & (idx < len(y))
    idx = np.clip(idx, 0, len(y) - 1)
    excess = np.where(ok & ~mask[idx], (y - usual)[idx], np.nan)
    with np.errstate(all="ignore"):
        shift = np.nanmedian(excess, axis=1)
    out = y.copy()
    out[at] = usual[at] + np.where(np.isfinite(shift), shift, 0.0)
    return out


def _replace_outliers(ts: np.ndarray, y: np.ndarray, m: int, notes: list[str]) -> np.ndarray:
    """y with its bursts and outages (`detect_outliers`) replaced (`outlier_values`), named in a note."""
    mask, usual = detect_outliers(y, m)
    clean = outlier_values(y, mask, usual, m)
    for kind, sel in (("burst", mask & (y > usual)), ("outage", mask & (y < usual))):
        if sel.any():
            shown = ", ".join(f"{period_label(t)} {v:.4g} → {u:.4g}" for t, v, u in
                              zip(ts[sel][:3], y[sel][:3], clean[sel][:3]))
            notes.append(f"{int(sel.sum())} {kind}(s) replaced for fitting by their season position's usual value "
                         f"at the level around them: {shown}{', ...' if sel.sum() > 3 else ''}; forecasts and "
                         f"bands are of demand without such {kind}s")
    return clean


def prepare(ts: np.ndarray, y: np.ndarray, freq: str, shifts: bool = True, h: int | None = None,
            outliers: bool = True) -> Prepared:
    """Regular history (NaN = missing period) → gap-filled, leading zeros dropped, bursts and outages
    (`detect_outliers`) replaced (`outlier_values`), cut at a level shift when enough history follows it to
    backtest the models at horizon h (``backtest_span``; without h, two seasons). Outliers go first: a
    three-day outage moves a week's median as a new level would."""
    m = SEASON[freq]
    min_after = max(2 * m, 14) if h is None else max(2 * m, 14, backtest_span(m, h))
    notes: list[str] = []
    y, filled, longest = fill_gaps(np.asarray(y, dtype=float), m)
    if filled:
        notes.append(f"{filled} missing period(s) filled (longest gap {longest}) from one season earlier "
                     "or by interpolation")
    nz = np.flatnonzero(y != 0)
    if len(nz) and nz[0] > 0:
        notes.append(f"history starts {period_label(ts[nz[0]])}, the first non-zero period ({nz[0]} leading zero "
                     "periods dropped)")
        ts, y = ts[nz[0]:], y[nz[0]:]
    idle = idle_start(y, freq)
    if idle is not None:
        notes.append(f"no demand since {period_label(ts[idle])} ({len(y) - idle} periods of zeros; the last demand "
                     f"{period_label(ts[idle - 1])}): a retired or idle series, not forecast until its demand returns")
        return Prepared(ts[idle:], y[idle:], freq, notes, ts[idle])
    if outliers:
        y = _replace_outliers(ts, y, m, notes)
    cut = 0
    while shifts:
        found = detect_level_shift(y[cut:], max(SEASONS.get(freq, (m,))))
        if found is None:
            break
        at, before, after = found
        since = len(y) - cut - at
        if since < min_after:
            notes.append(f"level shift on {period_label(ts[cut + at])} (median {before:.4g} → {after:.4g}), only "
                         f"{since} periods since (< {min_after} to backtest on them): fitted on the whole history, "
                         "which the trend may follow, and intervals may be too narrow")
            break
        notes.append(f"level shift on {period_label(ts[cut + at])} (median {before:.4g} → {after:.4g}): fitted on the "
                     f"{since} periods since")
        cut += at
    return Prepared(ts[cut:], y[cut:], freq, notes)


def forecast_series(ts: np.ndarray, y: np.ndarray, freq: str, h: int, shifts: bool = True,
                    max_origins: int = 28, outliers: bool = True) -> tuple[Prepared, Result, np.ndarray]:
    """Forecast one regular series (timestamps at bucket starts, NaN = missing); returns what was fitted,
    the result, and the future timestamps."""
    prep = prepare(np.asarray(ts).astype("datetime64[us]"), y, freq, shifts, h, outliers)
    res = forecast_values(prep.y, SEASON[freq], h, max_origins, periods=SEASONS.get(freq))
    res.notes = prep.notes + res.notes
    last = prep.ts[-1] if len(prep.ts) else np.asarray(ts).astype("datetime64[us]")[-1]
    return prep, res, future_index(last, freq, h)


def regularise(df, keys: list[str], freq: str, ts_col: str = "ts", value_col: str = "value", agg: str = "mean"):
    """Bucket timestamps to ``freq`` (mean or sum of the values in a bucket) and insert missing buckets as
    nulls, per series. Returns a Polars frame (keys..., ts, value) sorted by keys then ts."""
    import polars as pl
    reduce = pl.col(value_col).mean() if agg == "mean" else pl.col(value_col).sum()
    out = (df.with_columns(pl.col(ts_col).cast(pl.Datetime("us")).dt.truncate(EVERY[freq]))
             .group_by([*keys, ts_col]).agg(reduce.cast(pl.Float64)).sort([*keys, ts_col]))
    if out.height:
        out = out.upsample(ts_col, every=EVERY[freq], group_by=keys or None, maintain_order=True)
        out = out.with_columns(pl.col(k).forward_fill() for k in keys) if keys else out
    return out.select([*keys, pl.col(ts_col).alias("ts"), pl.col(value_col).alias("value")])


def _summary_row(key: dict, prep: Prepared, res: Result) -> dict:
    bt, c = res.backtest, res.model
    row = {**key, "model": c, "model_detail": res.detail,
           "history_from": prep.ts[0].item() if len(prep.ts) else None,
           "history_to": prep.ts[-1].item() if len(prep.ts) else None, "history_periods": len(prep.y),
           "backtest_horizon": bt.horizon if bt else None, "backtest_origins": len(bt.origins) if bt else None,
           "backtest_mase": bt.mase.get(c) if bt else None, "backtest_smape": bt.smape.get(c) if bt else None,
           "coverage80": bt.coverage[c][80] if bt and c in bt.coverage else None,
           "coverage95": bt.coverage[c][95] if bt and c in bt.coverage else None,
           # how the 80/95 % bounds were set: backtest (calibrated), finite-sample, short-backtest, pooled,
           # cross-series, none
           "interval": res.calibration,
           "idle_since": prep.idle_since.item() if prep.idle_since is not None else None}
    for cand in CANDIDATES:
        row[f"mase_{cand.lower()}"] = bt.mase.get(cand) if bt else None
    for cand in CANDIDATES:
        row[f"coverage80_{cand.lower()}"] = bt.coverage[cand][80] if bt and cand in bt.coverage else None
        row[f"coverage95_{cand.lower()}"] = bt.coverage[cand][95] if bt and cand in bt.coverage else None
    row["weights"] = ", ".join(f"{c} {w:.2f}" for c, w in res.weights.items())
    row["notes"] = "; ".join(res.notes)
    return row


def _forecast_job(job):
    ts, y, freq, horizon, shifts, max_origins, outliers = job
    return forecast_series(ts, y, freq, horizon, shifts, max_origins, outliers)


def _workers(n_series: int) -> int:
    """Processes for many series: $GPULEDGER_FORECAST_WORKERS, else both cores from 16 series up."""
    env = os.environ.get("GPULEDGER_FORECAST_WORKERS")
    if env:
        return max(1, int(env))
    return min(2, os.cpu_count() or 1) if n_series >= 16 else 1


BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _run_jobs(jobs: list, progress=None):
    """forecast_series over jobs, in order; in spawned worker processes when there are many (each series is
    independent, so two cores halve the time)."""
    workers = _workers(len(jobs))
    if workers == 1:
        for i, job in enumerate(jobs):
            yield _forecast_job(job)
            if progress:
                progress(i + 1, len(jobs))
        return
    ctx = multiprocessing.get_context("spawn")     # not fork: the parent runs Polars/DuckDB threads
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        # One BLAS thread per worker: the products here are small (tens x a few thousand), and OpenBLAS's
        # threads spin on them; with a worker per core that took 10x the CPU of ETS on hourly series. The
        # workers are spawned by map's submits, so they start with this environment; the parent's is restored.
        saved = {k: os.environ.get(k) for k in BLAS_THREADS}
        os.environ.update(dict.fromkeys(BLAS_THREADS, "1"))
        try:
            results = pool.map(_forecast_job, jobs, chunksize=max(1, len(jobs) // (8 * workers)))
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        for i, out in enumerate(results):
            yield out
            if progress:
                progress(i + 1, len(jobs))


def forecast_table(df, keys: list[str], freq: str, horizon: int, shifts: bool = True, max_origins: int = 28,
                   progress=None, outliers: bool = True):
    """Forecast every series of a long table (keys..., ts, value; regular grid, null = missing).

    Returns (forecast, summary): forecast has one row per series and future period with the point forecast,
    80 %/95 % bounds, the chosen model and its backtest MASE and coverage; summary has one row per series
    with the backtest of every candidate and the notes. A series without any demand (all zero or missing) has
    its summary row and note but no forecast rows: a line of zeros forecasts nothing. Values keep the input's
    unit."""
    import polars as pl
    parts = df.sort([*keys, "ts"]).partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): df.sort("ts")}
    frows, srows = [], []
    jobs = []
    for part in parts.values():
        y = part.get_column("value").cast(pl.Float64).to_numpy()
        jobs.append((part.get_column("ts").to_numpy(), np.where(np.isfinite(y), y, np.nan), freq, horizon,
                     shifts, max_origins, outliers))
    done = list(_run_jobs(jobs, progress))
    cross_series(done, SEASON[freq], horizon, SEASONS.get(freq))
    pooled = pooled_scale([res for _, res, _ in done])
    for (kv, part), (prep, res, fut) in zip(parts.items(), done):
        if pooled is not None:
            apply_pooled(res, pooled, bool(len(prep.y) and prep.y.min() >= 0))
        key = dict(zip(keys, kv))
        srow = _summary_row(key, prep, res)
        srows.append(srow)
        if res.model in ("Zero", "none"):      # no demand at all: listed in the summary's notes, not forecast
            continue
        frows.append(pl.DataFrame({
            **{k: [v] * horizon for k, v in key.items()}, "ts": fut, "forecast": res.point,
            "lo80": res.lo[80], "hi80": res.hi[80], "lo95": res.lo[95], "hi95": res.hi[95],
            "model": [res.model] * horizon, "backtest_mase": [srow["backtest_mase"]] * horizon,
            "coverage80": [srow["coverage80"]] * horizon, "coverage95": [srow["coverage95"]] * horizon,
        }, schema_overrides={k: part.schema[k] for k in keys} | {
            "backtest_mase": pl.Float64, "coverage80": pl.Float64, "coverage95": pl.Float64}))
    forecast = pl.concat(frows) if frows else pl.DataFrame()
    return forecast, pl.DataFrame(srows, infer_schema_length=None)
