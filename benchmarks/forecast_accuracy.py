"""Forecast accuracy on real cluster series: our models against statsforecast's, on the same rolling-origin folds.

Series (read straight from ../shared/traces, no warehouse needed):
- philly_hourly / philly_daily: Philly's per-minute active-node count (HeliosArtifact), mean per hour / day.
- openb_hourly / openb_daily: Alibaba openb (2023) pods, mean GPUs requested per hour / day (num_gpu x
  gpu_milli/1000 over creation..deletion: requested, whether or not scheduled, so it is demand).
- openb_T4_hourly / openb_T4_daily: the same for pods constrained to T4 GPUs (gpuspec33 list; the other types
  are near zero).
- dlrm_hourly / dlrm_daily: Alibaba DLRM (2025) GPU instances (HN role), mean GPUs requested per hour / day
  (its 30 days leave no daily fold at h = 7 with 28 days of training: skipped, and said so).
- with --demo-db FILE: the demo warehouse's daily demanded GPU-hours per pool (models/demand.py; synthetic).
Not used: the other openb pod lists (workloads derived from the default one for the paper's experiments), the
GenAI telemetry (one day), MIT SuperCloud's sample (a third party's subset of the job table, stitched: 17 of its
76 days have no job at all and from 2021-03-03 it holds only GPU jobs, so its GPU demand jumps from 1 to 108 GPUs
overnight by selection, not by use; not a demand series), Acme's summary and the PAI/spot node lists (no time
series). Only complete periods are used (a trace's partial last day is dropped).

Folds: origins step back from n - h by min(h, m) (at most 8), each with at least max(3m, 28) periods of
training data. Horizons: hourly 24, daily 7 and 28 (issue #17). MASE's scale is the in-sample seasonal naive
MAE of each fold's training data (M4). Every method is given exactly the same training data per fold.

Methods: ours = what `gpuledger forecast` does (the history prepared by `forecast.prepare`: leading zeros
dropped, cut at a level shift with enough data after it; every candidate backtested; the combination of the
singles not clearly worse than the best, or the best single when selecting it clearly beats that combination
out of sample: `forecast.choose`), and each of our
candidates forced (SeasonalNaive, ETS, Theta, ARIMA, MSTL, Combination) on the same prepared history, all with
backtest-calibrated intervals (where a candidate cannot be fitted on a fold's history, the fallback the CLI
would use is scored in its place, so every method covers the same folds); statsforecast's AutoARIMA, AutoETS,
AutoTheta, MSTL (seasons 24 and 168 hourly, 7 daily; its default AutoETS trend) and SeasonalNaive with their
own intervals on the raw training data of the same folds (season length m = 7 daily, 24 hourly).

One table per frequency (hourly; daily), each with every method's MASE per series and horizon, then every
method's mean MASE, sMAPE and 80/95 % coverage over the frequency's cells.

--table: "ours" is forecast as `gpuledger forecast` forecasts a table: at each fold origin every series of one
trace and frequency (openb and openb_T4, same days) is cut there and forecast together by `forecast_table`, so a
short series is calibrated on the longer ones (cross-series and pooled rules); Philly and DLRM are tables of one.
The forced candidates and statsforecast's methods are per series as without it (statsforecast is univariate).

Run: .venv/bin/python benchmarks/forecast_accuracy.py [--quick] [--series A,B] [--table] [--raw FILE.csv] [--markdown FILE]
(statsforecast is in the `bench` extra: `uv pip install -e '.[bench]'`). statsforecast's AutoARIMA takes most of
the time (about 25 minutes for each 3,584-hour openb series, ours 4 s): `--ours-only --raw ours.csv` scores ours
alone, `--theirs-from RAW.csv` reuses statsforecast's rows of an earlier run on the same folds, and
`--from-raw A.csv,B.csv` prints the tables of saved rows. Heavy: hold the shared lock,
`flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/forecast_accuracy.py`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TRACES = Path(os.environ.get("GPULEDGER_SHARED", ROOT.parent / "shared")) / "traces"

from models.forecasting import forecast as F  # noqa: E402

OURS = ("ours", *F.CANDIDATES)
THEIRS = ("AutoARIMA", "AutoETS", "AutoTheta", "sf.MSTL", "sf.SeasonalNaive")
PREPARED = tuple(f"{name}@prepared" for name in THEIRS)
HORIZONS = {"day": (7, 28), "hour": (24,)}


# ----------------------------------------------------------------------------- series from the traces

def _complete(t_start: float, t_end: float, bucket: float) -> int:
    return int((t_end - t_start) // bucket)


def interval_load(start: np.ndarray, end: np.ndarray, weight: np.ndarray, t_end: float, bucket: float) -> np.ndarray:
    """Mean of Σ weight·1[start ≤ t < end] over each complete bucket [k·bucket, (k+1)·bucket), k from 0."""
    nb = _complete(0.0, t_end, bucket)
    out = np.zeros(nb)
    for k in range(nb):   # few hundred buckets: a clear loop beats a clever one here
        a, b = k * bucket, (k + 1) * bucket
        out[k] = float(np.sum(weight * np.clip(np.minimum(end, b) - np.maximum(start, a), 0, None))) / bucket
    return out


def philly(freq: str) -> np.ndarray:
    d = pl.read_csv(TRACES / "philly" / "philly_node_sequence_minutely.csv.gz")
    d = d.with_columns(pl.col("time").str.to_datetime("%Y-%m-%d %H:%M:%S"))
    g = (d.group_by(pl.col("time").dt.truncate("1h" if freq == "hour" else "1d"))
          .agg(pl.col("active").mean(), pl.len().alias("n")).sort("time"))
    full = 60 if freq == "hour" else 1440
    return g.filter(pl.col("n") == full).get_column("active").to_numpy().astype(float)


def openb(freq: str, spec: str | None = None) -> np.ndarray:
    name = "openb_pod_list_gpuspec33.csv" if spec else "openb_pod_list_default.csv"
    d = pl.read_csv(TRACES / "alibaba-gpu-v2023-openb" / name)
    if spec:
        d = d.filter(pl.col("gpu_spec") == spec)
    d = d.filter(pl.col("num_gpu") > 0)
    g = (d["num_gpu"] * d["gpu_milli"].fill_null(1000) / 1000).to_numpy()
    t_end = float(pl.read_csv(TRACES / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv")["deletion_time"].max())
    return interval_load(d["creation_time"].to_numpy().astype(float), d["deletion_time"].to_numpy().astype(float),
                         g, t_end, 3600.0 if freq == "hour" else 86400.0)


def dlrm(freq: str) -> np.ndarray:
    cols = {c: pl.Float64 for c in ("creation_time", "scheduled_time", "deletion_time")}
    d = pl.read_csv(TRACES / "alibaba-gpu-v2025-dlrm" / "disaggregated_DLRM_trace.csv", schema_overrides=cols)
    t_end = float(d.select(pl.max_horizontal(pl.col(list(cols)).max())).item())
    d = d.filter(pl.col("gpu_request") > 0)
    start = d["creation_time"].fill_null(0.0).to_numpy()          # NaN: existed before the trace began
    end = d["deletion_time"].fill_null(t_end).to_numpy()           # NaN: still there when it ended
    return interval_load(start, end, d["gpu_request"].to_numpy().astype(float), t_end,
                         3600.0 if freq == "hour" else 86400.0)


def demo_series(db: str) -> dict[str, tuple[str, np.ndarray]]:
    from ingest import warehouse
    from models.metrics import demand
    con = warehouse.connect(db, read_only=True)
    s = demand.series(con, "demanded", "day", ["pool"])
    out = {}
    for k, part in s.partition_by(["pool"], as_dict=True, maintain_order=True).items():
        y = part["value"].to_numpy().astype(float)
        if not np.any(y):                    # e.g. the 'unknown' pool: nothing to forecast, MASE undefined
            print(f"demo pool {k[0]}: all zero, not scored", file=sys.stderr)
            continue
        out[f"demo_{k[0]}_daily"] = ("day", y)
    return out


def all_series(demo_db: str | None) -> dict[str, tuple[str, np.ndarray]]:
    out = {"philly_hourly": ("hour", philly("hour")), "openb_hourly": ("hour", openb("hour")),
           "openb_T4_hourly": ("hour", openb("hour", "T4")), "dlrm_hourly": ("hour", dlrm("hour")),
           "philly_daily": ("day", philly("day")), "openb_daily": ("day", openb("day")),
           "openb_T4_daily": ("day", openb("day", "T4")), "dlrm_daily": ("day", dlrm("day"))}
    if demo_db:
        out.update(demo_series(demo_db))
    return out


# ----------------------------------------------------------------------------- folds and scoring

def folds(n: int, m: int, h: int) -> list[int]:
    min_train = max(3 * m, 28)
    step = max(1, min(h, m))
    k = 8
    return sorted(o for o in (n - h - i * step for i in range(k)) if o >= min_train)


def score(y: np.ndarray, o: int, h: int, m: int, point, lo80, hi80, lo95, hi95) -> dict:
    actual = y[o:o + h]
    scale = F.mase_scale(y[:o], m)
    return {"mase": float(np.mean(np.abs(actual - point)) / scale),
            "smape": float(np.mean(F.smape(actual, point))),
            "cov80": float(np.mean((actual >= lo80) & (actual <= hi80))),
            "cov95": float(np.mean((actual >= lo95) & (actual <= hi95))),
            # the widest 95 % band over the largest value of the training data: a band counted as covering
            # because it is absurdly wide (run 9 found 1e11) shows here
            "wide95": float(np.max(np.asarray(hi95) - np.asarray(lo95)) / max(float(np.max(np.abs(y[:o]))), 1e-9))}


def run_ours(y: np.ndarray, freq: str, h: int, origins: list[int]) -> list[dict]:
    """Our methods on each fold's training data, prepared as `gpuledger forecast` prepares a history (leading
    zeros dropped, cut at a level shift with enough data after it); scored on the fold's raw actuals."""
    m = F.SEASON[freq]
    rows = []
    for o in origins:
        t0 = time.perf_counter()
        ts = (np.datetime64("2000-01-01") + F.STEP[freq] * np.arange(o)).astype("datetime64[us]")
        yo = F.prepare(ts, y[:o], freq, h=h).y
        periods = F.SEASONS[freq]
        bt = F.backtest(yo, m, h, periods=periods)    # the same internal backtest serves every forced candidate
        for name in OURS:
            # a forced candidate that cannot be fitted on this history falls back as the CLI would (e.g. Zero for
            # an all-zero history); it is scored all the same, so every method covers the same folds
            r = F.forecast_values(yo, m, h, force=None if name == "ours" else name, bt=bt, periods=periods)
            rows.append({"method": name, "origin": o, "chosen": r.model, "secs": time.perf_counter() - t0,
                         **score(y, o, h, m, r.point, r.lo[80], r.hi[80], r.lo[95], r.hi[95])})
    return rows


def trace_of(name: str) -> str:
    """The trace a series comes from (openb_daily and openb_T4_daily: openb): its table in --table mode."""
    return name.split("_")[0]


def run_table(group: dict[str, np.ndarray], freq: str, h: int, origins: list[int]) -> dict[tuple[str, int], dict]:
    """Ours as `gpuledger forecast` runs a table: at each origin every series of one trace and frequency (same
    length, same time axis) cut there and forecast together by `forecast_table` (pooled and cross-series
    calibration of the short ones included); scored on each series' raw actuals. (name, origin) -> scores."""
    m = F.SEASON[freq]
    out = {}
    for o in origins:
        ts = (np.datetime64("2000-01-01") + F.STEP[freq] * np.arange(o)).astype("datetime64[us]")
        df = pl.DataFrame({"series": [k for k in group for _ in range(o)], "ts": np.tile(ts, len(group)),
                           "value": np.concatenate([y[:o] for y in group.values()])})
        fc, summary = F.forecast_table(df, ["series"], freq, h)
        chosen = dict(zip(summary["series"], summary["model"]))
        for name, y in group.items():
            f = fc.filter(pl.col("series") == name) if fc.height else fc
            cols = ("forecast", "lo80", "hi80", "lo95", "hi95")
            # a series with no demand has no forecast rows (not forecast): its forecast is 0 with no width
            vals = [f[c].to_numpy() for c in cols] if f.height else [np.zeros(h)] * 5
            out[(name, o)] = {"chosen": chosen[name], **score(y, o, h, m, *vals)}
    return out


def run_theirs(y: np.ndarray, freq: str, h: int, origins: list[int], prepared: bool = False) -> list[dict]:
    """statsforecast's methods on each fold's raw training data, or with ``prepared`` on the history ours fits
    (`forecast.prepare`: leading zeros dropped, outliers replaced, cut at a level shift), named NAME@prepared:
    the gap between the two is what our preparation does, the gap to ours at equal input what our models do.
    A history too short for a model (a pool three days old) is forecast by the naive method, as ours carries
    the last value forward."""
    from statsforecast import StatsForecast
    from statsforecast.models import MSTL, AutoARIMA, AutoETS, AutoTheta, Naive, SeasonalNaive
    m = F.SEASON[freq]
    hist = {o: y[:o] for o in origins}
    if prepared:
        step = F.STEP[freq]
        hist = {o: F.prepare((np.datetime64("2000-01-01") + step * np.arange(o)).astype("datetime64[us]"), y[:o],
                             freq, h=h).y for o in origins}
    seasons = [p for p in F.SEASONS[freq] if 2 * p <= min(len(v) for v in hist.values())]
    models = [AutoARIMA(season_length=m), AutoETS(season_length=m), AutoTheta(season_length=m),
              MSTL(season_length=seasons or [m], alias="sf.MSTL"),
              SeasonalNaive(season_length=m, alias="sf.SeasonalNaive")]
    frames = [pl.DataFrame({"unique_id": str(o), "ds": np.arange(len(v)), "y": v.astype(float)})
              for o, v in hist.items()]
    sf = StatsForecast(models=models, freq=1, n_jobs=1, fallback_model=Naive() if prepared else None)
    t0 = time.perf_counter()
    fc = pl.from_pandas(sf.forecast(df=pl.concat(frames).to_pandas(), h=h, level=[80, 95]).reset_index(drop=True))
    secs = (time.perf_counter() - t0) / max(len(origins), 1)
    rows = []
    for o in origins:
        f = fc.filter(pl.col("unique_id") == str(o)).sort("ds")
        for name in THEIRS:
            cols = [name, f"{name}-lo-80", f"{name}-hi-80", f"{name}-lo-95", f"{name}-hi-95"]
            point, lo80, hi80, lo95, hi95 = (f[c].to_numpy() for c in cols)
            rows.append({"method": name + ("@prepared" if prepared else ""), "origin": o, "chosen": name,
                         "secs": secs / len(THEIRS),
                         **score(y, o, h, m, point, lo80, hi80, lo95, hi95)})
    return rows


# ----------------------------------------------------------------------------- report

def evaluate(series: dict, folds_max: int | None, raw: str | None = None,
             theirs: pl.DataFrame | None = None, ours_only: bool = False, table: bool = False,
             prepared: bool = False) -> pl.DataFrame:
    """Every method on every fold; with ``raw`` the rows so far are rewritten to that CSV after each cell.
    ``theirs``: statsforecast's rows of an earlier --raw run, reused for the folds they cover (their models do
    not change between runs of ours; only ours are refitted). ``table``: "ours" is forecast per trace as a
    table (`run_table`), the forced candidates and statsforecast's per series as before. ``prepared``: also
    statsforecast's methods on ours' prepared histories (`run_theirs`)."""
    rows = []
    tabled: dict[tuple[str, int, int], dict] = {}
    for name, (freq, y) in series.items():
        m = F.SEASON[freq]
        for h in HORIZONS[freq]:
            origins = folds(len(y), m, h)
            if folds_max:
                origins = origins[-folds_max:]
            if len(origins) < 2:
                print(f"  {name} h={h}: {len(y)} periods leave fewer than 2 folds; skipped", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            old = None if theirs is None else theirs.filter((pl.col("series") == name) & (pl.col("h") == h)
                                                             & pl.col("origin").is_in(origins))
            if table and (name, h, origins[0]) not in tabled:
                group = {k: v for k, (fq, v) in series.items() if fq == freq and trace_of(k) == trace_of(name)
                         and len(v) == len(y)}
                tabled.update({(k, h, o): r for (k, o), r in run_table(group, freq, h, origins).items()})
            if ours_only:
                got = run_ours(y, freq, h, origins)
            elif old is not None and old.select("origin").n_unique() == len(origins):
                kept = [r for r in old.iter_rows(named=True)]
                got = run_ours(y, freq, h, origins) + [{k: r[k] for k in r if k not in ("series", "freq", "n", "h",
                                                                                         "folds")} for r in kept]
            else:
                got = run_ours(y, freq, h, origins) + run_theirs(y, freq, h, origins)
            if prepared and not ours_only:
                got += run_theirs(y, freq, h, origins, prepared=True)
            if table:
                got = [{**r, **tabled[(name, h, r["origin"])]} if r["method"] == "ours" else r for r in got]
            rows += [{"series": name, "freq": freq, "n": len(y), "h": h, "folds": len(origins), **r} for r in got]
            if raw:
                pl.DataFrame(rows).write_csv(raw)
            print(f"  {name} h={h}: {len(origins)} folds in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return pl.DataFrame(rows)


def tables(res: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(MASE per series and horizon, per method: mean MASE, sMAPE, coverage; models chosen) of one frequency."""
    cell = (res.group_by("series", "h", "method")
               .agg(pl.col("mase", "smape", "cov80", "cov95").mean(), pl.col("folds").first()))
    wide = (cell.pivot(on="method", index=["series", "h", "folds"], values="mase")
                .select("series", "h", "folds", *[c for c in (*OURS, *THEIRS, *PREPARED) if c in cell["method"].unique()])
                .sort("h", "series"))
    # the means compare like with like: only the cells every method has (a statsforecast cell may be missing)
    every = cell.group_by("series", "h").agg(pl.len().alias("k")).filter(pl.col("k") == cell["method"].n_unique())
    overall = (cell.join(every.select("series", "h"), on=["series", "h"]).group_by("method").agg(
        pl.col("mase").mean().alias("mean_MASE"), pl.col("smape").mean().alias("mean_sMAPE"),
        pl.col("cov80").mean().alias("coverage80"), pl.col("cov95").mean().alias("coverage95"),
        pl.len().alias("cells")).sort("mean_MASE"))
    if "wide95" in res.columns:        # the widest band of any fold: a coverage bought by an absurd band shows
        widest = res.group_by("method").agg(pl.col("wide95").max().alias("max_wide95"))
        overall = overall.join(widest, on="method", how="left")
    chosen = res.filter(pl.col("method") == "ours").group_by("chosen").agg(pl.len().alias("folds")).sort("chosen")
    return wide, overall, chosen


def markdown(df: pl.DataFrame) -> str:
    def cell(v):
        return "" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 folds per cell (a smoke run)")
    ap.add_argument("--folds", type=int, help="at most this many (the most recent) folds per cell")
    ap.add_argument("--demo-db", help="also score the demo warehouse's per-pool daily demand")
    ap.add_argument("--series", help="comma list: only these series")
    ap.add_argument("--markdown", help="write the tables as Markdown to this file")
    ap.add_argument("--raw", help="write every fold's scores to this CSV as the run goes")
    ap.add_argument("--from-raw", help="only print the tables of a --raw CSV written before")
    ap.add_argument("--theirs-from", help="reuse statsforecast's rows of an earlier --raw CSV (same folds)")
    ap.add_argument("--table", action="store_true",
                    help="forecast ours per trace as a table (openb and openb_T4 together), as the CLI runs a table")
    ap.add_argument("--ours-only", action="store_true",
                    help="score ours only (with --raw; combine with statsforecast's rows by --from-raw A.csv,B.csv)")
    ap.add_argument("--theirs-prepared", action="store_true",
                    help="also run statsforecast's methods on the histories ours fits (forecast.prepare), as NAME@prepared")
    args = ap.parse_args(argv)
    if args.from_raw:
        return report(pl.concat([pl.read_csv(f) for f in args.from_raw.split(",")], how="diagonal_relaxed"),
                      args.markdown, 0.0)
    series = all_series(args.demo_db)
    if args.series:
        series = {k: v for k, v in series.items() if k in args.series.split(",")}
    for k, (freq, y) in series.items():
        print(f"{k}: {len(y)} {freq} periods, mean {y.mean():.1f}", file=sys.stderr)
    t0 = time.perf_counter()
    theirs = None
    if args.theirs_from:
        theirs = pl.read_csv(args.theirs_from).filter(pl.col("method").is_in(THEIRS))
    return report(evaluate(series, 3 if args.quick else args.folds, args.raw, theirs, args.ours_only, args.table,
                           args.theirs_prepared), args.markdown, t0)


def report(res: pl.DataFrame, md: str | None, t0: float) -> int:
    out = []
    for freq, label in (("hour", "Hourly (h = 24)"), ("day", "Daily (h = 7 and 28)")):
        part = res.filter(pl.col("freq") == freq)
        if part.is_empty():
            continue
        wide, overall, chosen = tables(part)
        with pl.Config(tbl_rows=200, tbl_cols=30, float_precision=3, tbl_width_chars=250):
            print(f"\n=== {label}: MASE per series and horizon (mean over folds; lower is better)")
            print(wide)
            print(f"\n=== {label}: every method's mean MASE, sMAPE and interval coverage (nominal 0.80 / 0.95)")
            print(overall)
            print(f"\n=== {label}: candidate our backtest chose, over all folds")
            print(chosen)
        out += [f"### {label}", markdown(wide), markdown(overall), markdown(chosen)]
    if t0:
        print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if md:
        Path(md).write_text("\n\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
