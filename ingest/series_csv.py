"""A planner's own series for `gpuledger forecast --series FILE.csv`: timestamp,value rows, optional key columns.

Columns are found by name (ts / timestamp / time / date / datetime, and value) or else by position (first =
timestamp, second = value); ``keys`` names extra columns that split the file into several series. Timestamps:
ISO dates or date-times (``2024-05-01``, ``2024-05-01 13:00``, ``2024-05-01T13:00:00Z``, offsets converted to
UTC) or Unix epoch seconds. An empty value is a missing period; anything unreadable, negative or not finite (NaN,
inf) is an error naming the file, line and field, so a planner never forecasts a silently shortened or corrupted
series.

The file is read as every input is (ingest/inputs.py: gzip, bzip2 or xz; UTF-16 or UTF-32 with a byte-order
mark, as spreadsheets save "Unicode text"). Its delimiter is the header's: a comma, a semicolon or a tab (a
spreadsheet in a locale whose decimal mark is a comma saves semicolons, and there a value ``10,5`` is 10.5).
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import polars as pl

from ingest.encoding import BOM
from ingest.errors import InputError
from ingest.inputs import read_file

TS_NAMES = ("ts", "timestamp", "time", "date", "datetime")
FORMATS = ("%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%d %H:%M:%S%.f%z", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f",
           "%Y-%m-%dT%H:%M%z", "%Y-%m-%d %H:%M%z", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%Y/%m/%d")


def _columns(header: list[str], path: str) -> tuple[str, str]:
    low = {c.strip().lower(): c for c in header}
    ts = next((low[n] for n in TS_NAMES if n in low), None)
    val = low.get("value")
    if ts and val:
        return ts, val
    if len(header) < 2:
        raise InputError(path, "expected at least two columns: timestamp,value", 1)
    return header[0], header[1]


def _parse_ts(col: pl.Expr) -> pl.Expr:
    s = col.str.strip_chars().str.replace(r"Z$", "+00:00")
    tries = [s.str.to_datetime(f, strict=False, time_unit="us", time_zone="UTC" if "%z" in f else None)
             .dt.replace_time_zone(None) for f in FORMATS]
    epoch = pl.from_epoch(s.cast(pl.Float64, strict=False).mul(1e6).cast(pl.Int64, strict=False), time_unit="us")
    return pl.coalesce(*tries, epoch)


def delimiter(data: bytes) -> str:
    """The header line's delimiter: whichever of comma, semicolon and tab it holds most of (outside quotes);
    a comma when it holds none (one column)."""
    header = re.sub(rb'"[^"]*"', b"", data.split(b"\n", 1)[0])
    counts = {sep: header.count(sep.encode()) for sep in (",", ";", "\t")}
    best = max(counts, key=counts.get)
    return best if counts[best] else ","


def read_series(path: str | Path, keys: list[str] | None = None) -> pl.DataFrame:
    """(keys..., ts, value) with ts naive UTC and value Float64 (null = missing)."""
    path = str(path)
    keys = keys or []
    data = read_file(path, "a CSV file").removeprefix(BOM)
    sep = delimiter(data)
    try:
        raw = pl.read_csv(io.BytesIO(data), separator=sep, infer_schema=False, truncate_ragged_lines=False)
    except Exception as exc:  # polars names the problem but not always the line; keep its words
        raise InputError(path, f"not a readable CSV ({str(exc).splitlines()[0]})") from None
    if raw.height == 0:
        raise InputError(path, "no data rows")
    ts_col, val_col = _columns(raw.columns, path)
    missing = [k for k in keys if k not in raw.columns]
    if missing:
        raise InputError(path, f"--by column {missing[0]!r} is not in the header ({', '.join(raw.columns)})", 1)
    value = pl.col(val_col).str.strip_chars()
    if sep != ",":          # a decimal comma: one comma between digits, no point (10,5 but not 1,234.5)
        value = value.str.replace(r"^(-?\d+),(\d+)$", "$1.$2")
    out = raw.select(*[pl.col(k) for k in keys], _parse_ts(pl.col(ts_col)).alias("ts"),
                     value.cast(pl.Float64, strict=False).alias("value"),
                     pl.col(ts_col).alias("_ts_raw"), pl.col(val_col).alias("_v_raw"))
    out = out.with_row_index("_line", offset=2)
    bad_ts = out.filter(pl.col("ts").is_null())
    if bad_ts.height:
        r = bad_ts.row(0, named=True)
        raise InputError(path, f"{r['_ts_raw']!r} is not a timestamp", r["_line"], ts_col)
    bad_v = out.filter(pl.col("value").is_null() & (pl.col("_v_raw").fill_null("").str.strip_chars() != ""))
    if bad_v.height:
        r = bad_v.row(0, named=True)
        raise InputError(path, f"{r['_v_raw']!r} is not a number", r["_line"], val_col)
    # demand is GPUs or GPU-hours: a negative or non-finite value is a broken export, not a period to forecast
    bad = out.filter(pl.col("value").is_nan() | pl.col("value").is_infinite() | (pl.col("value") < 0))
    if bad.height:
        r = bad.row(0, named=True)
        why = ("is negative (demand cannot be)" if r["value"] < 0
               else "is not a finite number (leave a missing period empty)")
        raise InputError(path, f"{r['_v_raw']!r} {why}", r["_line"], val_col)
    return out.select(*keys, "ts", "value")
