"""The Theta models of Fiorucci et al. (2016), fitted by least squares and vectorised across origins.

"Models for optimising the theta method and their relationship to state space models" (IJF 32(4)) writes the
Theta method as a state space model on the (deseasonalised) series x_1..x_n:

    x_t = mu_t + e_t
    mu_t = l_{t-1} + c·[(1-alpha)^(t-1)·A + ((1 - (1-alpha)^t)/alpha)·B],   c = 1 - 1/theta
    l_t = alpha·x_t + (1-alpha)·l_{t-1}

with A, B the intercept and slope of the least-squares line through x_1..x_n (static models: STM with
theta = 2, OTM with theta fitted) or through x_1..x_{t-1} only, updated every period (dynamic models: DSTM,
DOTM). The parameters (l_0, alpha, theta) minimise the in-sample MSE; the variant with the lowest MSE is used
(what statsforecast's AutoTheta selects among). Seasonality: M4's test at 90 % and classical decomposition,
multiplicative unless the series has zeros or negatives.

Why it is cheap here: for a fixed alpha the one-step errors are linear in l_0 and c, because
l_{t-1} = (1-alpha)^(t-1)·l_0 + (SES of x from a zero start). So l_0 and theta are an exact two-parameter least
squares solve and only alpha is searched, on a grid refined by a parabola. Each grid point is one C filter
over all backtest origins at once (rows of a matrix), so a series' whole backtest costs a few milliseconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

ALPHA_BOUNDS = (0.1, 0.99)          # Fiorucci et al.'s (and forecTheta's, statsforecast's) search range
C_MAX = 0.99                        # theta in [1, 100]: beyond 100 the line alone is extrapolated (c -> 1)
GRID = np.linspace(*ALPHA_BOUNDS, 24)
VARIANTS = ("STM", "OTM", "DSTM", "DOTM")
DYNAMIC = {"STM": False, "OTM": False, "DSTM": True, "DOTM": True}


# ----------------------------------------------------------------------------- seasonality (M4)

def seasonality_rows(x: np.ndarray, m: int) -> np.ndarray:
    """M4's seasonality test (`seasonality_test`) of each row of x (k, n) at once."""
    k, n = x.shape
    if m < 2 or n < 3 * m:
        return np.zeros(k, dtype=bool)
    c = x - x.mean(axis=1, keepdims=True)
    denom = np.einsum("kt,kt->k", c, c)
    acf = np.stack([np.einsum("kt,kt->k", c[:, :n - j], c[:, j:]) for j in range(1, m + 1)], axis=1)
    acf = acf / np.where(denom > 0, denom, 1.0)[:, None]
    limit = 1.645 * np.sqrt((1 + 2 * np.sum(acf[:, :m - 1] ** 2, axis=1)) / n)
    return (denom > 0) & (np.abs(acf[:, m - 1]) > limit)


def indices_rows(x: np.ndarray, m: int, multiplicative: np.ndarray) -> np.ndarray:
    """Classical decomposition's seasonal index (`seasonal_indices`) of each row of x (k, n) at once,
    multiplicative where the mask says: (k, m)."""
    w = np.r_[0.5, np.ones(m - 1), 0.5] / m if m % 2 == 0 else np.ones(m) / m
    trend = np.lib.stride_tricks.sliding_window_view(x, len(w), axis=1) @ w[::-1]
    half = (len(w) - 1) // 2
    core = x[:, half:half + trend.shape[1]]
    mult = multiplicative[:, None]
    detr = np.where(mult, core / np.where(mult, trend, 1.0), core - trend)
    pos = (np.arange(trend.shape[1]) + half) % m
    fig = np.stack([detr[:, pos == j].mean(axis=1) for j in range(m)], axis=1)
    return np.where(mult, fig / fig.mean(axis=1, keepdims=True), fig - fig.mean(axis=1, keepdims=True))


def seasonality_test(y: np.ndarray, m: int) -> bool:
    """M4's test: |acf_m| > 1.645·√((1 + 2·Σ_{k<m} acf_k²)/n), needing at least three seasons."""
    return bool(seasonality_rows(np.asarray(y, dtype=float)[None, :], m)[0])


def seasonal_indices(y: np.ndarray, m: int, multiplicative: bool) -> np.ndarray:
    """Classical decomposition (R's decompose): centred moving average, per-position mean of the ratios
    (or differences), normalised to mean 1 (or 0). Returns the index for each position 0..m-1 of y."""
    return indices_rows(np.asarray(y, dtype=float)[None, :], m, np.array([multiplicative]))[0]


def deseasonalise(y: np.ndarray, m: int) -> tuple[str, np.ndarray]:
    """("none" | "multiplicative" | "additive", index per position mod m) for y, by M4's rules."""
    if not seasonality_test(y, m):
        return "none", np.ones(max(m, 1))
    kind = "multiplicative" if y.min() > 0 else "additive"
    return kind, seasonal_indices(y, m, kind == "multiplicative")


def _apply(kind: str, index: np.ndarray, pos: np.ndarray, x: np.ndarray, inverse: bool) -> np.ndarray:
    if kind == "multiplicative":
        return x * index[pos] if inverse else x / index[pos]
    if kind == "additive":
        return x + index[pos] if inverse else x - index[pos]
    return x


# ----------------------------------------------------------------------------- the model, many rows at once

def ols_path(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intercept A_t and slope B_t of the least-squares line through x_1..x_t (time index 1..t), per row.

    B_t = (12·Σ i·x_i - 6(t+1)·Σ x_i) / (t(t²-1)), A_t = mean - B_t(t+1)/2; one point: A = x_1, B = 0."""
    x = np.atleast_2d(x)
    t = np.arange(1, x.shape[1] + 1, dtype=float)
    s1, s2 = np.cumsum(x, axis=1), np.cumsum(x * t, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(t > 1, (12 * s2 - 6 * (t + 1) * s1) / (t * (t * t - 1)), 0.0)
    return s1 / t - b * (t + 1) / 2, b


@dataclass
class Rows:
    """Standardised histories, one per row (zero-padded to a common width), and their fixed regressors."""
    x: np.ndarray           # (K, N) standardised deseasonalised history
    n: np.ndarray           # (K,) history lengths
    mask: np.ndarray        # (K, N) 1.0 where the one-step error is scored: t = 2..n
    a_n: np.ndarray         # (K,) static line over the whole history
    b_n: np.ndarray
    a_prev: np.ndarray      # (K, N) dynamic line through x_1..x_{t-1}, used for mu_t (0 at t = 1)
    b_prev: np.ndarray
    w_pp: np.ndarray        # mask x (1, A, A²) of the dynamic line, (3, K, N): weights of p² in the sums
    w_pq: np.ndarray        # mask x (1, B, AB): weights of p·q
    w_qq: np.ndarray        # mask x (1, B²): weights of q²


def _rows(x: np.ndarray, n: np.ndarray) -> Rows:
    k, width = x.shape
    t = np.arange(1, width + 1)
    a, b = ols_path(x)
    idx = np.arange(k)
    pad = np.zeros((k, 1))
    mask = ((t >= 2) & (t <= n[:, None])).astype(float)
    a_prev, b_prev = np.hstack([pad, a[:, :-1]]), np.hstack([pad, b[:, :-1]])
    return Rows(x, n, mask, a[idx, n - 1], b[idx, n - 1], a_prev, b_prev,
                mask * np.stack([np.ones_like(a_prev), a_prev, a_prev ** 2]),
                mask * np.stack([np.ones_like(a_prev), b_prev, a_prev * b_prev]),
                mask * np.stack([np.ones_like(a_prev), b_prev ** 2]))


def _rowdot(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Σ_t a[..., k, t]·v[t] (one vector for all rows) or v[k, t] (one per row)."""
    return a @ v if v.ndim == 1 else np.einsum("...kt,kt->...k", a, v)


def _sums(r: Rows, alpha: np.ndarray) -> dict:
    """Masked sums of products of the residual-from-data res = x - SES(x) and the regressors of l_0
    (p_t = (1-alpha)^(t-1)) and of c (g = A·p + B·q, q_t = (1 - (1-alpha)^t)/alpha, with the static or the
    dynamic line), at one alpha per row: the ingredients of every variant's least squares. g is linear in
    (p, q), so every sum is a product of a fixed weight matrix with p², pq or q²."""
    width = r.x.shape[1]
    t = np.arange(1, width + 1)
    if np.all(alpha == alpha[0]):
        a = float(alpha[0])
        ses = lfilter([0.0, a], [1.0, a - 1.0], r.x, axis=1)          # l_{t-1} from a zero start
        decay = (1 - a) ** (t - 1.0)
        q = (1 - decay * (1 - a)) / a
    elif width <= 4 * len(alpha):
        # many short rows (bootstraps of one history): one pass over the periods beats a filter call per row
        ses = np.zeros_like(r.x)
        for j in range(1, width):
            ses[:, j] = alpha * r.x[:, j - 1] + (1 - alpha) * ses[:, j - 1]
        decay = (1 - alpha)[:, None] ** (t - 1.0)
        q = (1 - decay * (1 - alpha)[:, None]) / alpha[:, None]
    else:
        ses = np.vstack([lfilter([0.0, a], [1.0, a - 1.0], row) for a, row in zip(alpha, r.x)])
        decay = (1 - alpha)[:, None] ** (t - 1.0)
        q = (1 - decay * (1 - alpha)[:, None]) / alpha[:, None]
    res = (r.x - ses) * r.mask
    rp, rap = _rowdot(np.stack([res, res * r.a_prev]), decay)
    rq, rbq = _rowdot(np.stack([res, res * r.b_prev]), q)
    pp, app, aapp = _rowdot(r.w_pp, decay * decay)
    pq, bpq, abpq = _rowdot(r.w_pq, decay * q)
    qq, bbqq = _rowdot(r.w_qq, q * q)
    an, bn = r.a_n, r.b_n
    static = (an * rp + bn * rq, an * pp + bn * pq, an * an * pp + 2 * an * bn * pq + bn * bn * qq)
    dynamic = (rap + rbq, app + bpq, aapp + 2 * abpq + bbqq)
    return {"rr": np.einsum("kt,kt->k", res, res), "rp": rp, "pp": pp, "ses": ses,
            "decay": decay if decay.ndim == 2 else np.broadcast_to(decay, r.x.shape),
            "static": static, "dynamic": dynamic}


def _solve(s: dict, variant: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(l_0, c, SSE) per row: least squares in l_0 (and c unless theta is fixed at 2), c kept in [0, C_MAX]."""
    rg, pg, gg = s["dynamic" if DYNAMIC[variant] else "static"]
    rp, pp, rr = s["rp"], s["pp"], s["rr"]
    if variant in ("STM", "DSTM"):
        c = np.full_like(rr, 0.5)
    else:
        det = pp * gg - pg * pg
        ok = det > 1e-12 * np.maximum(pp * gg, 1e-300)               # c unidentified when g ∝ p (flat line)
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(ok, (pp * rg - pg * rp) / np.where(ok, det, 1.0), 0.5)
        c = np.clip(c, 0.0, C_MAX)
    l0 = (rp - c * pg) / pp
    sse = rr - 2 * l0 * rp - 2 * c * rg + l0 * l0 * pp + 2 * l0 * c * pg + c * c * gg
    return l0, c, np.maximum(sse, 0.0)


def _refine(grid: np.ndarray, sse: np.ndarray) -> np.ndarray:
    """Per row, the vertex of the parabola through the grid minimum and its neighbours (kept in the bracket)."""
    i = np.clip(np.argmin(sse, axis=0), 1, len(grid) - 2)
    cols = np.arange(sse.shape[1])
    f0, f1, f2 = sse[i - 1, cols], sse[i, cols], sse[i + 1, cols]
    x0, x1, x2 = grid[i - 1], grid[i], grid[i + 1]
    den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0)
    num = (x1 - x0) ** 2 * (f1 - f2) - (x1 - x2) ** 2 * (f1 - f0)
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(den > 0, x1 - 0.5 * num / np.where(den > 0, den, 1.0), grid[np.argmin(sse, axis=0)])
    return np.clip(vertex, x0, x2)


@dataclass
class ThetaFits:
    """One variant fitted to every row: parameters, in-sample MSE, and the final level l_n."""
    variant: str
    alpha: np.ndarray
    c: np.ndarray
    level0: np.ndarray
    mse: np.ndarray
    level_n: np.ndarray

    @property
    def theta(self) -> np.ndarray:
        return 1 / (1 - self.c)


def fit_rows(r: Rows, variants=VARIANTS) -> dict[str, ThetaFits]:
    """Least-squares fit of each variant to every row: alpha on GRID then refined, l_0 and c exact."""
    k = len(r.n)
    per_alpha = [_sums(r, np.full(k, a)) for a in GRID]
    keys = ("rr", "rp", "pp")
    grid = {key: np.array([s[key] for s in per_alpha]) for key in keys}           # (G, K) each
    for kind in ("static", "dynamic"):
        grid[kind] = tuple(np.array([s[kind][j] for s in per_alpha]) for j in range(3))
    grid_sse = {v: _solve(grid, v)[2] for v in variants}
    out = {}
    for v in variants:
        alpha = _refine(GRID, grid_sse[v])
        s = _sums(r, alpha)
        l0, c, sse = _solve(s, v)
        idx = np.arange(k)
        last = r.n - 1
        # l_n = alpha·x_n + (1-alpha)·l_{n-1}, with l_0's share (1-alpha)^n
        level_n = (alpha * r.x[idx, last] + (1 - alpha) * (s["ses"][idx, last] + s["decay"][idx, last] * l0))
        out[v] = ThetaFits(v, alpha, c, l0, sse / np.maximum(r.n - 1, 1), level_n)
    return out


def forecast_rows(r: Rows, fit: ThetaFits, h: int) -> np.ndarray:
    """Point forecasts (K, h) on the standardised deseasonalised scale.

    Static: l_n + c·[(1-alpha)^n·A + ((j-1) + (1-(1-alpha)^(n+1))/alpha)·B], j = 1..h. Dynamic: the state
    equations run forward with x replaced by its forecast mu (exact conditional means: l, A and B are linear
    in x), so A_t and B_t keep updating as the paper's model says."""
    alpha, c, n = fit.alpha[:, None], fit.c[:, None], r.n[:, None].astype(float)
    j = np.arange(1, h + 1)[None, :]
    if not DYNAMIC[fit.variant]:
        trend = (1 - alpha) ** n * r.a_n[:, None] + ((j - 1) + (1 - (1 - alpha) ** (n + 1)) / alpha) * r.b_n[:, None]
        return fit.level_n[:, None] + c * trend
    idx = np.arange(len(r.n))
    tt = np.arange(1, r.x.shape[1] + 1)
    s1 = np.where(tt <= r.n[:, None], r.x, 0.0).sum(axis=1)
    s2 = np.where(tt <= r.n[:, None], r.x * tt, 0.0).sum(axis=1)
    level, t = fit.level_n.copy(), r.n.astype(float)
    a1, c1 = fit.alpha, fit.c
    out = np.empty((len(idx), h))
    for step in range(h):
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.where(t > 1, (12 * s2 - 6 * (t + 1) * s1) / (t * (t * t - 1)), 0.0)
        a = s1 / t - b * (t + 1) / 2
        mu = level + c1 * ((1 - a1) ** t * a + (1 - (1 - a1) ** (t + 1)) / a1 * b)
        out[:, step] = mu
        level = a1 * mu + (1 - a1) * level
        t = t + 1
        s1, s2 = s1 + mu, s2 + t * mu
    return out


# ----------------------------------------------------------------------------- Theta from many origins

@dataclass
class ThetaPaths:
    point: np.ndarray       # (K, h), the series' unit
    sd: np.ndarray          # (K, h)
    detail: list[str]       # per origin: variant, alpha, theta, seasonality


def theta_paths(y: np.ndarray, m: int, origins: list[int], h: int, variants=VARIANTS) -> ThetaPaths | None:
    """Forecasts of y[o:o+h] from y[:o] for each origin o, each with the variant of lowest in-sample MSE,
    on the series deseasonalised by M4's rules (`deseasonalise`) and reseasonalised after."""
    y = np.asarray(y, dtype=float)
    origins = [int(o) for o in origins]
    if min(origins) < 3:
        return None
    return theta_many([y[:o] for o in origins], m, h, variants)


def theta_many(series: list[np.ndarray], m: int, h: int, variants=VARIANTS) -> ThetaPaths:
    """Forecasts h steps after the end of each series (each at least 3 long), each deseasonalised by M4's
    rules on its own (`deseasonalise`), all fitted at once (`theta_rows`) and reseasonalised after."""
    kinds, indices, des = [], [], []
    for s in series:
        kind, index = deseasonalise(s, m)
        des.append(_apply(kind, index, np.arange(len(s)) % max(m, 1), s, inverse=False))
        kinds.append(kind)
        indices.append(index)
    fc = theta_rows(des, h, variants)
    j = np.arange(1, h + 1)
    for i, s in enumerate(series):
        pos = (len(s) + j - 1) % max(m, 1)
        fc.point[i] = _apply(kinds[i], indices[i], pos, fc.point[i], inverse=True)
        if kinds[i] == "multiplicative":
            fc.sd[i] = fc.sd[i] * indices[i][pos]
        if kinds[i] != "none":
            fc.detail[i] += f" {kinds[i]} seasonal"
    return fc


def theta_matrix(x: np.ndarray, m: int, h: int, variants=VARIANTS) -> ThetaPaths:
    """`theta_many` of the rows of x (k, n), series of one length (bootstraps of one history): the same
    forecasts and details, with the seasonality test and decomposition done for all rows at once."""
    k, n = x.shape
    seasonal = seasonality_rows(x, m)
    mult = seasonal & (x.min(axis=1) > 0)
    index = np.ones((k, max(m, 1)))
    if seasonal.any():
        index[seasonal] = indices_rows(x[seasonal], m, mult[seasonal])
    add = seasonal & ~mult
    pos = np.arange(n) % max(m, 1)
    des = np.where(mult[:, None], x / index[:, pos], np.where(add[:, None], x - index[:, pos], x))
    fc = theta_rows(list(des), h, variants)
    fpos = (n + np.arange(h)) % max(m, 1)
    fc.point = np.where(mult[:, None], fc.point * index[:, fpos], np.where(add[:, None], fc.point + index[:, fpos],
                                                                           fc.point))
    fc.sd = np.where(mult[:, None], fc.sd * index[:, fpos], fc.sd)
    fc.detail = [d + (" multiplicative seasonal" if mu else " additive seasonal" if ad else "")
                 for d, mu, ad in zip(fc.detail, mult, add)]
    return fc


def theta_rows(series: list[np.ndarray], h: int, variants=VARIANTS) -> ThetaPaths:
    """Non-seasonal Theta forecasts of each series in the list (each at least 3 long), h steps after its end,
    with the variant of lowest in-sample MSE: all series fitted at once as rows of one matrix.

    sd_j = sigma·√(1 + (j-1)·alpha²) (SES with drift, Hyndman & Billah 2003), sigma the in-sample RMSE of
    the one-step errors, scaled back through the standardisation."""
    k = len(series)
    lengths = np.array([len(s) for s in series])
    x = np.zeros((k, int(lengths.max())))
    mus, sds = np.empty(k), np.empty(k)
    for i, s in enumerate(series):
        mus[i], sds[i] = s.mean(), s.std() or 1.0
        x[i, :len(s)] = (s - mus[i]) / sds[i]
    r = _rows(x, lengths)
    fits = fit_rows(r, variants)
    best = np.argmin(np.vstack([fits[v].mse for v in variants]), axis=0)   # ties: the simpler variant
    point, sd, detail = np.empty((k, h)), np.empty((k, h)), [""] * k
    j = np.arange(1, h + 1)
    for vi, v in enumerate(variants):
        rows = np.flatnonzero(best == vi)
        if len(rows) == 0:
            continue
        f = fits[v]
        fc = forecast_rows(r, f, h)
        for i in rows:
            n = lengths[i]
            point[i] = mus[i] + sds[i] * fc[i]
            sd[i] = sds[i] * math.sqrt(f.mse[i] * (n - 1) / max(n - 2, 1)) * np.sqrt(1 + (j - 1) * f.alpha[i] ** 2)
            detail[i] = f"{v} alpha={f.alpha[i]:.3g} theta={f.theta[i]:.3g}"
    return ThetaPaths(point, sd, detail)
