"""numpy interval kernels: running sums per group, integrals per hour (hand figures and invariants)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.kernels.intervals import HOUR_US, group_cumsum, hour_integrals

H = HOUR_US
T0 = 1_709_251_200 * 1_000_000          # 2024-03-01 00:00 UTC


def test_group_cumsum_restarts_per_group():
    x = np.array([1, 2, 3, 10, 20, 5])
    starts = np.array([True, False, False, True, False, True])
    assert group_cumsum(x, starts).tolist() == [1, 3, 6, 10, 30, 5]


def test_hour_integrals_split_intervals_by_hour():
    # group 0: 2 GPUs from 00:30 to 03:15 -> 1.0 h, 2 h, 2 h, 0.5 h of GPU-hours; group 1: 4 GPUs 01:00-01:30
    g, hour, out = hour_integrals(np.array([0, 1]), np.array([T0 + H // 2, T0 + H]),
                                  np.array([T0 + 3 * H + H // 4, T0 + H + H // 2]), {"x": np.array([2.0, 4.0])})
    got = sorted(zip(g.tolist(), ((hour - T0) // H).tolist(), (out["x"] / 3600).tolist()))
    assert got == [(0, 0, 1.0), (0, 1, 2.0), (0, 2, 2.0), (0, 3, 0.5), (1, 1, 2.0)]


def test_hour_integrals_ignore_empty_intervals():
    g, hour, out = hour_integrals(np.array([0]), np.array([T0]), np.array([T0]), {"x": np.array([1.0])})
    assert len(g) == 0 and len(out["x"]) == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100 * 3600), st.integers(1, 30 * 3600),
                          st.floats(0.001, 16, allow_nan=False)), min_size=1, max_size=30))
def test_hour_integrals_conserve_and_stay_in_hours(rows):
    group = np.array([r[0] for r in rows])
    t0 = T0 + np.array([r[1] for r in rows]) * 1_000_000
    t1 = t0 + np.array([r[2] for r in rows]) * 1_000_000
    rate = np.array([r[3] for r in rows])
    g, hour, out = hour_integrals(group, t0, t1, {"x": rate})
    assert abs(out["x"].sum() - (rate * (t1 - t0) / 1e6).sum()) < 1e-6 * max(1.0, out["x"].sum())
    assert (out["x"] <= 3600 * np.array([rate[group == k].sum() for k in g]) + 1e-6).all()
    for k in np.unique(group):       # per group, the hours covered are exactly those the intervals touch
        want = set()
        for a, b in zip(t0[group == k], t1[group == k]):
            want |= set(range(int(a // H), int((b - 1) // H) + 1))
        assert set((hour[g == k] // H).tolist()) == want


def test_decayed_day_integrals_split_at_midnight_and_decay_exactly():
    """A 2-GPU piece from 18:00 to 06:00 next day, half-life 1 day: per day ∫ 2^((t - D)/h) dt, in seconds."""
    import math
    from models.kernels.intervals import DAY_US, decayed_day_integrals
    h = 86400.0
    d0 = 19_000 * DAY_US
    g, day, val = decayed_day_integrals(np.array([5]), np.array([d0 + 18 * 3600 * 10**6]),
                                        np.array([d0 + DAY_US + 6 * 3600 * 10**6]), np.array([2.0]), h)
    k = math.log(2) / h
    assert g.tolist() == [5, 5] and day.tolist() == [d0, d0 + DAY_US]
    assert val[0] == pytest.approx(2 * (2 ** 1 - 2 ** 0.75) / k, rel=1e-12)
    assert val[1] == pytest.approx(2 * (2 ** 0.25 - 1) / k, rel=1e-12)
    # decayed to 06:00 of the second day, the two days give the integral over the whole piece
    at = 1.25 * h
    whole = 2 * (1 - 2 ** -0.5) / k
    assert val[0] * 2 ** (-at / h) + val[1] * 2 ** (-(at - h) / h) == pytest.approx(whole, rel=1e-12)
