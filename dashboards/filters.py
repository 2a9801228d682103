"""The global filters every page honours: date range, cluster, pool (GPU type), partition, team.

:class:`Filters` is a frozen value, so it is a cache key: each distinct filter set is computed once per
snapshot. Dates are UTC calendar days; the window is half-open ``[start, end)`` like every model's buckets,
while the sidebar shows the inclusive last day people expect. A library caller (and the consistency tests) may
give exact instants instead (``datetime`` start and end); the pages' figures are the same functions of the window.
A window whose end is not after its start is refused (:class:`ValueError`), never silently turned around.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

import polars as pl

from dashboards.theme import UNMAPPED

#: Frame columns that carry each filter dimension (models name pools either way).
DIMENSION_COLUMNS = {
    "clusters": ("cluster",),
    "pools": ("pool", "gpu_type"),
    "partitions": ("partition",),
    "teams": ("team",),
}


@dataclass(frozen=True)
class Filters:
    start: dt.date                      # first day, inclusive (UTC); or an exact datetime
    end: dt.date                        # day after the last day: the window is [start, end); or a datetime
    clusters: tuple[str, ...] = ()      # empty = all
    pools: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()         # may contain UNMAPPED for jobs with no team

    def __post_init__(self) -> None:
        if self.t1 <= self.t0:
            raise ValueError(f"the window must end after it starts: from {_text(self.start)} to "
                             f"{_text(self.end, last=True)} is {'empty' if self.t1 == self.t0 else 'reversed'}")

    @property
    def t0(self) -> dt.datetime:
        return _instant(self.start)

    @property
    def t1(self) -> dt.datetime:
        return _instant(self.end)

    @property
    def days(self) -> int:
        """Whole days in the window (a part day counts as a day)."""
        span = self.t1 - self.t0
        return span.days + (span % dt.timedelta(days=1) > dt.timedelta(0))

    @property
    def month(self) -> str:
        """YYYY-MM of the window's last instant: the statement month pages show for this window."""
        return f"{self.t1 - dt.timedelta(microseconds=1):%Y-%m}"

    def previous(self) -> "Filters":
        """The same filters over the equally long window just before this one (for 'vs previous period')."""
        n = self.end - self.start
        return replace(self, start=self.start - n, end=self.start)

    def dimensions(self) -> dict[str, tuple[str, ...]]:
        return {"clusters": self.clusters, "pools": self.pools, "partitions": self.partitions, "teams": self.teams}

    def span_text(self) -> str:
        """'2026-10-01 to 2026-10-31': the window's first and (inclusive) last day, or its exact instants."""
        return f"{_text(self.start)} to {_text(self.end, last=True)}"

    def describe(self) -> str:
        """One line naming the window and every active filter, for captions and file names."""
        parts = [f"{self.span_text()} (UTC)"]
        for name, vals in self.dimensions().items():
            if vals:
                parts.append(f"{name[:-1] if name != 'clusters' else 'cluster'}: {', '.join(vals)}")
        return "; ".join(parts)

    def slug(self) -> str:
        """A short file-name-safe tag for downloads."""
        if isinstance(self.start, dt.datetime) or isinstance(self.end, dt.datetime):
            return f"{self.t0:%Y%m%dT%H%M%S}-{self.t1:%Y%m%dT%H%M%S}"
        last = self.end - dt.timedelta(days=1)
        return f"{self.start:%Y%m%d}-{last:%Y%m%d}"

    def apply(self, df: pl.DataFrame, skip: tuple[str, ...] = ()) -> pl.DataFrame:
        """Keep the rows of a model's output that match the dimension filters it has columns for.

        Only for outputs already grouped by those dimensions; a filter on a dimension the frame does not
        carry is ignored here (the caller passes it to the model instead).
        """
        for name, vals in self.dimensions().items():
            if not vals or name in skip:
                continue
            col = next((c for c in DIMENSION_COLUMNS[name] if c in df.columns), None)
            if col is None:
                continue
            want = [v for v in vals if v != UNMAPPED]
            cond = pl.col(col).is_in(want)
            if name == "teams" and UNMAPPED in vals:
                cond = cond | pl.col(col).is_null() | (pl.col(col) == UNMAPPED)
            df = df.filter(cond)
        return df


def _instant(d: dt.date) -> dt.datetime:
    return d if isinstance(d, dt.datetime) else dt.datetime.combine(d, dt.time())


def _text(d: dt.date, last: bool = False) -> str:
    """A window edge as people read it: a day (the end as the inclusive last day), or an exact UTC instant."""
    if isinstance(d, dt.datetime):
        return f"{d:%Y-%m-%d %H:%M:%S}" + (" (excluded)" if last else "")
    return f"{d - dt.timedelta(days=1) if last else d:%Y-%m-%d}"


#: The window presets: their name in a link (``?window=90d``) -> days ending on the data's last day (None: all).
WINDOWS = {"7d": 7, "30d": 30, "90d": 90, "1y": 365, "all": None}
#: The window a first visit gets.
DEFAULT_WINDOW = "30d"


def preset_window(name: str, first: dt.date | None, last: dt.date | None) -> tuple[dt.date, dt.date]:
    """The (first day, inclusive last day) of preset ``name`` (a key of :data:`WINDOWS`) for data from ``first``
    to ``last``: the last n days of data, never before its first day."""
    n = WINDOWS[name]
    if n is None and first is not None and last is not None:
        return first, last
    return default_window(first, last, n or 30)


def default_window(first: dt.date | None, last: dt.date | None, days: int = 30) -> tuple[dt.date, dt.date]:
    """The last ``days`` days of data, ending on the day of the data horizon (inclusive last day)."""
    if last is None:
        today = dt.datetime.now(dt.timezone.utc).date()
        return today - dt.timedelta(days=days - 1), today
    start = last - dt.timedelta(days=days - 1)
    if first is not None and start < first:
        start = first
    return start, last
