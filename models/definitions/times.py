"""Time windows, buckets and periods (naive UTC; windows half-open ``[start, end)``).

The parser of users' times is storage's (:func:`ingest.warehouse.times.parse_time`): ingest and reports read
times the same way. Here: what the models do with them."""
from __future__ import annotations

import datetime as dt
import zoneinfo

from ingest.warehouse.times import TimeParseError, parse_time

BUCKETS = ("hour", "day", "week", "month")
#: Polars ``dt.truncate`` spellings of the buckets.
EVERY = {"hour": "1h", "day": "1d", "week": "1w", "month": "1mo"}
DEFAULT_INTERVAL_S = 300
#: Hours in one bucket of each fixed length (a month's are its own: :func:`bucket_hours`).
BUCKET_HOURS = {"hour": 1.0, "day": 24.0, "week": 168.0}


def check_window(start: dt.datetime | None, end: dt.datetime | None) -> None:
    """A reversed or empty window is a user's mistake, said in one line (never silently swapped or emptied)."""
    if start is not None and end is not None and end <= start:
        raise TimeParseError(f"empty window: --from {start:%Y-%m-%d %H:%M:%S} is not before --to {end:%Y-%m-%d %H:%M:%S}")


def parse_window(start, end) -> tuple[dt.datetime | None, dt.datetime | None]:
    """``(--from, --to)`` as naive UTC (either may be None: open), checked for order."""
    s, e = parse_time(start, "--from"), parse_time(end, "--to")
    check_window(s, e)
    return s, e


def floor_hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def ceil_hour(t: dt.datetime) -> dt.datetime:
    f = floor_hour(t)
    return f if f == t else f + dt.timedelta(hours=1)


def floor_day(t: dt.datetime) -> dt.datetime:
    """The UTC midnight at or before ``t`` (naive UTC)."""
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


def ceil_day(t: dt.datetime) -> dt.datetime:
    """The UTC midnight at or after ``t``."""
    f = floor_day(t)
    return f if f == t else f + dt.timedelta(days=1)


def check_bucket(bucket: str) -> str:
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, not {bucket!r}")
    return bucket


def bucket_sql(bucket: str, col: str) -> str:
    """SQL for the start of the ``bucket`` (hour/day/week (Monday)/month, UTC) containing ``col``."""
    return f"date_trunc('{check_bucket(bucket)}', {col})"


def bucket_interval(bucket: str) -> str:
    return {"hour": "INTERVAL 1 HOUR", "day": "INTERVAL 1 DAY", "week": "INTERVAL 7 DAY",
            "month": "INTERVAL 1 MONTH"}[check_bucket(bucket)]


def bucket_hours(bucket: str, start: dt.datetime) -> float:
    """Hours of the whole ``bucket`` that starts at ``start`` (naive UTC): 1, 24, 168, or a month's 672-744."""
    if check_bucket(bucket) == "month":
        nxt = dt.datetime(start.year + (start.month == 12), start.month % 12 + 1, 1)
        return (nxt - start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)).total_seconds() / 3600
    return BUCKET_HOURS[bucket]


def parse_duration(value: str | int | float | None, default: int = DEFAULT_INTERVAL_S) -> int:
    """'5m', '300', '300s', '1h', '2d', 300 -> whole seconds (>= 1); None or '' -> ``default``."""
    if value is None or value == "":
        return default
    if isinstance(value, (int, float)):
        secs = float(value)
    else:
        v = str(value).strip().lower()
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(v[-1:], None)
        try:
            secs = float(v[:-1]) * mult if mult else float(v)
        except ValueError as exc:
            raise ValueError(f"cannot read duration {value!r}: use seconds or e.g. 5m, 1h, 2d") from exc
    if secs < 1 or secs != int(secs):
        raise ValueError(f"duration must be a whole number of seconds >= 1, not {value!r}")
    return int(secs)


def period_bounds(period: str, tz: str = "UTC") -> tuple[dt.datetime, dt.datetime]:
    """``'2026-03'`` -> [start, end) of that calendar month in zone ``tz``, as naive UTC."""
    try:
        year, month = (int(x) for x in period.split("-"))
        first = dt.date(year, month, 1)
    except ValueError:
        raise ValueError(f"period {period!r}: expected YYYY-MM, e.g. 2026-03") from None
    nxt = dt.date(year + month // 12, month % 12 + 1, 1)
    zone = zoneinfo.ZoneInfo(tz)
    to_utc = lambda d: dt.datetime(d.year, d.month, d.day, tzinfo=zone).astimezone(dt.timezone.utc).replace(tzinfo=None)
    return to_utc(first), to_utc(nxt)


def next_period(period: str, step: int = 1) -> str:
    year, month = (int(x) for x in period.split("-"))
    idx = year * 12 + month - 1 + step
    return f"{idx // 12:04d}-{idx % 12 + 1:02d}"


def period_of(t: dt.datetime, tz: str = "UTC") -> str:
    """The calendar month (YYYY-MM, in zone ``tz``) holding the naive-UTC instant ``t``."""
    return t.replace(tzinfo=dt.timezone.utc).astimezone(zoneinfo.ZoneInfo(tz)).strftime("%Y-%m")


def split_at(start: dt.datetime, end: dt.datetime, cuts) -> list[tuple[dt.datetime, dt.datetime]]:
    """[start, end) split at every cut strictly inside it."""
    pts = sorted({start, end} | {t for t in cuts if t is not None and start < t < end})
    return list(zip(pts, pts[1:]))


def month_chunks(start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """Calendar months (UTC) covering [start, end): per-sample work is done a month at a time (bounded memory)."""
    out, a = [], start
    while a < end:
        nxt = (a.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=32)).replace(day=1)
        b = min(nxt, end)
        out.append((a, b))
        a = b
    return out
