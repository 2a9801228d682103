"""Budgets against the forecast of the period's spend (`gpuledger report budgets`, the chargeback page, the
``budget`` alert rule). Budgets come from the governance file's ``[[budgets]]`` (table ``budgets``).

For each budget and its period (a calendar month or quarter in the governance ``period_timezone``):

- **actual**: what the period's monthly statements charge the team or cost centre so far (models/metrics/
  chargeback.py: every line, charges, reserved idle and adjustments for closed periods; money ``total``, i.e.
  direct cost plus idle share, or ``gpu_hours``), up to the data horizon;
- **rest**: the daily demand forecast (models/forecasting/forecast.py, measure ``served``: allocated GPU-hours,
  what a statement charges) of the team, or of the cost centre's teams, from the data horizon to the period's
  end (the day holding the horizon counts only its part after it); in money at the scope's effective rate so far
  (actual money / actual GPU-hours, else the previous month's);
- **forecast** = actual + rest, and ``forecast_pct`` = forecast / budget x 100.

A period that ended before the horizon has rest 0. Money in the governance currency, rounded to its minor
units; GPU-hours to 0.01. Times naive UTC.
"""
from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import polars as pl

from ingest.warehouse import has_table
from models.definitions.labels import UNMAPPED
from models.definitions.policy import CostError, Policy, current_policy
from models.definitions.times import floor_day, next_period, period_bounds, period_of
from models.forecasting import forecast
from models.metrics import chargeback, demand, timeline

SCHEMA = {"budget_no": pl.Int32, "scope": pl.String, "name": pl.String, "period": pl.String, "unit": pl.String,
          "budget": pl.Float64, "actual": pl.Float64, "forecast_rest": pl.Float64, "forecast": pl.Float64,
          "actual_pct": pl.Float64, "forecast_pct": pl.Float64, "rate": pl.Float64, "period_end": pl.Datetime("us"),
          "horizon": pl.Datetime("us"), "note": pl.String}


def quarter_of(month: str) -> str:
    """'2026-05' -> '2026-Q2'."""
    y, m = (int(x) for x in month.split("-"))
    return f"{y:04d}-Q{(m - 1) // 3 + 1}"


def months_of(label: str) -> list[str]:
    """The months of a period label: 'YYYY-MM' -> [it]; 'YYYY-QN' -> its three months."""
    m = re.fullmatch(r"(\d{4})-Q([1-4])", label)
    if m:
        first = f"{m.group(1)}-{3 * int(m.group(2)) - 2:02d}"
        return [first, next_period(first), next_period(first, 2)]
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", label):
        raise ValueError(f"period {label!r}: expected YYYY-MM (a month) or YYYY-QN (a quarter), e.g. 2026-03 or 2026-Q1")
    return [label]


def bounds(label: str, tz: str) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of a month or quarter label in zone ``tz``, naive UTC."""
    months = months_of(label)
    return period_bounds(months[0], tz)[0], period_bounds(months[-1], tz)[1]


def budget_rows(con) -> pl.DataFrame:
    """The budgets loaded from the governance file (empty before any, or on a warehouse older than budgets)."""
    if not has_table(con, "budgets"):
        return pl.DataFrame()
    return con.sql("SELECT * FROM budgets ORDER BY budget_no").pl()


def _labels(kind: str, period: str | None, horizon: dt.datetime, tz: str) -> str | None:
    """The period label of a budget of ``kind`` for the report's ``period`` (None: the one holding the horizon)."""
    month = period_of(horizon - dt.timedelta(microseconds=1), tz) if period is None else months_of(period)[0]
    if kind == "month":
        return None if period and period.count("Q") else month
    return quarter_of(month)


def _in_force(b: dict, label: str, tz: str) -> bool:
    start = bounds(label, tz)[0]
    first = None if b["valid_from"] is None else period_bounds(b["valid_from"].strftime("%Y-%m"), tz)[0]
    last = None if b["valid_to"] is None else period_bounds(b["valid_to"].strftime("%Y-%m"), tz)[0]
    return (first is None or start >= first) and (last is None or start < last)


def _spend(con, months: list[str], horizon: dt.datetime, tz: str) -> pl.DataFrame:
    """(team, cost_center, gpu_hours, total) summed over the statements of ``months`` begun by the horizon."""
    frames = [chargeback.statement(con, p, detail=False).lines.select(
        pl.col("team").fill_null(UNMAPPED), "cost_center", pl.col("gpu_hours").cast(pl.Float64),
        pl.col("total").cast(pl.Float64)) for p in months if period_bounds(p, tz)[0] < horizon]
    if not frames:
        return pl.DataFrame(schema={"team": pl.String, "cost_center": pl.String, "gpu_hours": pl.Float64,
                                    "total": pl.Float64})
    return pl.concat(frames)


def _forecast_days(con, horizon: dt.datetime, until: dt.datetime) -> pl.DataFrame:
    """Daily served GPU-hours forecast per team (team, ts, forecast) covering [floor_day(horizon), until)."""
    days = (until - floor_day(horizon)).days + (1 if until > floor_day(until) else 0)
    if days <= 0:
        return pl.DataFrame(schema={"team": pl.String, "ts": pl.Datetime("us"), "forecast": pl.Float64})
    hist = demand.series(con, "served", "day", ["team"])
    fc, _ = forecast.forecast_table(hist, ["team"], "day", days)
    if fc.is_empty():
        return pl.DataFrame(schema={"team": pl.String, "ts": pl.Datetime("us"), "forecast": pl.Float64})
    return fc.select("team", pl.col("ts").cast(pl.Datetime("us")), pl.col("forecast").clip(lower_bound=0))


def _rest(days: pl.DataFrame, teams: list[str], horizon: dt.datetime, end: dt.datetime) -> float:
    """Forecast GPU-hours of ``teams`` in [horizon, end): each day weighted by its overlap with the span."""
    if end <= horizon or days.is_empty():
        return 0.0
    part = days.filter(pl.col("team").is_in(teams))
    lo = pl.max_horizontal(pl.col("ts"), pl.lit(horizon))
    hi = pl.min_horizontal(pl.col("ts") + pl.duration(days=1), pl.lit(end))
    frac = ((hi - lo).dt.total_microseconds() / 86_400e6).clip(lower_bound=0)
    return float(part.select((pl.col("forecast") * frac).sum()).item() or 0.0)


def _scope_teams(policy: Policy, scope: str, name: str) -> list[str]:
    return [name] if scope == "team" else [t for t, cc, _ in policy.teams if cc == name]


def _mine(spend: pl.DataFrame, scope: str, name: str) -> pl.DataFrame:
    return spend.filter(pl.col("team" if scope == "team" else "cost_center") == name)


def _rate(con, scope: str, name: str, spent: pl.DataFrame, first_month: str, horizon, tz) -> float | None:
    """Money per GPU-hour of the scope so far in the period, else in the month before it."""
    h, m = float(spent["gpu_hours"].sum() or 0), float(spent["total"].sum() or 0)
    if h > 0:
        return m / h
    try:
        prev = _mine(_spend(con, [next_period(first_month, -1)], horizon, tz), scope, name)
    except CostError:
        return None
    h, m = float(prev["gpu_hours"].sum() or 0), float(prev["total"].sum() or 0)
    return m / h if h > 0 else None


def report(con, period: str | None = None) -> pl.DataFrame:
    """One row per budget in force for ``period`` ('YYYY-MM': month budgets of it and quarter budgets of its
    quarter; 'YYYY-QN': quarter budgets; None: each budget's period holding the data horizon). See the module
    docstring for the columns' meaning; ``budget``/``actual``/``forecast*`` are in the budget's unit (currency
    or GPU-hours), ``rate`` in currency per GPU-hour. Raises CostError without governance or data."""
    policy = current_policy(con)
    rows = budget_rows(con)
    hz = timeline.horizon(con)
    if hz is None:
        raise CostError("no jobs in the warehouse yet: nothing to compare with the budgets")
    if period is not None:
        months_of(period)
    tz, minor = policy.period_timezone, policy.minor_units
    todo = []
    for b in rows.iter_rows(named=True):
        label = _labels(b["period"], period, hz, tz)
        if label is not None and _in_force(b, label, tz):
            todo.append((b, label, *bounds(label, tz)))
    if not todo:
        return pl.DataFrame(schema=SCHEMA)
    days = _forecast_days(con, hz, max(e for *_, e in todo))
    spends = {label: _spend(con, months_of(label), hz, tz) for label in {lab for _, lab, _, _ in todo}}
    return pl.DataFrame([_row(con, policy, b, label, end, hz, spends[label], days, minor)
                         for b, label, _, end in todo], schema=SCHEMA, orient="row")


def _row(con, policy, b: dict, label: str, end, hz, spend, days, minor: int) -> tuple:
    scope, name, unit = b["scope"], b["name"], b["unit"]
    spent = _mine(spend, scope, name)
    hours = _rest(days, _scope_teams(policy, scope, name), hz, end)
    note = "" if end > hz else "period ended: actual only"
    if unit == "gpu_hours":
        actual, rest, rate, nd = float(spent["gpu_hours"].sum() or 0), hours, None, 2
    else:
        rate = _rate(con, scope, name, spent, months_of(label)[0], hz, policy.period_timezone)
        actual, nd = float(spent["total"].sum() or 0), minor
        rest = hours * rate if rate is not None else 0.0
        if rate is None and hours > 0:
            note = "no charges yet to price the forecast GPU-hours: actual only"
    budget = float(Decimal(b["amount"]))
    actual, rest = round(actual, nd), round(rest, nd)
    total = round(actual + rest, nd)
    return (b["budget_no"], scope, name, label, unit, budget, actual, rest, total,
            round(100 * actual / budget, 1), round(100 * total / budget, 1),
            None if rate is None else round(rate, 6), end, hz, note)
