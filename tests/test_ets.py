"""models/ets.py: ETS state updates and forecasts against hand-computed cases, the error filter against the
state recursion, the profile likelihood and its analytic gradient, AICc selection and the forecast variances."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import lfilter

from models.forecasting import ets as E


def _fit(form, m=1, alpha=0.5, beta=0.0, gamma=0.0, phi=1.0, level=0.0, slope=0.0, season=None, sigma2=1.0):
    season = np.zeros(m) if season is None else np.asarray(season, float)
    return E.EtsFit(form, m, alpha, beta, gamma, phi, level, slope, season, sigma2, 0.0, 0.0, 0, 0)


def _direct_errors(fit: E.EtsFit, y) -> np.ndarray:
    """The error-correction equations written out one step at a time (the reference for the filter)."""
    level, slope, ring = fit.level0, fit.slope0, fit.season0.copy()
    phi = {"N": 0.0, "A": 1.0, "Ad": fit.phi}[fit.form.trend]
    out = []
    for t, yt in enumerate(y):
        s = ring[t % fit.m] if fit.form.seasonal else 0.0
        e = yt - (level + phi * slope + s)
        level, slope = level + phi * slope + fit.alpha * e, phi * slope + fit.beta * e
        if fit.form.seasonal:
            ring[t % fit.m] += fit.gamma * e
        out.append(e)
    return np.array(out)


# ----------------------------------------------------------------------------- ETS by hand

def test_ets_holt_state_updates_by_hand():
    # ETS(A,A,N), alpha 0.5, beta 0.1, l0 10, b0 1, y = 12, 13, 15:
    # t1: ŷ 11, e 1, l 11.5, b 1.1; t2: ŷ 12.6, e .4, l 12.8, b 1.14; t3: ŷ 13.94, e 1.06, l 14.47, b 1.246
    fit = _fit(E.EtsForm("A", False), alpha=0.5, beta=0.1, level=10, slope=1)
    st_ = E.ets_states(fit, np.array([12.0, 13.0, 15.0]), at=[1, 2, 3])
    assert [round(s.level, 10) for s in st_] == [11.5, 12.8, 14.47]
    assert [round(s.slope, 10) for s in st_] == [1.1, 1.14, 1.246]
    np.testing.assert_allclose(E.ets_point(fit, st_[-1], 3), [15.716, 16.962, 18.208])


def test_ets_seasonal_state_updates_by_hand():
    # ETS(A,N,A), m 2, alpha .5, gamma .2, l0 10, (s_-1, s_0) = (-1, 1), y = 9.5, 11.6, 8.8:
    # t1: ŷ 9, e .5, l 10.25, s -0.9; t2: ŷ 11.25, e .35, l 10.425, s 1.07; t3: ŷ 9.525, e -.725, l 10.0625, s -1.045
    fit = _fit(E.EtsForm("N", True), m=2, alpha=0.5, gamma=0.2, level=10, season=[-1, 1])
    final = E.ets_states(fit, np.array([9.5, 11.6, 8.8]))[0]
    assert final.level == pytest.approx(10.0625)
    np.testing.assert_allclose(final.ring, [-1.045, 1.07])
    np.testing.assert_allclose(E.ets_point(fit, final, 2), [10.0625 + 1.07, 10.0625 - 1.045])


def test_damped_trend_forecast_by_hand():
    # ŷ_{t+h} = l + (phi + ... + phi^h) b: l 100, b 10, phi .9 -> 109, 117.1, 124.39
    fit = _fit(E.EtsForm("Ad", False), phi=0.9)
    state = E.EtsState(100.0, 10.0, np.zeros(1), 50)
    np.testing.assert_allclose(E.ets_point(fit, state, 3), [109.0, 117.1, 124.39])


@settings(max_examples=40, deadline=None)
@given(form=st.sampled_from(E.ETS_FORMS), alpha=st.floats(0.05, 0.95), bstar=st.floats(0.01, 0.9),
       gstar=st.floats(0.01, 0.9), phi=st.floats(0.8, 0.98), seed=st.integers(0, 1000))
def test_error_filter_equals_the_state_equations(form, alpha, bstar, gstar, phi, seed):
    """e = H(y - Φ x0) with the rational filter H reproduces the recursion exactly, for any initial states."""
    rng = np.random.default_rng(seed)
    m = 4
    y = rng.normal(50, 5, 40)
    beta, gamma = bstar * alpha, gstar * (1 - alpha)
    x0 = rng.normal(0, 3, 1 + (form.trend != "N") + (m - 1) * form.seasonal)
    x0[0] += 50
    season = np.zeros(m)
    if form.seasonal:
        season[:m - 1], season[m - 1] = x0[-(m - 1):], -x0[-(m - 1):].sum()
    fit = _fit(form, m, alpha, beta, gamma, phi, x0[0], x0[1] if form.trend != "N" else 0.0, season)
    num, den = E.ets_filter_polys(form, m, alpha, beta, gamma, phi)
    basis = E.ets_initial_basis(form, m, len(y), phi)
    via_filter = lfilter(num, den, y - basis @ x0)
    np.testing.assert_allclose(via_filter, _direct_errors(fit, y), atol=1e-8)


def test_profile_likelihood_solves_the_initial_states_exactly():
    """The least-squares initial states are the SSE minimum: nudging any of them raises the SSE."""
    rng = np.random.default_rng(3)
    t = np.arange(60)
    y = 20 + 0.3 * t + 4 * np.sin(2 * np.pi * t / 4) + rng.normal(0, 1, 60)
    form = E.EtsForm("A", True)
    sse, x0 = E.ets_profile_sse(y, form, 4, 0.3, 0.05, 0.1, 1.0)
    basis = E.ets_initial_basis(form, 4, 60, 1.0)
    num, den = E.ets_filter_polys(form, 4, 0.3, 0.05, 0.1, 1.0)
    assert sse == pytest.approx(float(np.sum(lfilter(num, den, y - basis @ x0) ** 2)))
    for i in range(len(x0)):
        for d in (-0.05, 0.05):
            x = x0.copy()
            x[i] += d
            assert float(np.sum(lfilter(num, den, y - basis @ x) ** 2)) > sse


def test_loglik_and_aicc_follow_the_formulas():
    rng = np.random.default_rng(5)
    y = 100 + np.cumsum(rng.normal(0, 1, 80))
    fit = E.fit_ets(y, E.EtsForm("N", False), 1)
    e = _direct_errors(fit, y)
    sse, n, k = float(e @ e), 80, 1 + 1 + 1          # alpha, l0, sigma
    loglik = -n / 2 * (math.log(2 * math.pi * sse / n) + 1)
    assert fit.loglik == pytest.approx(loglik, rel=1e-9)
    assert fit.aicc == pytest.approx(-2 * loglik + 2 * k + 2 * k * (k + 1) / (n - k - 1), rel=1e-9)
    assert fit.sigma2 == pytest.approx(sse / (n - k), rel=1e-9)


def test_fit_recovers_a_simulated_local_level_alpha():
    rng = np.random.default_rng(11)
    e = rng.normal(0, 1, 1500)
    level, y = 50.0, []
    for x in e:                                          # ETS(A,N,N) with alpha 0.4
        y.append(level + x)
        level += 0.4 * x
    fit = E.fit_ets(np.array(y), E.EtsForm("N", False), 1)
    assert fit.alpha == pytest.approx(0.4, abs=0.05)
    assert fit.sigma2 == pytest.approx(1.0, abs=0.1)


def test_aicc_prefers_seasonality_only_when_there_is_one():
    rng = np.random.default_rng(2)
    t = np.arange(140)
    seasonal = 30 + 8 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 1, 140)
    flat = 30 + rng.normal(0, 1, 140)
    assert E.select_ets(seasonal, 7).form.seasonal
    assert not E.select_ets(flat, 7).form.seasonal


# ----------------------------------------------------------------------------- intervals

def test_ets_sd_equals_fpp3_closed_form_for_aaa():
    alpha, beta, gamma, m, s2 = 0.3, 0.1, 0.2, 4, 2.0
    fit = _fit(E.EtsForm("A", True), m=m, alpha=alpha, beta=beta, gamma=gamma, sigma2=s2)
    sd = E.ets_sd(fit, 12)
    for h in range(1, 13):
        k = (h - 1) // m
        var = s2 * (1 + (h - 1) * (alpha ** 2 + alpha * beta * h + beta ** 2 * h * (2 * h - 1) / 6)
                    + gamma * k * (2 * alpha + gamma + beta * m * (k + 1)))
        assert sd[h - 1] ** 2 == pytest.approx(var)
    # by hand: c_j = .4, .5, .6, .9 -> h=2: 2(1 + .16) = 2.32; h=5: 2(1 + 1.58) = 5.16
    assert sd[1] ** 2 == pytest.approx(2.32)
    assert sd[4] ** 2 == pytest.approx(5.16)


def test_ets_sd_damped_and_simple_by_hand():
    ann = _fit(E.EtsForm("N", False), alpha=0.5, sigma2=4.0)
    np.testing.assert_allclose(E.ets_sd(ann, 3) ** 2, [4.0, 5.0, 6.0])          # σ²(1 + (h-1)α²)
    damped = _fit(E.EtsForm("Ad", False), alpha=0.5, beta=0.2, phi=0.5, sigma2=1.0)
    # c1 = .5 + .2·.5 = .6; c2 = .5 + .2·(.5 + .25) = .65 -> 1, 1.36, 1.7825
    np.testing.assert_allclose(E.ets_sd(damped, 3) ** 2, [1.0, 1.36, 1.7825])


# ----------------------------------------------------------------------------- gradient and starting points

@pytest.mark.parametrize("form", E.ETS_FORMS, ids=lambda f: f.name)
def test_analytic_gradient_equals_central_differences(form):
    """d log SSE/d(alpha, beta*, gamma*) from one extra filter of the errors (envelope theorem: the initial
    states stay at their optimum) agrees with differencing the profile objective."""
    rng = np.random.default_rng(3)
    t = np.arange(120)
    y = 20 + 0.3 * t + 4 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 1, 120)
    prof = E.ProfileSSE((y - y.mean()) / y.std(), form, 7)
    v = E._start(form) + 0.05
    _, grad = prof.value_grad(v)
    for i in range(len(v)):
        step = np.zeros(len(v))
        step[i] = 1e-6
        numeric = (prof.value(v + step) - prof.value(v - step)) / 2e-6
        assert grad[i] == pytest.approx(numeric, rel=1e-4, abs=1e-6)


def test_nested_starts_reach_the_optimum_a_fixed_start_misses():
    """Team demand with a weekly cycle, drift and multiplicative noise: from the fixed start (alpha .3, beta* .1)
    SLSQP stops at alpha = 0 on ETS(A,A,N) (a deterministic line); starting from the fitted ETS(A,N,N) it finds
    a likelihood higher by more than 10."""
    rng = np.random.default_rng(15)
    days = 400
    t = np.arange(days)
    y = (rng.lognormal(4, 1) * (1 + rng.uniform(0, 0.4) * (t % 7 < 5)) * (1 + rng.uniform(-0.3, 1.0) * t / days)
         * np.exp(np.cumsum(rng.normal(0, 0.02, days))) * rng.lognormal(0, 0.15, days))
    holt = E.EtsForm("A", False)
    fixed = E.fit_ets(y, holt, 7)
    nested = E.fit_ets_forms(y, 7, forms=(E.EtsForm("N", False), holt))[holt]
    assert fixed.alpha < 1e-3 and nested.alpha > 0.03
    assert nested.loglik > fixed.loglik + 10
    # the nested fit is a minimum of the profile objective along each coordinate
    prof = E.ProfileSSE((y - y.mean()) / y.std(), holt, 7)
    best = prof.value(E.ets_theta(nested))
    for i in range(2):
        for d in (-0.01, 0.01):
            v = E.ets_theta(nested)
            v[i] = min(max(v[i] + d, 1e-4), 0.9999)
            assert prof.value(v) >= best - 1e-9
