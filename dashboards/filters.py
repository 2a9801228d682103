"""The global filters every page honours: date range, cluster, pool (GPU type), partition, team.

:class:`Filters` is a frozen value, so it is a cache key: each distinct filter set is computed once per
snapshot. Dates are UTC calendar days; the window is half-open ``[start, end)`` like every model's buckets,
while the sidebar shows the inclusive last day people expect.
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
    start: dt.date                      # first day, inclusive (UTC)
    end: dt.date                        # day after the last day: the window is [start, end)
    clusters: tuple[str, ...] = ()      # empty = all
    pools: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()         # may contain UNMAPPED for jobs with no team

    @property
    def t0(self) -> dt.datetime:
        return dt.datetime.combine(self.start, dt.time())

    @property
    def t1(self) -> dt.datetime:
        return dt.datetime.combine(self.end, dt.time())

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    def previous(self) -> "Filters":
        """The same filters over the equally long window just before this one (for 'vs previous period')."""
        n = dt.timedelta(days=self.days)
        return replace(self, start=self.start - n, end=self.start)

    def dimensions(self) -> dict[str, tuple[str, ...]]:
        return {"clusters": self.clusters, "pools": self.pools, "partitions": self.partitions, "teams": self.teams}

    def describe(self) -> str:
        """One line naming the window and every active filter, for captions and file names."""
        last = self.end - dt.timedelta(days=1)
        parts = [f"{self.start:%Y-%m-%d} to {last:%Y-%m-%d} (UTC)"]
        for name, vals in self.dimensions().items():
            if vals:
                parts.append(f"{name[:-1] if name != 'clusters' else 'cluster'}: {', '.join(vals)}")
        return "; ".join(parts)

    def slug(self) -> str:
        """A short file-name-safe tag for downloads."""
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


def default_window(first: dt.date | None, last: dt.date | None, days: int = 30) -> tuple[dt.date, dt.date]:
    """The last ``days`` days of data, ending on the day of the data horizon (inclusive last day)."""
    if last is None:
        today = dt.datetime.now(dt.timezone.utc).date()
        return today - dt.timedelta(days=days - 1), today
    start = last - dt.timedelta(days=days - 1)
    if first is not None and start < first:
        start = first
    return start, last
