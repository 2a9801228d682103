"""`gpuledger ingest prometheus`: DCGM-exporter series over the Prometheus HTTP API (``query_range``).

Each step reads the last reading inside the step (``last_over_time(m[step])``), so a series that ended is
not repeated for Prometheus' 5-minute lookback. For each of the DCGM metrics gpuledger uses, the window is cut
into chunks that keep every series under
Prometheus' limit of 11,000 points per query (``MAX_POINTS`` = 10,000 to leave room), and small enough in total
points to keep memory bounded when there are thousands of GPUs (the series count is asked first, from
``/api/v1/series``). Transient failures (connection refused/reset, timeouts, HTTP 429/5xx) are retried with
exponential backoff a bounded number of times; anything else fails at once with one line saying what the
server answered. Credentials come from the environment only and never appear in messages or the audit:

* ``GPULEDGER_PROM_TOKEN``: sent as ``Authorization: Bearer <token>``;
* ``GPULEDGER_PROM_USER`` and ``GPULEDGER_PROM_PASSWORD``: HTTP basic auth.

Values arrive as strings (``"0.5"``, ``"NaN"``) and are typed and checked by :mod:`ingest.telemetry_store`,
exactly as scraped files are.
"""
from __future__ import annotations

import base64
from itertools import chain
import datetime as dt
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from ingest import telemetry_store as store
from ingest import warehouse
from ingest.errors import InputError

#: Points per series per query; Prometheus refuses more than 11,000.
MAX_POINTS = 10_000
#: Points per query over all series (memory bound for one answer).
MAX_QUERY_POINTS = 2_000_000
#: DuckDB memory while pulling: a window's points (<= MAX_QUERY_POINTS) merge in far less; without a bound
#: DuckDB caches every page written (a day of 1,024 GPUs: 7.9 GB of RSS, 2.9 GB with this)
PULL_MEMORY = "2GB"
ENV_TOKEN, ENV_USER, ENV_PASSWORD = "GPULEDGER_PROM_TOKEN", "GPULEDGER_PROM_USER", "GPULEDGER_PROM_PASSWORD"
_RETRY_HTTP = {429, 500, 502, 503, 504}


@dataclass
class QueryOptions:
    url: str
    start: dt.datetime                 # naive UTC
    end: dt.datetime
    step_s: int = 60
    match: str | None = None          # extra label matchers, `{Hostname=~"gpu.*"}`
    metrics: tuple[str, ...] = tuple(store.METRICS)
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5
    max_points: int = MAX_POINTS
    max_query_points: int = MAX_QUERY_POINTS
    stats: dict = field(default_factory=dict)
    progress: Callable[[int, int], None] | None = None   # (windows done, windows) for a terminal counter


def redact(url: str) -> str:
    """The URL without any ``user:password@`` part, for messages and the audit."""
    p = urllib.parse.urlsplit(url)
    if p.username or p.password:
        p = p._replace(netloc=p.hostname + (f":{p.port}" if p.port else ""))
    return urllib.parse.urlunsplit(p)


def parse_step(text: str) -> int:
    """``60``, ``60s``, ``5m``, ``1h`` -> seconds."""
    import re
    m = re.fullmatch(r"\s*(\d+)\s*([smh]?)\s*", text or "")
    if not m or int(m.group(1)) <= 0:
        raise InputError("--step", f"not a step: {text!r} (use e.g. 60s, 5m)")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def matchers(match: str | None) -> str:
    """The inside of ``{...}`` of the user's ``--match`` (empty for none)."""
    if not match:
        return ""
    m = match.strip()
    if not (m.startswith("{") and m.endswith("}")):
        raise InputError("--match", f"expected label matchers in braces, like {{Hostname=~\"gpu0.*\"}}; got {match!r}")
    return m[1:-1].strip()


# ---------------------------------------------------------------- HTTP

class _Client:
    def __init__(self, opts: QueryOptions):
        self.opts = opts
        self.base = opts.url.rstrip("/")
        self.shown = redact(self.base)
        self.headers = {"Accept": "application/json", "User-Agent": "gpuledger"}
        parts = urllib.parse.urlsplit(self.base)
        token, user, pw = os.environ.get(ENV_TOKEN), os.environ.get(ENV_USER), os.environ.get(ENV_PASSWORD)
        if parts.username:
            user, pw = urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
            self.base = urllib.parse.urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
        if token:
            self.headers["Authorization"] = "Bearer " + token
            self.auth = "bearer"
        elif user:
            self.headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{pw or ''}".encode()).decode()
            self.auth = "basic"
        else:
            self.auth = None
        if not parts.scheme or not parts.netloc:
            raise InputError("--url", f"not an http(s) URL: {self.shown!r}")

    def get(self, path: str, params: list[tuple[str, str]]) -> dict:
        """POST a form to the API (long selectors fit) and return ``data``; retries transient failures."""
        body = urllib.parse.urlencode(params).encode()
        last = "no answer"
        for attempt in range(self.opts.retries + 1):
            if attempt:
                time.sleep(self.opts.backoff_s * 2 ** (attempt - 1))
            req = urllib.request.Request(self.base + path, data=body, headers={
                **self.headers, "Content-Type": "application/x-www-form-urlencoded"}, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.opts.timeout_s) as resp:
                    raw = resp.read()
                    self.opts.stats["bytes"] = self.opts.stats.get("bytes", 0) + len(raw)
                    return self._data(raw, resp.status, resp.headers.get("Content-Type", ""))
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                if exc.code in _RETRY_HTTP:
                    last = f"HTTP {exc.code}{self._error_text(raw)}"
                    continue
                if exc.code in (401, 403):
                    raise InputError(self.shown, f"Prometheus refused the credentials (HTTP {exc.code}); set "
                                     f"{ENV_TOKEN}, or {ENV_USER} and {ENV_PASSWORD}") from None
                raise InputError(self.shown, f"Prometheus answered HTTP {exc.code}{self._error_text(raw)}") from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                last = "timed out" if isinstance(reason, (socket.timeout, TimeoutError)) else \
                    str(getattr(reason, "strerror", None) or reason).lower()
        raise InputError(self.shown, f"cannot reach Prometheus: {last} "
                                     f"(after {self.opts.retries + 1} attempt{'s' if self.opts.retries else ''})")

    @staticmethod
    def _error_text(raw: bytes) -> str:
        try:
            doc = json.loads(raw)
            return f": {doc.get('errorType', 'error')}: {doc.get('error', '')}".rstrip(": ")
        except (ValueError, AttributeError):
            text = raw.decode("utf-8", "replace").strip().splitlines()
            return f": {text[0][:200]}" if text else ""

    def _data(self, raw: bytes, status: int, ctype: str) -> dict:
        try:
            doc = json.loads(raw)
        except ValueError:
            raise InputError(self.shown, f"not a Prometheus API answer (HTTP {status}, {ctype or 'no content type'}); "
                                         "is --url the Prometheus server?") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error", "no error text") if isinstance(doc, dict) else "unexpected JSON"
            raise InputError(self.shown, f"Prometheus answered an error: {err}")
        for w in doc.get("warnings") or []:
            self.opts.stats.setdefault("warnings", []).append(str(w)[:300])
        return doc.get("data")


# ---------------------------------------------------------------- chunks

def _epoch(t: dt.datetime) -> float:
    return t.replace(tzinfo=dt.timezone.utc).timestamp()


def chunks(start: float, end: float, step: int, per_series: int) -> list[tuple[float, float]]:
    """Consecutive ``[t0, t1]`` windows covering ``[start, end]`` at ``step``, each with at most
    ``per_series`` evaluation points (``(t1 - t0) / step + 1``)."""
    out, t0 = [], start
    span = (max(1, per_series) - 1) * step
    while t0 <= end:
        t1 = min(end, t0 + span)
        out.append((t0, t1))
        t0 = t1 + step
    return out


def _series_count(client: _Client, selector: str, start: float, end: float) -> int:
    data = client.get("/api/v1/series", [("match[]", selector), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")])
    return len(data or [])


def series_text(metric: str, labels: dict) -> str:
    """A series' text, ``metric{k="v",...}`` with its labels sorted and without ``__name__``: its key in the
    identity cache and the join key of push-down's minute answers (ingest/prometheus_pushdown.py)."""
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"


def _to_tables(result: list, first_line: int, metric: str, opts: store.TelemetryOptions, cluster: str,
               cache: dict, sid_base: int) -> tuple[pa.Table, list[dict]]:
    """A ``matrix`` result -> (points, series rows); values stay text, as the API sends them."""
    ts, vals, sids, series = [], [], [], []
    for i, item in enumerate(result):
        labels = {k: str(v) for k, v in (item.get("metric") or {}).items()}
        labels.pop("__name__", None)
        text = series_text(metric, labels)
        ident = cache.get(text)
        if ident is None:
            ident = cache[text] = store.series_identity(metric, labels, opts, cluster)
        series.append({**ident, "sid": sid_base + i, "series_text": text})
        flat = list(chain.from_iterable(item.get("values") or []))   # [t0, v0, t1, v1, ...]
        ts.extend(flat[0::2])
        vals.extend(flat[1::2])
        sids.extend([sid_base + i] * (len(flat) // 2))
    n = len(ts)
    points = pa.table({"line_no": pa.array(range(first_line, first_line + n), pa.int64()),
                       "sid": pa.array(sids, pa.int32()),
                       "value": pa.array([str(v) for v in vals] if vals and not isinstance(vals[0], str) else vals,
                                         pa.string()),
                       "ts": pa.array(ts, pa.float64())})
    return points, series


def ingest(con: duckdb.DuckDBPyConnection, q: QueryOptions, opts: store.TelemetryOptions) -> dict:
    """Pull ``q.metrics`` over ``[q.start, q.end]`` and load them as one run; returns the run summary."""
    client = _Client(q)
    inner = matchers(q.match)
    start, end = _epoch(q.start), _epoch(q.end)
    if end < start:
        raise InputError("--end", "is before --start")
    cluster = opts.cluster or store.default_cluster(con)
    name = f"{client.shown} [{q.start:%Y-%m-%dT%H:%M:%SZ}, {q.end:%Y-%m-%dT%H:%M:%SZ}] step {q.step_s}s"
    counts = {}
    for metric in q.metrics:
        selector = metric + ("{" + inner + "}" if inner else "")
        n = _series_count(client, selector, start, end)
        if n:
            counts[metric] = (selector, n)
    # one chunk holds every metric of a time window, so each device-minute row is written once, complete
    per_series = min(q.max_points, max(1, q.max_query_points // max(1, sum(n for _, n in counts.values()))))
    windows = chunks(start, end, q.step_s, per_series) if counts else []
    q.stats.update(queries=len(windows) * len(counts), points=0, series=sum(n for _, n in counts.values()))
    run = warehouse.IngestRun(con, "prometheus", name, cluster=cluster, options={
        "url": client.shown, "start": q.start, "end": q.end, "step_s": q.step_s, "match": q.match,
        "auth": client.auth, "queries": q.stats["queries"]})
    with run, warehouse.bounded_memory(con, PULL_MEMORY):
        cache, line = {}, 1
        for done, (t0, t1) in enumerate(windows):
            if q.progress:
                q.progress(done, len(windows))
            parts, series = [], []
            for metric, (selector, _) in counts.items():
                # the last reading inside each step, never one repeated by the 5-minute lookback
                expr = f"last_over_time({selector}[{q.step_s * 1000 - 1}ms])"
                data = client.get("/api/v1/query_range", [("query", expr), ("start", f"{t0:.3f}"),
                                                           ("end", f"{t1:.3f}"), ("step", f"{q.step_s}s")])
                if not data or data.get("resultType") != "matrix":
                    raise InputError(client.shown, "expected a matrix from query_range, got "
                                                   f"{data and data.get('resultType')}")
                points, rows = _to_tables(data.get("result") or [], line, metric, opts, cluster, cache,
                                          sid_base=len(series))
                line += points.num_rows
                parts.append(points)
                series += rows
            points = pa.concat_tables(parts) if parts else None
            if points is None or not points.num_rows:
                continue
            run.lines_read += points.num_rows
            store.ingest_readings(con, run, points, store.series_table(series), "prometheus", opts, ts_unit="s",
                                  interval_s=max(60, q.step_s))
        if q.progress and windows:
            q.progress(len(windows), len(windows))
        q.stats["points"] = run.lines_read
        if q.stats.get("warnings"):
            run.options["warnings"] = q.stats["warnings"][:20]
    return store.summary(con, run)
