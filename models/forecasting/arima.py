"""Seasonal ARIMA with automatic order selection (Hyndman & Khandakar 2008), fitted by conditional sum of squares.

Model (Box-Jenkins): φ(B)Φ(B^m)(w_t - μ) = θ(B)Θ(B^m) e_t with w = (1-B)^d (1-B^m)^D y. The orders are chosen
as R's ``forecast::auto.arima`` / statsforecast's AutoARIMA do: D by the seasal strength of an STL decomposition
(D = 1 above 0.64), d by repeated KPSS tests at 5 % on the seasonally differenced series, then a stepwise search
over (p, q, P, Q, constant) by AICc, starting from four models and moving to neighbours while AICc falls.

Fitting (the conditional sum of squares, CSS, which auto.arima uses for its search): for given coefficients the
one-step errors are a rational filter of w, e = (A(B)/M(B)) (w - μ) with A = φ(B)Φ(B^m) and M = θ(B)Θ(B^m),
started at t = c (e_t = 0 before), so scipy's C ``lfilter`` replaces a Python loop over time. The gradient is
exact and costs one more filter call: de/dφ_i = -M⁻¹[1_{t≥c}·B^i Φ(B^m) w], de/dθ_j = -M⁻¹[B^j Θ(B^m) e] and
likewise for the seasonal coefficients and μ. All candidate models share one conditioning start c (the largest
AR lag any of them may have), so their AICc compare the same errors. Non-stationary AR or non-invertible MA
fits are rejected, as auto.arima does.

Forecasts run the full difference equation F(B) y_t = A(1)μ + M(B) e_t, F = A·(1-B)^d(1-B^m)^D, with future
errors 0; variances σ²·Σ ψ_j² with ψ the MA(∞) weights of M/F (Box, Jenkins & Reinsel §5.2). Rolling origins
reuse one fit (its errors are causal, so an origin's forecast needs only the data before it). Units are those
of the series.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.signal import lfilter

from models.forecasting.mstl import seasonal_strength

KPSS_5PC = 0.463            # 5 % critical value of the KPSS level-stationarity statistic (Kwiatkowski et al. 1992)
SEASONAL_STRENGTH = 0.64    # auto.arima's threshold for one seasonal difference
MAX_PQ, MAX_SPQ, MAX_ORDER = 5, 1, 5
MAX_MODELS = 18


@dataclass(frozen=True)
class Order:
    p: int
    d: int
    q: int
    P: int
    D: int
    Q: int
    m: int
    const: bool

    @property
    def name(self) -> str:
        s = f"ARIMA({self.p},{self.d},{self.q})"
        if self.m > 1 and (self.P or self.D or self.Q):
            s += f"({self.P},{self.D},{self.Q})[{self.m}]"
        return s + (" with drift" if self.const and self.d + self.D == 1 else " with mean" if self.const else "")

    @property
    def k(self) -> int:
        return self.p + self.q + self.P + self.Q + self.const


@dataclass
class ArimaFit:
    order: Order
    coef: np.ndarray            # φ_1..φ_p, θ_1..θ_q, Φ_1..Φ_P, Θ_1..Θ_Q, μ (if const), μ in the series' unit
    sigma2: float
    aicc: float
    nobs: int
    cond: int                   # conditioning start on the differenced series (errors before it are 0)

    @property
    def name(self) -> str:
        return self.order.name


# ----------------------------------------------------------------------------- differencing

def kpss_stat(x: np.ndarray) -> float:
    """KPSS level-stationarity statistic: Σ S_t² / (n²·s²), S the partial sums of x - mean, s² the Bartlett
    long-run variance with ⌊4(n/100)^¼⌋ lags (R's urca ``lags = "short"``, as forecast::ndiffs)."""
    n = len(x)
    e = x - x.mean()
    s = np.cumsum(e)
    lags = int(4 * (n / 100) ** 0.25)
    lrv = float(e @ e) / n
    for k in range(1, min(lags, n - 1) + 1):
        lrv += 2 * (1 - k / (lags + 1)) * float(e[k:] @ e[:-k]) / n
    return float(s @ s) / (n * n * lrv) if lrv > 0 else 0.0


def difference(y: np.ndarray, d: int, D: int, m: int) -> np.ndarray:
    w = np.asarray(y, dtype=float)
    for _ in range(D):
        w = w[m:] - w[:-m]
    for _ in range(d):
        w = np.diff(w)
    return w


def choose_differences(y: np.ndarray, m: int) -> tuple[int, int]:
    """(d, D): D = 1 when the STL seasonal strength exceeds 0.64 (needs three cycles), then d in 0..2 by KPSS."""
    D = int(m > 1 and len(y) >= 3 * m and seasonal_strength(y, m) > SEASONAL_STRENGTH)
    w = difference(y, 0, D, m)
    d = 0
    while d < 2 and len(w) > 10 and np.ptp(w) > 0 and kpss_stat(w) > KPSS_5PC:
        w = np.diff(w)
        d += 1
    return d, D


# ----------------------------------------------------------------------------- CSS fit

def _seasonal_poly(c: np.ndarray, m: int, sign: float) -> np.ndarray:
    out = np.zeros(len(c) * m + 1)
    out[0] = 1.0
    out[m::m] = sign * c
    return out


def polys(order: Order, coef: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(A, M, φ-part, Φ-part, μ): A = φ(B)Φ(B^m) and M = θ(B)Θ(B^m) as coefficient arrays in powers of B."""
    p, q, P, Q, m = order.p, order.q, order.P, order.Q, order.m
    ar, ma = coef[:p], coef[p:p + q]
    sar, sma = coef[p + q:p + q + P], coef[p + q + P:p + q + P + Q]
    mu = float(coef[-1]) if order.const else 0.0
    phi, Phi = np.concatenate(([1.0], -ar)), _seasonal_poly(sar, m, -1.0)
    theta, Theta = np.concatenate(([1.0], ma)), _seasonal_poly(sma, m, 1.0)
    return np.convolve(phi, Phi), np.convolve(theta, Theta), phi, Phi, mu


def css_errors(order: Order, coef: np.ndarray, w: np.ndarray, cond: int) -> np.ndarray:
    """One-step errors e_t, t >= cond, of the ARMA part on the differenced series w (0 before cond)."""
    A, M, _, _, mu = polys(order, coef)
    u = _fir(A, w - mu)
    u[:cond] = 0.0
    return lfilter([1.0], M, u)


class CSS:
    """The conditional sum of squares of one order on one differenced series, with its exact gradient."""

    def __init__(self, order: Order, w: np.ndarray, cond: int):
        self.order, self.w, self.cond = order, w, cond
        self.mask = (np.arange(len(w)) >= cond).astype(float)
        self.scale = 1.0 / max(len(w) - cond, 1)

    def value_grad(self, coef: np.ndarray) -> tuple[float, np.ndarray]:
        o, w, mask = self.order, self.w, self.mask
        A, M, phi, Phi, mu = polys(o, coef)
        x = w - mu
        with np.errstate(over="ignore", invalid="ignore"):      # a non-invertible MA explodes: rejected below
            e = lfilter([1.0], M, _fir(A, x) * mask)
            sse = float(e @ e)
        if not math.isfinite(sse) or sse > 1e100:
            return 1e100, np.zeros(len(coef))
        rows = []
        if o.p:
            z = _fir(Phi, x)
            rows += [-_shift(z, i) * mask for i in range(1, o.p + 1)]
        if o.q:
            z = _fir(_seasonal_poly(coef[o.p + o.q + o.P:o.p + o.q + o.P + o.Q], o.m, 1.0), e)
            rows += [-_shift(z, j) for j in range(1, o.q + 1)]
        if o.P:
            z = _fir(phi, x)
            rows += [-_shift(z, o.m * k) * mask for k in range(1, o.P + 1)]
        if o.Q:
            z = _fir(np.concatenate(([1.0], coef[o.p:o.p + o.q])), e)
            rows += [-_shift(z, o.m * k) for k in range(1, o.Q + 1)]
        if o.const:
            rows.append(-A.sum() * mask)
        if not rows:
            return sse * self.scale, np.zeros(0)
        de = lfilter([1.0], M, np.array(rows), axis=-1)
        return sse * self.scale, 2 * self.scale * (de @ e)


def _fir(b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """b(B) x from a zero start (what lfilter(b, [1], x) gives; np.convolve skips lfilter's per-row Python)."""
    return np.convolve(x, b)[:len(x)]


def _shift(z: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros_like(z)
    out[k:] = z[:-k]
    return out


def _roots_ok(poly: np.ndarray) -> bool:
    """All roots of 1 + c_1 z + ... outside the unit circle (stationary AR / invertible MA)."""
    nz = np.flatnonzero(np.abs(poly) > 0)
    if nz[-1] == 0:
        return True
    return bool(np.all(np.abs(np.roots(poly[:nz[-1] + 1][::-1])) > 1.001))


def fit_order(y: np.ndarray, order: Order, cond: int, start: np.ndarray | None = None) -> ArimaFit | None:
    """CSS fit of one order (SLSQP, exact gradient); None when too few points or the fit is not stationary
    and invertible. The series is scaled to unit sd for the optimiser (the fit is invariant to it)."""
    w = difference(y, order.d, order.D, order.m)
    n_eff = len(w) - cond
    if n_eff - order.k - 2 <= 0:
        return None
    sd = float(np.std(w)) or 1.0
    ws = w / sd
    x0 = np.zeros(order.k) if start is None else start.copy()
    if order.const:
        x0[-1] = float(ws.mean()) if start is None else start[-1] / sd
    css = CSS(order, ws, cond)
    bounds = [(-0.99, 0.99)] * (order.k - order.const) + [(-1e3, 1e3)] * order.const
    if order.k:
        # SLSQP: in SciPy 1.17 L-BFGS-B's wrapper costs ~4 ms a step here, SLSQP's a fraction of that
        res = minimize(css.value_grad, x0, jac=True, method="SLSQP", bounds=bounds,
                       options={"maxiter": 100, "ftol": 1e-7})
        coef, value = res.x, float(res.fun)
    else:
        coef, value = x0, css.value_grad(x0)[0]
    A, M, _, _, _ = polys(order, coef)
    if not (_roots_ok(A) and _roots_ok(M)):
        return None
    sse = value * n_eff * sd * sd
    if not math.isfinite(sse) or sse <= 0:
        sse = max(sse, 1e-300) if math.isfinite(sse) else math.inf
    if order.const:
        coef = coef.copy()
        coef[-1] *= sd
    k = order.k + 1
    loglik = -0.5 * n_eff * (math.log(2 * math.pi * max(sse, 1e-300) / n_eff) + 1)
    aicc = -2 * loglik + 2 * k + 2 * k * (k + 1) / max(n_eff - k - 1, 1)
    return ArimaFit(order, coef, sse / max(n_eff - order.k, 1), aicc, n_eff, cond)


# ----------------------------------------------------------------------------- order search

def conditioning(n_w: int, m: int) -> tuple[int, int, int]:
    """(largest p, largest P, conditioning start c = p + P·m) the differenced length n_w supports."""
    max_P = MAX_SPQ if m > 1 and n_w > 6 * m + 20 else 1 if m > 1 and n_w > 3 * m + 10 else 0
    max_p = MAX_PQ if n_w > 4 * MAX_PQ + 20 else 2
    return max_p, max_P, max_p + max_P * m


def auto_arima(y: np.ndarray, m: int) -> ArimaFit | None:
    """Hyndman-Khandakar stepwise search by AICc (CSS), orders p, q <= 5, P, Q <= 1, p+q+P+Q <= 5, at most
    MAX_MODELS fits."""
    y = np.asarray(y, dtype=float)
    if len(y) < 8 or np.ptp(y) == 0:
        return None
    d, D = choose_differences(y, m)
    s = m if D or (m > 1 and len(y) >= 3 * m) else 1
    n_w = len(y) - d - D * m
    max_p, max_P, cond = conditioning(n_w, s)
    const_ok = d + D <= 1
    fits: dict[Order, ArimaFit | None] = {}

    def tryit(p, q, P, Q, c):
        o = Order(p, d, q, P if s > 1 else 0, D, Q if s > 1 else 0, s, bool(c and const_ok))
        if (o.p > max_p or o.q > MAX_PQ or o.P > max_P or o.Q > MAX_SPQ or min(p, q, P, Q) < 0
                or p + q + P + Q > MAX_ORDER or o in fits or len(fits) >= MAX_MODELS):
            return
        fits[o] = fit_order(y, o, cond)

    for p, q, P, Q in ((2, 2, 1, 1), (0, 0, 0, 0), (1, 0, 1, 0), (0, 1, 0, 1)):
        tryit(p, q, P, Q, True)
    best = _best(fits)
    while best is not None:
        o = best.order
        for dp, dq, dP, dQ in ((0, 0, -1, 0), (0, 0, 1, 0), (0, 0, 0, -1), (0, 0, 0, 1), (0, 0, 1, 1),
                               (0, 0, -1, -1), (-1, 0, 0, 0), (1, 0, 0, 0), (0, -1, 0, 0), (0, 1, 0, 0),
                               (-1, -1, 0, 0), (1, 1, 0, 0), (-1, 1, 0, 0), (1, -1, 0, 0)):
            tryit(o.p + dp, o.q + dq, o.P + dP, o.Q + dQ, o.const)
        tryit(o.p, o.q, o.P, o.Q, not o.const)
        new = _best(fits)
        if new is best:
            break
        best = new
    return best


def _best(fits: dict) -> ArimaFit | None:
    ok = [f for f in fits.values() if f is not None and math.isfinite(f.aicc)]
    return min(ok, key=lambda f: f.aicc) if ok else None


# ----------------------------------------------------------------------------- forecasts

def full_polys(fit: ArimaFit) -> tuple[np.ndarray, np.ndarray, float]:
    """(F, M, constant): F = A·(1-B)^d(1-B^m)^D, constant = A(1)·μ, so that F(B) y_t = const + M(B) e_t."""
    o = fit.order
    A, M, _, _, mu = polys(o, fit.coef)
    F = A
    for _ in range(o.d):
        F = np.convolve(F, [1.0, -1.0])
    for _ in range(o.D):
        F = np.convolve(F, _seasonal_poly(np.array([1.0]), o.m, -1.0))
    return F, M, float(A.sum()) * mu


def arima_paths(fit: ArimaFit, y: np.ndarray, origins: list[int], h: int) -> tuple[np.ndarray, np.ndarray]:
    """Point forecasts (K, h) of y[o:o+h] from y[:o] for each origin with the fit's coefficients (errors from
    one CSS pass over y, which is causal), and the sd per step (h,)."""
    o_ = fit.order
    y = np.asarray(y, dtype=float)
    lag = o_.d + o_.D * o_.m
    w = difference(y, o_.d, o_.D, o_.m)
    e = np.zeros(len(y))
    e[lag:] = css_errors(o_, fit.coef, w, fit.cond)
    F, M, const = full_polys(fit)
    nf, nm = len(F) - 1, len(M) - 1
    width = max(nf, nm, 1)
    K = len(origins)
    yb = np.zeros((K, width + h))
    eb = np.zeros((K, width + h))
    for i, o in enumerate(origins):
        a = max(0, o - width)
        yb[i, width - (o - a):width] = y[a:o]
        eb[i, width - (o - a):width] = e[a:o]
    Fr, Mr = -F[1:][::-1], M[1:][::-1]
    for j in range(h):
        t = width + j
        val = const
        if nf:
            val = val + yb[:, t - nf:t] @ Fr
        if nm:
            val = val + eb[:, t - nm:t] @ Mr
        yb[:, t] = val
    psi = lfilter(M, F, np.r_[1.0, np.zeros(h - 1)])
    sd = np.sqrt(fit.sigma2 * np.cumsum(psi * psi))
    return yb[:, width:], sd


def arima_detail(fit: ArimaFit) -> str:
    o = fit.order
    names = ([f"ar{i}" for i in range(1, o.p + 1)] + [f"ma{i}" for i in range(1, o.q + 1)]
             + [f"sar{i}" for i in range(1, o.P + 1)] + [f"sma{i}" for i in range(1, o.Q + 1)]
             + (["drift" if o.d + o.D == 1 else "mean"] if o.const else []))
    return f"{fit.name} " + " ".join(f"{n}={c:.3g}" for n, c in zip(names, fit.coef)) + f" AICc={fit.aicc:.1f}"
