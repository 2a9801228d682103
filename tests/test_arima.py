"""models/arima.py: the KPSS statistic, the CSS errors and their gradient, forecasts and variances by hand, and
the automatic order selection on series whose model is known."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import approx_fprime

from models.forecasting import arima as A


def test_kpss_statistic_by_hand():
    x = np.array([1.0, 3, 2, 5, 4, 6, 5, 8])
    e = x - x.mean()
    s = np.cumsum(e)
    lags = int(4 * (8 / 100) ** 0.25)                              # 2
    lrv = e @ e / 8 + 2 * sum((1 - k / 3) * (e[k:] @ e[:-k]) / 8 for k in (1, 2))
    assert lags == 2
    assert A.kpss_stat(x) == pytest.approx((s @ s) / (64 * lrv))
    rng = np.random.default_rng(0)
    assert A.kpss_stat(rng.normal(0, 1, 500)) < A.KPSS_5PC          # white noise: stationary
    assert A.kpss_stat(np.cumsum(rng.normal(0, 1, 500))) > A.KPSS_5PC   # random walk: difference it


def test_css_errors_follow_the_arma_recursion():
    """ARMA(1,1)(1,0,1)[4] with mean, errors from t = c on, by the explicit recursion."""
    o = A.Order(1, 0, 1, 1, 0, 1, 4, True)
    phi, theta, Phi, Theta, mu = 0.5, 0.3, -0.4, 0.2, 2.0
    w = np.random.default_rng(1).normal(2, 1, 40)
    c = 9
    x = w - mu
    e = np.zeros(40)
    for t in range(c, 40):
        ar = phi * x[t - 1] + Phi * x[t - 4] - phi * Phi * x[t - 5]
        ma = theta * e[t - 1] + Theta * e[t - 4] + theta * Theta * e[t - 5]
        e[t] = x[t] - ar - ma
    got = A.css_errors(o, np.array([phi, theta, Phi, Theta, mu]), w, c)
    np.testing.assert_allclose(got, e, atol=1e-12)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), p=st.integers(0, 2), q=st.integers(0, 2), P=st.integers(0, 1),
       Q=st.integers(0, 1), const=st.booleans())
def test_css_gradient_is_exact(seed, p, q, P, Q, const):
    o = A.Order(p, 0, q, P, 0, Q, 7, const)
    if o.k == 0:
        return
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 1, 120)
    css = A.CSS(o, w, 2 + 2 * 7)
    coef = rng.uniform(-0.4, 0.4, o.k)
    _, grad = css.value_grad(coef)
    num = approx_fprime(coef, lambda v: css.value_grad(v)[0], 1e-7)
    np.testing.assert_allclose(grad, num, rtol=1e-4, atol=1e-5)


def _fit(order: A.Order, coef, sigma2=1.0, cond=1) -> A.ArimaFit:
    return A.ArimaFit(order, np.asarray(coef, float), sigma2, 0.0, 100, cond)


def test_arima_011_forecast_and_variance_by_hand():
    """ARIMA(0,1,1): ŷ_{n+h} = y_n + θ e_n for every h; var_h = σ²(1 + (h-1)(1+θ)²)."""
    theta, sigma2 = -0.6, 2.0
    fit = _fit(A.Order(0, 1, 1, 0, 0, 0, 1, False), [theta], sigma2)
    y = np.cumsum(np.random.default_rng(2).normal(0, 1, 60)) + 50
    w = np.diff(y)
    e = A.css_errors(fit.order, fit.coef, w, 1)
    point, sd = A.arima_paths(fit, y, [60], 5)
    np.testing.assert_allclose(point[0], y[-1] + theta * e[-1])
    np.testing.assert_allclose(sd ** 2, sigma2 * (1 + np.arange(5) * (1 + theta) ** 2))


def test_ar1_with_mean_decays_to_the_mean():
    phi, mu = 0.7, 10.0
    fit = _fit(A.Order(1, 0, 0, 0, 0, 0, 1, True), [phi, mu], 1.0)
    y = np.array([12.0, 9.0, 11.0, 14.0])
    point, sd = A.arima_paths(fit, y, [4], 3)
    np.testing.assert_allclose(point[0], mu + phi ** np.arange(1, 4) * (14.0 - mu))
    np.testing.assert_allclose(sd ** 2, np.cumsum(phi ** (2 * np.arange(3))))


def test_rolling_origins_use_only_the_data_before_each_origin():
    rng = np.random.default_rng(3)
    t = np.arange(300)
    y = 100 + 10 * np.sin(2 * np.pi * t / 7) + np.cumsum(rng.normal(0, 1, 300))
    fit = A.auto_arima(y[:200], 7)
    both, _ = A.arima_paths(fit, y, [220, 260], 7)
    alone, _ = A.arima_paths(fit, y[:260], [260], 7)
    np.testing.assert_allclose(both[1], alone[0])
    later = y.copy()
    later[260:] += 1000                                               # the future cannot move the forecast
    np.testing.assert_allclose(A.arima_paths(fit, later, [260], 7)[0][0], alone[0])


def test_auto_arima_differences_a_seasonal_random_walk_and_not_white_noise():
    rng = np.random.default_rng(4)
    season = np.tile(rng.normal(0, 10, 24), 20)
    walk = season + np.cumsum(rng.normal(0, 1, 480))
    fit = A.auto_arima(walk, 24)
    assert fit.order.D == 1 or fit.order.d >= 1
    noise = A.auto_arima(rng.normal(50, 1, 300), 7)
    assert (noise.order.d, noise.order.D) == (0, 0) and noise.order.const
    assert noise.coef[-1] == pytest.approx(50, abs=0.3)


def test_auto_arima_finds_an_ar1():
    rng = np.random.default_rng(5)
    y = np.zeros(600)
    for t in range(1, 600):
        y[t] = 0.7 * y[t - 1] + rng.normal()
    fit = A.auto_arima(y + 20, 1)
    assert fit.order.d == 0 and fit.order.p >= 1
    point, _ = A.arima_paths(fit, y + 20, [600], 1)
    # the one-step forecast is the conditional mean 20 + 0.7 (y_n) up to estimation error
    assert point[0, 0] == pytest.approx(20 + 0.7 * y[-1], abs=0.25)
    assert math.isfinite(fit.aicc) and fit.sigma2 == pytest.approx(1.0, rel=0.15)
    assert A.arima_detail(fit).startswith(fit.name)
