"""Our Theta (models/forecasting/theta.py) against statsforecast's AutoTheta, fold by fold (issue #17, run 11).

For every fold of the accuracy benchmark's daily cells (`forecast_accuracy.folds`), both models are fitted on
the same history twice: the raw one (what statsforecast is given in `forecast_accuracy.py`) and the one
`forecast.prepare` makes (what ours is given: leading zeros dropped, cut at a level shift). Prints per fold the
MASE of each, the variant and parameters each chose, and, where neither deseasonalised, the in-sample sum of
squared one-step errors of each fit (both in the paper's state space form, so the same objective): which
optimiser found the better fit. Needs statsforecast (as `forecast_accuracy.py` does for its baselines).

    .venv/bin/python benchmarks/forecast_theta_check.py [--series philly_daily,openb_T4_daily] [--h 28]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import forecast_accuracy as A  # noqa: E402
from models.forecasting import forecast as F  # noqa: E402
from models.forecasting import theta as T  # noqa: E402

M = 7


def our_fit(hist: np.ndarray, h: int) -> tuple[np.ndarray, str, float]:
    """(point forecast, detail, in-sample SSE of the chosen variant in the series' unit; NaN if deseasonalised)."""
    fc = T.theta_paths(hist, M, [len(hist)], h)
    if "seasonal" in fc.detail[0]:
        return fc.point[0], fc.detail[0], float("nan")
    mu, sd = hist.mean(), hist.std() or 1.0
    fits = T.fit_rows(T._rows(((hist - mu) / sd)[None, :], np.array([len(hist)])))
    best = min(fits.values(), key=lambda f: float(f.mse[0]))
    return fc.point[0], fc.detail[0], float(best.mse[0]) * (len(hist) - 1) * sd * sd


def their_fit(hist: np.ndarray, h: int) -> tuple[np.ndarray, str, float]:
    from statsforecast.models import AutoTheta
    model = AutoTheta(season_length=M).fit(hist)
    fit = model.model_
    par = fit["par"]
    seasonal = bool(fit.get("decompose", False))
    sse = float("nan") if seasonal else float(np.nansum(fit["residuals"][1:] ** 2))
    detail = f"{fit['modeltype']} alpha={par['alpha']:.3g} theta={par['theta']:.3g}" + (" seasonal" if seasonal else "")
    return model.predict(h)["mean"], detail, sse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", default="philly_daily,openb_daily,openb_T4_daily")
    ap.add_argument("--h", default="28,7")
    args = ap.parse_args(argv)
    every = A.all_series(None)
    for h in (int(v) for v in args.h.split(",")):
        for name in args.series.split(","):
            y = every[name][1]
            for o in A.folds(len(y), M, h):
                ts = (np.datetime64("2000-01-01") + F.STEP["day"] * np.arange(o)).astype("datetime64[us]")
                scale, actual = F.mase_scale(y[:o], M), y[o:o + h]
                for label, hist in (("raw", y[:o]), ("prepared", F.prepare(ts, y[:o], "day", h=h).y)):
                    if len(hist) < 4 or not np.any(hist):
                        print(f"h={h} {name} o={o} {label} n={len(hist)}: too short or all zero for AutoTheta")
                        continue
                    (p1, d1, s1), (p2, d2, s2) = our_fit(hist, h), their_fit(hist, h)
                    print(f"h={h} {name} o={o} {label} n={len(hist)}: ours {np.mean(np.abs(actual - p1)) / scale:.3f} "
                          f"[{d1}, SSE {s1:.4g}]  AutoTheta {np.mean(np.abs(actual - p2)) / scale:.3f} [{d2}, SSE {s2:.4g}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
