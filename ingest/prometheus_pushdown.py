"""`gpuledger ingest prometheus --aggregate INTERVAL`: per-GPU aggregates computed where the telemetry lives.

Instead of one point per series and minute (:mod:`ingest.prometheus`), the store answers one point per series
and *interval* (default 5 minutes, aligned to the UTC epoch). Every aggregate runs over the same one-minute
readings the raw pull would store (``last_over_time(m[59.999s])`` at each minute, as a PromQL subquery), so the
two pulls describe the same readings:

* activity metrics (GPU_UTIL, SM/GR_ENGINE/TENSOR_ACTIVE): the interval's mean ``a``, its number of minutes
  with a reading ``n`` and of minutes at zero activity ``z`` (below the idle threshold,
  :data:`ingest.telemetry_store.IDLE_EPSILON`), packed into one value ``a + 1000 * (n + 1000 * z)`` so the
  points transferred fall by the interval's length (``a`` <= 100, ``n``, ``z`` <= 999);
* FB_USED: the maximum; POWER_USAGE, GPU_TEMP: the mean; XID and the state-event fields: the maximum.

Stored rows (apportioning; docs/METRICS.md "Push-down telemetry"): an interval whose device read every minute
and whose activity was either never or always zero is stored as one row covering the interval (``interval_s`` =
the interval): the efficiency model spreads it evenly over its minutes, exactly as it would the raw minutes'
sum. Any other interval is laid out as minute rows: the ``n`` covered minutes sit at the interval's end when the
device had no reading in the interval before (its series starts), else at its start; the ``z`` zero minutes sit
on the side whose neighbouring interval has more zeros (all zero before some zero), at the start on a tie; the
other minutes carry ``a * n / (n - z)``, so the interval's sum is kept. A job starting or ending mid-interval on a
GPU that was idle outside it therefore gets exactly its own activity and idle minutes.

Chunking, retries, credentials and error messages are those of :mod:`ingest.prometheus`.
"""
from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ingest import prometheus as raw
from ingest import telemetry_store as store
from ingest import warehouse
from ingest.errors import InputError

#: Packing base of the activity answer ``a + BASE * (n + BASE * z)``.
BASE = 1000
#: Longest interval whose minute counts fit the packing (``n``, ``z`` < BASE).
MAX_INTERVAL_S = 60 * (BASE - 1)
_FN = {"fb_used_mib": "max_over_time", "power_w": "avg_over_time", "temp_c": "avg_over_time"}


def expression(metric: str, selector: str, interval_s: int, step_s: int = 60) -> str:
    """The PromQL asking ``metric`` (``selector`` = metric + matchers) for one interval's aggregate, evaluated
    at the interval's last minute ``b + interval - step``: minutes ``b .. b + interval - step``, as the raw
    pull's rows."""
    per_minute = f"last_over_time({selector}[{step_s * 1000 - 1}ms])"
    sub = f"[{interval_s * 1000 - 1}ms:{step_s}s]"
    col, scale = store.METRICS[metric][:2]
    if col in store.ACTIVITY_COLUMNS:
        thr = store.IDLE_EPSILON / scale          # GPU_UTIL is percent: 0.5, the PROF ratios 0.005
        return (f"avg_over_time({per_minute}{sub}) + {BASE} * (count_over_time({per_minute}{sub}) + {BASE} * "
                f"sum_over_time(({per_minute} < bool {thr:g}){sub}))")
    return f"{_FN.get(col, 'max_over_time')}({per_minute}{sub})"


def unpack(value: float) -> tuple[float, int, int]:
    """``a + BASE * (n + BASE * z)`` -> (mean a, minutes with a reading n, minutes at zero z)."""
    k = int(value // BASE)
    return value - BASE * k, k % BASE, k // BASE


def buckets(start: float, end: float, interval_s: int) -> tuple[int, int]:
    """First and last interval start (epoch seconds, multiples of ``interval_s``) covering ``[start, end]``."""
    return int(start // interval_s) * interval_s, int(end // interval_s) * interval_s


# ---------------------------------------------------------------- layout (DuckDB)

def _layout_sql(interval_s: int, step_s: int) -> str:
    """Aggregates ``_ag(sid, b, v)`` + series ``_as`` -> ``_lay(sid, ts, value, coarse)``: the readings to store
    (module doc). ``b`` is the interval start (epoch seconds); rows outside ``[$lo, $hi]`` are context only."""
    slots = interval_s // step_s
    acts = ", ".join(f"'{c}'" for c in store.ACTIVITY_COLUMNS)
    return f"""
    CREATE OR REPLACE TEMP TABLE _lay AS
    WITH a AS (
        SELECT g.sid, g.b, g.v, s.metric IN ({acts}) AS is_act,
               coalesce(s.cluster || '|' || s.node || '|' || s.gpu, 'sid' || g.sid) AS dkey
        FROM _ag g JOIN _as s USING (sid) WHERE NOT isnan(g.v)),
    u AS (
        SELECT *, CASE WHEN is_act THEN v - {BASE} * floor(v / {BASE}) ELSE v END AS avg,
               CASE WHEN is_act THEN (floor(v / {BASE})::BIGINT % {BASE}) END AS n,
               CASE WHEN is_act THEN (floor(v / {BASE})::BIGINT // {BASE}) END AS z
        FROM a),
    ctx AS (   -- each activity series' neighbours: 2 = all zero, 1 = some zeros, 0 = none or no reading
        SELECT *, CASE WHEN lag(b) OVER w = b - {interval_s} THEN
                         CASE WHEN lag(z) OVER w = lag(n) OVER w THEN 2 WHEN lag(z) OVER w > 0 THEN 1 ELSE 0 END
                       ELSE 0 END AS zprev,
                  CASE WHEN lead(b) OVER w = b + {interval_s} THEN
                         CASE WHEN lead(z) OVER w = lead(n) OVER w THEN 2 WHEN lead(z) OVER w > 0 THEN 1 ELSE 0 END
                       ELSE 0 END AS znext
        FROM u WHERE is_act WINDOW w AS (PARTITION BY sid ORDER BY b)),
    d0 AS (
        SELECT dkey, b, max(n) AS n_dev, bool_and(n = {slots} AND (z = 0 OR z = n)) AS uniform
        FROM u WHERE is_act GROUP BY ALL),
    dev AS (   -- the device's covered minutes sit at the interval's end when it had no reading before
        SELECT *, CASE WHEN coalesce(lag(b) OVER w, -1) <> b - {interval_s} AND lead(b) OVER w = b + {interval_s}
                       THEN {slots} - n_dev ELSE 0 END AS off
        FROM d0 WINDOW w AS (PARTITION BY dkey ORDER BY b)),
    s AS (
        SELECT u.sid, u.b, u.avg, u.is_act, coalesce(c.n, d.n_dev, {slots}) AS n, coalesce(c.z, 0) AS z,
               coalesce(c.znext > c.zprev, FALSE) AS zeros_last, coalesce(d.off, 0) AS off,
               coalesce(d.uniform, TRUE) AS coarse
        FROM u LEFT JOIN ctx c ON c.sid = u.sid AND c.b = u.b LEFT JOIN dev d ON d.dkey = u.dkey AND d.b = u.b
        WHERE u.b BETWEEN $lo AND $hi),
    m AS (SELECT *, unnest(range(n)) AS j FROM s WHERE NOT coarse)
    SELECT sid, b::DOUBLE AS ts, avg AS value, TRUE AS coarse FROM s WHERE coarse
    UNION ALL
    SELECT sid, (b + {step_s} * least(off + j, {slots} - n + j))::DOUBLE AS ts,
           CASE WHEN NOT is_act THEN avg
                WHEN (zeros_last AND j >= n - z) OR (NOT zeros_last AND j < z) THEN 0.0
                ELSE avg * n / (n - z) END AS value, FALSE AS coarse
    FROM m"""


def _answers(client: raw._Client, counts: dict, t0: float, t1: float, q: raw.QueryOptions, interval_s: int,
             opts: store.TelemetryOptions, cluster: str, cache: dict) -> tuple[pa.Table, list[dict]]:
    """One window's answers of every metric: ``(sid, b, v)`` and the series rows."""
    parts, series = [], []
    for metric, (selector, _) in counts.items():
        expr = expression(metric, selector, interval_s, q.step_s)
        lag = interval_s - q.step_s                      # evaluated at the interval's last minute
        data = client.get("/api/v1/query_range", [("query", expr), ("start", f"{t0 + lag:.3f}"),
                                                   ("end", f"{t1 + lag:.3f}"), ("step", f"{interval_s}s")])
        if not data or data.get("resultType") != "matrix":
            raise InputError(client.shown, f"expected a matrix from query_range, got {data and data.get('resultType')}")
        points, rows = raw._to_tables(data.get("result") or [], 0, metric, opts, cluster, cache, sid_base=len(series))
        parts.append(points)
        series += rows
    pts = pa.concat_tables(parts) if parts else None
    if pts is None or not pts.num_rows:
        return None, series
    b = pc.subtract(pts.column("ts"), float(lag))
    return pa.table({"sid": pts.column("sid"), "b": pc.cast(pc.round(b), pa.int64()),
                     "v": store.with_numbers(pts).column("vd")}), series


def ingest(con: duckdb.DuckDBPyConnection, q: raw.QueryOptions, opts: store.TelemetryOptions,
           interval_s: int = 300) -> dict:
    """Pull per-interval aggregates of ``q.metrics`` over the intervals covering ``[q.start, q.end]`` and store
    them as rows the efficiency model reads like raw minutes (module doc); returns the run summary.

    ``q.stats``: ``queries``, ``points`` (aggregate values received), ``series``, ``bytes``."""
    if interval_s % q.step_s or interval_s < q.step_s or interval_s > MAX_INTERVAL_S:
        raise InputError("--aggregate", f"interval must be a multiple of --step ({q.step_s} s) up to "
                                        f"{MAX_INTERVAL_S // 60} minutes; got {interval_s} s")
    client = raw._Client(q)
    inner = raw.matchers(q.match)
    start, end = raw._epoch(q.start), raw._epoch(q.end)
    if end < start:
        raise InputError("--end", "is before --start")
    cluster = opts.cluster or store.default_cluster(con)
    first, last = buckets(start, end, interval_s)
    name = (f"{client.shown} [{q.start:%Y-%m-%dT%H:%M:%SZ}, {q.end:%Y-%m-%dT%H:%M:%SZ}] aggregate {interval_s}s")
    counts = {}
    for metric in q.metrics:
        selector = metric + ("{" + inner + "}" if inner else "")
        n = raw._series_count(client, selector, first - interval_s, last + 2 * interval_s)
        if n:
            counts[metric] = (selector, n)
    per_series = min(q.max_points, max(3, q.max_query_points // max(1, sum(n for _, n in counts.values()))))
    # each window is asked with one interval of context on either side (the layout looks at neighbours)
    windows = raw.chunks(first, last, interval_s, max(1, per_series - 2)) if counts else []
    q.stats.update(queries=len(windows) * len(counts), points=0, series=sum(n for _, n in counts.values()))
    run = warehouse.IngestRun(con, "prometheus", name, cluster=cluster, options={
        "url": client.shown, "start": q.start, "end": q.end, "step_s": q.step_s, "aggregate_s": interval_s,
        "match": q.match, "auth": client.auth, "queries": q.stats["queries"]})
    with run, warehouse.bounded_memory(con, raw.PULL_MEMORY):
        cache, line = {}, 1
        for done, (t0, t1) in enumerate(windows):
            if q.progress:
                q.progress(done, len(windows))
            ag, series = _answers(client, counts, t0 - interval_s, t1 + interval_s, q, interval_s, opts, cluster,
                                  cache)
            if ag is None:
                continue
            q.stats["points"] += ag.num_rows
            line = _store_window(con, run, ag, series, (t0, t1), q.step_s, interval_s, opts, line)
        if q.progress and windows:
            q.progress(len(windows), len(windows))
        run.options["points_received"] = q.stats["points"]
        if q.stats.get("warnings"):
            run.options["warnings"] = q.stats["warnings"][:20]
    return store.summary(con, run)


def _store_window(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, ag: pa.Table, series: list[dict],
                  core: tuple[float, float], step_s: int, interval_s: int, opts: store.TelemetryOptions,
                  line: int) -> int:
    """Lay one window's aggregates out (:func:`_layout_sql`) and hand them to the telemetry store: whole
    intervals as rows of ``interval_s``, the rest as minute rows; returns the next line number."""
    ser = store.series_table(series)
    con.register("_ag", ag)
    con.register("_as", ser)
    try:
        con.execute(_layout_sql(interval_s, step_s), {"lo": int(core[0]), "hi": int(core[1])})
    finally:
        con.unregister("_ag")
        con.unregister("_as")
    events = "', '".join(store.EVENT_COLS)
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


def _batch(con: duckdb.DuckDBPyConnection, ser: pa.Table, coarse: bool) -> pa.Table:
    """The readings of ``_lay`` stored as whole intervals (``coarse``) or as minutes, values as text (the store
    classifies text, as read from any input). State-event fields always go with the minute batch."""
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

