"""Text for a terminal: data shown as aligned tables, and every text from data made safe to print.

Account, team, job and file names come from the sites' inputs; an ESC sequence or another control character in
one must print as text, never clear the screen, move the cursor or hide a line. :func:`escape` writes each
C0/C1 control character (and the bidirectional overrides that reorder what is shown) as a visible escape
(``\\x1b``, ``\\u202e``); only the newlines of multi-line output stay newlines.
"""
from __future__ import annotations

import math
import re
import shutil
from decimal import Decimal

import polars as pl

from dashboards import exports

#: C0 and C1 controls, DEL, line/paragraph separators and the bidirectional embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
#: columns that count things (jobs, GPUs, nodes, ...): whole values print as integers, never "32.00"
COUNT_COLUMN = re.compile(r"(^|_)(n?jobs|n?gpus|n?nodes|ncpus|count|users|pods|lines|periods|replications|n)(_|$)")

#: integer columns that name rather than count (run, line, job and budget numbers, years): no thousands separators
ID_COLUMN = re.compile(r"(^|_)(id|uid|no|line|year|seed|port|pid|code|xid)$")
#: columns in hours (GPU-hours, waits): 2 decimals even when every value is below 1
HOURS_COLUMN = re.compile(r"(_h|hours)$")


def _visible(m: re.Match) -> str:
    c = m.group()
    return _SHORT.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape(text: str, multiline: bool = False) -> str:
    """``text`` with every terminal control character shown as an escape; ``multiline`` keeps newlines."""
    return (_CONTROL_BUT_NEWLINE if multiline else _CONTROL).sub(_visible, text)


def _float_cells(name: str, values: list) -> list[str]:
    """One format per column, so its decimal points line up: counts (jobs, GPUs, nodes, ...) with whole values
    as integers; a column of fractions (every value below 1: shares, ratios) to 4 decimals; others to 2
    decimals (hours and money, whatever their size), where a value that is not zero but would print as 0.00
    keeps 2 significant digits."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if COUNT_COLUMN.search(name) and all(v == int(v) for v in finite):
        return ["" if v is None else f"{v:,.0f}" if math.isfinite(v) else str(v) for v in values]
    if any(v != 0 for v in finite) and all(abs(v) < 1 for v in finite) and not HOURS_COLUMN.search(name):
        return ["" if v is None else f"{v:.4f}" if math.isfinite(v) else str(v) for v in values]
    return ["" if v is None else f"{v:.2g}" if 0 < abs(v) < 0.005 else f"{v:,.2f}" for v in values]


def _datetime_cells(values: list) -> list[str]:
    """Timestamps; a column of midnights (day, week and month buckets) as dates."""
    dates = all(v.hour == v.minute == v.second == v.microsecond == 0 for v in values if v is not None)
    return ["" if v is None else v.date().isoformat() if dates else str(v) for v in values]


def _cells(s) -> list[str]:
    values = s.to_list()
    if s.dtype.is_float():
        return _float_cells(s.name, values)
    if s.dtype == pl.Datetime and s.dtype.time_zone is None:
        return _datetime_cells(values)
    if s.dtype.is_integer():
        return ["" if v is None else str(v) if ID_COLUMN.search(s.name) else f"{v:,}" for v in values]
    return ["" if v is None else f"{v:,}" if isinstance(v, Decimal) else escape(str(v)) for v in values]


def format_table(df, width: int | None = None) -> str:
    """Every row and column of a Polars DataFrame, aligned: numbers right-aligned, counts as integers,
    decimals exact with thousands separators, text escaped (:func:`escape`).

    ``width`` (a terminal's columns): a table wider than that is printed in blocks of columns, each block a
    table of its own that repeats the leading text columns (the row's keys: bucket, cluster, team, ...), as R
    prints a wide data frame; nothing is cut, and a block says which of the columns it holds."""
    if df.height == 0:
        return "(no rows)\n"
    df = exports.finite(df)   # unknown numbers print empty, as CSV and JSON write them: never "nan" or "inf"
    cols = [escape(c) for c in df.columns]
    cells = [_cells(df.get_column(c)) for c in df.columns]
    numeric = [df.get_column(c).dtype.is_numeric() for c in df.columns]
    widths = [max(len(c), *(len(v) for v in vals)) for c, vals in zip(cols, cells)]

    def block(idx: list[int]) -> list[str]:
        def line(vals):
            return "  ".join(vals[j].rjust(widths[j]) if numeric[j] else vals[j].ljust(widths[j])
                             for j in idx).rstrip()
        rows = [line(cols), line(["-" * w for w in widths])]
        return rows + [line([cells[j][i] for j in range(len(cols))]) for i in range(df.height)]

    groups = column_blocks(widths, numeric, width)
    if len(groups) == 1:
        return "\n".join(block(groups[0])) + "\n"
    keys = [j for j in groups[0] if j in groups[1]]
    out = []
    for g in groups:
        shown = [j for j in g if j not in keys]
        span = f"column {shown[0] + 1}" if len(shown) == 1 else f"columns {shown[0] + 1}-{shown[-1] + 1}"
        out.append(f"{span} of {len(cols)}"
                   + (f" (with {', '.join(cols[j] for j in keys)})" if keys else "") + ":")
        out += block(g) + [""]
    return "\n".join(out[:-1]) + "\n"


def terminal_width(stream) -> int | None:
    """The columns of the terminal ``stream`` writes to ($COLUMNS first, as shutil reads it); None when it is
    not a terminal (a pipe or file gets every table whole, one line per row, for scripts)."""
    return shutil.get_terminal_size().columns if stream.isatty() else None


def column_blocks(widths: list[int], numeric: list[bool], width: int | None) -> list[list[int]]:
    """Column indices per block so that each block's line fits ``width`` (two spaces between columns): one
    block when the whole table fits. The leading non-numeric columns are the keys every block repeats, as many
    of them as fit in half the width; a column wider than what is left gets a block of its own."""
    total = sum(widths) + 2 * (len(widths) - 1)
    if width is None or total <= width:
        return [list(range(len(widths)))]
    keys: list[int] = []
    for j, w in enumerate(widths):
        if numeric[j] or sum(widths[k] + 2 for k in keys) + w > width // 2:
            break
        keys.append(j)
    base = sum(widths[k] + 2 for k in keys)
    groups: list[list[int]] = []
    used = width + 1
    for j in range(len(keys), len(widths)):
        if used + 2 + widths[j] > width and (not groups or len(groups[-1]) > len(keys)):
            groups.append(list(keys))
            used = base - 2
        groups[-1].append(j)
        used += 2 + widths[j]
    return groups
