"""models/forecast.py: seasonal naive by hand, the interval formulas and their calibration, the backtest and the
selection rule, and the edge cases a planner's series bring (gaps, zeros, short histories, level shifts).
The ETS and Theta equations are tested in tests/test_ets.py and tests/test_theta.py."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.forecasting import forecast as F
from models.forecasting.bagging import bagged_theta


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
    np.testing.assert_allclose(half80, r.sd)
    assert np.all(r.lo[95] <= r.lo[80]) and np.all(r.lo[80] <= r.point)
    assert np.all(r.point <= r.hi[80]) and np.all(r.hi[80] <= r.hi[95])


# ----------------------------------------------------------------------------- errors, backtest, selection

def test_mase_scale_and_smape_by_hand():
    assert F.mase_scale(np.array([1.0, 3, 2, 5]), 1) == pytest.approx(2.0)
    assert F.mase_scale(np.array([1.0, 3, 2, 5]), 2) == pytest.approx(1.5)      # |2-1|, |5-3|
    assert F.mase_scale(np.array([4.0, 4, 4]), 1) == pytest.approx(4.0)         # flat: the level
    assert F.mase_scale(np.zeros(3), 1) == 1.0
    np.testing.assert_allclose(F.smape(np.array([0.0, 2.0]), np.array([0.0, 1.0])), [0.0, 200 / 3])


def test_backtest_origins_by_hand():
    origins, hb = F.backtest_origins(100, 7, 28)         # 12 origins wanted; those leaving two weeks of training
    assert hb == 28 and origins == [16, 23, 30, 37, 44, 51, 58, 65, 72]
    origins, hb = F.backtest_origins(100, 7, 1)          # short horizon: ⌈4m/h⌉ = 28 origins, step 1
    assert hb == 1 and origins == list(range(72, 100))
    assert F.backtest_origins(20, 7, 28) == ([14], 6)                         # one origin: too few to backtest
    assert F.backtest_origins(10, 7, 5)[0] == []                              # under two seasons + h


def test_calibration_reports_leave_one_origin_out_coverage():
    absu = np.array([[0.5, 1.0], [2.0, 0.1], [0.2, 0.3], [5.0, 0.4], [1.5, 0.9]])
    scale, cov, raw = F._calibrate(absu)
    assert raw[80] == pytest.approx(7 / 10)         # |u| <= 1.2816
    # split-conformal quantile with the finite-sample correction: the ⌈(10+1)·0.8⌉ = 9th smallest of 10 errors
    assert scale[80] == pytest.approx(2.0 / F.Z[80])
    assert scale[95] == pytest.approx(5.0 / F.Z[95])                     # ⌈11·0.95⌉ = 11 > 10: the largest
    # leave one origin out: 8 errors, ⌈9·0.8⌉ = 8th smallest = the largest of the other origins'
    hits = [absu[i] <= np.delete(absu, i, axis=0).max() for i in range(5)]
    assert cov[80] == pytest.approx(np.mean(hits))
    assert [F.conformal_rank(n, 0.8) for n in (4, 10, 100)] == [3, 8, 80]
    few = F._calibrate(absu[:2])                    # too few errors to calibrate on: model-based intervals
    assert few[0] == {80: 1.0, 95: 1.0} and few[1] == few[2]


def _bt(mase_o: dict, horizon: int = 7, step: int = 7) -> F.Backtest:
    mase = {c: float(np.mean(v)) for c, v in mase_o.items()}
    return F.Backtest(horizon, list(range(len(next(iter(mase_o.values()))))), mase, {}, {}, {}, {}, {},
                      mase_o={c: np.asarray(v, float) for c, v in mase_o.items()}, step=step)


ETS_O = [0.5, 0.6, 0.55, 0.5, 0.6, 0.55]              # the best: mean 0.55
THETA_O = [0.56, 0.62, 0.6, 0.52, 0.66, 0.56]          # worse at every origin: t = 4.2 > t_.8,5 = 0.92
ARIMA_O = [0.3, 0.9, 0.4, 0.8, 0.5, 0.6]               # mean 0.583 but noisy: t = 0.38, kept


def test_combination_keeps_the_singles_not_clearly_worse_than_the_best():
    w = F.combination_weights({"ETS": ETS_O, "Theta": THETA_O, "ARIMA": ARIMA_O}, step=7, horizon=7)
    inv = {"ETS": 1.0, "ARIMA": 0.55 / np.mean(ARIMA_O)}
    assert w == pytest.approx({c: v / sum(inv.values()) for c, v in inv.items()})
    assert list(w) == ["ETS", "ARIMA"]                                   # largest weight first
    # 28-period forecasts from origins 7 apart overlap: 6 origins span 1 + 5·7/28 = 2.25 independent windows;
    # Theta is still clearly worse (t = 4.2·√(2.25/6) = 2.6 > t_.8,1.25 = 1.24)
    w = F.combination_weights({"ETS": ETS_O, "Theta": THETA_O, "ARIMA": ARIMA_O}, step=7, horizon=28)
    assert set(w) == {"ETS", "ARIMA"}
    assert F.n_independent(6, 7, 28) == pytest.approx(2.25) and F.n_independent(6, 7, 7) == 6
    # 4 origins: 1.75 independent windows, the t-test cannot tell them apart; ARIMA (better than ETS at the
    # first origin) is kept, Theta, worse than ETS at every one of the 4 origins, is dominated and left out
    w = F.combination_weights({"ETS": ETS_O[:4], "Theta": THETA_O[:4], "ARIMA": ARIMA_O[:4]}, step=7, horizon=28)
    assert set(w) == {"ETS", "ARIMA"}
    # 2 origins: too few even to be dominated, every single is kept
    w = F.combination_weights({"ETS": ETS_O[:2], "Theta": THETA_O[:2], "ARIMA": ARIMA_O[:2]}, step=7, horizon=28)
    assert set(w) == {"ETS", "Theta", "ARIMA"}
    assert F.combination_weights({"ETS": [0.0] * 4, "Theta": [1.0] * 4}) == {"ETS": 1.0}


def test_dominated_means_worse_at_every_one_of_at_least_three_origins():
    assert F.dominated(np.array([0.1, 0.01, 2.0])) and F.dominated([0.5] * 5)
    assert not F.dominated(np.array([0.1, 0.0, 2.0]))            # a tie at one origin: not everywhere worse
    assert not F.dominated(np.array([0.1, -0.3, 2.0, 1.0]))
    assert not F.dominated(np.array([1.0, 1.0]))                  # two origins: too few


def test_level_factor_brings_each_origins_errors_to_the_current_level():
    # m = 2: the season before origin 2 has mean 1.5, before origin 4 mean 4; the last season (9, 7) mean 8
    y = np.array([1.0, 2.0, 3.0, 5.0, 6.0, 9.0, 7.0])
    f = F.level_factor(y, [2, 4], 2)
    assert f.shape == (2, 1) and f[:, 0] == pytest.approx([(8 / 1.5) ** 0.5, (8 / 4) ** 0.5])
    assert F.level_factor(np.array([0.0, 0.0, 3.0, 5.0]), [2], 2)[0, 0] == 1.0     # no level at the origin
    assert np.all(F.level_factor(y - 5, [2, 4], 2) == 1.0)                         # not a level: untouched
    ramp = np.array([0.1, 0.1, 50.0, 150.0])                      # (100 / 0.1)^0.5 = 31.6, kept at 3; 1/3 below
    assert F.level_factor(ramp, [2], 2)[0, 0] == 3.0 and F.level_factor(ramp[::-1], [2], 2)[0, 0] == pytest.approx(1 / 3)


def test_choice_is_the_combination_and_names_every_member():
    bt = _bt({"ETS": ETS_O, "Theta": THETA_O, "ARIMA": ARIMA_O})
    bt.weights = F.combination_weights(bt.mase_o, bt.step, bt.horizon)
    model, why = F.choose(bt)
    assert model == "Combination" and "ETS 0.51 (MASE 0.55)" in why and "left out as clearly worse: Theta" in why


def test_the_best_single_is_used_only_when_selecting_it_beats_the_combination_out_of_sample():
    bt = _bt({"ETS": ETS_O, "Theta": THETA_O, "ARIMA": ARIMA_O, "Combination": [0.6] * 6})
    bt.weights = F.combination_weights({c: v for c, v in bt.mase_o.items() if c != "Combination"}, 7, 7)
    bt.selection_o = np.array([0.62, 0.58, 0.61, 0.6, 0.57, 0.63])        # as good as the combination: kept
    assert F.choose(bt)[0] == "Combination"
    bt.selection_o = np.array([0.5, 0.55, 0.52, 0.5, 0.56, 0.54])         # better at every origin: the best single
    model, why = F.choose(bt)
    assert model == "ETS" and "beat the combination clearly out of sample" in why
    bt.selection_o = np.array([0.4, 0.7, 0.5, 0.65, 0.45, 0.62])          # lower on average, not clearly: kept
    assert F.choose(bt)[0] == "Combination"
    # 2 origins: too few independent origins to test, the combination stays however low the selection's MASE
    short = _bt({"ETS": ETS_O[:2], "Theta": THETA_O[:2], "Combination": [0.6, 0.6]}, horizon=28)
    short.selection_o = np.array([0.1, 0.1])
    assert F.choose(short)[0] == "Combination"


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(F.SINGLES), st.lists(st.floats(0.01, 10.0), min_size=6, max_size=6),
                       min_size=1), st.sampled_from([(7, 7), (24, 24), (7, 28)]))
def test_combination_weights_sum_to_one_and_the_best_weighs_most(mase_o, step_h):
    w = F.combination_weights(mase_o, *step_h)
    means = {c: np.mean(v) for c, v in mase_o.items()}
    best = min(means, key=lambda c: (means[c], F.SINGLES.index(c)))
    assert sum(w.values()) == pytest.approx(1.0) and best in w
    assert all(w[best] >= v - 1e-12 for v in w.values())
    worse = {c: [x + 1.0 for x in mase_o[best]] for c in F.SINGLES if c not in mase_o}
    if worse:                                  # worse by 1 at every origin: always left out (t-test or dominated)
        assert not set(F.combination_weights({**mase_o, **worse}, *step_h)) & set(worse)


def test_combination_in_the_backtest_is_scored_out_of_sample():
    """At origin i the combination's members and weights come from the other origins' MASE only."""
    pa = {"ETS": F.Paths(np.array([[1.0], [2.0], [3.0], [4.0]]), np.ones((4, 1))),
          "Theta": F.Paths(np.array([[3.0], [4.0], [5.0], [6.0]]), np.ones((4, 1)))}
    mase_o = {"ETS": np.array([1.0, 3.0, 2.0, 2.0]), "Theta": np.array([2.0, 1.0, 1.0, 1.0])}
    comb = F._loo_combination(pa, mase_o, step=1, horizon=1)
    # origin 0: others ETS [3, 2, 2], Theta [1, 1, 1]: ETS worse by 1 to 2 at every other origin, so it is
    # left out (t = 4.0 > t_.8,2 = 1.06)
    assert comb.point[0, 0] == pytest.approx(3.0)
    # origin 1: ETS [1, 2, 2] mean 5/3, Theta [2, 1, 1] mean 4/3; d = [-1, 1, 1]: t = 0.58, both kept with
    # weights 1 and (4/3)/(5/3) = 0.8
    assert comb.point[1, 0] == pytest.approx((1 * 4.0 + 0.8 * 2.0) / 1.8)


def test_selection_on_a_seasonal_series_runs_the_backtest_of_every_candidate():
    rng = np.random.default_rng(8)
    t = np.arange(300)
    y = 200 + 40 * (t % 7 < 5) + rng.normal(0, 3, 300)        # weekday/weekend demand: seasonal
    r = F.forecast_values(y, 7, 14)
    assert set(r.backtest.mase) == set(F.CANDIDATES)
    assert r.model == F.choose(r.backtest)[0]
    assert r.backtest.mase[r.model] < 1.0                     # beats in-sample seasonal naive scale
    assert len(r.backtest.origins) == F.MIN_ORIGINS and r.backtest.step == 7
    assert sum(r.backtest.weights.values()) == pytest.approx(1.0) and set(r.backtest.weights) <= set(F.SINGLES)
    if r.model == "Combination":
        assert any(n.startswith("model combination of the candidates") for n in r.notes)
        assert r.weights == pytest.approx(r.backtest.weights)
    else:     # here seasonal ARIMA: alone in the combination, and its selection beats the combination's LOO score
        best = min((c for c in F.SINGLES if c in r.backtest.mase), key=r.backtest.mase.get)
        assert r.model == best and any(n.startswith(f"model {best}, the best single") for n in r.notes)


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
    y = np.r_[100 + rng.normal(0, 3, 200), 300 + rng.normal(0, 3, 150)]     # a pool was added on day 200
    prep, res, _ = F.forecast_series(DAYS[:350], y, "day", 14)
    assert len(prep.y) == 150 and prep.ts[0] == DAYS[200]
    assert any("level shift on 2024-07-19" in n and "fitted on the 150 periods since" in n for n in res.notes)
    assert np.all(np.abs(res.point - 300) < 15)
    _, res_all, _ = F.forecast_series(DAYS[:350], y, "day", 14, shifts=False)
    assert not any("level shift" in n for n in res_all.notes)


def test_recent_level_shift_with_little_data_after_keeps_history_and_warns():
    rng = np.random.default_rng(9)
    y = np.r_[100 + rng.normal(0, 3, 200), 300 + rng.normal(0, 3, 10)]
    prep, res, _ = F.forecast_series(DAYS[:210], y, "day", 7)
    assert len(prep.y) == 210
    # a cut must leave room for the full backtest: 14 training + 7 horizon + 11 steps of 7 = 98 periods
    assert F.backtest_span(7, 7) == 98 and F.backtest_span(7, 90) == 14 + 28 + 11 * 7
    assert F.backtest_span(7, 1) == 14 + 1 + 27                  # one-day horizon: 28 origins a day apart
    assert any("only 10 periods since (< 98 to backtest on them)" in n for n in res.notes)


def test_a_one_off_burst_is_replaced_for_fitting_and_not_forecast_every_week():
    """One day at 100 times the level, 20 days before the end: fitted as it was, the seasonal models forecast it
    again on its weekday of each week ahead (278 and 281 GPUs for a pool at 50)."""
    rng = np.random.default_rng(3)
    y = 50 + rng.normal(0, 3, 120)
    y[100] += 5000
    mask, usual = F.detect_outliers(y, 7)
    assert np.flatnonzero(mask).tolist() == [100]
    assert usual[100] == pytest.approx(np.median(y[[86, 93, 107, 114]]))     # its weekday, two weeks either side
    # replaced by the usual value moved by the median difference of the week around it from its own usual values
    around = [97, 98, 99, 101, 102, 103]
    shift = np.median([y[i] - np.median(y[[i - 14, i - 7, i + 7, i + 14]]) for i in around])
    prep, res, _ = F.forecast_series(DAYS[:120], y, "day", 14)
    assert prep.y[100] == pytest.approx(usual[100] + shift) and abs(prep.y[100] - 50) < 5
    assert np.delete(prep.y, 100).tolist() == np.delete(y, 100).tolist()
    assert any(f"1 burst(s) replaced for fitting by their season position's usual value at the level around them: "
               f"2024-04-10 {y[100]:.4g} → {prep.y[100]:.4g}" in n for n in res.notes)
    assert res.point.max() < 70 and res.hi[80].max() < 100
    kept, res_kept, _ = F.forecast_series(DAYS[:120], y, "day", 14, outliers=False)
    assert kept.y[100] == y[100] and res_kept.point.max() > 200          # the weekly ghost of the burst


def test_busy_weekdays_and_a_fast_climb_are_not_bursts():
    rng = np.random.default_rng(5)
    weekly = 50 + rng.normal(0, 3, 140) + 150 * (np.arange(140) % 7 == 0)      # every Monday at 4x: its weekday's usual
    assert not F.detect_outliers(weekly, 7)[0].any()
    climb = np.r_[np.full(60, 2.0), np.geomspace(2, 60, 20)] + rng.normal(0, 0.1, 80)   # a new pool ramping up
    assert not F.detect_outliers(climb, 7)[0].any()
    last_week = 50 + rng.normal(0, 3, 100)
    last_week[97] = 5000                # the last cycle has no later one to say it was a burst, not a new level
    assert not F.detect_outliers(last_week, 7)[0][97]



def test_a_three_day_outage_is_replaced_not_read_as_a_level_shift():
    """A maintenance outage (three days at 0, 30 days before the end) of a pool at 60 on weekdays and 40 at
    weekends: fitted as it was, the week's median fell by 3/7 of the window there, the level-shift rule cut the
    history after it ("median 34.7 → 58.5") and the bands widened to 0-131 GPUs by day 14 (noise sd 3)."""
    rng = np.random.default_rng(7)
    weekly = np.where(np.arange(200) % 7 < 5, 60.0, 40.0)
    y = weekly + rng.normal(0, 3, 200)
    y[170:173] = 0.0
    mask, usual = F.detect_outliers(y, 7)
    assert np.flatnonzero(mask).tolist() == [170, 171, 172]
    assert usual[170] == pytest.approx(np.median(y[[156, 163, 177, 184]]))
    prep, res, _ = F.forecast_series(DAYS[:200], y, "day", 14)
    assert len(prep.y) == 200 and not any("level shift" in n for n in res.notes)
    assert any(n.startswith("3 outage(s) replaced for fitting by their season position's usual value at the level "
                            f"around them: 2024-06-19 0 → {prep.y[170]:.4g}") for n in res.notes)
    assert np.abs(prep.y[170:173] - weekly[170:173]).max() < 6
    assert res.lo[95].min() > 20 and res.hi[95].max() < 80 and res.backtest.mase[res.model] < 1
    kept, res_kept, _ = F.forecast_series(DAYS[:200], y, "day", 14, outliers=False)
    assert any("level shift" in n for n in res_kept.notes) and res_kept.hi[95].max() > 100


def test_quiet_weekends_and_a_falling_pool_are_not_outages():
    rng = np.random.default_rng(11)
    weekends = 60 + rng.normal(0, 2, 140) - 55 * (np.arange(140) % 7 >= 5)   # weekends at 1/12: their weekday's usual
    assert not F.detect_outliers(weekends, 7)[0].any()
    fall = np.r_[np.full(60, 60.0), np.geomspace(60, 2, 20), np.full(30, 2.0)] + rng.normal(0, 0.1, 110)
    assert not F.detect_outliers(fall, 7)[0].any()          # a project winding down: below its earlier week only
    sparse = rng.poisson(3, 140) * (rng.random(140) < 0.5)   # a pool idle half its days: zeros are its usual
    assert not F.detect_outliers(sparse.astype(float), 7)[0].any()

def test_no_level_shift_on_a_random_walk():
    y = 500 + np.cumsum(np.random.default_rng(12).normal(0, 5, 300))
    assert F.detect_level_shift(y, 7) is None


def test_a_series_is_idle_after_a_week_of_zeros_longer_than_any_earlier_pause():
    steady = np.r_[np.full(60, 50.0), np.zeros(7)]
    assert F.idle_start(steady, "day") == 60 and F.idle_start(steady[:-1], "day") is None      # 6 days: a pause
    lumpy = np.zeros(70)
    lumpy[::14] = 500.0                     # one big submission every other week: 13 quiet days are its habit
    assert F.idle_start(lumpy[:67], "day") is None and F.idle_start(np.r_[lumpy[:57], np.zeros(14)], "day") == 57
    assert F.idle_start(np.r_[np.full(400, 5.0), np.zeros(167)], "hour") is None
    assert F.idle_start(np.r_[np.full(400, 5.0), np.zeros(168)], "hour") == 400
    assert F.idle_start(np.r_[np.full(30, 5.0), np.zeros(2)], "month") == 30
    assert F.idle_start(np.zeros(9), "day") is None


def test_no_level_shift_in_an_intermittent_pool_but_a_start_from_zero_is_one():
    """A pool busy on 3 days in 10 at random: most weeks' medians are 0, so the median jump was 0 and any week
    whose median rose passed as abrupt ("level shift on 2026-05-10 (median 0 → 16.84)"). A pool that starts from
    zero and stays busy is still a shift."""
    rng = np.random.default_rng(4)
    y = (rng.random(180) < 0.3) * rng.gamma(2, 20, 180)
    assert F.detect_level_shift(y, 7) is None
    start = np.r_[np.zeros(60), 20 + rng.normal(0, 1, 90)]
    assert F.detect_level_shift(start, 7)[0] == 60


def test_a_burst_is_not_a_level_shift_but_a_step_is_found_where_it_starts():
    """One day at seven times the level (a sweep submitted at once) moved the week's mean by 43 and read as two
    level shifts ("mean 53 → 96.6", "96.6 → 55.7"), cutting 47 days of history; the medians do not move."""
    rng = np.random.default_rng(4)
    y = 50 + 0.1 * np.arange(200) + rng.normal(0, 3, 200)
    y[40] += 300
    assert F.detect_level_shift(y, 7) is None
    prep = F.prepare(DAYS[:200], y, "day", h=28)
    assert len(prep.y) == 200 and not any("level shift" in n for n in prep.notes)
    # three days of a burst in a week are fewer than half of it: not a new level either
    y3 = 100 + rng.normal(0, 2, 120)
    y3[60:63] += 400
    assert F.detect_level_shift(y3, 7) is None
    # a clean step from 100 to 300 at index 90: found at 90 (the medians alone are level from 87 to 93)
    step = np.r_[np.full(90, 100.0), np.full(60, 300.0)]
    assert F.detect_level_shift(step, 7) == (90, 100.0, 300.0)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 120), h=st.integers(1, 30),
       zeros=st.floats(0.0, 0.8), scale=st.sampled_from([1e-3, 1.0, 1e5]))
def test_any_nonnegative_history_gives_ordered_nonnegative_bounds(seed, n, h, zeros, scale):
    rng = np.random.default_rng(seed)
    y = scale * rng.lognormal(2, 1, n) * (rng.random(n) > zeros)
    r = F.forecast_values(y, 7, h)
    assert len(r.point) == h and np.all(np.isfinite(r.point)) and np.all(r.point >= 0)
    if r.model not in ("Naive", "none"):
        assert np.all(r.lo[95] <= r.lo[80] + 1e-9) and np.all(r.lo[80] <= r.point + 1e-9)
        assert np.all(r.point <= r.hi[80] + 1e-9) and np.all(r.hi[80] <= r.hi[95] + 1e-9)
        assert np.all(r.lo[95] >= 0)


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


def test_series_without_demand_get_a_summary_row_but_no_forecast_rows():
    t = np.arange(60)
    df = pl.DataFrame({"pool": ["a100"] * 60 + ["unknown"] * 60, "ts": np.r_[DAYS[:60], DAYS[:60]],
                       "value": np.r_[50 + 5 * np.sin(2 * np.pi * t / 7), np.zeros(60)]})
    fc, summary = F.forecast_table(df, ["pool"], "day", 7)
    assert fc["pool"].unique().to_list() == ["a100"] and fc.height == 7
    row = summary.filter(pl.col("pool") == "unknown").row(0, named=True)
    assert row["model"] == "Zero" and "all 60 periods are zero" in row["notes"]
    every = {f"mase_{c.lower()}" for c in F.CANDIDATES} | {f"coverage95_{c.lower()}" for c in F.CANDIDATES}
    assert every <= set(summary.columns) and summary.filter(pl.col("pool") == "a100")["weights"][0]


def test_hourly_demand_with_daily_and_weekly_cycles_backtests_mstl_and_arima():
    rng = np.random.default_rng(30)
    t = np.arange(24 * 7 * 5)
    y = 100 + 20 * np.sin(2 * np.pi * t / 24) + 15 * ((t // 24) % 7 < 5) + rng.normal(0, 2, len(t))
    r = F.forecast_values(y, 24, 24, periods=F.SEASONS["hour"])
    assert {"ARIMA", "MSTL", "Combination"} <= set(r.backtest.mase)
    # two cycles of a known shape and little noise: the weekly-aware MSTL beats the daily seasonal naive
    assert r.backtest.mase["MSTL"] < r.backtest.mase["SeasonalNaive"]
    assert "MSTL" in r.weights and "periods 24,168" in r.detail
    assert np.all(r.lo[95] >= 0) and np.all(r.lo[95] <= r.point) and np.all(r.point <= r.hi[95])


def test_a_history_too_short_to_backtest_uses_one_model_even_when_the_combination_is_asked_for():
    y = np.array([5.0, 6.0, 7.0, 6.0, 8.0, 7.0, 9.0, 8.0, 9.0, 10.0])
    r = F.forecast_values(y, 7, 28, force="Combination")
    assert r.backtest is None and r.model == "Theta" and any("too short to backtest" in n for n in r.notes)


# ----------------------------------------------------------------------------- intervals without a backtest (run 6)

def test_finite_sample_interval_by_hand():
    # n = 4 (t = 1..4, t̄ = 2.5, Sxx = 4·15/12 = 5), sd = 1 at both steps: at h = 1 the line's error at t = 5 adds
    # 1/4 + 2.5²/5 = 1.5, at h = 2 (t = 6) 1/4 + 3.5²/5 = 2.7; Student-t with 2 degrees of freedom
    wide, scale = F.finite_sample_interval(np.array([1.0, 1.0]), 4)
    np.testing.assert_allclose(wide, [math.sqrt(2.5), math.sqrt(3.7)])
    assert scale[80] == pytest.approx(1.8856180831641267 / F.Z[80])       # t_{2, 0.90}
    assert scale[95] == pytest.approx(4.302652729749464 / F.Z[95])        # t_{2, 0.975}
    wide, scale = F.finite_sample_interval(np.array([2.0, 3.0]), 10_000)   # long history: both corrections vanish
    np.testing.assert_allclose(wide, [2.0, 3.0], rtol=1e-3)
    assert scale[95] == pytest.approx(1.0, abs=1e-3)


def test_a_history_too_short_to_backtest_gets_the_finite_sample_interval():
    y = np.array([5.0, 6.0, 7.0, 6.0, 8.0, 7.0, 9.0, 8.0, 9.0, 10.0])
    r = F.forecast_values(y, 7, 28)
    assert r.backtest is None and r.calibration == "finite-sample" and r.n == 10
    wide, scale = F.finite_sample_interval(r.sd, 10)
    np.testing.assert_allclose(r.hi[95] - r.point, F.Z[95] * scale[95] * wide)
    np.testing.assert_allclose(r.hi[80] - r.point, F.Z[80] * scale[80] * wide)
    assert np.all(r.hi[95] - r.point > F.Z[95] * r.sd)                   # wider than the model's own band
    assert any("Student-t quantiles with 8 degrees of freedom" in n for n in r.notes)
    long = F.forecast_values(100 + 10 * np.sin(2 * np.pi * np.arange(200) / 7), 7, 7)
    assert long.calibration == "backtest"                               # a calibrated one keeps its backtest band


def test_calibration_origins_by_hand():
    # 40 days, h = 28: no backtest at 28 (one origin); the longest with three origins, each keeping 14 days, is
    # hb = 12 (origins 28, 21, 14; hb = 13 would need 13)
    assert F.calibration_origins(40, 7, 28) == ([14, 21, 28], 12)
    assert F.calibration_origins(20, 7, 28) == ([14, 16, 18], 2)          # shorter than a season: step hb
    assert F.calibration_origins(16, 7, 5) == ([], 0)                      # two origins at most
    origins, hb = F.calibration_origins(200, 7, 28)                        # a long history: the full horizon
    assert hb == 28 and len(origins) == F.MIN_ORIGINS


def test_a_history_too_short_for_the_horizon_is_calibrated_on_the_longest_backtest_it_allows():
    # 40 days at h = 28: no backtest, bagged Theta; its intervals calibrated on bagged Theta's errors at horizons
    # 1..12 from 3 origins (one factor per level, the model's sd growth beyond step 12), not the textbook band
    rng = np.random.default_rng(5)
    t = np.arange(40)
    y = 20 + 0.3 * t + 5 * np.sin(2 * np.pi * t / 7) + rng.standard_t(3, 40) * 3   # heavy-tailed errors
    r = F.forecast_values(y, 7, 28)
    assert r.backtest is None and r.model == "Theta" and r.calibration == "short-backtest" and r.bagged
    np.testing.assert_allclose(r.point, np.maximum(bagged_theta(y, 7, 28)[0], 0))
    scale, hb, k = F.short_calibration(y, 7, 28, "Theta", bag=True)
    assert (hb, k) == (12, 3)
    for lv in F.LEVELS:
        np.testing.assert_allclose(r.hi[lv] - r.point, F.Z[lv] * scale[lv] * r.sd)
    # the 95 % factor is the conformal quantile of the 36 standardised errors (3 origins x 12 steps, each
    # origin's brought to the current level): ⌈37·0.95⌉ = the 36th smallest, the largest; 80 %: the 30th
    origins, hb = F.calibration_origins(40, 7, 28)
    p = F.fallback_paths(y, 7, origins, hb)
    err = np.array([y[o:o + hb] for o in origins]) - p.point
    absu = F.standardised(err, p.sd, F.level_factor(y, origins, 7))
    assert scale[95] == pytest.approx(absu.max() / F.Z[95])
    assert scale[80] == pytest.approx(np.sort(absu, axis=None)[29] / F.Z[80])
    assert any("calibrated on bagged Theta's backtest errors at horizons 1..12 from 3 origins" in n for n in r.notes)
    assert any("bagged: the median of its forecasts of 100 bootstrapped histories" in n for n in r.notes)
    assert F.short_calibration(y[:20], 7, 28, "Theta") is None            # 3 origins x 2 steps: too few errors


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(17, 60), h=st.integers(14, 60))
def test_short_backtest_bands_nest_and_stay_non_negative(seed, n, h):
    # pools of 17-60 days with bursts and zeros at long horizons: whatever calibrates them, 95 % contains 80 %
    # contains the point, no bound below 0, and a short-backtest band comes from a backtest shorter than h
    rng = np.random.default_rng(seed)
    bursts = rng.integers(0, 2, n) * 40.0 * (rng.random(n) < 0.05)
    y = rng.poisson(rng.uniform(0.5, 20), n) * (rng.random(n) > 0.2) + bursts
    r = F.forecast_values(y.astype(float), 7, h)
    if r.model in ("Zero", "none", "Naive"):
        return
    assert np.all(r.lo[95] >= 0) and np.all(r.lo[95] <= r.lo[80]) and np.all(r.lo[80] <= r.point + 1e-9)
    assert np.all(r.point <= r.hi[80] + 1e-9) and np.all(r.hi[80] <= r.hi[95] + 1e-9)
    if r.calibration == "short-backtest":
        origins, hb = F.calibration_origins(n, 7, h)
        assert len(origins) >= 3 and hb < h
        assert any(f"horizons 1..{hb} from {len(origins)} origins" in x for x in r.notes)


def _calibrated_result(absu: np.ndarray, point=10.0, h=3) -> F.Result:
    """A Result whose backtest calibrated it on the errors ``absu`` (one row per origin)."""
    bt = F.Backtest(h, list(range(absu.shape[0])), {}, {}, {}, {}, {}, {}, absu={"Theta": np.sort(absu, axis=None)})
    return F.Result(np.full(h, point), {}, {}, "Theta", backtest=bt, sd=np.ones(h), calibration="backtest", n=100)


def test_pooled_scale_is_the_conformal_quantile_of_every_calibrated_series_errors():
    rows = [np.arange(1, 13, dtype=float).reshape(4, 3), np.arange(13, 25, dtype=float).reshape(4, 3),
            np.arange(25, 37, dtype=float).reshape(4, 3)]                 # 36 errors 1..36 in three series
    uncalibrated = F.forecast_values(np.array([5.0, 6, 7, 6, 8, 7, 9, 8, 9, 10]), 7, 5)
    scale, k = F.pooled_scale([_calibrated_result(r) for r in rows] + [uncalibrated])
    assert k == 3                                                           # the uncalibrated one adds nothing
    assert scale[80] == pytest.approx(30 / F.Z[80])                         # ⌈37·0.80⌉ = 30th smallest
    assert scale[95] == pytest.approx(36 / F.Z[95])                         # ⌈37·0.95⌉ = 36th
    assert F.pooled_scale([_calibrated_result(r) for r in rows[:2]]) is None     # fewer than three series


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000), spread=st.floats(0.5, 3.0), series=st.integers(3, 8))
def test_pooled_band_covers_exchangeable_errors_at_least_nominally(seed, spread, series):
    # standardised errors of every series from one distribution (models whose sd is off by ``spread``, heavy
    # tails): conformal coverage is guaranteed over the draw of the calibration errors too, so the check averages
    # the coverage of 20 new errors over 200 calibrations, with a tolerance of 3 standard errors of that average
    rng = np.random.default_rng(seed)
    draw = lambda *shape: np.abs(spread * rng.standard_t(5, shape))       # noqa: E731
    reps, n_new, n_cal = 200, 20, series * 6 * 7
    covered = {lv: [] for lv in F.LEVELS}
    for _ in range(reps):
        scale, _ = F.pooled_scale([_calibrated_result(draw(6, 7)) for _ in range(series)])
        new = draw(n_new)
        for lv in F.LEVELS:
            covered[lv].append(np.mean(new <= F.Z[lv] * scale[lv]))
    for lv in F.LEVELS:
        p = lv / 100
        tol = 3 * math.sqrt(p * (1 - p) * (1 / n_cal + 1 / n_new) / reps)
        assert np.mean(covered[lv]) >= p - tol


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 40), h=st.integers(1, 30), factor=st.floats(0.1, 20.0))
def test_pooled_bands_are_never_narrower_than_the_finite_sample_ones_nor_below_zero(seed, n, h, factor):
    rng = np.random.default_rng(seed)
    y = rng.lognormal(1, 1, n) * (rng.random(n) > 0.3)
    r = F.forecast_values(y, 7, h)
    if r.calibration not in ("finite-sample", "short-backtest"):          # all zero, two points, or calibrated
        return
    before = {lv: (r.lo[lv].copy(), r.hi[lv].copy()) for lv in F.LEVELS}
    F.apply_pooled(r, ({80: factor, 95: factor}, 3), nonneg=True)
    assert r.calibration == "pooled" and "3 calibrated series" in r.notes[-1]
    for lv in F.LEVELS:
        assert np.all(r.lo[lv] >= 0) and np.all(r.lo[lv] <= before[lv][0] + 1e-9)
        assert np.all(r.hi[lv] >= before[lv][1] - 1e-9)
        np.testing.assert_allclose(r.hi[lv] - r.point, np.fmax(before[lv][1] - r.point, F.Z[lv] * factor * r.sd))


def _three_long_pools_and_a_new_one() -> tuple[pl.DataFrame, np.ndarray]:
    """120 days of three weekly-seasonal pools and a pool that started 20 days ago (its values)."""
    t = np.arange(120)
    rng = np.random.default_rng(21)
    long = [50 * k + 5 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 3 * k, 120) for k in (1, 2, 3)]
    short = np.r_[np.zeros(100), 40 + rng.normal(0, 2, 20)]
    df = pl.DataFrame({"pool": [p for p in ("a", "b", "c", "new") for _ in t], "ts": np.tile(DAYS[:120], 4),
                       "value": np.concatenate([*long, short])})
    return df, short


def test_forecast_table_widens_a_short_series_to_the_pooled_errors_of_the_others(monkeypatch):
    monkeypatch.setattr(F, "CROSS_SERIES", False)        # the pooled rule alone (cross-series: the test below)
    df, short = _three_long_pools_and_a_new_one()
    fc, summary = F.forecast_table(df, ["pool"], "day", 14)
    notes = dict(zip(summary["pool"], summary["notes"]))
    assert "pooled" in notes["new"] and "3 calibrated series" in notes["new"]
    assert dict(zip(summary["pool"], summary["interval"])) == {"a": "backtest", "b": "backtest", "c": "backtest",
                                                               "new": "pooled"}
    assert not any("pooled" in notes[p] for p in "abc")
    r = F.forecast_values(short[100:], 7, 14)                               # the same series alone
    new = fc.filter(pl.col("pool") == "new")
    assert np.all(new["hi95"].to_numpy() >= r.hi[95] - 1e-9) and np.all(new["lo95"].to_numpy() >= 0)


def test_cross_windows_take_one_window_per_longer_series_before_a_second_one():
    # n = 10, h = 7, m = 7: origins step back by 7 from len - 7 while 10 periods precede them
    assert F.cross_windows(10, [50, 30], 7, 7) == [(0, 43), (1, 23), (0, 36), (1, 16), (0, 29), (0, 22), (0, 15)]
    assert F.cross_windows(10, [50, 30], 7, 7, limit=3) == [(0, 43), (1, 23), (0, 36)]
    assert F.cross_windows(10, [16], 7, 7) == []                                 # 9 periods before its only origin


def test_cross_calibration_is_the_conformal_quantile_of_the_cut_windows_standardised_errors():
    # naive (m = 1) on 5 periods of a ramp y_t = t: point o - 1, sigma = 1 (every difference is 1), sd_j = √j,
    # error at step j = j, so |e/sd| = √j at every window: 12 windows x steps 1..4 = 48 errors, 1, √2, √3 and 2
    # twelve times each; the ⌈49·0.8⌉ = 40th and the ⌈49·0.95⌉ = 47th smallest are both 2
    scale, windows, series = F.cross_calibration(5, "SeasonalNaive", [np.arange(30.0)], 1, 4)
    assert (windows, series) == (12, 1)
    assert scale[80] == pytest.approx(2 / F.Z[80]) and scale[95] == pytest.approx(2 / F.Z[95])
    # a flat series: every window's model claims sd 0, nothing to standardise with
    assert F.cross_calibration(5, "SeasonalNaive", [np.full(30, 3.0)], 1, 4) is None
    assert F.cross_calibration(5, "Combination", [np.arange(30.0)], 1, 4) is None


def test_a_bagged_short_series_is_calibrated_on_windows_forecast_bagged_too():
    # the windows of the longer series are forecast as the short series was: bagged Theta, 20 bootstraps each
    # (WINDOW_BOOTSTRAPS), their errors divided by Theta's sd
    rng = np.random.default_rng(11)
    t = np.arange(120)
    longer = [50 + 0.2 * t + 8 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 6, 120) for _ in range(3)]
    bagged = F.cross_calibration(30, "Theta", longer, 7, 28, bag=True)
    plain = F.cross_calibration(30, "Theta", longer, 7, 28)
    assert bagged is not None and plain is not None and bagged[0] != plain[0]
    rows = []
    for s, o in F.cross_windows(30, [120] * 3, 7, 28):
        p = F.fallback_paths(longer[s][o - 30:o], 7, [30], 28, F.WINDOW_BOOTSTRAPS)
        assert p.detail.endswith("bagged over 20 bootstraps (median)")
        rows.append(F.standardised(longer[s][o:o + 28] - p.point[0], p.sd[0], np.ones(1)))
    absu = np.sort(np.array(rows), axis=None)
    assert bagged[0][95] == pytest.approx(absu[math.ceil((len(absu) + 1) * 0.95) - 1] / F.Z[95])


def test_forecast_table_calibrates_a_new_series_on_the_longer_ones_cut_to_its_length():
    df, short = _three_long_pools_and_a_new_one()
    fc, summary = F.forecast_table(df, ["pool"], "day", 14)
    notes = dict(zip(summary["pool"], summary["notes"]))
    assert dict(zip(summary["pool"], summary["interval"]))["new"] == "cross-series"
    assert "windows of 20 periods cut from 3 longer series" in notes["new"]
    r = F.forecast_values(short[100:], 7, 14)                               # the same series alone
    new = fc.filter(pl.col("pool") == "new")
    for lv in F.LEVELS:                                                     # at least its own band, never below 0
        assert np.all(new[f"hi{lv}"].to_numpy() >= r.hi[lv] - 1e-9) and np.all(new[f"lo{lv}"].to_numpy() >= 0)


def test_a_quantile_on_errors_the_model_gave_no_sd_for_calibrates_nothing():
    # 10 origins x 2 steps; 3 of the 20 errors happened where the model claimed sd 0 (out of any band)
    absu = np.r_[np.arange(1.0, 18.0), np.full(3, F.OUT_OF_ANY_BAND)].reshape(10, 2)
    scale, _, _ = F._calibrate(absu)
    assert scale[80] == pytest.approx(17 / F.Z[80])          # ⌈21·0.80⌉ = 17th smallest: 17
    assert scale[95] == math.inf                             # ⌈21·0.95⌉ = 20th: an error without sd
    assert F.standardised(np.array([[0.0, 2.0]]), np.array([[0.0, 0.0]]), np.array([[1 / 3]])).tolist() == \
        [[0.0, F.OUT_OF_ANY_BAND]]                           # the level factor does not shrink "out of any band"


def test_a_history_flat_at_the_backtest_origins_gets_a_finite_band():
    # a pool flat at 1 GPU for 36 days that then moves: Theta fits the flat origins exactly (sd 0), so most of the
    # backtest's errors have no sd; the factor once became 1e12/z and the 95 % band 1e11 GPUs wide
    y = np.r_[0.7, np.ones(35), 1.2, 1.2, 1.3, 2.6, 2.2, 2.3, 3.3, 3.2, 2.3, 2.4]
    for h in (7, 28):
        r = F.forecast_values(y, 7, h)
        assert r.calibration in ("backtest", "short-backtest", "finite-sample")
        assert np.all(np.isfinite(r.hi[95])) and np.all(r.hi[95] - r.point < 100 * y.max())


def test_level_sd_is_the_square_root_of_the_level_times_the_models_growth():
    y = np.r_[np.full(7, 4.0), np.full(7, 9.0)]
    # level 4 at origin 7 (√4 = 2), 9 at 14 (3); growth sd_j / sd_1, or √j where the model claims sd 0
    got = F.level_sd(y, [7, 14], 7, np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(got, [[2, 4, 6], [3, 3 * math.sqrt(2), 3 * math.sqrt(3)]])


def test_a_model_sd_that_held_is_kept_and_one_that_failed_tenfold_gives_way_to_the_level():
    y = np.r_[np.full(7, 4.0), np.full(14, 9.0)]
    err = np.array([[1.0, -2.0], [2.0, 1.0], [-1.0, 3.0]])
    sd = np.array([[0.5, 1.0], [0.5, 1.0], [0.5, 1.0]])
    absu = np.abs(err / sd)
    assert F.band_basis(y, [7, 14, 21], 7, err, sd, absu, F.SD_FAILS)[0] == "model"
    basis, scores = F.band_basis(y, [7, 14, 21], 7, err, sd, absu, F.SD_FAILS + 0.1)
    # levels √4, √9, √9 times the model's growth 1, 2: scores |e| / (2, 4), / (3, 6), / (3, 6)
    assert basis == "level"
    np.testing.assert_allclose(scores, [[0.5, 0.5], [2 / 3, 1 / 6], [1 / 3, 0.5]])
    neg = np.r_[-1.0, y]                                             # a series with negatives has no level law
    assert F.band_basis(neg, [7, 14, 21], 7, err, sd, absu, 50.0)[0] == "model"


def test_a_pool_flat_for_weeks_then_climbing_gets_a_band_of_its_own_size(fixtures):
    # openb's T4 pods (real): 76 days of nothing, five weeks at exactly one GPU, then 2.2-4.1 GPUs a day. At the
    # flat backtest origins the models' sd was 0.01-0.08 GPUs and their errors 1-3 GPUs: calibrated on the model
    # sd, the factor was 54 and the 80 % band of the next day reached 54.5 GPUs (gpus_needed 113 for a pool using 4)
    d = pl.read_csv(fixtures / "forecast" / "openb_t4_daily.csv", try_parse_dates=True)
    prep, r, _ = F.forecast_series(d["date"].to_numpy(), d["gpus"].to_numpy(), "day", 28)
    assert r.calibration == "backtest" and r.backtest.basis[r.model] == "level"
    assert any("intervals scaled by the level" in n for n in r.notes)
    recent = float(prep.y[-7:].max())                                # 4.10 GPUs
    assert r.hi[80][0] < 2 * recent and r.hi[95][-1] < 3 * recent    # was 54.5 and 80 (the ceiling)
    assert np.all(r.lo[95] <= r.lo[80]) and np.all(r.hi[80] <= r.hi[95]) and np.all(r.lo[95] >= 0)
    assert np.all(r.lo[80] <= r.point) and np.all(r.point <= r.hi[80])


def test_forecast_table_bands_a_new_flat_series_from_the_others_errors_relative_to_their_level():
    t = np.arange(120)
    rng = np.random.default_rng(5)
    long = [50 * k + 5 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 3 * k, 120) for k in (1, 2)]
    flat = np.r_[np.zeros(100), np.full(20, 4.0)]                   # one job of 4 GPUs for 20 days, nothing else
    df = pl.DataFrame({"pool": [p for p in ("a", "b", "new") for _ in t], "ts": np.tile(DAYS[:120], 3),
                       "value": np.concatenate([*long, flat])})
    alone = F.forecast_values(flat[100:], 7, 14)
    assert np.all(alone.hi[95] == alone.point) and "fits the history exactly" in " ".join(alone.notes)
    fc, summary = F.forecast_table(df, ["pool"], "day", 14)
    new = fc.filter(pl.col("pool") == "new")
    notes = dict(zip(summary["pool"], summary["notes"]))
    assert dict(zip(summary["pool"], summary["interval"]))["new"] == "cross-series"
    assert "claims no uncertainty" in notes["new"] and "2 longer series" in notes["new"]
    for lv in F.LEVELS:                                            # q_L · level · √j: half-widths grow as √j
        half = new[f"hi{lv}"].to_numpy() - new["forecast"].to_numpy()
        assert half[0] > 0
        np.testing.assert_allclose(half / half[0], np.sqrt(np.arange(1, 15)))


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 10_000), n_new=st.integers(3, 30), h=st.integers(1, 28))
def test_cross_series_bands_are_at_least_the_series_own_nest_and_stay_non_negative(seed, n_new, h):
    rng = np.random.default_rng(seed)
    t = np.arange(90)
    long = [rng.lognormal(2, 1) * (1 + 0.3 * np.sin(2 * np.pi * t / 7)) * rng.lognormal(0, 0.3, 90) for _ in range(3)]
    new = np.r_[np.zeros(90 - n_new), rng.lognormal(1, 1) * rng.lognormal(0, 0.5, n_new)]
    df = pl.DataFrame({"pool": [p for p in ("a", "b", "c", "new") for _ in t], "ts": np.tile(DAYS[:90], 4),
                       "value": np.concatenate([*long, new])})
    fc, summary = F.forecast_table(df, ["pool"], "day", h)
    if dict(zip(summary["pool"], summary["interval"]))["new"] != "cross-series":
        return
    alone = F.forecast_values(new[90 - n_new:], 7, h)                       # its own band, without the table
    f = fc.filter(pl.col("pool") == "new")
    assert np.all(f["lo95"].to_numpy() >= 0)
    assert np.all(f["lo95"].to_numpy() <= f["lo80"].to_numpy() + 1e-9)
    assert np.all(f["hi80"].to_numpy() <= f["hi95"].to_numpy() + 1e-9)
    assert np.all(f["hi95"].to_numpy() >= alone.hi[95] - 1e-9) and np.all(np.isfinite(f["hi95"].to_numpy()))


def test_an_outage_in_a_quiet_week_is_replaced_at_that_week_s_level():
    """Philly's outage day (70 active nodes) fell in a week running about 45 below the weeks around it: the usual
    value of its weekday alone (372) would have put a busy day into a quiet week."""
    y = np.full(140, 100.0)
    y[70:77] = 80.0
    y[73] = 0.0
    mask, usual = F.detect_outliers(y + np.arange(140) % 3 * 0.5, 7)      # a little noise: a MAD scale > 0
    assert np.flatnonzero(mask).tolist() == [73] and usual[73] == pytest.approx(100, abs=1)
    assert F.outlier_values(y, mask, np.full(140, 100.0), 7)[73] == 80.0
