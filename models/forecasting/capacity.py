"""Capacity answers from demand forecasts: when does a pool run out, and how many GPUs does it need?

Demand is compared in GPUs: a GPU-hour series is divided by the bucket's hours (mean GPUs busy, the offered
load), and smoothed by a trailing window (default one week of daily buckets) because planners buy for sustained
demand, not for one busy day. The window starts with the last actual values so the first forecast days are
averaged like the rest. Averaging the daily upper bounds gives an upper bound for the window's mean (errors of
one forecast path are positively correlated), so the upper-band answers are conservative.

A pool is exhausted on the first forecast day where smoothed demand exceeds capacity × target utilisation
(default 85 %). GPUs needed for a band at a horizon = ⌈smoothed demand / target⌉; the shortfall is what is
needed beyond installed capacity.
"""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import duckdb
import polars as pl

from models.definitions.labels import ANY_POOL, described
from models.metrics import demand, timeline
from models.forecasting import forecast

BANDS = {"median": "forecast", "80": "hi80", "95": "hi95"}


def pool_capacity(con: duckdb.DuckDBPyConnection, by_cluster: bool = False) -> pl.DataFrame:
    """Installed GPUs per pool at the data horizon: ((cluster,) pool, capacity_gpus, available_gpus), in GPUs.

    An instant's capacity is the GPUs of the nodes in force at that instant (the timeline's node state, built
    from the ``nodes`` inventory with validity), not the GPU-hours of the bucket around it: a horizon at 10:40
    must not read 40/60 of the last hour's GPU-hours as GPUs. The state "at the horizon" is the piece that
    covers the instant just before it (t0 < horizon <= t1); pieces end at their cluster's horizon. available =
    GPUs on nodes that are up (not down, drained or in maintenance)."""
    hz = timeline.horizon(con)
    empty = pl.DataFrame(schema={**({"cluster": pl.String} if by_cluster else {}), "pool": pl.String,
                                 "capacity_gpus": pl.Float64, "available_gpus": pl.Float64})
    if hz is None:
        return empty
    keys = "cluster, gpu_type" if by_cluster else "gpu_type"
    out = timeline.frame(con, f"""
        SELECT {keys.replace('gpu_type', 'gpu_type AS pool')}, sum(gpus)::DOUBLE AS capacity_gpus,
               sum(CASE WHEN avail = 'up' THEN gpus ELSE 0 END)::DOUBLE AS available_gpus
        FROM tl_node_state
        WHERE t0 < $hz AND t1 >= $hz AND gpu_type IS NOT NULL AND gpus > 0 AND avail <> 'absent'
        GROUP BY {keys} HAVING sum(gpus) > 0 ORDER BY {keys}""", {"hz": hz})
    return out if out.height else empty


def parse_capacity(items: list[str], bare: bool = False) -> dict[str, float]:
    """['a100=512', 'h100=256'] → {'a100': 512.0, ...} (--capacity overrides). With ``bare``, a plain GPUS
    ('500') is allowed too and applies to every series (key '*')."""
    out = {}
    for item in items:
        pool, sep, n = item.partition("=")
        try:
            if bare and not sep:
                out["*"] = float(item)
                continue
            if not sep or not pool.strip():
                raise ValueError
            out[pool.strip()] = float(n)
        except ValueError:
            raise ValueError(f"--capacity {item!r}: expected POOL=GPUS, e.g. a100=512"
                             + (", or GPUS" if bare else "")) from None
    return out


def smoothed(history: pl.DataFrame, forecast: pl.DataFrame, keys: list[str], window: int,
             per_hour: float) -> pl.DataFrame:
    """Forecast rows with forecast/hi80/hi95 in GPUs, as trailing means over ``window`` periods that start
    with the last actual values. ``per_hour``: hours per bucket for GPU-hour series, 1 for GPU series."""
    cols = list(BANDS.values())
    tail = (history.sort([*keys, "ts"]).group_by(keys, maintain_order=True).tail(max(window - 1, 0))
            .with_columns(*(pl.col("value").alias(c) for c in cols)).select([*keys, "ts", *cols]))
    fut = forecast.select([*keys, "ts", *cols]).with_columns(pl.lit(True).alias("future"))
    both = pl.concat([tail.with_columns(pl.lit(False).alias("future")), fut], how="vertical_relaxed").sort([*keys, "ts"])
    roll = [(pl.col(c).rolling_mean(window, min_samples=1) / per_hour) for c in cols]
    if keys:
        roll = [r.over(keys) for r in roll]
    return both.with_columns(roll).filter(pl.col("future")).drop("future")


#: A band above K_CEILING x installed GPUs (or above the most GPUs ever running + pending, if higher) is beyond
#: what the pool's demand can physically be: flagged in a note and drawn capped (issue #17).
K_CEILING = 2.0

#: Periods averaged before demand is compared with capacity, per frequency (`--window` overrides): the shortest
#: cycle inside the data, so that neither a night nor a weekend decides (24 hours, 7 days). A week or a month is an
#: average already, and its yearly cycle's peak is what capacity must meet: averaging 52 weeks or 12 months first
#: put a pool growing past its target in April at "exhausted in September".
SMOOTHING = {"hour": 24, "day": 7, "week": 1, "month": 1}


def exhaustion(history: pl.DataFrame, forecast: pl.DataFrame, capacity: dict, keys: list[str],
               target_util: float = 0.85, band: str = "80", window: int = 7, per_hour: float = 24.0,
               horizons: tuple[int, ...] = (30, 90, 180, 365), peaks: dict | None = None,
               ceiling_k: float | None = None) -> pl.DataFrame:
    """Per pool (keys end with 'pool'): capacity, target, exhaustion dates for the median and the upper 80 %
    band, GPUs needed / shortfall at each horizon (in periods) for ``band``, and the physical ceiling (GPUs)
    with the first period whose 95 % band exceeds it. ``capacity`` maps a key tuple (or a pool name) to
    installed GPUs; ``peaks`` maps the same keys to the most GPUs ever running + pending at once;
    ``ceiling_k`` installed GPUs' multiple that bounds the series (default K_CEILING for demand; 1 for served
    GPU-hours, which allocation cannot take past what is installed)."""
    if band not in BANDS:
        raise ValueError(f"--band: {band!r} is not one of {', '.join(BANDS)}")
    if not 0 < target_util <= 1:
        raise ValueError(f"--target-util {target_util}: must be in (0, 1]")
    k = K_CEILING if ceiling_k is None else ceiling_k
    recent = history.sort([*keys, "ts"]).group_by(keys, maintain_order=True).agg(
        (pl.col("value").tail(window).mean() / per_hour).alias("recent"))
    recent = {tuple(r[:-1]): r[-1] for r in recent.iter_rows()}
    seen = {tuple(r[:-1]): r[-1] for r in history.group_by(keys, maintain_order=True).agg(
        (pl.col("value").max() / per_hour).alias("seen")).iter_rows()}
    ceilings = {kv: physical_ceiling(_lookup(capacity, kv), _lookup(peaks or {}, kv), top, k)
                for kv, top in seen.items()}
    # the answers read the bands as they are drawn: capped at the ceiling (`cap_bands`)
    sm = smoothed(history, _capped(forecast, keys, ceilings, per_hour), keys, window, per_hour)
    parts = sm.partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): sm}
    raw = forecast.partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): forecast}
    rows = []
    for kv, part in parts.items():
        cap = _lookup(capacity, kv)
        row = _pool_row(dict(zip(keys, kv)), part.sort("ts"), cap, recent.get(tuple(kv)), target_util, band,
                        horizons)
        rows.append(_ceiling(row, raw[kv].sort("ts"), ceilings.get(tuple(kv)),
                             _ceiling_why(cap, _lookup(peaks or {}, kv), seen.get(tuple(kv)), k), per_hour))
    return pl.DataFrame(rows, infer_schema_length=None)


def _lookup(table: dict, kv: tuple):
    return table.get(tuple(kv), table.get(kv[-1] if kv else None, table.get("*")))


def physical_ceiling(cap: float | None, peak: float | None, seen: float | None = None,
                     k: float = K_CEILING) -> float | None:
    """GPUs a pool's demand cannot physically exceed: k x installed (K_CEILING for demand, 1 for served
    GPU-hours), or the most GPUs ever running + pending at once, or the largest value the history itself shows
    (in GPUs), whichever is highest: what happened was possible (a capacity given below today's demand once made
    the ceiling, and the capped band, fall under the forecast itself); None when none is known."""
    known = [v for v in (None if cap is None else k * cap, peak, seen) if v is not None and v > 0]
    return max(known) if known else None


def _ceiling_why(cap, peak, seen, k: float) -> str:
    installed = f"{cap or 0:,.0f} installed" if k == 1 else f"{k:g} x {cap or 0:,.0f} installed"
    options = [(k * cap if cap else 0, installed),
               (peak or 0, "the most GPUs ever running + pending at once"),
               (seen or 0, "the largest value of the history")]
    return max(options, key=lambda o: o[0])[1]


def _ceiling(row: dict, fc: pl.DataFrame, ceil: float | None, why: str, per_hour: float) -> dict:
    """Add ceiling_gpus and above_ceiling_from (first period whose 95 % upper bound, in GPUs, exceeds it)."""
    row["ceiling_gpus"] = ceil
    row["above_ceiling_from"] = None if ceil is None else _first_over(
        fc.with_columns(pl.col("hi95") / per_hour), "hi95", ceil)
    if row["above_ceiling_from"] is not None:
        row["note"] = "; ".join(x for x in (row["note"], (
            f"95 % band above the physically possible demand ({ceil:,.0f} GPUs = {why}) from "
            f"{row['above_ceiling_from']:%Y-%m-%d %H:%M}: drawn capped at it")) if x)
    return row


def cap_bands(forecast: pl.DataFrame, answers: pl.DataFrame | None, keys: list[str],
              per_hour: float) -> pl.DataFrame:
    """The forecast rows with upper bounds capped at each pool's physical ceiling (``exhaustion``'s
    ceiling_gpus, in the series' unit per period) and a ``capped`` column saying where that happened."""
    if answers is None or answers.is_empty() or "ceiling_gpus" not in answers.columns:
        return forecast.with_columns(pl.lit(False).alias("capped"))
    ceilings = {tuple(r[:-1]): r[-1] for r in answers.select(*keys, "ceiling_gpus").iter_rows()}
    return _capped(forecast, keys, ceilings, per_hour, flag=True)


def _capped(forecast: pl.DataFrame, keys: list[str], ceilings: dict, per_hour: float,
            flag: bool = False) -> pl.DataFrame:
    """hi80 and hi95 at most each series' ceiling (GPUs, ``ceilings`` by key tuple; None: none), and never below
    the forecast itself: where the median is above the ceiling the bounds stop there, so an interval still holds
    its forecast. ``flag`` adds ``capped`` (the 95 % bound was above the ceiling)."""
    parts = forecast.partition_by(keys, as_dict=True, maintain_order=True) if keys else {(): forecast}
    out = []
    for kv, part in parts.items():
        ceil = ceilings.get(tuple(kv))
        lim = float("inf") if ceil is None else float(ceil) * per_hour
        limit = pl.max_horizontal(pl.lit(lim), "forecast")
        # NaN (no interval) stays NaN: min_horizontal would replace it with the limit
        part = part.with_columns(*(pl.when(pl.col(c).is_nan()).then(pl.col(c)).otherwise(pl.min_horizontal(c, limit))
                                   .alias(c) for c in ("hi80", "hi95")),
                                 # polars orders NaN above every number: no interval is not "above the ceiling"
                                 *([(pl.col("hi95").is_not_nan() & (pl.col("hi95") > lim)).alias("capped")]
                                   if flag else []))
        out.append(part)
    return pl.concat(out) if out else forecast.with_columns(*([pl.lit(False).alias("capped")] if flag else []))


def _first_over(part: pl.DataFrame, col: str, limit: float):
    hit = part.filter(pl.col(col).is_not_nan() & (pl.col(col) > limit))   # NaN: no interval, not "over"
    return hit.get_column("ts")[0] if hit.height else None


def _pool_row(key: dict, part: pl.DataFrame, cap, recent, target_util: float, band: str, horizons) -> dict:
    row = {**key, "capacity_gpus": cap, "target_gpus": None if cap is None else cap * target_util,
           "recent_gpus": recent, "exhausted_median": None, "exhausted_upper80": None}
    if cap is not None:
        row["exhausted_median"] = _first_over(part, "forecast", cap * target_util)
        row["exhausted_upper80"] = _first_over(part, "hi80", cap * target_util)
    col = BANDS[band]
    for h in sorted({x for x in horizons if x <= part.height} | {part.height}):
        demand = part.get_column(col)[h - 1]
        need = None if demand is None or math.isnan(demand) else math.ceil(demand / target_util - 1e-9)
        row[f"gpus_needed_h{h}"] = need
        row[f"shortfall_h{h}"] = None if cap is None or need is None else max(0, need - int(cap))
    no_band = part.height == 0 or part.get_column("hi80").is_nan().all()
    row["note"] = ("no installed capacity known for this pool: pass --capacity POOL=GPUS" if cap is None else
                   "history too short for intervals: upper-band answers unknown" if no_band else
                   ("" if row["exhausted_upper80"] else "not exhausted within the horizon"))
    row["already_above"] = cap is not None and recent is not None and recent > cap * target_util
    if row["already_above"]:
        # Over the target now: reached, on the first forecast period at the latest, whatever the forecast does
        # next (after a busy week it may fall below: the dates were then empty, and the tile and the alert
        # said nothing of a pool over its target). A later crossing would print "already (before <later>)".
        falls = row["exhausted_upper80"] is None
        row["exhausted_median"] = row["exhausted_upper80"] = part.get_column("ts")[0] if part.height else None
        # an exhaustion date on the first forecast period reads as "tomorrow"; the pool is over its target now
        later = "the forecast's upper 80 % band stays below it over the horizon" if falls and not no_band else ""
        row["note"] = "; ".join(x for x in (f"already above the target: the last window's demand {recent:,.1f} GPUs "
                                            f"> {cap * target_util:,.1f}", later or row["note"]) if x)
    return row


def forecast_warehouse(con: duckdb.DuckDBPyConnection, horizon: int, by=("pool",), freq: str = "day",
                       measure: str = "demanded", cluster: str | None = None, overrides: dict | None = None,
                       target_util: float = 0.85, band: str = "80", window: int | None = None,
                       shifts: bool = True, progress=None, outliers: bool = True) -> dict:
    """Demand forecasts for the ``by`` groups and, per pool, the capacity answers, from the warehouse.

    Returns {"history", "forecast", "summary", "capacity", "notes", "keys", "title"}. Pools (or groups) without
    any demand are not forecast, and pools whose installed capacity is unknown get no capacity answer: both are
    listed in ``notes``. A 95 % band above a pool's physical ceiling (`physical_ceiling`) is capped in the pool
    forecast rows (``capped``) and noted in the capacity table. Capacity answers need pool-level
    forecasts (group forecasts and their intervals do not add up to a pool's), so unless ``by`` is the pool
    itself, pools are forecast separately. Pools are split by cluster when the warehouse has several;
    ``overrides`` maps pool → installed GPUs and replaces the inventory's figure."""
    by = demand.parse_by(by)
    hist = demand.series(con, measure, freq, by, cluster, estimated=True)
    est_notes = estimated_notes(hist, by, freq) if "estimated" in hist.columns else []
    hist = hist.drop("estimated", strict=False)
    fc, summary = forecast.forecast_table(hist, by, freq, horizon, shifts=shifts, progress=progress,
                                          outliers=outliers)
    unit = "GPUs" if measure == "peak" else "GPU-hours"
    per_hour = 1.0 if measure == "peak" else demand.FREQS[freq]
    out = {"history": hist, "forecast": fc, "summary": summary, "keys": by, "capacity": None,
           "notes": idle_notes(summary, by) + est_notes, "per_hour": per_hour, "unit": unit,
           "title": f"{measure} {unit} per {freq} by {', '.join(by) or 'total'}: {horizon}-{freq} forecast"}
    if fc.is_empty():
        return out
    multi = con.sql("SELECT count(DISTINCT cluster) FROM jobs").fetchall()[0][0] > 1
    pool_keys = ["cluster", "pool"] if multi else ["pool"]
    if by == pool_keys:
        phist, pfc, psummary = hist, fc, summary
    else:
        phist = demand.series(con, measure, freq, pool_keys, cluster)
        pfc, psummary = forecast.forecast_table(phist, pool_keys, freq, horizon, shifts=shifts, outliers=outliers)
    if pfc.is_empty():
        return out
    overrides = overrides or {}
    installed = pool_capacity(con, multi)
    caps = {tuple(r[:-2]): overrides.get(r[-3], r[-2]) for r in installed.iter_rows()}
    any_caps, any_notes = any_pool_capacity(phist, installed, pool_keys)
    caps.update({k: v for k, v in any_caps.items() if ANY_POOL not in overrides})
    caps.update(overrides)
    # served GPU-hours are allocations: never above what is installed, whatever was pending
    served = measure == "served"
    peaks = None if served else _peaks(con, phist if measure == "peak" else None, pool_keys, freq, cluster)
    answers = exhaustion(phist, pfc, caps, pool_keys, target_util, band, window or SMOOTHING[freq],
                         per_hour, peaks=peaks, ceiling_k=1.0 if served else K_CEILING)
    known = answers.filter(pl.col("capacity_gpus").is_not_null())
    out["notes"] = list(dict.fromkeys(out["notes"] + idle_notes(psummary, pool_keys) + any_notes + [
        f"{' / '.join(map(str, r[:len(pool_keys)]))}: no installed capacity known (pass --capacity "
        f"{r[len(pool_keys) - 1]}=GPUS): demand forecast only, no capacity answer"
        for r in answers.filter(pl.col("capacity_gpus").is_null()).select(pool_keys).iter_rows()]))
    out["capacity"] = known
    if by == pool_keys:
        out["forecast"] = cap_bands(fc, known, by, per_hour)
    return out


def any_pool_capacity(history: pl.DataFrame, installed: pl.DataFrame, keys: list[str]) -> tuple[dict, list[str]]:
    """Installed GPUs for the "(any)" pool (jobs that asked for no GPU type and name no node, e.g. a trace
    without placement) of each cluster where it is the only pool with demand: every installed GPU of the
    cluster can serve it, so its capacity is their sum. Where typed pools have demand too, the "(any)" demand
    competes with them for the same GPUs and no share of them is its own: no capacity (a note says so, the
    caller's --capacity gives one). Returns ({key tuple: GPUs}, notes)."""
    if history.is_empty() or ANY_POOL not in history["pool"].to_list():
        return {}, []
    group = keys[:-1]
    busy = history.group_by(keys, maintain_order=True).agg((pl.col("value").fill_null(0) != 0).any().alias("busy")
                                                            ).filter("busy")
    caps, notes = {}, []
    for kv, part in (busy.partition_by(group, as_dict=True, maintain_order=True) if group else {(): busy}).items():
        if ANY_POOL not in part["pool"].to_list():
            continue
        where = " / ".join(map(str, kv))
        if part.height > 1:
            notes.append(f"{where + ' / ' if where else ''}{ANY_POOL}: demand for any GPU type shares the GPUs of "
                         f"the typed pools ({', '.join(sorted(p for p in part['pool'] if p != ANY_POOL))}); no "
                         f"capacity of its own")
            continue
        mine = installed.filter(*(pl.col(c) == v for c, v in zip(group, kv))) if group else installed
        if mine.height:
            caps[(*kv, ANY_POOL)] = float(mine["capacity_gpus"].sum())
            notes.append(f"{where + ' / ' if where else ''}{ANY_POOL}: every job asked for any GPU type: its "
                         f"capacity is all {caps[(*kv, ANY_POOL)]:,.0f} installed GPUs ("
                         f"{', '.join(mine['pool'].to_list())})")
    return caps, notes


def idle_notes(summary: pl.DataFrame, keys: list[str]) -> list[str]:
    """One note per series of a forecast ``summary`` that was not forecast for want of demand: none in its
    history (all zero or missing), or none for the last `forecast.idle_periods` periods or more (``idle_since``,
    UTC): a retired pool is not drawn as a forecast of its old demand."""
    if summary.is_empty():
        return []
    idle = summary.filter(pl.col("model").is_in(["Zero", "none"]))
    notes = []
    for r in idle.select(*keys, "idle_since").iter_rows():
        who = " / ".join(map(described, r[:-1])) or "series"
        since = r[-1]
        notes.append(f"{who}: no demand since {forecast.period_label(since)} UTC: not forecast" if since is not None
                     else f"{who}: no demand in the history (all zero): not forecast")
    return notes


#: Said once under the per-series notes of :func:`estimated_notes`.
ESTIMATED_NOTE = ("estimated GPU-hours: work still running or pending at the data horizon counts its expected run "
                  "time given what it has run (the mean of the finished runs of its partition that lasted as long)")


def estimated_notes(history: pl.DataFrame, keys: list[str], freq: str, least: float = 0.01) -> list[str]:
    """One note per demanded series whose last smoothing window (SMOOTHING: 7 days, 24 hours) is at least
    ``least`` estimated: the GPU-hours of work not finished at the data horizon beyond what it has run, which the
    demand kernel counts at its expected run time (docs/FORECAST.md). The forecast starts from those periods."""
    n = SMOOTHING[freq]
    tail = (history.sort([*keys, "ts"]).group_by(keys, maintain_order=True).tail(n) if keys
            else history.sort("ts").tail(n))
    sums = (tail.group_by(keys, maintain_order=True).agg(pl.col("value").sum(), pl.col("estimated").sum()) if keys
            else tail.select(pl.col("value").sum(), pl.col("estimated").sum()))
    notes = []
    for r in sums.iter_rows(named=True):
        if r["value"] > 0 and r["estimated"] >= least * r["value"]:
            who = " / ".join(described(r[k]) for k in keys) or "series"
            notes.append(f"{who}: {r['estimated'] / r['value']:.0%} of the demanded GPU-hours of the last {n} "
                         f"{freq}s are estimated ({r['estimated']:,.0f} of {r['value']:,.0f})")
    return notes + ([ESTIMATED_NOTE] if notes else [])


def _peaks(con, peak_hist: pl.DataFrame | None, keys: list[str], freq: str, cluster) -> dict:
    """Most GPUs running + pending at once ever, per pool key tuple (the ``peak`` series' maximum)."""
    hist = peak_hist if peak_hist is not None else demand.series(con, "peak", freq, keys, cluster)
    return {tuple(r[:-1]): r[-1] for r in hist.group_by(keys).agg(pl.col("value").max()).iter_rows()}


def forecast_csv(raw: pl.DataFrame, name: str, keys: list[str], freq: str | None, horizon: int, agg: str = "mean",
                 unit: str = "gpus", capacity: dict | None = None, target_util: float = 0.85, band: str = "80",
                 window: int | None = None, shifts: bool = True, progress=None, outliers: bool = True) -> dict:
    """Forecasts of a planner's timestamp,value series (``raw``: the (keys..., ts, value) rows
    ingest/series_csv.py reads from the file ``name``; ``keys`` split it into series), and the capacity answers
    when ``capacity`` gives installed GPUs (a pool → GPUs, or '*' for every series).

    ``freq`` None infers it from the timestamps; ``agg`` combines values within a period; ``unit`` 'gpu-hours'
    says the values are GPU-hours per period (compared with capacity per hour). Returns the dict of
    :func:`forecast_warehouse`."""
    spacing = forecast.infer_freq(raw.get_column("ts").to_numpy())
    order = list(forecast.SEASON)                                      # hour, day, week, month
    if freq and order.index(freq) < order.index(spacing):
        # daily values spread over hours would be 23 invented periods in 24, "filled" and forecast as data
        raise ValueError(f"--freq {freq} is finer than {Path(name).name}'s own spacing ({spacing}): its periods "
                         f"would be invented; use --freq {spacing} or coarser")
    freq = freq or spacing
    hist = forecast.regularise(raw, keys, freq, agg=agg)
    notes = []
    if unit == "gpu-hours" and freq not in demand.FREQS:
        # months have 672-744 hours: no one factor turns their GPU-hours into GPUs. Dividing each month by its
        # own hours is the calendar adjustment (FPP3 section 3.1), which also keeps February from looking like a dip
        hist = hist.with_columns(pl.col("value") / (pl.col("ts").dt.month_end().dt.day().cast(pl.Float64) * 24))
        unit, notes = "gpus", ["GPU-hours per month divided by the month's hours: history, forecasts and bands "
                               "are mean GPUs (calendar-adjusted, so months of 28-31 days compare)"]
    fc, summary = forecast.forecast_table(hist, keys, freq, horizon, shifts=shifts, progress=progress,
                                          outliers=outliers)
    per_hour = demand.FREQS[freq] if unit == "gpu-hours" else 1.0
    answer = (exhaustion(hist, fc, capacity, keys, target_util, band, window or SMOOTHING[freq], per_hour)
              if capacity and fc.height else None)
    return {"history": hist, "forecast": cap_bands(fc, answer, keys, per_hour) if fc.height else fc,
            "summary": summary, "capacity": answer, "keys": keys, "notes": notes + idle_notes(summary, keys),
            "per_hour": per_hour, "unit": unit,
            "title": f"{Path(name).name}: {freq} series, {horizon}-period forecast"}
