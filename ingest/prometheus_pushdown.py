"""`gpuledger ingest prometheus --aggregate INTERVAL`: per-GPU aggregates computed where the telemetry lives.

Instead of one point per series and minute (:mod:`ingest.prometheus`), the store answers one point per series
and *interval* (default 5 minutes). Intervals end on multiples of the interval since the epoch: the interval
evaluated at 10:05 holds the readings of (10:00, 10:05], which the raw pull stores as the minute rows
10:01 .. 10:05 (a raw row ``ts`` holds the last reading in ``(ts - 60 s, ts]``). The pull is widened to the whole
intervals around ``--start`` and ``--end``.

Per series and interval the store sends the mean of the activity metrics (GPU_UTIL, SM/GR_ENGINE/TENSOR_ACTIVE),
POWER_USAGE and GPU_TEMP, the maximum of FB_USED, XID and the state-event fields: plain range functions
(``avg_over_time(m[5m])``), the cheapest thing a store evaluates. With the exporter scraped once a minute these
are the raw rows' mean and maximum exactly; with faster scrapes the mean is over every reading (the raw pull keeps
the last of each minute). Minute readings travel only where one value per interval would change the efficiency
figures:

* *mixed* intervals of an activity series: fewer readings than minutes, or some at zero (below
  :data:`ingest.warehouse.IDLE_EPSILON`) and some not (a job or its exporter label starting or ending inside, an
  idle stretch beginning or ending). The store tests this (:func:`mixed_expression`) and answers only the mixed
  (series, interval) pairs;
* *handover* intervals: a GPU job known to the warehouse starts within :data:`HANDOVER_S` of another's end on
  the same node, so no minute at zero need separate them.

Their minutes are then asked interval by interval, for just those devices (by ``UUID``, else by node): queries
the store answers from its index in milliseconds. (Selecting them inside one query for the whole window made the
store evaluate every minute of every series, more work than the raw pull.)

Stored rows (docs/METRICS.md, "Push-down telemetry"): a device's interval without minute readings is one row
covering the interval (``interval_s`` = the interval), which the efficiency model spreads evenly over its
minutes: its sum is the raw minutes' sum, and its minutes are all at zero or none. Any other interval is stored
as minute rows: the fetched readings as read, the device's other series (memory, power, temperature, activity
metrics that were not mixed) repeated on the minutes fetched for the same label set, else for the device.

Chunking, retries, credentials and error messages are those of :mod:`ingest.prometheus`.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import queue
import re
from itertools import chain

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest import prometheus as raw
from ingest import telemetry_store as store
from ingest import warehouse
from ingest.errors import InputError

#: Longest interval accepted (longer intervals transfer fewer aggregates but more minutes of mixed intervals).
MAX_INTERVAL_S = 60 * 999
#: The aggregate of each stored column over an interval (the rest, XID and state events: the maximum).
_FN = {**dict.fromkeys(store.ACTIVITY_COLUMNS, "avg_over_time"), "fb_used_mib": "max_over_time",
       "power_w": "avg_over_time", "temp_c": "avg_over_time"}


def is_activity(metric: str) -> bool:
    return store.METRICS[metric][0] in store.ACTIVITY_COLUMNS


def expression(metric: str, selector: str, interval_s: int) -> str:
    """PromQL of ``metric``'s aggregate (``selector`` = metric + matchers) over the readings of the interval
    ending at the evaluation time, ``(s - interval, s]``: the mean, for memory, XID and state events the maximum.
    A plain range function: no subquery, no operator between vectors (both multiply the store's work)."""
    return f"{_FN.get(store.METRICS[metric][0], 'max_over_time')}({selector}[{interval_s * 1000 - 1}ms])"


def mixed_expression(metric: str, selector: str, interval_s: int, step_s: int = 60) -> str:
    """PromQL keeping the activity series whose interval (ending at the evaluation time) is *mixed*: fewer
    readings than minutes, or some reading at zero (below the idle threshold in the metric's unit: 0.5 for
    GPU_UTIL, which is percent; 0.005 for the PROF ratios) and some not."""
    r = f"{selector}[{interval_s * 1000 - 1}ms]"
    thr = f"{warehouse.IDLE_EPSILON / store.METRICS[metric][1]:g}"
    return (f"(count_over_time({r}) < {interval_s // step_s}) or "
            f"((min_over_time({r}) < {thr}) and (max_over_time({r}) >= {thr}))")


def interval_ends(start: float, end: float, interval_s: int) -> tuple[int, int]:
    """First and last interval end (multiples of ``interval_s``, epoch seconds) whose minutes cover the raw
    pull's rows ``start .. end``."""
    return -(-int(start) // interval_s) * interval_s, -(-int(end) // interval_s) * interval_s


#: A job starting within this many seconds of another's end on the same node may leave no minute at zero
#: between them (a *handover*): the store's mixed test cannot see it, so those intervals are asked minute by minute.
HANDOVER_S = 120


def handovers(con: duckdb.DuckDBPyConnection, cluster: str, first: int, last: int, interval_s: int,
              step_s: int = 60) -> dict[int, list[str]]:
    """Intervals (by end, epoch seconds) in ``[first, last]`` holding a handover (:data:`HANDOVER_S`) between two
    GPU jobs known to the warehouse, with the nodes where it happens: ``{interval end: [node, ...]}``. A time
    falls in the minute row holding it; the row belongs to the interval ending at the next multiple of
    ``interval_s``."""
    rows = con.execute(f"""
        WITH e AS (
            SELECT jn.node, epoch(j.start) AS st, epoch(j."end") AS en
            FROM jobs j JOIN job_nodes jn USING (job_uid)
            WHERE j.cluster = $c AND j.ngpus > 0 AND jn.gpus_on_node > 0 AND j.start IS NOT NULL
              AND coalesce(j."end", j.start) >= make_timestamp($lo::BIGINT * 1000000)
              AND j.start <= make_timestamp($hi::BIGINT * 1000000)),
        h AS (SELECT b.node, unnest([a.en, b.st]) AS t
              FROM e b ASOF JOIN (SELECT node, en FROM e WHERE en IS NOT NULL) a ON a.node = b.node AND a.en <= b.st
              WHERE b.st - a.en <= {HANDOVER_S}),
        s AS (SELECT DISTINCT node, ceil(floor(t / {step_s}) * {step_s} / {interval_s})::BIGINT * {interval_s} AS s
              FROM h)
        SELECT s, list(node ORDER BY node) FROM s WHERE s BETWEEN $first AND $last GROUP BY s ORDER BY s""",
                       {"c": cluster, "lo": first - 2 * interval_s, "hi": last + interval_s, "first": first,
                        "last": last}).fetchall()
    return dict(rows)


_META = re.compile(r"([\\.+*?()|\[\]{}^$])")


def _alternatives(values) -> str:
    """A PromQL string literal's inside for a regex matching exactly these values. Only regex metacharacters are
    escaped (``re.escape`` also escapes ``-``, which keeps Prometheus from matching a plain alternation as a set
    through its index: every UUID has dashes)."""
    return "|".join(_META.sub(r"\\\1", v) for v in sorted(values)).replace("\\", "\\\\").replace('"', '\\"')


def node_matcher(nodes) -> str:
    """``Hostname=~"..."`` matching these nodes, with or without a domain (nodes are stored without one)."""
    return f'Hostname=~"({_alternatives(nodes)})([.].*)?"'


def uuid_matcher(uuids) -> str:
    """``UUID=~"..."`` matching these devices."""
    return f'UUID=~"{_alternatives(uuids)}"'


# ---------------------------------------------------------------- layout (DuckDB)

def _layout_sql(interval_s: int, step_s: int) -> str:
    """Aggregates ``_ag(sid, s, v)`` (``s`` = interval end), edges ``_ed(series_text, ts, v)`` and series ``_as``
    -> ``_lay(sid, ts, value, coarse)``: the readings to store, ``ts`` epoch seconds (module doc)."""
    lag, slots = interval_s - step_s, interval_s // step_s
    acts = ", ".join(f"'{c}'" for c in store.ACTIVITY_COLUMNS)
    return f"""
    CREATE OR REPLACE TEMP TABLE _lay AS
    WITH u AS (
        SELECT g.sid, g.s - {lag} AS b, g.v AS avg, s.metric IN ({acts}) AS is_act,
               coalesce(s.cluster || '|' || s.node || '|' || s.gpu, 'sid' || g.sid) AS dkey,
               substr(s.series_text, strpos(s.series_text, '{{')) AS lkey
        FROM _ag g JOIN _as s USING (sid) WHERE NOT isnan(g.v)),
    e AS (
        SELECT DISTINCT s.sid, e.ts, e.ts - ((e.ts - {step_s}) % {interval_s}) AS b, e.v,
               coalesce(s.cluster || '|' || s.node || '|' || s.gpu, 'sid' || s.sid) AS dkey,
               substr(s.series_text, strpos(s.series_text, '{{')) AS lkey
        FROM _ed e JOIN _as s USING (series_text)),
    dev AS (SELECT DISTINCT dkey, b, FALSE AS coarse FROM e),   -- devices with minutes fetched in an interval
    dl AS (SELECT dkey, b, list(DISTINCT ts ORDER BY ts) AS tss FROM e GROUP BY ALL),
    ll AS (SELECT lkey, b, list(DISTINCT ts ORDER BY ts) AS tss FROM e GROUP BY ALL),
    x AS (SELECT u.*, coalesce(d.coarse, TRUE) AS coarse FROM u LEFT JOIN dev d USING (dkey, b)),
    spread AS (   -- minute rows of series without edge readings: on the minutes fetched for the same label set
                  -- (the exporter's job label stays on its job's minutes), else the device's, else every minute
        SELECT x.sid, unnest(coalesce(ll.tss, dl.tss, generate_series(x.b, x.b + {lag}, {step_s}))) AS ts,
               x.avg AS value
        FROM x LEFT JOIN dl USING (dkey, b) LEFT JOIN ll USING (lkey, b)
        WHERE NOT x.coarse AND NOT EXISTS (SELECT 1 FROM e WHERE e.sid = x.sid AND e.b = x.b))
    SELECT sid, b::DOUBLE AS ts, avg AS value, TRUE AS coarse FROM x WHERE coarse
    UNION ALL
    SELECT e.sid, e.ts::DOUBLE, e.v, FALSE FROM e JOIN x USING (sid, b) WHERE NOT x.coarse
    UNION ALL
    SELECT sid, ts::DOUBLE, value, FALSE FROM spread"""


def _matrix(client: raw._Client, expr: str, start: float, end: float, step_s: int) -> list:
    client.opts.stats["queries"] = client.opts.stats.get("queries", 0) + 1
    data = client.get("/api/v1/query_range", [("query", expr), ("start", f"{start:.3f}"), ("end", f"{end:.3f}"),
                                               ("step", f"{step_s}s")])
    if not data or data.get("resultType") != "matrix":
        raise InputError(client.shown, f"expected a matrix from query_range, got {data and data.get('resultType')}")
    return data.get("result") or []


def _edge_table(result: list, metric: str) -> pa.Table:
    """A minute query's matrix -> ``(series_text, ts, v)``, ``ts`` the minute row (the evaluation time). Only the
    series text (:func:`ingest.prometheus.series_text`: it joins the aggregates' series) is built: these answers
    are many series of a few points each, so per-series work is what costs."""
    texts, lens, flat = [], [], []
    for item in result:
        texts.append(raw.series_text(metric, item.get("metric") or {}))
        vals = item.get("values") or []
        lens.append(len(vals))
        flat.extend(chain.from_iterable(vals))
    sid = pa.array(np.repeat(np.arange(len(texts), dtype=np.int32), lens))
    ts = pa.array(flat[0::2], pa.float64())
    points = store.with_numbers(pa.table({"value": pa.array(flat[1::2], pa.string()), "ts": ts}))
    return pa.table({"series_text": pc.take(pa.array(texts, pa.string()), sid),
                     "ts": pc.cast(pc.round(ts), pa.int64()), "v": points.column("vd")})


def _mixed(result: list, metric: str, opts: store.TelemetryOptions, cluster: str, cache: dict,
           wanted: dict) -> int:
    """From the answer of :func:`mixed_expression` (which series of ``metric`` are mixed in which interval), add
    their devices (UUID, else node) to ``wanted[interval end]``; returns the points received."""
    points, rows = raw._to_tables(result, 0, metric, opts, cluster, cache, sid_base=0)
    for sid, t in zip(points.column("sid").to_pylist(), points.column("ts").to_pylist()):
        row = rows[sid]
        nodes, uuids = wanted.setdefault(int(round(t)), (set(), set()))
        if row.get("uuid"):
            uuids.add(row["uuid"])
        elif row.get("node"):
            nodes.add(row["node"])
    return points.num_rows


#: Minute queries in flight at once: each is a round trip the store answers in milliseconds, so one at a time
#: leaves both ends waiting on each other (288 of them a day per activity metric).
PARALLEL_QUERIES = 4


def _minutes(client: raw._Client, counts: dict, wanted: dict, q: raw.QueryOptions, interval_s: int,
             opts: store.TelemetryOptions, cluster: str, cache: dict) -> list[pa.Table]:
    """The minute readings of every activity series of the wanted devices (by UUID) and nodes (handovers, series
    without a UUID), interval by interval: small queries the store answers from its index in milliseconds,
    :data:`PARALLEL_QUERIES` at a time (:func:`_fetch`)."""
    asks = []
    for s, (nodes, uuids) in sorted(wanted.items()):
        for metric, (selector, _) in counts.items():
            if not is_activity(metric):
                continue
            name, _, inner = selector.partition("{")
            parts = [f"last_over_time({name}{{{', '.join(filter(None, [inner.rstrip('}'), m]))}}}"
                     f"[{q.step_s * 1000 - 1}ms])"
                     for m in ([node_matcher(nodes)] if nodes else []) + ([uuid_matcher(uuids)] if uuids else [])]
            asks.append((metric, " or ".join(parts), s - interval_s + q.step_s, s))
    # the answers first in zip: their generator then runs to its end (and adds its counters)
    return [_edge_table(result, metric)
            for result, (metric, *_) in zip(_fetch(client, q, [(a[1], a[2], a[3], q.step_s) for a in asks]), asks)]


def _fetch(client: raw._Client, q: raw.QueryOptions, asks: list[tuple[str, float, float, int]]):
    """The matrices of ``asks`` (expression, start, end, step), in order as they arrive, :data:`PARALLEL_QUERIES`
    in flight (each thread with its own client and counters, added to ``client``'s once all are read): the
    caller parses one answer while the store computes the next."""
    clients = queue.SimpleQueue()
    mine = [raw._Client(dataclasses.replace(q, stats={})) for _ in range(min(PARALLEL_QUERIES, len(asks)))]
    for c in mine:
        clients.put(c)

    def ask(a):
        c = clients.get()
        try:
            return _matrix(c, *a)
        finally:
            clients.put(c)

    with concurrent.futures.ThreadPoolExecutor(len(mine) or 1) as pool:
        yield from pool.map(ask, asks)
    for c in mine:
        for k in ("queries", "bytes"):
            client.opts.stats[k] = client.opts.stats.get(k, 0) + c.opts.stats.get(k, 0)
        if c.opts.stats.get("warnings"):
            client.opts.stats.setdefault("warnings", []).extend(c.opts.stats["warnings"])


def _answers(client: raw._Client, counts: dict, s0: float, s1: float, q: raw.QueryOptions, interval_s: int,
             opts: store.TelemetryOptions, cluster: str, cache: dict,
             jobs: dict[int, list[str]]) -> tuple[pa.Table, pa.Table, list[dict], int]:
    """The answers for the intervals ending at ``s0 .. s1`` (the aggregate and mixed-test queries in flight
    together, :func:`_fetch`): aggregates ``(sid, s, v)``, minute readings
    ``(series_text, ts, v)`` of mixed and handover (``jobs``) intervals, the aggregates' series, and the number of
    mixed-test points received."""
    aggs, series, tested = [], [], 0
    wanted = {s: (set(n), set()) for s, n in jobs.items() if s0 <= s <= s1}
    asks = [(kind, metric, expr(metric, selector, interval_s)) for metric, (selector, _) in counts.items()
            for kind, expr in (("agg", expression), ("mixed", mixed_expression))
            if kind == "agg" or is_activity(metric)]
    for result, (kind, metric, _) in zip(_fetch(client, q, [(a[2], s0, s1, interval_s) for a in asks]), asks):
        if kind == "mixed":
            tested += _mixed(result, metric, opts, cluster, cache, wanted)
            continue
        points, rows = raw._to_tables(result, 0, metric, opts, cluster, cache, sid_base=len(series))
        aggs.append(points)
        series += rows
    edges = _minutes(client, counts, wanted, q, interval_s, opts, cluster, cache)
    ag = pa.concat_tables(aggs)
    ed = pa.concat_tables(edges) if edges else pa.table({"series_text": pa.array([], pa.string()),
                                                         "ts": pa.array([], pa.int64()),
                                                         "v": pa.array([], pa.float64())})
    ag = pa.table({"sid": ag.column("sid"), "s": pc.cast(pc.round(ag.column("ts")), pa.int64()),
                   "v": store.with_numbers(ag).column("vd")})
    return ag, ed, series, tested


def ingest(con: duckdb.DuckDBPyConnection, q: raw.QueryOptions, opts: store.TelemetryOptions,
           interval_s: int = 300) -> dict:
    """Pull per-interval aggregates (and mixed intervals' minutes) of ``q.metrics`` for the intervals covering
    ``[q.start, q.end]`` and store them as rows the efficiency model reads like raw minutes (module doc).

    Returns the run summary; ``q.stats`` gets ``queries``, ``points`` (values received: aggregates + edge
    minutes), ``edge_points``, ``series``, ``bytes`` and ``batches`` (store calls: windows are held together up
    to ``q.max_query_points`` rows, :class:`_Held`)."""
    if interval_s % q.step_s or interval_s < q.step_s or interval_s > MAX_INTERVAL_S or q.step_s != 60:
        raise InputError("--aggregate", f"interval must be whole minutes, 1 to {MAX_INTERVAL_S // 60} (with --step "
                                        f"60s); got {interval_s} s")
    client = raw._Client(q)
    inner = raw.matchers(q.match)
    start, end = raw._epoch(q.start), raw._epoch(q.end)
    if end < start:
        raise InputError("--end", "is before --start")
    cluster = opts.cluster or store.default_cluster(con)
    first, last = interval_ends(start, end, interval_s)
    name = f"{client.shown} [{q.start:%Y-%m-%dT%H:%M:%SZ}, {q.end:%Y-%m-%dT%H:%M:%SZ}] aggregate {interval_s}s"
    counts = {}
    for metric in q.metrics:
        selector = metric + ("{" + inner + "}" if inner else "")
        n = raw._series_count(client, selector, first - interval_s, last)
        if n:
            counts[metric] = (selector, n)
    # bounded like the raw pull, in minutes: the store evaluates every minute of the window's intervals
    per_series = q.max_query_points // max(1, sum(n for _, n in counts.values())) // (interval_s // q.step_s)
    windows = raw.chunks(first, last, interval_s, max(1, min(q.max_points, per_series))) if counts else []
    jobs = handovers(con, cluster, first, last, interval_s, q.step_s) if counts else {}
    q.stats.update(queries=0, points=0, edge_points=0, batches=0,
                   series=sum(n for _, n in counts.values()), handover_intervals=len(jobs))
    run = warehouse.IngestRun(con, "prometheus", name, cluster=cluster, options={
        "url": client.shown, "start": q.start, "end": q.end, "step_s": q.step_s, "aggregate_s": interval_s,
        "match": q.match, "auth": client.auth})
    with run, warehouse.bounded_memory(con, raw.PULL_MEMORY):
        cache, line, held = {}, 1, _Held()
        for done, (s0, s1) in enumerate(windows):
            if q.progress:
                q.progress(done, len(windows))
            ag, ed, series, tested = _answers(client, counts, s0, s1, q, interval_s, opts, cluster, cache, jobs)
            q.stats["points"] += ag.num_rows + ed.num_rows + tested
            q.stats["edge_points"] += ed.num_rows
            held.add(ag, ed, series)
            if held.ag_rows and (held.rows >= q.max_query_points or done == len(windows) - 1):
                line = _store_window(con, run, *held.take(), q.step_s, interval_s, opts, line)
                q.stats["batches"] += 1
        if q.progress and windows:
            q.progress(len(windows), len(windows))
        run.options.update(queries=q.stats["queries"], points_received=q.stats["points"],
                           edge_points=q.stats["edge_points"])
        if q.stats.get("warnings"):
            run.options["warnings"] = q.stats["warnings"][:20]
    return store.summary(con, run)


class _Held:
    """Windows' answers held until :data:`ingest.prometheus.MAX_QUERY_POINTS` rows (bounded memory) are stored
    together: each store call has a fixed cost (merge, rollup, commit of a batch), and on edge-dense days a
    window's answers are a fraction of that bound. Series keep one ``sid`` across the held windows."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.ags, self.eds, self.series, self.index, self.rows, self.ag_rows = [], [], [], {}, 0, 0

    def add(self, ag: pa.Table, ed: pa.Table, series: list[dict]) -> None:
        sids = []
        for r in series:
            sid = self.index.get(r["series_text"])
            if sid is None:
                sid = self.index[r["series_text"]] = len(self.series)
                self.series.append({**r, "sid": sid})
            sids.append(sid)
        if ag.num_rows:
            ag = ag.set_column(0, "sid", pc.take(pa.array(sids, pa.int32()), ag.column("sid")))
        self.ags.append(ag)
        self.eds.append(ed)
        self.rows += ag.num_rows + ed.num_rows
        self.ag_rows += ag.num_rows

    def take(self) -> tuple[pa.Table, pa.Table, list[dict]]:
        out = (pa.concat_tables(self.ags), pa.concat_tables(self.eds), self.series)
        self.clear()
        return out


def _store_window(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, ag: pa.Table, ed: pa.Table,
                  series: list[dict], step_s: int, interval_s: int, opts: store.TelemetryOptions, line: int) -> int:
    """Lay the held windows' answers out (:func:`_layout_sql`) and hand them to the telemetry store: whole intervals
    as rows of ``interval_s``, the rest as minute rows; returns the next line number."""
    ser = store.series_table(series)
    con.register("_ag", ag)
    con.register("_ed", ed)
    con.register("_as", ser)
    try:
        con.execute(_layout_sql(interval_s, step_s))
    finally:
        for t in ("_ag", "_ed", "_as"):
            con.unregister(t)
    _drop_overlapped(con, ser, run, interval_s)
    for coarse, width in ((True, interval_s), (False, step_s)):
        pts = _batch(con, ser, coarse)
        if not pts.num_rows:
            continue
        pts = pts.append_column("line_no", pa.array(range(line, line + pts.num_rows), pa.int64()))
        line += pts.num_rows
        run.lines_read += pts.num_rows
        store.ingest_readings(con, run, pts.select(["line_no", "sid", "value", "ts"]), ser, "prometheus", opts,
                              ts_unit="s", interval_s=width)
    con.execute("DROP TABLE IF EXISTS _lay")
    return line


def _drop_overlapped(con: duckdb.DuckDBPyConnection, ser: pa.Table, run: warehouse.IngestRun,
                     interval_s: int) -> None:
    """Delete the stored minute rows inside the intervals about to be stored whole (an earlier raw pull, or a
    pull that saw the interval still open): the interval's row replaces them, so no minute counts twice."""
    con.register("_asd", ser)
    try:
        lo, hi = con.sql("SELECT min(ts), max(ts) FROM _lay WHERE coarse").fetchall()[0]
        if lo is None:
            return
        n = con.execute(f"""
            DELETE FROM gpu_samples g USING (
                SELECT DISTINCT s.cluster, s.node, s.gpu, make_timestamp((l.ts * 1e6)::BIGINT) AS b
                FROM _lay l JOIN _asd s USING (sid) WHERE l.coarse AND s.node IS NOT NULL) c
            WHERE g.cluster = c.cluster AND g.node = c.node AND g.gpu = c.gpu
              AND g.ts > c.b AND g.ts < c.b + INTERVAL {int(interval_s)} SECOND
              AND g.ts > make_timestamp(($lo * 1e6)::BIGINT)
              AND g.ts < make_timestamp(($hi * 1e6)::BIGINT) + INTERVAL {int(interval_s)} SECOND""",
                        {"lo": lo, "hi": hi}).fetchall()[0][0]
    finally:
        con.unregister("_asd")
    if n:
        run.options["replaced_minute_rows"] = run.options.get("replaced_minute_rows", 0) + n


def _batch(con: duckdb.DuckDBPyConnection, ser: pa.Table, coarse: bool) -> pa.Table:
    """The readings of ``_lay`` stored as whole intervals (``coarse``) or as minutes, values as text (the store
    classifies text, as read from any input). State-event fields all go with the minute batch, so one batch
    derives each device's events."""
    event_sids = [s for s, m in zip(ser.column("sid").to_pylist(), ser.column("metric").to_pylist())
                  if m in store.EVENT_COLS]
    t = con.sql("""SELECT sid, ts, value FROM _lay
                   WHERE CASE WHEN list_contains($ev, sid) THEN NOT $coarse ELSE coarse = $coarse END
                   ORDER BY sid, ts""", params={"ev": event_sids, "coarse": coarse}).to_arrow_table()
    return pa.table({"sid": pc.cast(t.column("sid"), pa.int32()), "value": pc.cast(t.column("value"), pa.string()),
                     "ts": t.column("ts")})


def parse_interval(text: str) -> int:
    """``5m``, ``300s``, ``1h`` -> seconds (the ``--aggregate`` value)."""
    try:
        return raw.parse_step(text)
    except InputError:
        raise InputError("--aggregate", f"not an interval: {text!r} (use e.g. 5m, 15m)") from None
