"""`gpuledger ingest dcgm`: scraped DCGM-exporter ``/metrics`` text (Prometheus text format 0.0.4 or OpenMetrics).

Parsing is vectorised (an input of millions of lines is never walked line by line in Python): the bytes are
cut into lines with numpy, each sample line is split from the right into ``series value [timestamp]`` with
Arrow kernels, and the series text is dictionary-encoded so that labels are parsed once per distinct series
(thousands), not once per line (millions). Values and timestamps are typed and checked in DuckDB by
:mod:`ingest.telemetry_store`.

Timestamps: OpenMetrics files (those with a ``# EOF`` line, or ``--format openmetrics``) carry seconds; the
Prometheus text format carries milliseconds. Lines without a timestamp take the file's scrape time
(``FILE@TIME`` or ``--scrape-time``).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest import telemetry_store as store
from ingest import warehouse
from ingest.errors import InputError
from ingest.inputs import read_file
from ingest.lines import arrow_lines

_SERIES = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(.*)\})?")
SHAPE = "expected `metric{labels} value [timestamp]`"


def split_spec(spec: str) -> tuple[str, str | None]:
    """``FILE@TIME`` -> (FILE, TIME); a path that exists as given is never split."""
    if "@" in spec and not os.path.exists(spec):
        path, when = spec.rsplit("@", 1)
        return path, when
    return spec, None


def split_lines(data: bytes) -> pa.Array:
    """The lines of ``data`` as one Arrow string array (ingest/lines.py: the one definition of a line)."""
    return arrow_lines(data)


def _patch(base: pa.Array, idx: np.ndarray, repl: pa.Array) -> pa.Array:
    """``base`` with positions ``idx`` replaced by ``repl`` (in order)."""
    order = np.arange(len(base), dtype=np.int64)
    order[idx] = len(base) + np.arange(len(idx))
    return pc.take(pa.concat_arrays([base, repl.cast(base.type)]), pa.array(order))


def _split_samples(lines: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray]:
    """Split lines from the right into (series text, value, timestamp or null, piece count)."""
    parts = pc.split_pattern(lines, " ", max_splits=2, reverse=True)
    flat, offs = parts.values, parts.offsets.to_numpy()
    n, start = np.diff(offs), offs[:-1]
    first = pc.take(flat, pa.array(start))
    value = pc.take(flat, pa.array(np.where(n >= 2, start + 1, start)))
    ts = pc.take(flat, pa.array(np.where(n == 3, start + 2, start)))
    # `m{a="x y"} 5` splits as [`m{a="x`, `y"}`, `5`]: a series cut inside its braces had no timestamp
    open_end = np.flatnonzero(~pc.ends_with(first, "}").to_numpy(zero_copy_only=False))
    if open_end.size:
        cut = open_end[pc.match_substring(pc.take(first, pa.array(open_end)), "{").to_numpy(zero_copy_only=False)]
        if cut.size:
            two = pc.split_pattern(pc.take(lines, pa.array(cut)), " ", max_splits=1, reverse=True)
            head = pc.list_element(two, 0)
            closed = pc.ends_with(head, "}").to_numpy(zero_copy_only=False)
            two_n = pc.list_value_length(two).to_numpy(zero_copy_only=False)
            tail = pc.take(two.values, pa.array(two.offsets.to_numpy()[:-1] + np.minimum(two_n, 2) - 1))
            first = _patch(first, cut, head)
            value = _patch(value, cut, tail)
            n = n.copy()
            n[cut] = np.where(closed & (two_n == 2), 2, 1)   # still open: not `series value` at all
    ts = pc.if_else(pa.array(n == 3), ts, pa.nulls(len(n), ts.type))
    return first, value, ts, n   # values keep any trailing blanks: DuckDB's casts ignore them


def _identities(texts: list[str], opts: store.TelemetryOptions, cluster: str, cache: dict) -> list[dict]:
    """Series rows for the distinct series texts; label sets are parsed once (cached across metrics and files),
    and not at all for metrics gpuledger does not use."""
    rows = []
    for sid, text in enumerate(texts):
        ident = cache.get(text)
        if ident is None:
            m = _SERIES.fullmatch(text)
            if m is None:
                ident = dict.fromkeys(store.SERIES_SCHEMA.names)
                ident.update(reject_field="metric", reject_reason="not a metric name: " + text[:80])
            elif m.group(1) not in store.METRICS:
                ident = store.series_identity(m.group(1), None, opts, cluster)
            else:
                key = ("labels", m.group(2) or "")
                device = cache.get(key)
                if device is None:
                    labels = store.parse_labels(key[1])
                    device = cache[key] = {"reject_field": "labels", "reject_reason": "malformed label set"} \
                        if labels is None else store.device_identity(labels, opts, cluster)
                ident = store.series_identity(m.group(1), None, opts, cluster, device=device)
            cache[text] = ident
        rows.append({**ident, "sid": sid, "series_text": text})
    return rows


def parse(lines: pa.Array, opts: store.TelemetryOptions, cluster: str, cache: dict | None = None):
    """Parse exposition lines into (points, series, skips, bad_lines, has_eof).

    ``skips`` maps reason -> (count, first line number); ``bad_lines`` is an Arrow table of rejected lines.
    """
    cache = {} if cache is None else cache
    line_no = np.arange(1, len(lines) + 1, dtype=np.int64)
    blank = pc.equal(pc.utf8_length(lines), 0).to_numpy(zero_copy_only=False)
    hashed = pc.starts_with(lines, "#").to_numpy(zero_copy_only=False)
    hidx = np.flatnonzero(hashed)
    htext = pc.utf8_rtrim_whitespace(pc.take(lines, pa.array(hidx)))
    eof = np.zeros(len(lines), bool)
    meta = np.zeros(len(lines), bool)
    eof[hidx] = pc.equal(htext, "# EOF").to_numpy(zero_copy_only=False)
    meta[hidx] = pc.match_substring_regex(htext, r"^#\s*(HELP|TYPE|UNIT)\s").to_numpy(zero_copy_only=False)
    skips = {}
    for reason, mask in (("blank line", blank), ("# EOF marker", eof), ("# HELP/# TYPE/# UNIT line", meta),
                         ("comment line", hashed & ~eof & ~meta)):
        if mask.any():
            skips[reason] = (int(mask.sum()), int(line_no[mask][0]))
    first, value, ts, n = _split_samples(lines)
    sample = ~(blank | hashed)
    ok = sample & (n >= 2)
    bad = sample & ~ok
    bad_tbl = pa.table({"line_no": pa.array(line_no[bad]), "field": pa.nulls(int(bad.sum()), pa.string()),
                        "reason": pa.array([SHAPE] * int(bad.sum()), pa.string()),
                        "raw": pc.utf8_rtrim_whitespace(pc.take(lines, pa.array(np.flatnonzero(bad)))).cast(pa.string())})
    enc = pc.dictionary_encode(first)
    sids = pc.filter(enc.indices, pa.array(ok)).cast(pa.int32())
    series = store.series_table(_identities(enc.dictionary.to_pylist(), opts, cluster, cache))
    okm = pa.array(ok)
    points = pa.table({"line_no": pa.array(line_no[ok]), "sid": sids,
                       "value": pc.filter(value, okm).cast(pa.string()), "ts": pc.filter(ts, okm).cast(pa.string())})
    return points, series, skips, bad_tbl, bool(eof.any())


@dataclass
class Parsed:
    """One input, parsed and checked, not yet stored (built without touching the warehouse)."""
    name: str
    points: pa.Table
    series: pa.Table
    skips: dict
    bad: pa.Table
    n_lines: int
    openmetrics: bool
    scrape_time: dt.datetime | None
    sha256: str
    nbytes: int


def parse_bytes(data: bytes, name: str, opts: store.TelemetryOptions, cluster: str, fmt: str = "auto",
                scrape_time: dt.datetime | None = None, cache: dict | None = None) -> Parsed:
    """Parse one scrape file (no warehouse access, so it can run beside the store of the previous file)."""
    lines = split_lines(data)
    first = next((t.strip() for t in lines[:50].to_pylist() if t and t.strip()), "")
    if first.startswith("timestamp,") or "utilization.gpu" in first:   # every line was "not a metric name"
        raise InputError(name, "this is an `nvidia-smi --query-gpu ... --format=csv` log: load it with "
                               "`gpuledger ingest nvidia-smi`")
    points, series, skips, bad, has_eof = parse(lines, opts, cluster, cache)
    if scrape_time is None and points.num_rows and points.column("ts").null_count:
        first = pc.filter(points.column("line_no"), pc.is_null(points.column("ts")))[0].as_py()
        raise InputError(name, "sample has no timestamp; give the scrape time as FILE@TIME or --scrape-time",
                         line_no=first)
    points = store.with_numbers(points)    # here, in the parsing thread, not on the store's critical path
    return Parsed(name, points, series, skips, bad, len(lines), fmt == "openmetrics" or (fmt == "auto" and has_eof),
                  scrape_time, hashlib.sha256(data).hexdigest(), len(data))


def store_parsed(con: duckdb.DuckDBPyConnection, p: Parsed, opts: store.TelemetryOptions, cluster: str) -> dict:
    """Load a parsed input as one run (one transaction); returns the run summary."""
    run = warehouse.IngestRun(con, "dcgm", p.name, sha256=p.sha256, nbytes=p.nbytes, cluster=cluster, options={
        "format": "openmetrics" if p.openmetrics else "prometheus-text", "scrape_time": p.scrape_time,
        "node": opts.node})
    with run:
        run.lines_read = p.n_lines
        for reason, (n, first) in p.skips.items():
            run.skip(reason, n, first)
        if p.bad.num_rows:
            run.reject_rows(p.bad)
        store.ingest_readings(con, run, p.points, p.series, "dcgm", opts, ts_unit="s" if p.openmetrics else "ms",
                              scrape_time=p.scrape_time)
    return store.summary(con, run)


def ingest_bytes(con: duckdb.DuckDBPyConnection, data: bytes, name: str, opts: store.TelemetryOptions,
                 fmt: str = "auto", scrape_time: dt.datetime | None = None, cache: dict | None = None) -> dict:
    """Load one scrape file; returns the run summary (see ``IngestRun.summary``)."""
    cluster = opts.cluster or store.default_cluster(con)
    return store_parsed(con, parse_bytes(data, name, opts, cluster, fmt, scrape_time, cache), opts, cluster)


def _parse_spec(spec: str, opts: store.TelemetryOptions, cluster: str, fmt: str, scrape_time: str | None,
                tz: str | None, cache: dict) -> Parsed:
    path, when = split_spec(spec)
    when = when or scrape_time
    t = store.parse_time(when, what=f"scrape time of {path}", tz=tz) if when else None
    return parse_bytes(read_file(path, "a metrics text file"), path, opts, cluster, fmt, t, cache)


def ingest_path(con: duckdb.DuckDBPyConnection, spec: str, opts: store.TelemetryOptions, fmt: str = "auto",
                scrape_time: str | None = None, tz: str | None = None, cache: dict | None = None) -> dict:
    """Load ``FILE`` or ``FILE@TIME``; the per-file time wins over ``scrape_time``."""
    cluster = opts.cluster or store.default_cluster(con)
    return store_parsed(con, _parse_spec(spec, opts, cluster, fmt, scrape_time, tz, {} if cache is None else cache),
                        opts, cluster)


def ingest_paths(con: duckdb.DuckDBPyConnection, specs: list[str], opts: store.TelemetryOptions, fmt: str = "auto",
                 scrape_time: str | None = None, tz: str | None = None) -> Iterator[dict]:
    """Load several files, one run each, parsing the next file while the current one is stored (Arrow and
    DuckDB both release the GIL, so the two overlap on two cores). Yields each run's summary in order."""
    cluster = opts.cluster or store.default_cluster(con)
    cache: dict = {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dcgm-parse") as pool:
        pending = pool.submit(_parse_spec, specs[0], opts, cluster, fmt, scrape_time, tz, cache) if specs else None
        for k in range(len(specs)):
            parsed = pending.result()
            pending = pool.submit(_parse_spec, specs[k + 1], opts, cluster, fmt, scrape_time, tz, cache) \
                if k + 1 < len(specs) else None
            try:
                yield store_parsed(con, parsed, opts, cluster)
            except BaseException:
                if pending is not None:
                    pending.cancel()
                raise
