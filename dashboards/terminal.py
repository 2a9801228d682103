"""Text for a terminal: data shown as aligned tables, and every text from data made safe to print.

Account, team, job and file names come from the sites' inputs; an ESC sequence or another control character in
one must print as text, never clear the screen, move the cursor or hide a line. :func:`escape` writes each
C0/C1 control character (and the bidirectional overrides that reorder what is shown) as a visible escape
(``\\x1b``, ``\\u202e``); only the newlines of multi-line output stay newlines.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal

#: C0 and C1 controls, DEL, line/paragraph separators and the bidirectional embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
#: columns that count things (jobs, GPUs, nodes, ...): whole values print as integers, never "32.00"
COUNT_COLUMN = re.compile(r"(^|_)(n?jobs|n?gpus|n?nodes|ncpus|count|users|pods|lines|periods|replications|n)(_|$)")


def _visible(m: re.Match) -> str:
    c = m.group()
    return _SHORT.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape(text: str, multiline: bool = False) -> str:
    """``text`` with every terminal control character shown as an escape; ``multiline`` keeps newlines."""
    return (_CONTROL_BUT_NEWLINE if multiline else _CONTROL).sub(_visible, text)


def _float_cells(name: str, values: list) -> list[str]:
    """Counts (jobs, GPUs, nodes, ...) with whole values as integers; others to 2 decimals, or 4 significant
    digits below 1."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if COUNT_COLUMN.search(name) and all(v == int(v) for v in finite):
        return ["" if v is None else f"{v:,.0f}" if math.isfinite(v) else str(v) for v in values]
    return ["" if v is None else f"{v:,.4g}" if abs(v) < 1 else f"{v:,.2f}" for v in values]


def _cells(s) -> list[str]:
    values = s.to_list()
    if s.dtype.is_float():
        return _float_cells(s.name, values)
    if s.dtype.is_integer():
        return ["" if v is None else str(v) for v in values]
    return ["" if v is None else f"{v:,}" if isinstance(v, Decimal) else escape(str(v)) for v in values]


def format_table(df) -> str:
    """Every row and column of a Polars DataFrame, aligned: numbers right-aligned, counts as integers,
    decimals exact with thousands separators, text escaped (:func:`escape`)."""
    if df.height == 0:
        return "(no rows)\n"
    cols = [escape(c) for c in df.columns]
    cells = [_cells(df.get_column(c)) for c in df.columns]
    numeric = [df.get_column(c).dtype.is_numeric() for c in df.columns]
    widths = [max(len(c), *(len(v) for v in vals)) for c, vals in zip(cols, cells)]

    def line(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()
    rows = [line(cols), line(["-" * w for w in widths])]
    rows += [line([cells[j][i] for j in range(len(cols))]) for i in range(df.height)]
    return "\n".join(rows) + "\n"
