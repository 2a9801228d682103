"""Time as the warehouse holds it (naive UTC, microseconds) and the one parser of times a user gives, for every
command: ingest windows, report windows, ``--as-of``."""
from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_EPOCH = re.compile(r"[+-]?\d{9,11}(\.\d+)?")


class TimeParseError(ValueError):
    """A time (or time zone) a user gave that cannot be read; the message is one line naming the option."""


def zone(tz: str | None, what: str = "--tz") -> ZoneInfo:
    """The IANA time zone ``tz`` (None = UTC), or a one-line TimeParseError naming ``what``."""
    try:
        return ZoneInfo(tz or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise TimeParseError(f"{what}: unknown time zone {tz!r} (use an IANA name such as Europe/Berlin)") from None


def parse_time(value, what: str = "time", tz: str | None = None) -> dt.datetime | None:
    """A user's time as naive UTC; None for None or ''.

    Accepts a datetime (an aware one is converted), a date (its midnight), or text: epoch seconds
    (``1720000000``, ``1720000000.5``), an ISO 8601 date (``2026-07-14``) or date-time (``2026-07-14T08:12``,
    ``2026-07-14 08:12:53Z``, ``...+02:00``). A time without an offset is read in ``tz`` (default UTC)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, dt.date):
        t = dt.datetime(value.year, value.month, value.day)
    else:
        s = str(value).strip()
        if _EPOCH.fullmatch(s):
            return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=float(s))
        try:
            t = dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise TimeParseError(f"{what}: not a time: {value!r} (use ISO 8601 such as 2026-07-14 or "
                                 "2026-07-14T08:00:00Z, or epoch seconds)") from None
    if t.tzinfo is None:
        if tz in (None, "UTC"):
            return t
        t = t.replace(tzinfo=zone(tz))
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None)
