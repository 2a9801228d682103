"""models/theta.py: the Fiorucci et al. (2016) state equations on a short series by hand, the exact least-squares
solve for l_0 and theta, the alpha search, forecasts (closed form and the dynamic recursion), many origins at
once, and M4's seasonality handling."""
from __future__ import annotations

import numpy as np
import pytest

from models.forecasting import theta as T

# x = 1, 3, 2, 4: the least-squares line through t = 1..4 has B = (12·29 - 6·5·10)/(4·15) = 0.8 and
# A = 2.5 - 0.8·2.5 = 0.5. With alpha = 0.5, theta = 2 (c = 1/2), l_0 = 1, by hand:
#   STM  mu = 1.65, 1.725, 2.7625, 2.78125   e = -0.65, 1.275, -0.7625, 1.21875   l_4 = 3
#   DSTM (lines through x_1..x_{t-1}: A,B = 0,0 | 1,0 | -1,2 | 1,0.5)
#        mu = 1, 1.25, 3.625, 2.53125         e = 0, 1.75, -1.625, 1.46875
X = np.array([1.0, 3.0, 2.0, 4.0])
SSE_STM = 1.275 ** 2 + 0.7625 ** 2 + 1.21875 ** 2          # scored from t = 2: 3.6923828125
SSE_DSTM = 1.75 ** 2 + 1.625 ** 2 + 1.46875 ** 2           # 7.8603515625


def _sse_at(s: dict, variant: str, l0: float, c: float) -> float:
    rg, pg, gg = s["dynamic" if T.DYNAMIC[variant] else "static"]
    rr, rp, pp = s["rr"][0], s["rp"][0], s["pp"][0]
    return float(rr - 2 * l0 * rp - 2 * c * rg[0] + l0 * l0 * pp + 2 * l0 * c * pg[0] + c * c * gg[0])


def test_least_squares_line_and_its_dynamic_path_by_hand():
    a, b = T.ols_path(X)
    np.testing.assert_allclose(a[0], [1.0, -1.0, 1.0, 0.5])
    np.testing.assert_allclose(b[0], [0.0, 2.0, 0.5, 0.8])


def test_one_step_errors_by_hand_static_and_dynamic():
    r = T._rows(X[None, :], np.array([4]))
    s = T._sums(r, np.array([0.5]))
    assert _sse_at(s, "STM", 1.0, 0.5) == pytest.approx(SSE_STM)
    assert _sse_at(s, "DSTM", 1.0, 0.5) == pytest.approx(SSE_DSTM)


def test_theta_and_initial_level_are_the_exact_least_squares_solution():
    """For fixed alpha the errors are linear in (l_0, c): the solve is the minimum; nudging either raises SSE."""
    rng = np.random.default_rng(2)
    x = np.cumsum(rng.normal(0.2, 1, 40))
    r = T._rows(x[None, :], np.array([40]))
    s = T._sums(r, np.array([0.4]))
    for variant in ("OTM", "DOTM"):
        l0, c, sse = (v[0] for v in T._solve(s, variant))
        assert 0 <= c < 1 and _sse_at(s, variant, l0, c) == pytest.approx(sse)
        for dl, dc in ((0.05, 0), (-0.05, 0), (0, 0.02), (0, -0.02)):
            if 0 <= c + dc < 1:
                assert _sse_at(s, variant, l0 + dl, c + dc) > sse


def _recursion(x, variant, alpha, c, l0):
    """The paper's equations one period at a time (the reference for the vectorised sums)."""
    level, errors = l0, []
    a_n, b_n = (v[0, -1] for v in T.ols_path(x))
    for t in range(1, len(x) + 1):
        if T.DYNAMIC[variant]:
            a, b = (0.0, 0.0) if t == 1 else (v[0, t - 2] for v in T.ols_path(x[:t - 1]))
        else:
            a, b = a_n, b_n
        mu = level + c * ((1 - alpha) ** (t - 1) * a + (1 - (1 - alpha) ** t) / alpha * b)
        errors.append(x[t - 1] - mu)
        level = alpha * x[t - 1] + (1 - alpha) * level
    e = np.array(errors[1:])
    return float(e @ e), level


@pytest.mark.parametrize("variant", T.VARIANTS)
def test_fit_matches_the_recursion_and_a_fine_alpha_search(variant):
    rng = np.random.default_rng(1)
    x = np.cumsum(rng.normal(0.3, 1, 60))
    x = (x - x.mean()) / x.std()
    r = T._rows(x[None, :], np.array([60]))
    fit = T.fit_rows(r, (variant,))[variant]
    sse, level_n = _recursion(x, variant, fit.alpha[0], fit.c[0], fit.level0[0])
    assert fit.mse[0] * 59 == pytest.approx(sse, rel=1e-9)
    assert fit.level_n[0] == pytest.approx(level_n, rel=1e-9)
    fine = min(T._solve(T._sums(r, np.array([a])), variant)[2][0] for a in np.linspace(0.1, 0.99, 900))
    assert sse <= fine + 1e-6                      # grid + parabola is at least as good as a 900-point search
    if variant in ("STM", "DSTM"):
        assert fit.theta[0] == pytest.approx(2.0)


def test_forecasts_by_hand():
    r = T._rows(X[None, :], np.array([4]))
    one = np.array([1.0])
    fit = T.ThetaFits("STM", 0.5 * one, 0.5 * one, one, one, 3.0 * one)
    # l_4 + c·[(1-a)^4·A + ((j-1) + (1-(1-a)^5)/a)·B] = 3 + .5·(.03125 + 1.55) = 3.790625, then + c·B per period
    np.testing.assert_allclose(T.forecast_rows(r, fit, 2)[0], [3.790625, 4.190625])
    # dynamic: the first step uses the line through x_1..x_4; then x_5 := 3.790625 updates l, A and B:
    # l_5 = 3.3953125, B_5 = 0.658125, A_5 = 0.78375 -> mu_6 = 3.3953125 + .5·(.03125·A_5 + 1.96875·B_5)
    fit = T.ThetaFits("DSTM", 0.5 * one, 0.5 * one, one, one, 3.0 * one)
    np.testing.assert_allclose(T.forecast_rows(r, fit, 2)[0], [3.790625, 4.055400390625])


def test_static_closed_form_equals_the_forecast_recursion():
    """Iterating the static model with x replaced by mu gives the closed form (Fiorucci et al., eq. for OTM)."""
    rng = np.random.default_rng(4)
    x = np.cumsum(rng.normal(0.5, 1, 30))
    r = T._rows(x[None, :], np.array([30]))
    fit = T.fit_rows(r, ("OTM",))["OTM"]
    alpha, c, level = fit.alpha[0], fit.c[0], fit.level_n[0]
    a_n, b_n = r.a_n[0], r.b_n[0]
    out = []
    for t in range(31, 41):
        mu = level + c * ((1 - alpha) ** (t - 1) * a_n + (1 - (1 - alpha) ** t) / alpha * b_n)
        out.append(mu)
        level = alpha * mu + (1 - alpha) * level
    np.testing.assert_allclose(T.forecast_rows(r, fit, 10)[0], out)


def test_many_origins_at_once_equal_one_at_a_time():
    rng = np.random.default_rng(6)
    t = np.arange(150)
    y = 40 + 0.2 * t + 6 * (t % 7 < 5) + rng.normal(0, 2, 150)
    origins = [100, 110, 120, 130]
    batch = T.theta_paths(y, 7, origins, 14)
    for i, o in enumerate(origins):
        single = T.theta_paths(y[:o], 7, [o], 14)
        np.testing.assert_allclose(batch.point[i], single.point[0], rtol=1e-9)
        np.testing.assert_allclose(batch.sd[i], single.sd[0], rtol=1e-9)
        assert batch.detail[i] == single.detail[0]


def test_variant_with_lowest_mse_is_used_and_named():
    rng = np.random.default_rng(8)
    y = 100 + np.cumsum(rng.normal(1, 2, 90))
    paths = T.theta_paths(y, 1, [90], 5)
    x = (y - y.mean()) / y.std()
    fits = T.fit_rows(T._rows(x[None, :], np.array([90])))
    best = min(T.VARIANTS, key=lambda v: fits[v].mse[0])
    assert paths.detail[0].startswith(best)


def test_seasonal_series_is_deseasonalised_multiplicatively_and_the_cycle_returns():
    t = np.arange(70)
    factors = np.array([1.3, 1.2, 1.1, 1.0, 1.0, 0.7, 0.7])
    y = 100 * factors[t % 7]
    paths = T.theta_paths(y, 7, [70], 14)
    assert "multiplicative seasonal" in paths.detail[0]
    np.testing.assert_allclose(paths.point[0], 100 * factors[np.arange(70, 84) % 7], rtol=1e-6)


def test_zeros_switch_the_decomposition_to_additive():
    t = np.arange(70)
    y = np.where(t % 7 < 5, 10.0 + 0.01 * t, 0.0)
    assert "additive seasonal" in T.theta_paths(y, 7, [70], 7).detail[0]


def test_theta_on_a_line_extrapolates_it():
    """A straight line: SES with alpha near 1 and theta at its bound 100 (c = 0.99), so the forecast continues
    the line to within 1 % of its slope per step, and the detail prints theta=100, not 1e+06."""
    y = 2 + 0.5 * np.arange(1, 41)
    paths = T.theta_paths(y, 1, [40], 5)
    j = np.arange(1, 6)
    assert np.all(np.abs(paths.point[0] - (2 + 0.5 * (40 + j))) <= 0.01 * 0.5 * j + 1e-3)
    assert "theta=100" in paths.detail[0]


def test_seasonality_test_and_indices():
    t = np.arange(70)
    assert T.seasonality_test(10 + 3 * np.sin(2 * np.pi * t / 7), 7)
    assert not T.seasonality_test(np.random.default_rng(0).normal(10, 1, 70), 7)
    assert not T.seasonality_test(10 + np.sin(2 * np.pi * t[:20] / 7), 7)      # < 3 seasons: never
    factors = np.array([0.8, 1.0, 1.2])
    y = 50 * np.tile(factors, 10)
    np.testing.assert_allclose(T.seasonal_indices(y, 3, True), factors)
    np.testing.assert_allclose(T.seasonal_indices(y, 3, False), 50 * factors - 50, atol=1e-9)


@pytest.mark.parametrize("n,m", [(40, 7), (30, 7), (15, 7), (100, 24)])
def test_many_rows_of_one_length_forecast_as_each_alone(n, m):
    # theta_matrix (bootstraps of one history: the seasonality test, decomposition and per-row alpha refit done
    # for all rows at once, the SES by a pass over the periods) gives theta_many's forecasts: seasonal rows
    # (multiplicative, and additive where a row has a value <= 0) and rows without a season mixed
    rng = np.random.default_rng(n)
    t = np.arange(n)
    rows = [50 + 10 * np.sin(2 * np.pi * t / m) + rng.normal(0, s, n) for s in (1, 5, 20, 40) for _ in range(5)]
    rows[3] = rows[3] - rows[3].min()                          # a zero: additive
    rows[7] = 30 + 0.5 * t + rng.normal(0, 3, n)               # no season
    x = np.array(rows)
    many, matrix = T.theta_many(list(x), m, 28), T.theta_matrix(x, m, 28)
    np.testing.assert_allclose(matrix.point, many.point, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(matrix.sd, many.sd, rtol=1e-9, atol=1e-9)
    alone = T.theta_many([x[0]], m, 28)                        # one row: the per-row filter path
    np.testing.assert_allclose(matrix.point[0], alone.point[0], rtol=1e-9, atol=1e-9)
