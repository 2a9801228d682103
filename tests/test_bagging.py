"""models/forecasting/bagging.py: Guerrero's lambda, Box-Cox both ways, the moving block bootstrap, the bootstrapped
histories and bagged Theta (Bergmeir, Hyndman & Benítez 2016), by hand and as invariants."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.forecasting import bagging as B
from models.forecasting import theta as T


def test_guerrero_lambda_finds_the_power_that_steadies_the_spread():
    rng = np.random.default_rng(1)
    level = np.repeat([10.0, 40.0, 160.0, 640.0, 2560.0], 7)
    # sd proportional to the level (multiplicative noise): the log (lambda 0) makes it constant
    assert B.guerrero_lambda(level * np.exp(rng.normal(0, 0.1, 35)), 7) == pytest.approx(0.0, abs=0.1)
    # sd proportional to the square root of the level (count-like): lambda 1/2
    assert B.guerrero_lambda(level + np.sqrt(level) * rng.normal(0, 1, 35), 7) == pytest.approx(0.5, abs=0.2)
    # the same spread at every level: no transform
    assert B.guerrero_lambda(level + rng.normal(0, 3, 35), 7) >= 0.8
    assert B.guerrero_lambda(np.r_[0.0, level[1:]], 7) == 1.0                  # a zero: not transformed
    assert B.guerrero_lambda(np.full(35, 5.0), 7) == 1.0                       # flat: nothing to steady
    assert B.guerrero_lambda(level[:10], 7) == 1.0                             # fewer than two blocks


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 1.0])
def test_box_cox_round_trips(lam):
    y = np.array([0.5, 1.0, 7.0, 120.0])
    np.testing.assert_allclose(B.inv_box_cox(B.box_cox(y, lam), lam), y)
    assert B.box_cox(np.array([4.0]), 0.5)[0] == pytest.approx(2.0)            # (4^0.5 - 1) / 0.5
    assert B.inv_box_cox(np.array([-3.0]), 0.5)[0] == 0.0                      # below the range: 0


def test_the_block_bootstrap_joins_runs_of_consecutive_values():
    rem = np.arange(30.0)
    out = B.block_bootstrap(rem, 14, 50, np.random.default_rng(0))
    assert out.shape == (50, 30)
    for row in out:
        breaks = np.flatnonzero(np.diff(row) != 1)                               # where one block ends
        runs = np.diff(np.r_[-1, breaks, len(row) - 1])
        # whole blocks between the ends (two blocks drawn one after the other join into one run)
        assert np.all(runs[1:-1] % 14 == 0) and len(breaks) <= 30 // 14 + 1
    assert len({tuple(r) for r in out}) > 40                                     # resampled, not copied


def test_bootstrapped_histories_keep_the_history_first_and_stay_non_negative():
    rng = np.random.default_rng(2)
    t = np.arange(45)
    y = np.maximum(20 + 8 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 6, 45), 0)
    y[5] = 0.0
    series, lam = B.bootstrap_series(y, 7, 30)
    assert series.shape == (30, 45) and lam == 1.0                               # a zero: additive
    np.testing.assert_array_equal(series[0], y)
    assert series.min() >= 0
    again, _ = B.bootstrap_series(y, 7, 30)
    np.testing.assert_array_equal(series, again)                                 # deterministic


def test_a_history_with_little_noise_bags_to_about_theta_itself():
    # a straight line: STL leaves a remainder of a fraction of a GPU (its loess at the ends), so every bootstrap
    # is the history within 0.5 % and bagged Theta is Theta within 1 %
    y = 100 + 2.5 * np.arange(40)
    series, _ = B.bootstrap_series(y, 7, 20)
    np.testing.assert_allclose(series, np.broadcast_to(y, series.shape), rtol=5e-3)
    np.testing.assert_allclose(B.bagged_theta(y, 7, 28)[0], T.theta_many([y], 7, 28).point[0], rtol=1e-2)


def test_bagging_does_not_hang_the_level_on_the_last_few_days():
    # Philly's first h = 28 fold, by hand: four weeks around 300 active nodes, then two days at 391 and 412.
    # Theta's alpha (0.9) follows the two days; in the bootstraps those days' excess is remainder, resampled
    # through the history, and the median forecast stays near the level of the weeks (the month after: 312)
    rng = np.random.default_rng(7)
    y = np.r_[300 + rng.normal(0, 20, 28), 391.0, 412.0]
    theta = T.theta_many([y], 7, 28).point[0]
    bagged = B.bagged_theta(y, 7, 28)[0]
    assert theta.mean() > 380
    assert bagged.mean() < theta.mean() - 30


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(15, 60), m=st.sampled_from([7, 24]))
def test_bagged_forecasts_are_finite_and_non_negative_for_demand(seed, n, m):
    rng = np.random.default_rng(seed)
    if not B.can_bag(n, m):
        assert n < 2 * m + 1
        return
    y = np.maximum(rng.gamma(2, 10, n) * (rng.random(n) > 0.2), 0)
    point, lam = B.bagged_theta(y, m, 30)
    assert point.shape == (30,) and np.all(np.isfinite(point)) and point.min() >= 0 and 0 <= lam <= 1
