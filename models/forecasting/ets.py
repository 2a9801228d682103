"""ETS with additive errors (trend none / additive / damped, additive seasonality or none), fitted by maximum
likelihood: the model equations, the profile likelihood and its gradient, state updates, forecasts and variances.

numpy and scipy only. Equations: FPP3 §8, Hyndman et al. 2008 (Table 6.1, class 1 variances), statsmodels'
ETS log-likelihood with additive errors; derivations in docs/FORECAST.md. Units are those of the series.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import minimize
from scipy.signal import lfilter

ALPHA_BOUNDS, PHI_BOUNDS = (1e-4, 0.9999), (0.8, 0.98)

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




class ProfileSSE:
    """The concentrated SSE of one form on one series, and its gradient, for the optimiser.

    The one-step errors are linear in the initial states: e = H·y - H·Phi·x0 (H the error filter of
    `ets_filter_polys`, Phi the basis of `ets_initial_basis`), so x0 is solved exactly by least squares and the
    likelihood is concentrated on the smoothing parameters. Its gradient needs no finite differences for
    alpha, beta and gamma: only the filter's denominator A depends on them, so de/dp = -(dA/dp)·(e/A), one
    more C filter of e; by the envelope theorem x0 stays fixed. phi (damped trend) moves N, A and Phi and is
    differenced numerically."""

    def __init__(self, y: np.ndarray, form: EtsForm, m: int):
        n = len(y)
        self.form, self.m, self.n = form, m, n
        self.parts = _poly_parts(form.trend != "N", form.seasonal, m)
        # rows filtered at every evaluation: y, one seasonal indicator (or ones) and, if damped, phi^t
        self.rows = np.zeros((3 if form.trend == "Ad" else 2, n))
        self.rows[0] = y
        if form.seasonal:
            self.rows[1, ::m] = 1.0
        else:
            self.rows[1] = 1.0
        self.t1 = np.arange(1.0, n + 1.0)
        self.p = 1 + (form.trend != "N") + (m - 1) * form.seasonal
        # gathers from a zero-padded copy: row j of buf[self.shift] is the series delayed by j periods
        width = max(m, 2 * m + 4)
        self.buf = np.zeros(n + width)
        self.shift = width + np.arange(n)[None, :] - np.arange(width)[:, None]

    def filtered(self, phi: float, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """[H·y; H·Phi'] (p+1, n) from three filtered rows: H is linear and time-invariant from a zero state,
        so it commutes with shifts and running sums. The indicator of season position j is the position-0
        indicator shifted by j, ones = their sum, the linear trend t = cumsum(ones), and the damped trend
        Σ_{i<=t} phi^i = phi/(1-phi)·(1 - phi^t)."""
        form, m, n = self.form, self.m, self.n
        if form.trend == "Ad":
            self.rows[2] = phi ** self.t1
        f = lfilter(num, den, self.rows, axis=-1)
        out = np.empty((self.p + 1, n))
        out[0] = f[0]
        if form.seasonal:
            c = np.cumsum(f[1])
            h_ones = c.copy()
            h_ones[m:] -= c[:-m]
            shifted = self._delayed(f[1], m)
            np.subtract(shifted[:m - 1], shifted[m - 1], out=out[-(m - 1):])
        else:
            h_ones = f[1]
        out[1] = h_ones
        if form.trend == "A":
            out[2] = np.cumsum(h_ones)
        elif form.trend == "Ad":
            out[2] = phi / (1 - phi) * (h_ones - f[2])
        return out

    def _delayed(self, x: np.ndarray, k: int) -> np.ndarray:
        """(k, n): row j is x delayed by j periods (zeros before the start)."""
        self.buf[-self.n:] = x
        return self.buf[self.shift[:k]]

    def solve(self, alpha: float, beta: float, gamma: float, phi: float):
        """(SSE, x0, errors, denominator of the error filter) at these smoothing parameters."""
        num, den = ets_filter_polys(self.form, self.m, alpha, beta, gamma, phi)
        filt = self.filtered(phi, num, den)
        gram = filt @ filt.T
        try:
            x0 = np.linalg.solve(gram[1:, 1:], gram[1:, 0])
        except np.linalg.LinAlgError:
            x0 = np.linalg.lstsq(filt[1:].T, filt[0], rcond=None)[0]
        e = filt[0] - x0 @ filt[1:]
        return float(e @ e), x0, e, den

    def value(self, v: np.ndarray) -> float:
        """log(SSE/n): the negative concentrated log-likelihood up to constants, at optimiser vector v."""
        sse = self.solve(*_smoothing(self.form, v))[0]
        return math.log(sse / self.n) if sse > 0 and math.isfinite(sse) else 1e6

    def value_grad(self, v: np.ndarray) -> tuple[float, np.ndarray]:
        form = self.form
        alpha, beta, gamma, phi = _smoothing(form, v)
        sse, _, e, den = self.solve(alpha, beta, gamma, phi)
        if not (sse > 0 and math.isfinite(sse)):
            return 1e6, np.zeros(len(v))
        w = lfilter([1.0], den, e)
        lags = self._delayed(w, len(den)) @ e                         # Σ_t e_t·w_{t-k}, k = 0..order
        ph = _phi_of(form, phi)
        parts = self.parts
        d_alpha = -2 * (parts[2] - ph * parts[3]) @ lags / sse          # d log SSE / d alpha, beta, gamma
        d_beta = -2 * (ph * parts[2]) @ lags / sse
        d_gamma = -2 * (parts[4] - ph * parts[5]) @ lags / sse
        f = math.log(sse / self.n)
        # chain rule to (alpha, beta* = beta/alpha, gamma* = gamma/(1-alpha), phi)
        bstar = beta / alpha
        gstar = gamma / (1 - alpha)
        g = [d_alpha + bstar * d_beta * (form.trend != "N") - gstar * d_gamma * form.seasonal]
        if form.trend != "N":
            g.append(alpha * d_beta)
        if form.seasonal:
            g.append((1 - alpha) * d_gamma)
        if form.trend == "Ad":
            step = 1e-6 if v[-1] + 1e-6 <= PHI_BOUNDS[1] else -1e-6
            vp = v.copy()
            vp[-1] += step
            g.append((self.value(vp) - f) / step)
        return f, np.array(g)


def ets_profile_sse(y: np.ndarray, form: EtsForm, m: int, alpha: float, beta: float, gamma: float,
                    phi: float) -> tuple[float, np.ndarray]:
    """Sum of squared one-step errors with the initial states at their least-squares (= ML) values, and those
    initial states (level, slope, m-1 seasonal contrasts)."""
    sse, x0, _, _ = ProfileSSE(np.asarray(y, dtype=float), form, m).solve(alpha, beta, gamma, phi)
    return sse, x0


def _bounds(form: EtsForm) -> list[tuple[float, float]]:
    return [ALPHA_BOUNDS] * (form.n_smoothing - (form.trend == "Ad")) + [PHI_BOUNDS] * (form.trend == "Ad")


def _start(form: EtsForm) -> np.ndarray:
    return np.array([0.3] + [0.1] * (form.n_smoothing - 1 - (form.trend == "Ad")) + [0.9] * (form.trend == "Ad"))


def fit_ets(y: np.ndarray, form: EtsForm, m: int, start: np.ndarray | None = None) -> EtsFit | None:
    """Maximum-likelihood fit of one ETS form (SLSQP with the analytic gradient); None if too few points.

    y is centred and scaled before fitting (the likelihood is invariant to it), so one set of tolerances suits
    GPU-hours in the tens or the millions."""
    n = len(y)
    p = 1 + (form.trend != "N") + (m - 1) * form.seasonal
    k = form.n_smoothing + p + 1               # + sigma, as forecast::ets counts it
    if n - k - 1 <= 0 or (form.seasonal and n < 2 * m):
        return None
    mu, sd = float(np.mean(y)), float(np.std(y)) or 1.0
    prof = ProfileSSE((np.asarray(y, dtype=float) - mu) / sd, form, m)
    bounds = _bounds(form)
    lo, hi = np.array(bounds).T
    x_start = _start(form) if start is None else np.clip(start, lo, hi)
    res = minimize(prof.value_grad, x_start, jac=True, method="SLSQP", bounds=bounds,
                   options={"ftol": 1e-8, "maxiter": 100})
    theta = np.clip(res.x, lo, hi)
    if not res.success and prof.value(x_start) < prof.value(theta):
        theta = x_start
    alpha, beta, gamma, phi = _smoothing(form, theta)
    sse, x0, _, _ = prof.solve(alpha, beta, gamma, phi)
    x0 = x0 * sd
    x0[0] += mu
    return _ets_result(form, m, (alpha, beta, gamma, phi), x0, sse * sd * sd, n, k)


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
    """Every form that can be fitted; ``warm`` maps a form to a start vector (e.g. the fit at an earlier origin).

    Without one, a form starts from the optimum of the form it nests (N -> A -> Ad trend, non-seasonal -> seasonal
    level): the new parameter starts near its nested value, so the optimiser begins where the simpler model
    ended. That takes about half the iterations of a fixed start and escapes the poor local optima a fixed start
    falls into on trending series (tests/test_ets.py)."""
    fits: dict[EtsForm, EtsFit] = {}
    for form in forms:
        if form.seasonal and m < 2:
            continue
        start = (warm or {}).get(form)
        if start is None:
            start = _nested_start(form, fits)
        fit = fit_ets(y, form, m, start=start)
        if fit is not None:
            fits[form] = fit
    return fits


def _nested_start(form: EtsForm, fits: dict[EtsForm, EtsFit]) -> np.ndarray | None:
    """Start vector from the fitted form this one extends: beta* = 0.05 after N, phi = 0.95 after A,
    gamma* = 0.1 after the non-seasonal level."""
    if form.trend == "A" and EtsForm("N", form.seasonal) in fits:
        v = ets_theta(fits[EtsForm("N", form.seasonal)])
        return np.r_[v[0], 0.05, v[1:]]
    if form.trend == "Ad" and EtsForm("A", form.seasonal) in fits:
        return np.r_[ets_theta(fits[EtsForm("A", form.seasonal)]), 0.95]
    if form.trend == "N" and form.seasonal and EtsForm("N", False) in fits:
        return np.r_[ets_theta(fits[EtsForm("N", False)]), 0.1]
    return None


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





def ets_detail(fit: EtsFit) -> str:
    """The form and its parameters, for the forecast summary."""
    parts = [f"alpha={fit.alpha:.3g}"]
    if fit.form.trend != "N":
        parts.append(f"beta={fit.beta:.3g}")
    if fit.form.seasonal:
        parts.append(f"gamma={fit.gamma:.3g}")
    if fit.form.trend == "Ad":
        parts.append(f"phi={fit.phi:.3g}")
    return f"{fit.name} {' '.join(parts)} AICc={fit.aicc:.1f}"
