"""What a line is, for every text ingestor: the one line splitter.

A line ends at ``\\n`` and nowhere else. A ``\\r`` before the ``\\n`` (CRLF) is dropped; a UTF-8 byte order mark
at the very start is dropped; a final line without ``\\n`` still counts; a final ``\\n`` does not start another
line. Form feeds, vertical tabs, U+2028/U+2029, NEL and lone ``\\r`` are characters *inside* a line (str.splitlines
would break there and miscount: "read 5" for a 3-line file). So ``lines_read`` is the file's line count as
``wc -l`` (plus an unterminated last line) gives it, in every ingestor, and a reject's line number is the one
an editor shows.

The sacct splitter (ingest/textsplit.py) takes its line bounds from :func:`bounds`; the other ingestors read
:func:`arrow_lines` (vectorised) or :func:`text_lines` (small inputs).
"""
from __future__ import annotations

import codecs
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.encoding import BOM
from ingest.errors import InputError
#: Newlines are searched block by block: a mask of the whole input would be one more input-sized allocation.
_BLOCK = 1 << 24


def to_utf8(data) -> tuple[bytes, int]:
    """``data`` (bytes-like) unchanged when it is UTF-8, else re-encoded with U+FFFD for bad bytes;
    returns (data, number of replacement characters)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if not len(raw) or raw.max() < 0x80:   # pure ASCII: valid, and no copy (nor temporary array) needed
        return data, 0
    try:
        codecs.utf_8_decode(data, "strict", True)
        return data, 0
    except UnicodeDecodeError:
        text = codecs.utf_8_decode(data, "replace", True)[0]
        return text.encode("utf-8"), text.count("\ufffd")


def bounds(buf: np.ndarray, n_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) byte offsets of the lines in ``buf[:n_bytes]`` (uint8), terminators excluded."""
    nl = np.concatenate([np.flatnonzero(buf[lo:min(lo + _BLOCK, n_bytes)] == 10) + lo
                         for lo in range(0, n_bytes, _BLOCK)] or [np.zeros(0, np.int64)])
    first = 3 if n_bytes >= 3 and bytes(buf[:3]) == BOM else 0
    starts = np.concatenate([[first], nl + 1]).astype(np.int64)
    ends = np.concatenate([nl, [n_bytes]]).astype(np.int64)
    if len(starts) and ends[-1] == starts[-1]:  # a final newline ends the last line; it does not start one
        starts, ends = starts[:-1], ends[:-1]
    if len(starts):
        cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
        ends = ends - cr
    return starts, ends


def count(data) -> int:
    """The number of lines of ``data`` (bytes-like)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    return len(bounds(buf, len(buf))[0])


def arrow_lines(data) -> pa.Array:
    """The lines of ``data`` as one Arrow string array (invalid UTF-8 shown as U+FFFD), without a per-line
    Python loop: each line's string runs to the next line's start, and the terminators are trimmed off."""
    data, _ = to_utf8(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends = bounds(buf, len(buf))
    if not len(starts):
        return pa.array([], pa.string())
    with_ends = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(np.append(starts, len(buf))),
                                                 pa.py_buffer(data))
    # the trim takes every trailing CR/LF: exact, unless a line keeps a CR of its own ("a\r\r\n" is "a\r")
    kept_cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
    if kept_cr.any():
        edge = np.zeros(len(buf) + 1, dtype=np.int8)   # +1 at each line's start, -1 at its end (each unique)
        edge[starts] += 1
        edge[ends] -= 1
        offsets = np.zeros(len(starts) + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        body = buf[np.cumsum(edge[:-1], dtype=np.int8) > 0].tobytes()
        trimmed = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(body))
    else:
        trimmed = pc.utf8_rtrim(with_ends, "\r\n")
    return trimmed.cast(pa.string()) if len(buf) < (1 << 31) - 1 else trimmed


def text_lines(data) -> list[str]:
    """The lines of ``data`` as Python strings (for inputs small enough to walk line by line)."""
    return arrow_lines(data).to_pylist()


_RULE = re.compile(r"\s*-+( +-+)*\s*")


def aligned_table(data, name: str, command: str) -> None:
    """Refuse, in one line, a space-aligned table of sacct, sacctmgr or sreport (titles over a rule of dashes
    among the first 50 lines): those commands cut values to the column width and fields may hold spaces, so
    no line of it can be read for sure. ``command`` names what to run instead. InputError names the line."""
    head = text_lines(bytes(data[:1 << 16]))[:50]
    for i, line in enumerate(head[1:], start=1):
        if _RULE.fullmatch(line) and head[i - 1].strip() and "|" not in head[i - 1]:
            raise InputError(name, f"line {i} heads a space-aligned table (titles over a rule of dashes), whose "
                                   f"values are cut to the column width; run {command}")


#: What printed a '|'-separated header line, by its titles (lower case, spaces removed), first match wins:
#: (test, what it is, the `gpuledger ingest` reader that loads it). Job outputs name JobID and titles only sacct
#: or only squeue prints (a JobID header with neither is left to the reader), sacctmgr's event and reservation
#: listings TimeStart (reservations also Name), sinfo two of its titles.
_SINFO_TITLES = {"nodelist", "nodehost", "hostnames", "partition", "state", "statelong", "gres", "gresused",
                 "cpus(a/i/o/t)", "memory"}
_SACCT_TITLES = {"jobidraw", "elapsed", "submit", "eligible", "start", "end", "exitcode", "alloctres", "reqtres",
                 "ncpus", "nnodes", "timelimit"}
_SQUEUE_TITLES = {"st", "nodelist(reason)", "submit_time", "start_time", "time_left", "tres_per_job",
                  "tres_per_node", "tres_alloc"}
_PRINTED_BY = (
    (lambda t: "jobid" in t and bool(t & _SACCT_TITLES), "sacct output", "sacct"),
    (lambda t: "jobid" in t and bool(t & _SQUEUE_TITLES), "squeue output", "squeue"),
    (lambda t: "timestart" in t and "name" in t, "`sacctmgr show reservation` output", "reservations"),
    (lambda t: "timestart" in t, "`sacctmgr show event` output", "events"),
    (lambda t: len(t & _SINFO_TITLES) >= 2, "sinfo output", "nodes"),
)


def other_output(line: str, name: str, line_no: int, reader: str) -> None:
    """Refuse, in one line, a '|'-separated header printed by another Slurm command than the one ``reader``
    (`gpuledger ingest READER`) loads, naming the reader that does: such a file was rejected line by line
    ("no header line before the data"), or, given to `ingest nodes`, loaded as nodes without GPUs."""
    if "|" not in line:
        return
    titles = {re.sub(r"\s+", "", t).lower() for t in line.split("|")} - {""}
    for test, what, by in _PRINTED_BY:
        if test(titles):
            if by != reader:
                raise InputError(name, f"line {line_no} heads {what}: load it with `gpuledger ingest {by}`")
            return


def first_text_line(lines: list[str]) -> int | None:
    """Index of the first line that is not blank, among the first 50."""
    return next((i for i, line in enumerate(lines[:50]) if line.strip()), None)
