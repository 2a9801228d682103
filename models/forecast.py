"""Demand forecasts with honest uncertainty: seasonal naive, ETS, Theta and their combination.

numpy and scipy only. One series at a time (`forecast_series`) or a long table of many (`forecast_table`).
For each series the model is chosen by a rolling-origin backtest (mean MASE over horizons 1..H), its 80 % and
95 % prediction intervals are calibrated on the backtest's standardised errors, and the backtest coverage of
those intervals (leave-one-origin-out, so not in-sample) is reported beside them. Gaps, zeros, short histories
and level shifts are handled and explained in ``notes``. Equations and sources: docs/FORECAST.md, which
follows ../shared/METRICS.md §4 (FPP3 §8, Hyndman et al. 2008 Table 6.1, statsmodels' ETS log-likelihood,
the M4 Theta benchmark code). Units are those of the input series (GPU-hours per bucket, GPUs, ...).
"""
from __future__ import annotations

import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.signal import lfilter

Z = {80: 1.2815515655446004, 95: 1.959963984540054}
LEVELS = (80, 95)
# Season length per frequency: weekly cycle for daily data, daily cycle for hourly data (METRICS.md §4).
SEASON = {"hour": 24, "day": 7, "week": 52, "month": 12}
STEP = {"hour": np.timedelta64(1, "h"), "day": np.timedelta64(1, "D"), "week": np.timedelta64(7, "D")}
ALPHA_BOUNDS, PHI_BOUNDS = (1e-4, 0.9999), (0.8, 0.98)


# ----------------------------------------------------------------------------- ETS (additive error)

@dataclass(frozen=True)
class EtsForm:
    """One ETS form: additive error, trend N / A / Ad, additive seasonality or none."""
    trend: str        # "N", "A" or "Ad"
    seasonal: bool

    @property
    def name(self) -> str:
        return f"ETS(A,{self.trend},{'A' if self.seasonal else 'N'})"

    @property
    def n_smoothing(self) -> int:
        return 1 + (self.trend != "N") + self.seasonal + (self.trend == "Ad")


ETS_FORMS = tuple(EtsForm(t, s) for s in (False, True) for t in ("N", "A", "Ad"))


@dataclass
class EtsFit:
    """A fitted ETS model. beta and gamma are the error-correction forms (beta = beta*·alpha,
    gamma = gamma*·(1-alpha)); `season0` holds the initial seasonal states (s_{1-m} .. s_0), summing to 0."""
    form: EtsForm
    m: int
    alpha: float
    beta: float
    gamma: float
    phi: float
    level0: float
    slope0: float
    season0: np.ndarray
    sigma2: float
    loglik: float
    aicc: float
    nobs: int
    k: int

    @property
    def name(self) -> str:
        return self.form.name


def _phi_of(form: EtsForm, phi: float) -> float:
    return {"N": 0.0, "A": 1.0, "Ad": phi}[form.trend]


def ets_filter_polys(form: EtsForm, m: int, alpha: float, beta: float, gamma: float,
                     phi: float) -> tuple[np.ndarray, np.ndarray]:
    """The one-step errors as a rational filter of y: e = (N(z)/A(z)) y, coefficients in powers of z^-1.

    N = (1-z^-1)·T·S with T = 1-phi·z^-1 (trend) and S = 1-z^-m (season); A = N + alpha·z^-1·T·S
    + phi·beta·z^-1·S + gamma·z^-m·(1-z^-1)·T. Derived from the error-correction equations (docs/FORECAST.md);
    it lets scipy's C filter replace a Python loop over time. Both are linear combinations of six fixed
    polynomials (`_poly_parts`), so building them costs one small matrix product.
    """
    ph = _phi_of(form, phi)
    parts = _poly_parts(form.trend != "N", form.seasonal, m)
    num = parts[0] - ph * parts[1]
    den = np.array([1.0, -ph, alpha + ph * beta, -alpha * ph, gamma, -gamma * ph]) @ parts
    return num, den


@lru_cache(maxsize=64)
def _poly_parts(trend: bool, seasonal: bool, m: int) -> np.ndarray:
    """Rows L·S, z^-1·L·S, z^-1·S, z^-2·S, z^-m·L, z^-(m+1)·L (L = 1 - z^-1), padded to the filter order."""
    S = np.r_[1.0, np.zeros(m - 1), -1.0] if seasonal else np.ones(1)
    L = np.array([1.0, -1.0])
    size = len(S) + 1 + trend
    rows = np.zeros((6, size))

    def put(i, poly, shift):
        if shift + len(poly) <= size:
            rows[i, shift:shift + len(poly)] = poly
    put(0, np.convolve(L, S), 0)
    put(1, np.convolve(L, S), 1)
    put(2, S, 1)
    put(3, S, 2)
    if seasonal:
        put(4, L, m)
        put(5, L, m + 1)
    rows.setflags(write=False)
    return rows


def ets_initial_basis(form: EtsForm, m: int, n: int, phi: float) -> np.ndarray:
    """Forecasts from the initial states alone, as columns (n, p): level, slope, m-1 seasonal contrasts.

    The last initial seasonal state is minus the sum of the others (the seasonal states sum to zero)."""
    t = np.arange(1, n + 1)
    cols = [np.ones(n)]
    if form.trend != "N":
        ph = _phi_of(form, phi)
        cols.append(t.astype(float) if ph == 1.0 else np.cumsum(ph ** t))
    if form.seasonal:
        pos = (t - 1) % m
        last = (pos == m - 1).astype(float)
        cols += [(pos == j) - last for j in range(m - 1)]
    return np.column_stack(cols)


def _smoothing(form: EtsForm, theta: np.ndarray) -> tuple[float, float, float, float]:
    """(alpha, beta, gamma, phi) from the optimiser's vector (alpha, beta*, gamma*, phi) (statsmodels'
    reparameterisation, which keeps beta < alpha and gamma < 1 - alpha)."""
    i, alpha = 1, float(theta[0])
    beta = gamma = 0.0
    phi = 1.0
    if form.trend != "N":
        beta, i = float(theta[i]) * alpha, i + 1
    if form.seasonal:
        gamma, i = float(theta[i]) * (1 - alpha), i + 1
    if form.trend == "Ad":
        phi = float(theta[i])
    return alpha, beta, gamma, phi


def ets_profile_sse(y: np.ndarray, form: EtsForm, m: int, alpha: float, beta: float, gamma: float,
                    phi: float) -> tuple[float, np.ndarray]:
    """Sum of squared one-step errors with the initial states at their least-squares (= ML) values.

    The errors are linear in the initial states: e = H·y - H·Phi·x0 (H the error filter, Phi the basis of
    `ets_initial_basis`), so x0 is solved exactly and the likelihood is concentrated on the smoothing
    parameters."""
    num, den = ets_filter_polys(form, m, alpha, beta, gamma, phi)
    filt = _filtered(y, form, m, phi, num, den)
    gram = filt @ filt.T
    try:
        x0 = np.linalg.solve(gram[1:, 1:], gram[1:, 0])
    except np.linalg.LinAlgError:
        x0 = np.linalg.lstsq(filt[1:].T, filt[0], rcond=None)[0]
    resid = filt[0] - x0 @ filt[1:]
    return float(resid @ resid), x0


def _filtered(y: np.ndarray, form: EtsForm, m: int, phi: float, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """[H·y; H·Phi'] filtering only y, one seasonal indicator (or ones) and, for a damped trend, phi^t.

    H is linear and time-invariant from a zero state, so it commutes with shifts and running sums: the
    indicator of position j is the position-0 indicator shifted by j, ones = Σ_j indicators, the linear trend
    t = cumsum(ones), and the damped trend Σ_{i<=t} phi^i = phi/(1-phi)·(1 - phi^t). Three filtered rows
    instead of m + 2."""
    n = len(y)
    idx = np.arange(n)
    base = (idx % m == 0).astype(float) if form.seasonal else np.ones(n)
    rows = [y, base] + ([phi ** (idx + 1.0)] if form.trend == "Ad" else [])
    f = lfilter(num, den, np.vstack(rows), axis=-1)
    if form.seasonal:
        shifted = np.zeros((m, n))
        for j in range(m):
            shifted[j, j:] = f[1, :n - j]
        h_ones = shifted.sum(axis=0)
    else:
        h_ones = f[1]
    out = [f[0], h_ones]
    if form.trend == "A":
        out.append(np.cumsum(h_ones))
    elif form.trend == "Ad":
        out.append(phi / (1 - phi) * (h_ones - f[2]))
    if form.seasonal:
        out.extend(shifted[:m - 1] - shifted[m - 1])
    return np.vstack(out)


def _bounds(form: EtsForm) -> list[tuple[float, float]]:
    return [ALPHA_BOUNDS] * (form.n_smoothing - (form.trend == "Ad")) + [PHI_BOUNDS] * (form.trend == "Ad")


def _start(form: EtsForm) -> np.ndarray:
    return np.array([0.3] + [0.1] * (form.n_smoothing - 1 - (form.trend == "Ad")) + [0.9] * (form.trend == "Ad"))


def fit_ets(y: np.ndarray, form: EtsForm, m: int, start: np.ndarray | None = None) -> EtsFit | None:
    """Maximum-likelihood fit of one ETS form with scipy.optimize (L-BFGS-B); None if too few points.

    y is centred and scaled before fitting (the likelihood is invariant to it), so one set of tolerances suits
    GPU-hours in the tens or the millions."""
    n = len(y)
    p = 1 + (form.trend != "N") + (m - 1) * form.seasonal
    k = form.n_smoothing + p + 1               # + sigma, as forecast::ets counts it
    if n - k - 1 <= 0 or (form.seasonal and n < 2 * m):
        return None
    mu, sd = float(np.mean(y)), float(np.std(y)) or 1.0
    ys = (y - mu) / sd

    def objective(theta):
        sse = ets_profile_sse(ys, form, m, *_smoothing(form, theta))[0]
        return math.log(sse / n) if sse > 0 and math.isfinite(sse) else 1e6

    bounds = _bounds(form)
    x_start = _start(form) if start is None else np.clip(start, *zip(*bounds))
    # SLSQP: bounded quasi-Newton like L-BFGS-B, but far less per-iteration overhead in SciPy 1.17 here.
    res = minimize(objective, x_start, method="SLSQP", bounds=bounds, options={"ftol": 1e-7, "maxiter": 200})
    theta = np.clip(res.x, *zip(*bounds))
    if not res.success and objective(x_start) < objective(theta):
        theta = x_start
    alpha, beta, gamma, phi = _smoothing(form, theta)
    sse, x0 = ets_profile_sse(ys, form, m, alpha, beta, gamma, phi)
    sse *= sd * sd
    x0 = x0 * sd
    x0[0] += mu
    return _ets_result(form, m, (alpha, beta, gamma, phi), x0, sse, n, k)


def _ets_result(form, m, params, x0, sse, n, k) -> EtsFit:
    alpha, beta, gamma, phi = params
    slope0 = float(x0[1]) if form.trend != "N" else 0.0
    season0 = np.zeros(m)
    if form.seasonal:
        contrasts = x0[-(m - 1):]
        season0[:m - 1] = contrasts
        season0[m - 1] = -contrasts.sum()
    sse = max(sse, 1e-300)
    loglik = -0.5 * n * (math.log(2 * math.pi * sse / n) + 1)
    aicc = -2 * loglik + 2 * k + 2 * k * (k + 1) / (n - k - 1)
    return EtsFit(form, m, alpha, beta, gamma, phi if form.trend == "Ad" else 1.0, float(x0[0]), slope0,
                  season0, sse / max(n - k, 1), loglik, aicc, n, k)


def ets_theta(fit: EtsFit) -> np.ndarray:
    """The optimiser's vector (alpha, beta*, gamma*, phi) of a fit, to warm-start a refit."""
    v = [fit.alpha]
    if fit.form.trend != "N":
        v.append(fit.beta / fit.alpha)
    if fit.form.seasonal:
        v.append(fit.gamma / (1 - fit.alpha))
    if fit.form.trend == "Ad":
        v.append(fit.phi)
    return np.array(v)


def select_ets(y: np.ndarray, m: int, forms=ETS_FORMS, warm: dict | None = None) -> EtsFit | None:
    """The ETS form with the lowest AICc among those the history can support (seasonal ones need two seasons)."""
    fits = fit_ets_forms(y, m, forms, warm)
    return min(fits.values(), key=lambda f: f.aicc) if fits else None


def fit_ets_forms(y: np.ndarray, m: int, forms=ETS_FORMS, warm: dict | None = None) -> dict[EtsForm, EtsFit]:
    """Every form that can be fitted; ``warm`` maps a form to a start vector (e.g. the fit at an earlier origin)."""
    fits = {}
    for form in forms:
        if form.seasonal and m < 2:
            continue
        fit = fit_ets(y, form, m, start=(warm or {}).get(form))
        if fit is not None:
            fits[form] = fit
    return fits


@dataclass
class EtsState:
    """Level, slope and the seasonal ring after consuming t observations (ring[j] is the seasonal state used
    at time indices congruent to j mod m)."""
    level: float
    slope: float
    ring: np.ndarray
    t: int


def ets_states(fit: EtsFit, y: np.ndarray, at: list[int] | None = None) -> list[EtsState]:
    """Run the state equations through y; return the states after y[:o] for each o in ``at`` (default: len(y)).

    ŷ_t = l + phi·b + s_{t-m};  e = y_t - ŷ_t;  l ← l + phi·b + alpha·e;  b ← phi·b + beta·e;  s_t = s_{t-m} + gamma·e.
    """
    at = [len(y)] if at is None else list(at)
    want = set(at)
    level, slope, ring = fit.level0, fit.slope0, fit.season0.copy()
    phi = _phi_of(fit.form, fit.phi)
    m, alpha, beta, gamma = fit.m, fit.alpha, fit.beta, fit.gamma
    seasonal = fit.form.seasonal
    out: dict[int, EtsState] = {}
    if 0 in want:
        out[0] = EtsState(level, slope, ring.copy(), 0)
    for t in range(max(at)):
        j = t % m
        err = y[t] - (level + phi * slope + (ring[j] if seasonal else 0.0))
        level = level + phi * slope + alpha * err
        slope = phi * slope + beta * err
        if seasonal:
            ring[j] += gamma * err
        if t + 1 in want:
            out[t + 1] = EtsState(level, slope, ring.copy(), t + 1)
    return [out[o] for o in at]


def ets_point(fit: EtsFit, state: EtsState, h: int) -> np.ndarray:
    """ŷ_{t+j|t} = l_t + (phi + … + phi^j)·b_t + s_{t+j-m(k+1)}, j = 1..h (FPP3 §8.3)."""
    j = np.arange(1, h + 1)
    phi = _phi_of(fit.form, fit.phi)
    damp = np.zeros(h) if phi == 0 else (j.astype(float) if phi == 1 else np.cumsum(phi ** j))
    season = state.ring[(state.t + j - 1) % fit.m] if fit.form.seasonal else 0.0
    return state.level + damp * state.slope + season


def ets_sd(fit: EtsFit, h: int) -> np.ndarray:
    """Forecast standard deviation, j = 1..h: sigma²·(1 + Σ_{i<j} c_i²), c_i = alpha + beta·(phi+…+phi^i)
    + gamma·[i mod m = 0] (Hyndman et al. 2008, class 1; equals FPP3 Table 8.8 for ETS(A,A,A))."""
    i = np.arange(1, h)
    phi = _phi_of(fit.form, fit.phi)
    damp = np.zeros(h - 1) if phi == 0 else (i.astype(float) if phi == 1 else np.cumsum(phi ** i))
    c = fit.alpha + fit.beta * damp + (fit.gamma * (i % fit.m == 0) if fit.form.seasonal else 0.0)
    return np.sqrt(fit.sigma2 * (1 + np.r_[0.0, np.cumsum(c * c)]))


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


# ----------------------------------------------------------------------------- Theta (M4 benchmark)

def seasonality_test(y: np.ndarray, m: int) -> bool:
    """M4's test: |acf_m| > 1.645·√((1 + 2·Σ_{k<m} acf_k²)/n), needing at least three seasons."""
    n = len(y)
    if m < 2 or n < 3 * m:
        return False
    x = y - y.mean()
    denom = float(x @ x)
    if denom == 0:
        return False
    acf = np.array([x[:n - k] @ x[k:] for k in range(1, m + 1)]) / denom
    limit = 1.645 * math.sqrt((1 + 2 * float(np.sum(acf[:m - 1] ** 2))) / n)
    return abs(acf[m - 1]) > limit


def seasonal_indices(y: np.ndarray, m: int, multiplicative: bool) -> np.ndarray:
    """Classical decomposition (R's decompose): centred moving average, per-position mean of the ratios
    (or differences), normalised to mean 1 (or 0). Returns the index for each position 0..m-1 of y."""
    w = np.r_[0.5, np.ones(m - 1), 0.5] / m if m % 2 == 0 else np.ones(m) / m
    trend = np.convolve(y, w, mode="valid")
    half = (len(w) - 1) // 2
    core = y[half:half + len(trend)]
    detr = core / trend if multiplicative else core - trend
    pos = (np.arange(len(trend)) + half) % m
    fig = np.array([detr[pos == j].mean() for j in range(m)])
    return fig / fig.mean() if multiplicative else fig - fig.mean()


@dataclass
class ThetaFit:
    intercept: float
    slope: float
    ses: EtsFit
    sigma: float
    seasonal: str           # "none", "multiplicative" or "additive"
    index: np.ndarray       # per position mod m
    n: int


def fit_theta(y: np.ndarray, m: int) -> ThetaFit | None:
    """Theta classic (M4 code): deseasonalise if the ACF test passes, Z = 2y - L for the OLS line L,
    forecast = ½·SES(Z) + ½·L, reseasonalise. Multiplicative decomposition as in M4 unless the series has
    zeros or negatives (then additive). SES is ETS(A,N,N) fitted by maximum likelihood."""
    n = len(y)
    if n < 3:
        return None
    kind, index = "none", np.ones(max(m, 1))
    if seasonality_test(y, m):
        kind = "multiplicative" if y.min() > 0 else "additive"
        index = seasonal_indices(y, m, kind == "multiplicative")
    pos = np.arange(n) % max(m, 1)
    des = y / index[pos] if kind == "multiplicative" else (y - index[pos] if kind == "additive" else y)
    t = np.arange(1, n + 1, dtype=float)
    slope, intercept = np.polyfit(t, des, 1)
    line = intercept + slope * t
    ses = fit_ets(2 * des - line, EtsForm("N", False), 1)
    if ses is None:
        return None
    ses_fitted = _ses_fitted(ses, 2 * des - line)
    resid = des - (0.5 * ses_fitted + 0.5 * line)
    return ThetaFit(float(intercept), float(slope), ses, float(np.sqrt(np.mean(resid ** 2))), kind, index, n)


def _ses_fitted(fit: EtsFit, z: np.ndarray) -> np.ndarray:
    """One-step fitted values of SES: ℓ_{t-1} for each t (ℓ_0 the fitted initial level)."""
    a = fit.alpha
    levels = lfilter([a], [1.0, -(1 - a)], z, zi=[(1 - a) * fit.level0])[0]
    return np.r_[fit.level0, levels[:-1]]


def theta_forecast(fit: ThetaFit, z_last_level: float, h: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    j = np.arange(1, h + 1)
    t = fit.n + j
    des = 0.5 * z_last_level + 0.5 * (fit.intercept + fit.slope * t)
    sd = fit.sigma * np.sqrt(1 + (j - 1) * fit.ses.alpha ** 2)
    pos = (fit.n + j - 1) % max(m, 1)
    if fit.seasonal == "multiplicative":
        return des * fit.index[pos], sd * fit.index[pos]
    if fit.seasonal == "additive":
        return des + fit.index[pos], sd
    return des, sd


def theta(y: np.ndarray, m: int, h: int) -> tuple[np.ndarray, np.ndarray] | None:
    fit = fit_theta(y, m)
    if fit is None:
        return None
    pos = np.arange(len(y)) % max(m, 1)
    des = y / fit.index[pos] if fit.seasonal == "multiplicative" else (
        y - fit.index[pos] if fit.seasonal == "additive" else y)
    line = fit.intercept + fit.slope * np.arange(1, len(y) + 1)
    zl = 2 * des - line
    last = lfilter([fit.ses.alpha], [1.0, -(1 - fit.ses.alpha)], zl, zi=[(1 - fit.ses.alpha) * fit.ses.level0])[0][-1]
    return theta_forecast(fit, float(last), h, m)


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

CANDIDATES = ("SeasonalNaive", "ETS", "Theta", "Combination")
COMBINED = ("ETS", "Theta", "SeasonalNaive")


@dataclass
class Paths:
    """Forecasts of one candidate from K origins: point and model sd, each (K, h); for ETS, the start
    vectors of the three forms with the lowest AICc (the final refit re-selects among them, warm-started)."""
    point: np.ndarray
    sd: np.ndarray
    detail: str = ""
    warm: dict = field(default_factory=dict)


def _clip(paths: Paths, nonneg: bool) -> Paths:
    if nonneg:
        paths.point = np.maximum(paths.point, 0.0)
    return paths


def candidate_paths(y: np.ndarray, m: int, origins: list[int], h: int,
                    only: tuple[str, ...] = CANDIDATES, warm: dict | None = None,
                    weights: dict | None = None) -> dict[str, Paths]:
    """Every candidate's forecasts from each origin (forecast of y[o:o+h] from y[:o]); ``only`` limits the set.

    Seasonal naive and Theta are refitted at every origin (they are cheap). ETS is chosen by AICc and fitted at
    the first origin, then its states are updated through later data with those parameters ("rolling origin
    with updating", Tashman 2000), which keeps 200 series within the speed budget. With one origin at len(y)
    this is the final forecast."""
    want = set(only) | (set(COMBINED) if "Combination" in only else set())
    out: dict[str, Paths] = {}
    if "SeasonalNaive" in want:
        sn = [snaive(y[:o], m, h) for o in origins]
        short = "naive: history shorter than a season" if origins[0] <= m else ""
        out["SeasonalNaive"] = Paths(np.array([p for p, _ in sn]), np.array([s for _, s in sn]), short)
    forms = ETS_FORMS if not warm else tuple(warm)
    fits = fit_ets_forms(y[:origins[0]], m, forms, warm=warm) if "ETS" in want else {}
    if fits:
        fit = min(fits.values(), key=lambda f: f.aicc)
        states = ets_states(fit, y, origins)
        out["ETS"] = Paths(np.array([ets_point(fit, s, h) for s in states]),
                           np.tile(ets_sd(fit, h), (len(origins), 1)), _ets_detail(fit),
                           {f: ets_theta(v) for f, v in sorted(fits.items(), key=lambda kv: kv[1].aicc)[:3]})
    th = [theta(y[:o], m, h) for o in origins] if "Theta" in want else [None]
    if all(r is not None for r in th):
        out["Theta"] = Paths(np.array([p for p, _ in th]), np.array([s for _, s in th]))
    members = [c for c in COMBINED if c in out]
    if "Combination" in only and len(members) >= 2:
        out["Combination"] = combine({c: out[c] for c in members}, weights)
    nonneg = bool(len(y) and y.min() >= 0)
    return {k: _clip(v, nonneg) for k, v in out.items() if k in only}


def combine(members: dict[str, Paths], weights: dict | None = None) -> Paths:
    """Weighted mean of the members' forecasts and sds (equal weights when none are given)."""
    w = np.array([(weights or {}).get(c, 1.0) for c in members])
    w = w / w.sum()
    point = np.tensordot(w, np.array([p.point for p in members.values()]), axes=1)
    sd = np.tensordot(w, np.array([p.sd for p in members.values()]), axes=1)
    label = ", ".join(f"{c} {wi:.2f}" for c, wi in zip(members, w))
    return Paths(point, sd, f"weighted mean of {label}")


def _inverse_mase_weights(mase_o: dict[str, np.ndarray], skip: int | None = None) -> dict[str, float]:
    """Combination weights ∝ 1 / backtest MASE of each member (over all origins but ``skip``)."""
    out = {}
    for c, v in mase_o.items():
        v = np.delete(v, skip) if skip is not None else v
        out[c] = 1.0 / max(float(np.mean(v)), 1e-9)
    return out


def _ets_detail(fit: EtsFit) -> str:
    parts = [f"alpha={fit.alpha:.3g}"]
    if fit.form.trend != "N":
        parts.append(f"beta={fit.beta:.3g}")
    if fit.form.seasonal:
        parts.append(f"gamma={fit.gamma:.3g}")
    if fit.form.trend == "Ad":
        parts.append(f"phi={fit.phi:.3g}")
    return f"{fit.name} {' '.join(parts)} AICc={fit.aicc:.1f}"


# ----------------------------------------------------------------------------- backtest, selection, calibration

@dataclass
class Backtest:
    """Rolling-origin backtest of every candidate on the series' own history.

    ``coverage`` is that of the calibrated intervals, each origin calibrated on the other origins only
    (leave-one-origin-out), so it is an out-of-sample estimate; ``coverage_raw`` is the model-based interval's."""
    horizon: int
    origins: list[int]
    mase: dict[str, float]
    mase_by_h: dict[str, np.ndarray]
    smape: dict[str, float]
    coverage: dict[str, dict[int, float]]
    coverage_raw: dict[str, dict[int, float]]
    scale: dict[str, dict[int, float]]
    warm: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)     # the combination's member weights for the final forecast


def backtest_origins(n: int, m: int, h: int, max_origins: int = 28) -> tuple[list[int], int]:
    """Origins (training lengths) and the backtest horizon hb = min(h, what the history allows).

    Origins step by min(hb, m) back from n - hb, at least max(6, ⌈4m/hb⌉) of them (so short horizons still
    see a few seasons of errors), each keeping at least two seasons of training data."""
    min_train = max(2 * m, 8)
    hb = min(h, n - min_train)
    if hb < 1:
        return [], 0
    k = min(max_origins, max(6, math.ceil(4 * m / hb)))
    step = max(1, min(hb, m))
    last = n - hb
    return sorted(last - i * step for i in range(k) if last - i * step >= min_train), hb


def _calibrate(absu: np.ndarray) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """Scale factors c_L = quantile_L(|u|)/z_L of the standardised errors u = e/sd (rows = origins), the
    raw coverage, and the leave-one-origin-out coverage of the calibrated intervals."""
    scale, cov, raw = {}, {}, {}
    k = absu.shape[0]
    for lv in LEVELS:
        raw[lv] = float(np.mean(absu <= Z[lv]))
        if k < 3 or absu.size < 10:
            scale[lv], cov[lv] = 1.0, raw[lv]
            continue
        scale[lv] = float(np.quantile(absu, lv / 100)) / Z[lv]
        hits = [absu[i] <= np.quantile(np.delete(absu, i, axis=0), lv / 100) for i in range(k)]
        cov[lv] = float(np.mean(hits))
    return scale, cov, raw


def backtest(y: np.ndarray, m: int, h: int, max_origins: int = 28) -> Backtest | None:
    origins, hb = backtest_origins(len(y), m, h, max_origins)
    if len(origins) < 2:
        return None
    paths = candidate_paths(y, m, origins, hb)
    actual = np.array([y[o:o + hb] for o in origins])
    scales = np.array([mase_scale(y[:o], m) for o in origins])[:, None]
    bt = Backtest(hb, origins, {}, {}, {}, {}, {}, {}, paths["ETS"].warm if "ETS" in paths else {})
    members = {c: paths[c] for c in COMBINED if c in paths}
    if len(members) >= 2:
        # weights ∝ 1/MASE of each member; for the backtest's own score each origin's weights come from the
        # other origins only, so the combination's MASE stays out-of-sample like the others'
        mase_o = {c: (np.abs(actual - p.point) / scales).mean(axis=1) for c, p in members.items()}
        rows = [combine({c: Paths(p.point[i:i + 1], p.sd[i:i + 1]) for c, p in members.items()},
                        _inverse_mase_weights(mase_o, i)) for i in range(len(origins))]
        paths["Combination"] = Paths(np.vstack([r.point for r in rows]), np.vstack([r.sd for r in rows]))
        bt.weights = _inverse_mase_weights(mase_o)
    for name, p in paths.items():
        err = actual - p.point
        mase_oh = np.abs(err) / scales
        bt.mase_by_h[name] = mase_oh.mean(axis=0)
        bt.mase[name] = float(mase_oh.mean())
        bt.smape[name] = float(smape(actual, p.point).mean())
        with np.errstate(divide="ignore", invalid="ignore"):
            absu = np.where(p.sd > 0, np.abs(err) / p.sd, np.where(err == 0, 0.0, 1e12))
        absu = np.nan_to_num(absu, nan=1e12)
        bt.scale[name], bt.coverage[name], bt.coverage_raw[name] = _calibrate(absu)
    return bt


def choose(bt: Backtest) -> str:
    """Lowest mean backtest MASE over horizons 1..hb; ties go to the simpler model (CANDIDATES order)."""
    return min(bt.mase, key=lambda c: (round(bt.mase[c], 12), CANDIDATES.index(c)))


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


def _flat(value: float, h: int, model: str, note: str, width: float = float("nan")) -> Result:
    point = np.full(h, value)
    return Result(point, {lv: point - width for lv in LEVELS}, {lv: point + width for lv in LEVELS},
                  model, notes=[note])


def forecast_values(y: np.ndarray, m: int, h: int, max_origins: int = 28, force: str | None = None,
                    bt: Backtest | None = None) -> Result:
    """Forecast a regular, gap-free history y (oldest first) h periods ahead with the backtest-chosen model
    (or the candidate ``force`` names, still calibrated on the backtest; ``bt`` reuses a backtest of this same
    y, m and h: the benchmark uses both)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n == 0:
        return _flat(float("nan"), h, "none", "no history: nothing to forecast")
    if not np.any(y):
        return _flat(0.0, h, "Zero", f"all {n} periods are zero: forecast 0", 0.0)
    if n < 3:
        return _flat(float(y[-1]), h, "Naive", f"only {n} period(s) of history: last value carried forward, "
                                               "no interval can be estimated")
    notes = []
    if n < 2 * m:
        notes.append(f"short history ({n} periods < two seasons of {m}): no seasonal ETS, Theta not deseasonalised")
    bt = bt or backtest(y, m, h, max_origins)
    if bt is None:
        chosen = force or ("ETS" if select_ets(y, m) is not None else "SeasonalNaive")
        notes.append(f"history too short to backtest ({n} periods): {chosen} chosen by default, "
                     "intervals model-based (not calibrated), coverage unknown")
    else:
        chosen = force if force in bt.mase else choose(bt)
        if bt.horizon < h:
            notes.append(f"backtest covers horizons 1..{bt.horizon} of {h}; beyond it the model's own "
                         "variance growth is used, scaled by the backtest calibration")
    final = candidate_paths(y, m, [n], h, only=(chosen,), warm=bt.warm if bt else None,
                            weights=bt.weights if bt else None).get(chosen)
    if final is None:                        # the chosen model cannot be fitted on this history
        chosen, final = "SeasonalNaive", candidate_paths(y, m, [n], h, only=("SeasonalNaive",))["SeasonalNaive"]
    point, sd = final.point[0], final.sd[0]
    scale = bt.scale[chosen] if bt else {lv: 1.0 for lv in LEVELS}
    nonneg = y.min() >= 0
    lo, hi = {}, {}
    for lv in LEVELS:
        half = Z[lv] * scale[lv] * sd
        lo[lv] = np.maximum(point - half, 0.0) if nonneg else point - half
        hi[lv] = point + half
    if nonneg and np.any(point - Z[95] * scale[95] * sd < 0):
        notes.append("lower bounds clipped at 0 (demand cannot be negative)")
    return Result(point, lo, hi, chosen, final.detail, bt, notes)


# ----------------------------------------------------------------------------- level shifts

def detect_level_shift(y: np.ndarray, m: int, ratio: float = 8.0, rel: float = 0.3) -> tuple[int, float, float] | None:
    """The largest abrupt level change: (index of the first period at the new level, mean before, mean after).

    Compares the means of the w = max(m, 7) periods before and after each point (a whole season, so the
    seasonal pattern cancels). A shift is reported when the largest jump is ``ratio`` times the median jump
    (abrupt against the series' own drift) and changes the level by at least ``rel`` (30 %)."""
    w = max(m, 7)
    n = len(y)
    if n < 4 * w:
        return None
    c = np.r_[0.0, np.cumsum(y)]
    t = np.arange(w, n - w + 1)
    before = (c[t] - c[t - w]) / w
    after = (c[t + w] - c[t]) / w
    jump = np.abs(after - before)
    i = int(np.argmax(jump))
    typical = float(np.median(jump))
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
    """The history a forecast is fitted on, and what was done to get it (``notes``)."""
    ts: np.ndarray
    y: np.ndarray
    freq: str
    notes: list[str]


def _day(t) -> str:
    return str(np.datetime64(t, "m")).replace("T00:00", "").replace("T", " ")


def prepare(ts: np.ndarray, y: np.ndarray, freq: str, shifts: bool = True) -> Prepared:
    """Regular history (NaN = missing period) → gap-filled, leading zeros dropped, cut at a recent level shift."""
    m = SEASON[freq]
    notes: list[str] = []
    y, filled, longest = fill_gaps(np.asarray(y, dtype=float), m)
    if filled:
        notes.append(f"{filled} missing period(s) filled (longest gap {longest}) from one season earlier "
                     "or by interpolation")
    nz = np.flatnonzero(y != 0)
    if len(nz) and nz[0] > 0:
        notes.append(f"history starts {_day(ts[nz[0]])}, the first non-zero period ({nz[0]} leading zero "
                     "periods dropped)")
        ts, y = ts[nz[0]:], y[nz[0]:]
    cut = 0
    while shifts:
        found = detect_level_shift(y[cut:], m)
        if found is None:
            break
        at, before, after = found
        since = len(y) - cut - at
        if since < max(2 * m, 14):
            notes.append(f"level shift on {_day(ts[cut + at])} (mean {before:.4g} → {after:.4g}), only {since} "
                         "periods since: fitted on the whole history, so intervals may be too narrow")
            break
        notes.append(f"level shift on {_day(ts[cut + at])} (mean {before:.4g} → {after:.4g}): fitted on the "
                     f"{since} periods since")
        cut += at
    return Prepared(ts[cut:], y[cut:], freq, notes)


def forecast_series(ts: np.ndarray, y: np.ndarray, freq: str, h: int, shifts: bool = True,
                    max_origins: int = 28) -> tuple[Prepared, Result, np.ndarray]:
    """Forecast one regular series (timestamps at bucket starts, NaN = missing); returns what was fitted,
    the result, and the future timestamps."""
    prep = prepare(np.asarray(ts).astype("datetime64[us]"), y, freq, shifts)
    res = forecast_values(prep.y, SEASON[freq], h, max_origins)
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
           "coverage95": bt.coverage[c][95] if bt and c in bt.coverage else None}
    for cand in CANDIDATES:
        row[f"mase_{cand.lower()}"] = bt.mase.get(cand) if bt else None
    row["notes"] = "; ".join(res.notes)
    return row


def _forecast_job(job):
    ts, y, freq, horizon, shifts, max_origins = job
    return forecast_series(ts, y, freq, horizon, shifts, max_origins)


def _workers(n_series: int) -> int:
    """Processes for many series: $GPULEDGER_FORECAST_WORKERS, else both cores from 16 series up."""
    env = os.environ.get("GPULEDGER_FORECAST_WORKERS")
    if env:
        return max(1, int(env))
    return min(2, os.cpu_count() or 1) if n_series >= 16 else 1


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
        for i, out in enumerate(pool.map(_forecast_job, jobs, chunksize=max(1, len(jobs) // (8 * workers)))):
            yield out
            if progress:
                progress(i + 1, len(jobs))


def forecast_table(df, keys: list[str], freq: str, horizon: int, shifts: bool = True, max_origins: int = 28,
                   progress=None):
    """Forecast every series of a long table (keys..., ts, value; regular grid, null = missing).

    Returns (forecast, summary): forecast has one row per series and future period with the point forecast,
    80 %/95 % bounds, the chosen model and its backtest MASE and coverage; summary has one row per series
    with the backtest of every candidate and the notes. Values keep the input's unit."""
    import polars as pl
    parts = df.sort([*keys, "ts"]).partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): df.sort("ts")}
    frows, srows = [], []
    jobs = []
    for part in parts.values():
        y = part.get_column("value").cast(pl.Float64).to_numpy()
        jobs.append((part.get_column("ts").to_numpy(), np.where(np.isfinite(y), y, np.nan), freq, horizon,
                     shifts, max_origins))
    for (kv, part), (prep, res, fut) in zip(parts.items(), _run_jobs(jobs, progress)):
        key = dict(zip(keys, kv))
        srow = _summary_row(key, prep, res)
        srows.append(srow)
        frows.append(pl.DataFrame({
            **{k: [v] * horizon for k, v in key.items()}, "ts": fut, "forecast": res.point,
            "lo80": res.lo[80], "hi80": res.hi[80], "lo95": res.lo[95], "hi95": res.hi[95],
            "model": [res.model] * horizon, "backtest_mase": [srow["backtest_mase"]] * horizon,
            "coverage80": [srow["coverage80"]] * horizon, "coverage95": [srow["coverage95"]] * horizon,
        }, schema_overrides={k: part.schema[k] for k in keys} | {
            "backtest_mase": pl.Float64, "coverage80": pl.Float64, "coverage95": pl.Float64}))
    forecast = pl.concat(frows) if frows else pl.DataFrame()
    return forecast, pl.DataFrame(srows, infer_schema_length=None)
