"""models/forecast.py: the model equations against hand-computed cases, the interval formulas, the backtest and
selection, and the edge cases a planner's series bring (gaps, zeros, short histories, level shifts)."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import lfilter

from models import forecast as F


def _fit(form, m=1, alpha=0.5, beta=0.0, gamma=0.0, phi=1.0, level=0.0, slope=0.0, season=None, sigma2=1.0):
    season = np.zeros(m) if season is None else np.asarray(season, float)
    return F.EtsFit(form, m, alpha, beta, gamma, phi, level, slope, season, sigma2, 0.0, 0.0, 0, 0)


def _direct_errors(fit: F.EtsFit, y) -> np.ndarray:
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
    fit = _fit(F.EtsForm("A", False), alpha=0.5, beta=0.1, level=10, slope=1)
    st_ = F.ets_states(fit, np.array([12.0, 13.0, 15.0]), at=[1, 2, 3])
    assert [round(s.level, 10) for s in st_] == [11.5, 12.8, 14.47]
    assert [round(s.slope, 10) for s in st_] == [1.1, 1.14, 1.246]
    np.testing.assert_allclose(F.ets_point(fit, st_[-1], 3), [15.716, 16.962, 18.208])


def test_ets_seasonal_state_updates_by_hand():
    # ETS(A,N,A), m 2, alpha .5, gamma .2, l0 10, (s_-1, s_0) = (-1, 1), y = 9.5, 11.6, 8.8:
    # t1: ŷ 9, e .5, l 10.25, s -0.9; t2: ŷ 11.25, e .35, l 10.425, s 1.07; t3: ŷ 9.525, e -.725, l 10.0625, s -1.045
    fit = _fit(F.EtsForm("N", True), m=2, alpha=0.5, gamma=0.2, level=10, season=[-1, 1])
    final = F.ets_states(fit, np.array([9.5, 11.6, 8.8]))[0]
    assert final.level == pytest.approx(10.0625)
    np.testing.assert_allclose(final.ring, [-1.045, 1.07])
    np.testing.assert_allclose(F.ets_point(fit, final, 2), [10.0625 + 1.07, 10.0625 - 1.045])


def test_damped_trend_forecast_by_hand():
    # ŷ_{t+h} = l + (phi + ... + phi^h) b: l 100, b 10, phi .9 -> 109, 117.1, 124.39
    fit = _fit(F.EtsForm("Ad", False), phi=0.9)
    state = F.EtsState(100.0, 10.0, np.zeros(1), 50)
    np.testing.assert_allclose(F.ets_point(fit, state, 3), [109.0, 117.1, 124.39])


@settings(max_examples=40, deadline=None)
@given(form=st.sampled_from(F.ETS_FORMS), alpha=st.floats(0.05, 0.95), bstar=st.floats(0.01, 0.9),
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
    num, den = F.ets_filter_polys(form, m, alpha, beta, gamma, phi)
    basis = F.ets_initial_basis(form, m, len(y), phi)
    via_filter = lfilter(num, den, y - basis @ x0)
    np.testing.assert_allclose(via_filter, _direct_errors(fit, y), atol=1e-8)


def test_profile_likelihood_solves_the_initial_states_exactly():
    """The least-squares initial states are the SSE minimum: nudging any of them raises the SSE."""
    rng = np.random.default_rng(3)
    t = np.arange(60)
    y = 20 + 0.3 * t + 4 * np.sin(2 * np.pi * t / 4) + rng.normal(0, 1, 60)
    form = F.EtsForm("A", True)
    sse, x0 = F.ets_profile_sse(y, form, 4, 0.3, 0.05, 0.1, 1.0)
    basis = F.ets_initial_basis(form, 4, 60, 1.0)
    num, den = F.ets_filter_polys(form, 4, 0.3, 0.05, 0.1, 1.0)
    assert sse == pytest.approx(float(np.sum(lfilter(num, den, y - basis @ x0) ** 2)))
    for i in range(len(x0)):
        for d in (-0.05, 0.05):
            x = x0.copy()
            x[i] += d
            assert float(np.sum(lfilter(num, den, y - basis @ x) ** 2)) > sse


def test_loglik_and_aicc_follow_the_formulas():
    rng = np.random.default_rng(5)
    y = 100 + np.cumsum(rng.normal(0, 1, 80))
    fit = F.fit_ets(y, F.EtsForm("N", False), 1)
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
    fit = F.fit_ets(np.array(y), F.EtsForm("N", False), 1)
    assert fit.alpha == pytest.approx(0.4, abs=0.05)
    assert fit.sigma2 == pytest.approx(1.0, abs=0.1)


def test_aicc_prefers_seasonality_only_when_there_is_one():
    rng = np.random.default_rng(2)
    t = np.arange(140)
    seasonal = 30 + 8 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 1, 140)
    flat = 30 + rng.normal(0, 1, 140)
    assert F.select_ets(seasonal, 7).form.seasonal
    assert not F.select_ets(flat, 7).form.seasonal


# ----------------------------------------------------------------------------- intervals

def test_ets_sd_equals_fpp3_closed_form_for_aaa():
    alpha, beta, gamma, m, s2 = 0.3, 0.1, 0.2, 4, 2.0
    fit = _fit(F.EtsForm("A", True), m=m, alpha=alpha, beta=beta, gamma=gamma, sigma2=s2)
    sd = F.ets_sd(fit, 12)
    for h in range(1, 13):
        k = (h - 1) // m
        var = s2 * (1 + (h - 1) * (alpha ** 2 + alpha * beta * h + beta ** 2 * h * (2 * h - 1) / 6)
                    + gamma * k * (2 * alpha + gamma + beta * m * (k + 1)))
        assert sd[h - 1] ** 2 == pytest.approx(var)
    # by hand: c_j = .4, .5, .6, .9 -> h=2: 2(1 + .16) = 2.32; h=5: 2(1 + 1.58) = 5.16
    assert sd[1] ** 2 == pytest.approx(2.32)
    assert sd[4] ** 2 == pytest.approx(5.16)


def test_ets_sd_damped_and_simple_by_hand():
    ann = _fit(F.EtsForm("N", False), alpha=0.5, sigma2=4.0)
    np.testing.assert_allclose(F.ets_sd(ann, 3) ** 2, [4.0, 5.0, 6.0])          # σ²(1 + (h-1)α²)
    damped = _fit(F.EtsForm("Ad", False), alpha=0.5, beta=0.2, phi=0.5, sigma2=1.0)
    # c1 = .5 + .2·.5 = .6; c2 = .5 + .2·(.5 + .25) = .65 -> 1, 1.36, 1.7825
    np.testing.assert_allclose(F.ets_sd(damped, 3) ** 2, [1.0, 1.36, 1.7825])


def test_seasonal_naive_by_hand():
    point, sd = F.snaive(np.array([1.0, 2, 3, 4, 5, 6]), 3, 4)
    np.testing.assert_allclose(point, [4, 5, 6, 4])
    np.testing.assert_allclose(sd, [3, 3, 3, 3 * math.sqrt(2)])      # σ·√(⌊(h-1)/m⌋ + 1), σ = 3
    point, _ = F.snaive(np.array([5.0, 7.0]), 7, 3)                   # shorter than a season: naive
    np.testing.assert_allclose(point, [7, 7, 7])


def test_interval_bounds_use_z_times_calibrated_sd():
    rng = np.random.default_rng(4)
    t = np.arange(200)
    y = 100 + 10 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 2, 200)
    r = F.forecast_values(y, 7, 14)
    scale = r.backtest.scale[r.model]
    half80 = (r.hi[80] - r.point) / F.Z[80] / scale[80]
    half95 = (r.hi[95] - r.point) / F.Z[95] / scale[95]
    np.testing.assert_allclose(half80, half95)                        # the same model sd behind both
    assert np.all(r.lo[95] <= r.lo[80]) and np.all(r.lo[80] <= r.point)
    assert np.all(r.point <= r.hi[80]) and np.all(r.hi[80] <= r.hi[95])


# ----------------------------------------------------------------------------- Theta

def test_theta_on_a_line_is_ses_with_half_the_drift():
    """Hyndman & Billah: Theta = SES with drift b/2. On an exact line SES has alpha -> 1, so ŷ = y_n + b·h/2."""
    y = 2 + 0.5 * np.arange(1, 41)
    point, _ = F.theta(y, 1, 5)
    np.testing.assert_allclose(point, y[-1] + 0.25 * np.arange(1, 6), atol=1e-2)


def test_seasonality_test_and_indices():
    t = np.arange(70)
    assert F.seasonality_test(10 + 3 * np.sin(2 * np.pi * t / 7), 7)
    assert not F.seasonality_test(np.random.default_rng(0).normal(10, 1, 70), 7)
    assert not F.seasonality_test(10 + np.sin(2 * np.pi * t[:20] / 7), 7)      # < 3 seasons: never
    factors = np.array([0.8, 1.0, 1.2])
    y = 50 * np.tile(factors, 10)
    np.testing.assert_allclose(F.seasonal_indices(y, 3, True), factors)
    np.testing.assert_allclose(F.seasonal_indices(y, 3, False), 50 * factors - 50, atol=1e-9)


# ----------------------------------------------------------------------------- errors, backtest, selection

def test_mase_scale_and_smape_by_hand():
    assert F.mase_scale(np.array([1.0, 3, 2, 5]), 1) == pytest.approx(2.0)
    assert F.mase_scale(np.array([1.0, 3, 2, 5]), 2) == pytest.approx(1.5)      # |2-1|, |5-3|
    assert F.mase_scale(np.array([4.0, 4, 4]), 1) == pytest.approx(4.0)         # flat: the level
    assert F.mase_scale(np.zeros(3), 1) == 1.0
    np.testing.assert_allclose(F.smape(np.array([0.0, 2.0]), np.array([0.0, 1.0])), [0.0, 200 / 3])


def test_backtest_origins_by_hand():
    origins, hb = F.backtest_origins(100, 7, 28)
    assert hb == 28 and origins == [37, 44, 51, 58, 65, 72]
    origins, hb = F.backtest_origins(100, 7, 1)          # short horizon: ⌈4m/h⌉ = 28 origins, step 1
    assert hb == 1 and origins == list(range(72, 100))
    assert F.backtest_origins(20, 7, 28) == ([14], 6)                         # one origin: too few to backtest
    assert F.backtest_origins(10, 7, 5)[0] == []                              # under two seasons + h


def test_calibration_reports_leave_one_origin_out_coverage():
    absu = np.array([[0.5, 1.0], [2.0, 0.1], [0.2, 0.3], [5.0, 0.4], [1.5, 0.9]])
    scale, cov, raw = F._calibrate(absu)
    assert raw[80] == pytest.approx(7 / 10)         # |u| <= 1.2816
    assert scale[80] == pytest.approx(np.quantile(absu, 0.8) / F.Z[80])
    hits = [absu[i] <= np.quantile(np.delete(absu, i, axis=0), 0.8) for i in range(5)]
    assert cov[80] == pytest.approx(np.mean(hits))
    few = F._calibrate(absu[:2])                    # too few errors to calibrate on: model-based intervals
    assert few[0] == {80: 1.0, 95: 1.0} and few[1] == few[2]


def test_selection_picks_the_lowest_backtest_mase():
    rng = np.random.default_rng(8)
    t = np.arange(300)
    y = 200 + 40 * (t % 7 < 5) + rng.normal(0, 3, 300)        # weekday/weekend demand: seasonal
    r = F.forecast_values(y, 7, 14)
    assert r.model == min(r.backtest.mase, key=r.backtest.mase.get)
    assert r.backtest.mase[r.model] < 1.0                     # beats in-sample seasonal naive scale
    assert set(r.backtest.mase) == set(F.CANDIDATES)


def test_intervals_cover_close_to_nominal_on_simulated_demand():
    """Out-of-sample coverage of the calibrated intervals on series from the model class, 12 series x 7 days."""
    rng = np.random.default_rng(21)
    hits80, hits95 = [], []
    for _ in range(12):
        n = 150
        level, season = 100.0, 10 * np.sin(2 * np.pi * np.arange(7) / 7)
        y = []
        for t in range(n):
            e = rng.normal(0, 3)
            y.append(level + season[t % 7] + e)
            level += 0.3 * e
        y = np.array(y)
        r = F.forecast_values(y[:-7], 7, 7)
        hits80 += list((y[-7:] >= r.lo[80]) & (y[-7:] <= r.hi[80]))
        hits95 += list((y[-7:] >= r.lo[95]) & (y[-7:] <= r.hi[95]))
    assert 0.68 <= np.mean(hits80) <= 0.92
    assert 0.86 <= np.mean(hits95) <= 1.0


# ----------------------------------------------------------------------------- edge cases

DAYS = np.arange(np.datetime64("2024-01-01"), np.datetime64("2024-12-31")).astype("datetime64[us]")


def test_empty_zero_and_tiny_histories_do_not_crash():
    r = F.forecast_values(np.array([]), 7, 5)
    assert r.model == "none" and np.all(np.isnan(r.point))
    r = F.forecast_values(np.zeros(50), 7, 5)
    assert r.model == "Zero" and np.all(r.point == 0) and np.all(r.hi[95] == 0) and "all 50" in r.notes[0]
    r = F.forecast_values(np.array([3.0, 4.0]), 7, 5)
    assert r.model == "Naive" and np.all(r.point == 4) and "no interval" in r.notes[0]


def test_short_history_uses_non_seasonal_models_and_says_so():
    y = np.array([10.0, 12, 11, 13, 12, 14, 13, 15, 14, 16])     # 10 days < two weeks
    r = F.forecast_values(y, 7, 7)
    assert any("short history" in n for n in r.notes)
    assert "A)" not in r.detail or "ETS" not in r.model         # no seasonal ETS form
    assert np.all(np.isfinite(r.point)) and np.all(r.hi[95] >= r.point)


def test_gaps_are_filled_and_explained():
    y = 50 + 5 * np.sin(2 * np.pi * np.arange(120) / 7)
    y[30:33] = np.nan
    y[60] = np.nan
    prep, res, fut = F.forecast_series(DAYS[:120], y, "day", 7)
    assert not np.isnan(prep.y).any()
    assert prep.y[30] == pytest.approx(y[23])                    # one season earlier
    assert "4 missing period(s) filled (longest gap 3)" in res.notes[0]
    assert fut[0] == DAYS[120]


def test_leading_zeros_are_dropped_and_explained():
    y = np.r_[np.zeros(40), 20 + np.random.default_rng(1).normal(0, 1, 100)]
    prep, res, _ = F.forecast_series(DAYS[:140], y, "day", 7)
    assert len(prep.y) == 100 and prep.ts[0] == DAYS[40]
    assert "first non-zero period (40 leading zero periods dropped)" in res.notes[0]


def test_level_shift_cuts_the_history_and_the_forecast_follows_the_new_level():
    rng = np.random.default_rng(7)
    y = np.r_[100 + rng.normal(0, 3, 200), 300 + rng.normal(0, 3, 100)]     # a pool was added on day 200
    prep, res, _ = F.forecast_series(DAYS[:300], y, "day", 14)
    assert len(prep.y) == 100 and prep.ts[0] == DAYS[200]
    assert any("level shift on 2024-07-19" in n and "fitted on the 100 periods since" in n for n in res.notes)
    assert np.all(np.abs(res.point - 300) < 15)
    _, res_all, _ = F.forecast_series(DAYS[:300], y, "day", 14, shifts=False)
    assert not any("level shift" in n for n in res_all.notes)


def test_recent_level_shift_with_little_data_after_keeps_history_and_warns():
    rng = np.random.default_rng(9)
    y = np.r_[100 + rng.normal(0, 3, 200), 300 + rng.normal(0, 3, 10)]
    prep, res, _ = F.forecast_series(DAYS[:210], y, "day", 7)
    assert len(prep.y) == 210
    assert any("only 10 periods since" in n for n in res.notes)


def test_no_level_shift_on_a_random_walk():
    y = 500 + np.cumsum(np.random.default_rng(12).normal(0, 5, 300))
    assert F.detect_level_shift(y, 7) is None


def test_nonnegative_demand_keeps_bounds_at_zero_or_above():
    y = np.abs(np.random.default_rng(13).normal(0, 1, 100)) * (np.arange(100) % 3 == 0)   # sparse, spiky
    r = F.forecast_values(y, 7, 10)
    assert np.all(r.lo[95] >= 0) and np.all(r.point >= 0)


# ----------------------------------------------------------------------------- tables

def test_regularise_buckets_and_inserts_missing_periods():
    df = pl.DataFrame({"team": ["a"] * 4 + ["b"],
                       "ts": pl.Series(["2024-01-01 01:00", "2024-01-01 05:00", "2024-01-03 00:00",
                                        "2024-01-03 12:00", "2024-01-02 00:00"]).str.to_datetime(),
                       "value": [2.0, 4.0, 6.0, 8.0, 1.0]})
    out = F.regularise(df, ["team"], "day")
    a = out.filter(pl.col("team") == "a")
    assert a["value"].to_list() == [3.0, None, 7.0]
    summed = F.regularise(df, ["team"], "day", agg="sum").filter(pl.col("team") == "a")
    assert summed["value"].to_list() == [6.0, None, 14.0]


def test_infer_freq():
    assert F.infer_freq(DAYS[:10]) == "day"
    assert F.infer_freq(np.arange(np.datetime64("2024-01-01T00"), np.datetime64("2024-01-02T00"))) == "hour"
    assert F.infer_freq(DAYS[::7][:10]) == "week"


def test_forecast_table_shapes_and_columns():
    t = np.arange(120)
    df = pl.DataFrame({"pool": ["a100"] * 120 + ["h100"] * 120, "ts": np.r_[DAYS[:120], DAYS[:120]],
                       "value": np.r_[50 + 5 * np.sin(2 * np.pi * t / 7), 20 + 0.1 * t]})
    fc, summary = F.forecast_table(df, ["pool"], "day", 30)
    assert fc.height == 60 and fc.columns[:8] == ["pool", "ts", "forecast", "lo80", "hi80", "lo95", "hi95", "model"]
    assert summary.height == 2 and summary["history_periods"].to_list() == [120, 120]
    assert fc.filter(pl.col("pool") == "a100")["ts"][0] == DAYS[120]
    assert summary["backtest_mase"].null_count() == 0
