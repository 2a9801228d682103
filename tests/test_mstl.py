"""models/mstl.py: loess weights reproduce what a local fit must, STL and MSTL recover known components, and
the seasonal forecast repeats each component's last cycle."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.forecasting import mstl as M


@settings(max_examples=30, deadline=None)
@given(n=st.integers(3, 60), q=st.integers(1, 40).map(lambda k: 2 * k + 1), extend=st.booleans())
def test_loess_reproduces_lines_and_constants(n, q, extend):
    """A local linear fit returns a straight line exactly, at every point and one step beyond the ends; a local
    mean returns a constant; and the weights of every target sum to 1. (From 3 points: with 2, a target one
    step beyond the end gives the far point weight 0, and one point cannot fix a slope, as in netlib's STL.)"""
    t = np.arange(n, dtype=float)
    at = np.arange(-1, n + 1) if extend else t
    np.testing.assert_allclose(M.loess(3 - 0.5 * t, q, extend), 3 - 0.5 * at, atol=1e-9)
    np.testing.assert_allclose(M.loess(np.full(n, 7.0), q, extend, degree=0), 7.0)
    _, wt = M.loess_op(n, q, extend, 0)
    np.testing.assert_allclose(wt.sum(axis=1), 1.0)


def test_loess_weights_by_hand():
    # 5 points, q = 3, interior target 2: neighbours 1, 2, 3 at distance 1, 0, 1; h = 1 + (q > n ? ...) = 1,
    # but a point at distance h has weight 0 (r = 1 > 0.999): only the centre counts
    j, wt = M.loess_op(5, 3, False, 0)
    assert j[2].tolist() == [1, 2, 3] and wt[2].tolist() == [0.0, 1.0, 0.0]
    # q = 5 over 5 points: target 0 sees 0..4, h = 4; tricube (1 - (d/4)^3)^3 normalised
    j, wt = M.loess_op(5, 5, False, 0)
    d = np.arange(5) / 4
    w = np.where(d < 0.999, (1 - d ** 3) ** 3, 0)
    np.testing.assert_allclose(wt[0], w / w.sum())


def test_stl_splits_a_constant_plus_a_fixed_cycle_exactly():
    cycle = np.array([3.0, -1.0, -2.0, 0.0])
    y = 10 + np.tile(cycle, 12)
    seasonal, trend = M.stl(y, 4)
    np.testing.assert_allclose(seasonal, np.tile(cycle, 12), atol=1e-9)
    np.testing.assert_allclose(trend, 10.0, atol=1e-9)


def test_mstl_recovers_a_daily_and_a_weekly_cycle():
    t = np.arange(24 * 7 * 8)
    day = 5 * np.sin(2 * np.pi * t / 24)
    week = 8 * ((t // 24) % 7 < 5) - 8 * 5 / 7                   # weekdays above the mean, weekends below
    y = 100 + 0.01 * t + day + week + np.random.default_rng(0).normal(0, 0.5, len(t))
    dec = M.mstl(y, (168, 24))
    assert dec.periods == (24, 168)
    np.testing.assert_allclose(dec.trend + dec.seasonal.sum(axis=0) + dec.remainder, y)
    core = slice(168, -168)                                      # away from the ends
    assert np.abs(dec.seasonal[0][core] - day[core]).mean() < 0.6
    assert np.abs(dec.seasonal[1][core] - week[core]).mean() < 0.8
    assert np.abs(dec.trend[core] - (100 + 0.01 * t[core])).mean() < 0.6


def test_seasonal_forecast_repeats_each_last_cycle():
    s24 = np.tile(np.arange(24.0), 15)
    s3 = np.tile([1.0, -1.0, 0.0], 120)
    dec = M.Decomposition(np.zeros(360), np.vstack([s3, s24]), np.zeros(360), (3, 24))
    np.testing.assert_allclose(M.seasonal_forecast(dec, 5), [0 + 1, 1 - 1, 2 + 0, 3 + 1, 4 - 1])


def test_periods_without_two_cycles_are_left_out():
    y = np.random.default_rng(1).normal(0, 1, 100)
    assert M.mstl(y, (24, 168)).periods == (24,)
    assert M.mstl(y[:30], (24, 168)).periods == ()


def test_seasonal_strength():
    t = np.arange(140)
    rng = np.random.default_rng(2)
    assert M.seasonal_strength(10 + 5 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 0.5, 140), 7) > 0.9
    assert M.seasonal_strength(rng.normal(0, 1, 140), 7) < 0.64
    assert M.seasonal_strength(np.ones(10), 7) == 0.0
    assert M.seasonal_strength(np.ones(140), 7) == pytest.approx(0.0)
