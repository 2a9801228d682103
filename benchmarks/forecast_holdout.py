"""Synthetic hold-out for forecast rules: the last h periods of generated series held out, scored like the CLI.

The accuracy benchmark's real series are few and short, so a rule chosen on them alone would be tuned to
them. Every change to selection, combination or intervals is also measured here, on series nobody looked at:
`forecast_speed.synthetic` (level, weekly and daily cycles, trend, random walk, level shifts, late starters)
with seeds not used elsewhere, each series' last h periods held out (one fold per series), forecast through
`forecast_table` as `gpuledger forecast` runs it (pooled calibration included). Prints mean MASE (scaled by
the training part's seasonal naive MAE) and 80/95 % coverage per case, overall and over the last quarter of
the horizon's steps (a band calibrated on all steps alike can cover the near steps and miss the far ones).

Run: .venv/bin/python benchmarks/forecast_holdout.py [--cases NAME,...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.forecast_speed import synthetic  # noqa: E402
from models.forecasting import forecast as F  # noqa: E402

#: name -> (series, days, horizon, seed, freq); the daily cases of docs/FORECAST.md run 6, hourly seeds 11, 12
CASES = {"d120h28s41": (100, 120, 28, 41, "day"), "d365h28s42": (100, 365, 28, 42, "day"),
         "d90h7s43": (100, 90, 7, 43, "day"), "h90h24s11": (50, 90, 24, 11, "hour"),
         "h90h24s12": (50, 90, 24, 12, "hour"),
         # 32 days of training at h = 28: too short to backtest at 28, every series on its fallback (run 8)
         "d60h28s44": (100, 60, 28, 44, "day"), "d75h28s45": (100, 75, 28, 45, "day"),
         # tables of long series and new ones (run 9): every third series has only 20-45 (h = 28) or 8-27 (h = 7)
         # days of training, too few to backtest at h, beside series that have the whole span (run 6's design)
         "d200h28s46late": (60, 200, 28, 46, "day", (20, 45)), "d120h7s47late": (60, 120, 7, 47, "day", (8, 27)),
         # hourly new series (run 20, bagging): 50-300 hours of training, too few to backtest at 24 (336 needed)
         "h60h24s48late": (30, 60, 24, 48, "hour", (50, 300))}


def late_starters(df: pl.DataFrame, h: int, late: tuple[int, int], seed: int) -> tuple[pl.DataFrame, set]:
    """Every third series zeroed but for its last L periods of training (L uniform in ``late``) and the h held out:
    a pool or team that started recently, in a table with long series. Returns the table and those series."""
    rng = np.random.default_rng(seed)
    keys = df.select("team", "pool").unique(maintain_order=True).rows()
    new = {k: int(rng.integers(late[0], late[1] + 1)) for i, k in enumerate(keys) if i % 3 == 2}
    first = pl.DataFrame({"team": [k[0] for k in new], "pool": [k[1] for k in new],
                          "keep": list(new.values())}, schema_overrides={"keep": pl.Int64})
    df = df.join(first, on=["team", "pool"], how="left").with_columns(
        pl.when(pl.col("keep").is_not_null() & (pl.col("i") < pl.col("n") - h - pl.col("keep")))
          .then(0.0).otherwise(pl.col("value")).alias("value")).drop("keep")
    return df, set(new)


def holdout(n_series: int, days: int, h: int, seed: int, freq: str, late: tuple[int, int] | None = None) -> dict:
    df = synthetic(n_series, days, seed, freq).sort("team", "pool", "ts")
    df = df.with_columns(pl.int_range(pl.len()).over("team", "pool").alias("i"),
                         pl.len().over("team", "pool").alias("n"))
    df, new = late_starters(df, h, late, seed) if late else (df, set())
    train = df.filter(pl.col("i") < pl.col("n") - h).drop("i", "n")
    test = df.filter(pl.col("i") >= pl.col("n") - h).drop("i", "n")
    fc, _ = F.forecast_table(train, ["team", "pool"], freq, h)
    m = F.SEASON[freq]
    mase, c80, c95, tail, is_new = [], [], [], [], []
    q = max(1, h // 4)             # the last quarter of the steps: where a band too narrow for its step shows
    for (team, pool), part in test.partition_by("team", "pool", as_dict=True, maintain_order=True).items():
        f = fc.filter((pl.col("team") == team) & (pl.col("pool") == pool))
        if f.is_empty():
            continue
        y = part["value"].to_numpy()
        hist = train.filter((pl.col("team") == team) & (pl.col("pool") == pool))["value"].to_numpy()
        hist = hist[np.flatnonzero(hist)[0]:] if np.any(hist) else hist
        mase.append(float(np.mean(np.abs(y - f["forecast"].to_numpy())) / F.mase_scale(hist, m)))
        c80.append(float(np.mean((y >= f["lo80"].to_numpy()) & (y <= f["hi80"].to_numpy()))))
        c95.append(float(np.mean((y >= f["lo95"].to_numpy()) & (y <= f["hi95"].to_numpy()))))
        is_new.append((team, pool) in new)
        tail.append([float(np.mean((y[-q:] >= f[f"lo{lv}"].to_numpy()[-q:]) & (y[-q:] <= f[f"hi{lv}"].to_numpy()[-q:])))
                     for lv in (80, 95)])
    sel = np.array(is_new, bool)
    return {"series": len(mase), "mase": float(np.mean(mase)), "cov80": float(np.mean(c80)),
            "cov95": float(np.mean(c95)), "late80": float(np.mean([x[0] for x in tail])),
            "late95": float(np.mean([x[1] for x in tail])), "new": int(sel.sum()),
            "new_mase": float(np.mean(np.array(mase)[sel])) if sel.any() else float("nan"),
            "new80": float(np.mean(np.array(c80)[sel])) if sel.any() else float("nan"),
            "new95": float(np.mean(np.array(c95)[sel])) if sel.any() else float("nan")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    for name in args.cases.split(","):
        t0 = time.perf_counter()
        r = holdout(*CASES[name])
        print(f"{name}: {r['series']} series, mean MASE {r['mase']:.4f}, coverage {100 * r['cov80']:.1f} / "
              f"{100 * r['cov95']:.1f} %, last quarter of the steps {100 * r['late80']:.1f} / {100 * r['late95']:.1f} %"
              + (f"; the {r['new']} new series: MASE {r['new_mase']:.4f}, coverage {100 * r['new80']:.1f} / "
                 f"{100 * r['new95']:.1f} %" if r["new"] else "") + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
