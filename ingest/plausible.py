"""The plausibility window: the one definition of which times and counts an ingestor may store.

A time before :data:`EARLIEST` (2000-01-01) or after the ingest time plus :data:`FUTURE_SKEW` (one day: clock
skew, and a controller whose zone was given wrong by up to 14 hours) is a typo, a sentinel or a unit mistake
(milliseconds read as seconds), never an observation. Stored, one such value stretches every model's time axis
to year 9999 (refresh overflows or runs out of memory), so every ingestor rejects it at the door, with its
line and field. The window is configurable in one place, ``$GPULEDGER_TIME_WINDOW``::

    GPULEDGER_TIME_WINDOW="2000-01-01..now+1d"      # the default
    GPULEDGER_TIME_WINDOW="1990-01-01..now+6h"      # an older archive, a tighter future bound
    GPULEDGER_TIME_WINDOW="2026-01-01..2027-02-01"  # replaying data (e.g. a synthetic year) that runs ahead of the clock

A program that replays such data says so for its own ingests with ``with plausible.replaying("2026-01-05..2027-01-06"):``.
``now`` is read when an input is ingested. Durations (elapsed, time limits) may not exceed the window's width.
Counts may not be negative, nor exceed :data:`MAX_COUNTS` (far beyond the largest machines: Fugaku has 158,976
nodes and 7.6 million cores; the largest GPU clusters some 10^5 GPUs); memory and billing must be finite.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from contextvars import ContextVar
from dataclasses import dataclass

from ingest.errors import InputError

ENV_WINDOW = "GPULEDGER_TIME_WINDOW"
EARLIEST = dt.datetime(2000, 1, 1)
FUTURE_SKEW = dt.timedelta(days=1)
DEFAULT = "2000-01-01..now+1d"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_REPLAYING: ContextVar[str | None] = ContextVar("gpuledger_time_window", default=None)
#: The most nodes, CPUs and GPUs one job (or one node) can plausibly hold.
MAX_COUNTS = {"nodes": 1_000_000, "cpus": 100_000_000, "gpus": 1_000_000}


@dataclass(frozen=True)
class Window:
    """Times ``lo <= t <= hi`` (naive UTC) are plausible."""
    lo: dt.datetime
    hi: dt.datetime
    spec: str

    @property
    def max_duration_s(self) -> int:
        """No plausible duration is longer than the window itself."""
        return int((self.hi - self.lo).total_seconds())

    def contains(self, t: dt.datetime) -> bool:
        return self.lo <= t <= self.hi

    def describe(self) -> str:
        """``[2000-01-01 00:00:00, 2026-12-04 08:41:00]`` for reject reasons."""
        return f"[{self.lo:%Y-%m-%d %H:%M:%S}, {self.hi:%Y-%m-%d %H:%M:%S}]"

    def reason(self, shown: str) -> str:
        """The reject reason for a time ``shown`` (as read) outside the window."""
        return f"time {shown} outside the plausible window {self.describe()} (${ENV_WINDOW})"


def _bound(text: str, now: dt.datetime, side: str) -> dt.datetime:
    s = text.strip()
    m = re.fullmatch(r"now(?:\s*([+-])\s*(\d+)\s*([smhd]))?", s)
    if m:
        if not m.group(1):
            return now
        delta = dt.timedelta(seconds=int(m.group(2)) * _UNITS[m.group(3)])
        return now + delta if m.group(1) == "+" else now - delta
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"${ENV_WINDOW}", f"cannot read the {side} bound {s!r} (use an ISO date or time, "
                                           "or now, now+1d, now-6h)") from None
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None) if t.tzinfo else t


@contextlib.contextmanager
def replaying(spec: str):
    """Inside the block, the window is ``spec`` (``LOWER..UPPER``, as in the environment variable), whatever the
    environment says: for a program that ingests data running ahead of the clock (a synthetic year)."""
    token = _REPLAYING.set(spec)
    try:
        window()   # a bad spec fails here, at the caller, not at its first ingest
        yield
    finally:
        _REPLAYING.reset(token)


def window(now: dt.datetime | None = None) -> Window:
    """The window in force: :func:`replaying`'s, else ``$GPULEDGER_TIME_WINDOW`` (``LOWER..UPPER``), else
    2000-01-01 .. now + 1 day."""
    if now is None:
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    spec = _REPLAYING.get() or os.environ.get(ENV_WINDOW, "").strip() or DEFAULT
    if spec.count("..") != 1:
        raise InputError(f"${ENV_WINDOW}", f"expected LOWER..UPPER (like {DEFAULT}), got {spec!r}")
    lo_text, hi_text = spec.split("..")
    lo, hi = _bound(lo_text, now, "lower"), _bound(hi_text, now, "upper")
    if lo >= hi:
        raise InputError(f"${ENV_WINDOW}", f"the lower bound {lo} is not before the upper bound {hi}")
    return Window(lo=lo, hi=hi, spec=spec)


def sql_params(w: Window, sql: str) -> dict:
    """Named parameters for the checks in ``sql``: those of ``$win_lo``, ``$win_hi`` (TIMESTAMP) and ``$win_max_s``
    (seconds) that it uses (DuckDB refuses unused parameters)."""
    params = {"win_lo": w.lo, "win_hi": w.hi, "win_max_s": w.max_duration_s}
    return {k: v for k, v in params.items() if "$" + k in sql}


def sql_reason(shown_sql: str) -> str:
    """SQL text of the reject reason for a time outside the window (``shown_sql`` is the value as read)."""
    return (f"'time ' || {shown_sql} || ' outside the plausible window [' || strftime($win_lo, '%Y-%m-%d %H:%M:%S') "
            f"|| ', ' || strftime($win_hi, '%Y-%m-%d %H:%M:%S') || '] (${ENV_WINDOW})'")
