"""Dimensions, the labels of what the data does not name, and the one set of request-size classes.

Where the old code differed: unmapped teams were ``unmapped`` (demand) or ``(unmapped)`` (everywhere else);
pools without a type ``unknown``, ``(untyped)`` or ``(any)``; size classes came in three sets (queue: 0, 1, 2-4,
5-8, 9-15, 16+; simulator: 1, 2-4, 5-8, 9-32, 33+; blocked waits: powers of two, fractional, multi-node).
docs/METRICS.md ("Labels and size classes") says which won and why."""
from __future__ import annotations

from typing import Iterable, Sequence

import polars as pl

#: A job whose account no governance team_map pattern matches.
UNMAPPED = "(unmapped)"
#: GPUs whose type the inventory (or the job) does not name.
UNTYPED = "(untyped)"
#: A job that asked for GPUs of any type and whose pool nothing else tells (queue waits before it starts).
ANY_POOL = "(any)"
#: A row totalling a group ("all teams", "all pools").
ALL = "(all)"
#: An empty attribute (no QOS, no partition, no account).
NONE = "(none)"

#: What each label stands for, where a note names it to a reader (forecast notes: "(any) (jobs ...)").
MEANING = {UNMAPPED: "accounts no team_map pattern matches", UNTYPED: "GPUs whose type no source names",
           ANY_POOL: "jobs that ran on no pool and asked for any GPU type"}


def described(label) -> str:
    """``label`` as a note shows it: our own labels with what they stand for, any other as it is."""
    return f"{label} ({MEANING[label]})" if label in MEANING else str(label)


#: Grouping columns that describe capacity (node properties) and those that describe the work (job properties).
CAPACITY_DIMS = ("cluster", "gpu_type", "partition")
DEMAND_DIMS = ("team", "account", "user", "job_partition", "qos")
ALIASES = {"pool": "gpu_type"}


def normalise_dims(by: str | Iterable[str] | None, allowed: Sequence[str], option: str = "--by") -> list[str]:
    """'team,gpu_type' or a list -> validated list, duplicates dropped (aliases: pool = gpu_type)."""
    if by is None:
        return []
    items = [b.strip() for b in (by.split(",") if isinstance(by, str) else by)]
    out = []
    for b in items:
        if not b:
            continue
        b = b if b in allowed else ALIASES.get(b, b)
        if b not in allowed:
            raise ValueError(f"{option}: cannot group by {b!r}; choose from {', '.join(allowed)}")
        if b not in out:
            out.append(b)
    return out


# ---------------------------------------------------------------- request-size classes

#: Requested GPUs -> class, in display order: no GPUs, a fraction of one GPU (GPU sharing), then powers of two
#: as XDMoD's job-size bins (one node of 8 GPUs is "5-8"; every class above it is multi-node there).
SIZE_CLASSES = ("0", "<1", "1", "2-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129+")
_BOUNDS = ((1, "1"), (4, "2-4"), (8, "5-8"), (16, "9-16"), (32, "17-32"), (64, "33-64"), (128, "65-128"))
#: Polars dtype that sorts size classes in display order.
SIZE_DTYPE = pl.Enum(list(SIZE_CLASSES))


def size_class_sql(gpus: str, milli: str | None = None) -> str:
    """SQL CASE giving the size class of ``gpus`` requested GPUs (``milli``: milli-GPUs per GPU, < 1000 when the
    job shares a GPU)."""
    frac = f"WHEN coalesce({milli}, 1000) < 1000 AND ({gpus}) > 0 THEN '<1' " if milli else ""
    whens = " ".join(f"WHEN ({gpus}) <= {hi} THEN '{name}'" for hi, name in _BOUNDS)
    return f"(CASE WHEN coalesce({gpus}, 0) <= 0 THEN '0' {frac}WHEN ({gpus}) < 1 THEN '<1' {whens} ELSE '129+' END)"


def size_class_expr(gpus: pl.Expr) -> pl.Expr:
    """Polars: the size class of requested GPUs (no GPU sharing information)."""
    expr = pl.when(gpus.fill_null(0) <= 0).then(pl.lit("0")).when(gpus < 1).then(pl.lit("<1"))
    for hi, name in _BOUNDS:
        expr = expr.when(gpus <= hi).then(pl.lit(name))
    return expr.otherwise(pl.lit("129+"))


def size_order(col: pl.Expr) -> pl.Expr:
    """Sort key of a size-class column (unknown labels such as ``(all)`` last)."""
    return col.replace_strict(list(SIZE_CLASSES), list(range(len(SIZE_CLASSES))), default=len(SIZE_CLASSES),
                              return_dtype=pl.Int32)


def sized(df: pl.DataFrame, col: str = "size_class") -> pl.DataFrame:
    """``df`` with its size-class column (if any) as the ordered :data:`SIZE_DTYPE` (labels such as ``(all)``,
    which are not classes, keep it a string: sort those with :func:`size_order`)."""
    if col not in df.columns or df.schema[col] == SIZE_DTYPE:
        return df
    if df[col].is_in(list(SIZE_CLASSES)).all() or df.is_empty():
        return df.with_columns(pl.col(col).cast(SIZE_DTYPE))
    return df
