"""Vectorised splitting of delimited text into Arrow columns, without copying the text.

DuckDB's per-row string splitting costs microseconds per line; a million-line accounting export needs
better. Here numpy finds every newline and delimiter once, computes each field's byte range, and wraps
the ranges as Arrow ``string_view`` arrays that point into the original buffer (zero copy). DuckDB then
types and validates the columns in SQL.

A line's fields: the first ``free_at - 1`` fields count from the left, the fields after the free-text
column count from the right, and the free-text column takes whatever is between (so a delimiter inside
a job name stays in the job name).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ingest.lines import bounds, to_utf8  # noqa: F401  (to_utf8: part of this module's API)

#: Arrow string views carry 32-bit offsets: one data buffer per this many bytes.
VIEW_WINDOW = 1 << 30
_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype=np.uint32)


@dataclass
class Lines:
    """Byte ranges of the lines of ``data`` (``\\r\\n`` endings trimmed)."""
    data: bytes
    buf: np.ndarray          # the bytes followed by 16 zero bytes (string views read 4-12 bytes ahead)
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def text(self) -> pa.Array:
        return string_views(self.data, self.buf, self.starts, self.ends - self.starts)

    def line(self, i: int) -> bytes:
        """The bytes of line ``i`` (0-based)."""
        return bytes(self.data[int(self.starts[i]):int(self.ends[i])])


def int_array(values, type_=pa.int64()) -> pa.Array:
    """Integers (a numpy array or a list) as an Arrow array of ``type_`` (int32/int64), sharing a numpy array's
    memory. ``pa.array`` would do, but its first call imports pandas (~0.7 s of every CLI ingest)."""
    a = np.ascontiguousarray(values, dtype=np.int32 if type_ == pa.int32() else np.int64)
    return pa.Array.from_buffers(type_, len(a), [None, pa.py_buffer(a)])


def str_array(values) -> pa.Array:
    """Python strings (None for NULL) as an Arrow string array, without ``pa.array`` (see :func:`int_array`)."""
    enc = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(len(enc) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in enc], out=offsets[1:])
    valid = np.array([v is not None for v in values], dtype=bool)
    nulls = int(len(valid) - valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.large_string(), len(enc), [bitmap, pa.py_buffer(offsets),
                                                               pa.py_buffer(b"".join(enc))], null_count=nulls)


def padded(data: bytes) -> np.ndarray:
    """``data`` as uint8 followed by 16 zero bytes (one copy; :func:`read_padded` avoids even that)."""
    buf = np.zeros(len(data) + 16, dtype=np.uint8)
    buf[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return buf


def read_padded(path: str) -> np.ndarray:
    """A file's bytes read straight into a buffer with the 16 zero bytes string views need after it."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        buf = np.zeros(size + 16, dtype=np.uint8)
        n = f.readinto(memoryview(buf)[:size])
    return buf[: n + 16] if n < size else buf


def split_lines(data, buf: np.ndarray | None = None) -> Lines:
    """The lines of ``data`` (bytes, or a view of ``buf`` without its padding), as ingest/lines.py defines them."""
    if buf is None:
        buf = padded(data)
    starts, ends = bounds(buf, len(buf) - 16)
    return Lines(data, buf, starts, ends)


def _view_matrix(data: bytes, pad: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
    """(views as an (n, 4) uint32 matrix, data buffers) for the byte ranges (starts, lengths) of ``data``.

    Each 16-byte view is the length, then either the string itself (up to 12 bytes, inline) or its first
    4 bytes, its buffer index and its offset in that buffer.
    """
    n = len(starts)
    starts = starts.astype(np.int64, copy=False)
    lengths = np.maximum(lengths, 0).astype(np.int64)
    if len(data) < VIEW_WINDOW:  # the usual case: one data buffer
        bases = np.zeros(1, dtype=np.int64)
        limits = np.array([len(data)], dtype=np.int64)
        buf_idx = np.zeros(n, dtype=np.uint32)
        offsets = starts.astype(np.uint32)
    else:  # each window's buffer starts at its first string and spans its strings wholly
        uniq, window = np.unique(starts // VIEW_WINDOW, return_inverse=True)
        bases = np.array([starts[window == k].min() for k in range(len(uniq))], dtype=np.int64)
        limits = np.array([(starts + lengths)[window == k].max() for k in range(len(uniq))], dtype=np.int64)
        buf_idx = window.astype(np.uint32)
        offsets = (starts - bases[window]).astype(np.uint32)
    # 16 bytes from each start in one row gather (one cache line per string, not one per byte)
    words = np.lib.stride_tricks.sliding_window_view(pad, 16)[starts].view("<u4")
    short = lengths <= 12
    views = np.empty((n, 4), dtype=np.uint32)
    views[:, 0] = lengths
    # bytes past the string's end must be zero: mask each word by how many of its bytes are inside
    views[:, 1] = words[:, 0] & _MASKS[np.clip(lengths, 0, 4)]
    views[:, 2] = np.where(short, words[:, 1] & _MASKS[np.clip(lengths - 4, 0, 4)], buf_idx)
    views[:, 3] = np.where(short, words[:, 2] & _MASKS[np.clip(lengths - 8, 0, 4)], offsets)
    mv = memoryview(data)
    return views, [pa.py_buffer(mv[int(lo):int(hi)]) for lo, hi in zip(bases, limits)]


def _wrap(views: np.ndarray, data_bufs: list) -> pa.Array:
    views = np.ascontiguousarray(views)
    return pa.Array.from_buffers(pa.string_view(), len(views), [None, pa.py_buffer(views), *data_bufs])


def string_views(data: bytes, pad: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A Utf8View array of the byte ranges (starts, lengths) of ``data``, sharing its memory.

    ``pad`` is ``data`` as uint8 followed by at least 16 zero bytes."""
    if len(starts) == 0:
        return pa.array([], pa.string_view())
    return _wrap(*_view_matrix(data, pad, starts, lengths))


def delimiter_positions(buf: np.ndarray, delim: bytes) -> np.ndarray:
    """Start offsets of non-overlapping occurrences of ``delim`` (1-4 bytes) in ``buf``."""
    buf = buf[:-16]  # the padding
    if len(delim) == 1:
        return np.flatnonzero(buf == delim[0])
    m = len(delim)
    if len(buf) < m:
        return np.zeros(0, dtype=np.int64)
    hit = buf[: len(buf) - m + 1] == delim[0]
    for k in range(1, m):
        hit &= buf[k: len(buf) - m + 1 + k] == delim[k]
    pos = np.flatnonzero(hit)
    if len(pos) > 1:  # drop overlaps (e.g. '^|^|^'): keep a match only if it starts after the previous ends
        keep = np.ones(len(pos), dtype=bool)
        last = -m
        gaps = np.diff(pos)
        if (gaps < m).any():
            for i, p in enumerate(pos):
                if p < last + m:
                    keep[i] = False
                else:
                    last = p
            pos = pos[keep]
    return pos


@dataclass
class Fields:
    """Per selected line: the number of fields found, and each column as an Arrow string view array."""
    nfields: np.ndarray
    columns: list[pa.Array]


#: Lines split per batch: bounds the (lines x columns) offset matrices. Small enough (~10 MB) that the
#: allocator reuses their memory from batch to batch; 200k-line batches page-faulted fresh memory each time (2x slower).
CHUNK_LINES = 50_000


def split_fields(lines: Lines, rows: np.ndarray, delim: bytes, ncols: int, free_at: int | None,
                 trailing: bool, only: list[int] | None = None) -> Fields:
    """Split the lines ``rows`` (indices into ``lines``) into ``ncols`` columns.

    ``free_at`` (0-based) is the column that absorbs surplus delimiters, or None. With ``trailing``, one
    empty field after a final delimiter (``sacct --parsable``) is dropped. Lines with too few fields (or
    surplus fields and no free-text column) get empty columns; the caller rejects them by ``nfields``.
    ``only`` (column indices) builds just those columns, in that order (the others cost nothing).
    """
    want = list(range(ncols)) if only is None else list(only)
    chunks = [rows[i:i + CHUNK_LINES] for i in range(0, max(len(rows), 1), CHUNK_LINES)]

    def split(r: np.ndarray):
        # the delimiters of this batch's bytes only: small arrays the allocator reuses, where one array for the
        # whole input (8 bytes a delimiter, plus a byte-sized mask) would fault in fresh pages
        lo, hi = (int(lines.starts[r[0]]), int(lines.ends[r[-1]])) if len(r) else (0, 0)
        pos = delimiter_positions(lines.buf[lo:hi + 16], delim) + lo
        return _split_chunk(lines, r, pos, len(delim), ncols, free_at, trailing, want)
    # numpy releases the GIL in these scans and gathers, so batches split in parallel threads
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        parts = list(pool.map(split, chunks))
    nfields = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    columns = [pa.chunked_array([p[1][k] for p in parts], pa.string_view()) for k in range(len(want))]
    return Fields(nfields=nfields, columns=columns)


def _one_column(lines: Lines, starts, ends, first, nfields, pos, w: int, ncols: int, free_at: int | None,
                k: int) -> pa.Array:
    """Column ``k`` alone (left of any free-text column, so counted from the left on every line that has its
    fields): the same ranges :func:`_split_chunk` gives it, without the (lines x columns) matrices."""
    ok = (nfields == ncols) | ((nfields > ncols) & (free_at is not None))
    top = len(pos) - 1
    f_start = starts if k == 0 else np.where(ok, pos[np.minimum(first + k - 1, top)] + w, starts)
    f_end = np.where(ok, ends if k == ncols - 1 else pos[np.minimum(first + k, top)], starts)
    return string_views(lines.data, lines.buf, f_start, f_end - f_start)


def _split_chunk(lines: Lines, rows: np.ndarray, pos: np.ndarray, w: int, ncols: int, free_at: int | None,
                 trailing: bool, want: list[int]):
    starts, ends = lines.starts[rows], lines.ends[rows]
    n = len(rows)
    first = np.searchsorted(pos, starts)          # index in pos of the line's first delimiter
    last = np.searchsorted(pos, ends)             # one past its last delimiter
    if trailing and len(pos):
        ends_with = (last > first) & (pos[np.maximum(last - 1, 0)] + w == ends)
        last = last - ends_with
        ends = np.where(ends_with, ends - w, ends)
    nfields = last - first + 1
    if len(want) == 1 and (free_at is None or want[0] < free_at) and len(pos):
        return nfields, [_one_column(lines, starts, ends, first, nfields, pos, w, ncols, free_at, want[0])]
    f_start = np.repeat(starts[:, None], ncols, axis=1)
    f_end = f_start.copy()
    regular = np.flatnonzero(nfields == ncols)
    if len(regular) and ncols > 1:
        d = pos[first[regular][:, None] + np.arange(ncols - 1)]
        f_start[regular, 1:] = d + w
        f_end[regular, :-1] = d
    f_end[regular, ncols - 1] = ends[regular]
    surplus = np.flatnonzero(nfields > ncols) if free_at is not None else np.zeros(0, np.int64)
    if len(surplus):
        # fields left of the free-text column count from the left, those right of it from the right
        fs, ls = first[surplus], last[surplus]
        for k in range(ncols):
            before = fs + k - 1 if k <= free_at else ls - (ncols - k)
            after = fs + k if k < free_at else ls - (ncols - 1 - k)
            f_start[surplus, k] = np.where(before < fs, starts[surplus], pos[np.maximum(before, 0)] + w)
            f_end[surplus, k] = np.where(after >= ls, ends[surplus], pos[np.minimum(after, len(pos) - 1)])
    if len(want) < ncols:
        f_start, f_end = f_start[:, want], f_end[:, want]
    views, bufs = _view_matrix(lines.data, lines.buf, f_start.ravel(), (f_end - f_start).ravel())
    views = views.reshape(n, len(want), 4)
    return nfields, [_wrap(views[:, k, :], bufs) for k in range(len(want))]
