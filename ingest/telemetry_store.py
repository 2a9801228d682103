"""The one writer of GPU telemetry: readings in, ``gpu_samples`` + rollup + devices + XID events out.

The three telemetry ingestors (``prometheus``, ``dcgm``, ``nvidia_smi``) parse their formats into two Arrow
tables and hand them here:

* a *series* table, one row per distinct labelled series (``sid``), with the device identity resolved from the
  labels by :func:`series_identity` (or built directly by the nvidia-smi reader);
* a *points* table, one row per reading: ``line_no``, ``sid``, ``value`` (text as read), ``ts`` (text or
  number, NULL = use the scrape time).

Readings are classified in DuckDB (loaded, skipped with a reason, rejected with a reason), folded into one row
per device and UTC minute (``gpu_samples``), merged idempotently on ``(cluster, node, gpu, ts)``, and the
5-minute rollup, device list, XID events and ingest ranges are brought up to date, all inside the caller's
:class:`ingest.warehouse.IngestRun` transaction.

Scale: activity is stored as a fraction 0..1 (GPU_UTIL percent / 100; PROF ratios as given).
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ingest import plausible, warehouse
from ingest.errors import InputError

#: Exporter metric -> (gpu_samples column, scale to the stored unit, lowest and highest plausible raw value).
METRICS: dict[str, tuple[str, float, float, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", 0.01, 0.0, 100.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0, 0.0, 1.01),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", 1.0, 0.0, 1.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 1.0, 0.0, 1.01),
    "DCGM_FI_DEV_FB_USED": ("fb_used_mib", 1.0, 0.0, 1e9),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0, 0.0, 1e5),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0, -100.0, 250.0),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", 1.0, 0.0, 1e6),
    # kept as events (EVENT_COLS), not as sample columns
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle", 1.0, 0.0, 1e12),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle", 1.0, 0.0, 1e12),   # the field's name from DCGM 3.3 on
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", 1.0, 0.0, 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe", 1.0, 0.0, 1e12),
}
#: Fields kept as ``gpu_events`` of their own kind (a reading nonzero and different from the device's previous
#: one in the batch), not as ``gpu_samples`` columns. Clock-throttle reasons keep the slowdown bits only (DCGM:
#: 0x08 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake; idle, clock settings and the
#: software power cap are normal operation).
EVENT_COLS = ("throttle", "row_remap_failure", "ecc_dbe")
THROTTLE_MASK = 0x08 | 0x20 | 0x40 | 0x80
ACTIVITY_COLUMNS = ("gpu_util", "sm_active", "gr_engine_active", "tensor_active")
#: Labels that name the scheduler job using the GPU (dcgm-exporter --hpc-job-mapping-dir writes ``hpc_job``).
JOB_LABELS = ("hpc_job", "slurm_job_id", "slurm_job")
POD_LABELS = {"pod": ("pod", "pod_name"), "namespace": ("namespace", "pod_namespace"),
              "container": ("container", "container_name")}
SERIES_SCHEMA = pa.schema([
    ("sid", pa.int32()), ("series_text", pa.string()), ("metric", pa.string()), ("scale", pa.float64()),
    ("lo", pa.float64()), ("hi", pa.float64()), ("cluster", pa.string()), ("node", pa.string()),
    ("gpu", pa.string()), ("gpu_index", pa.int32()), ("mig_instance", pa.int32()), ("mig_profile", pa.string()),
    ("uuid", pa.string()), ("model", pa.string()), ("hpc_job", pa.string()), ("pod", pa.string()),
    ("namespace", pa.string()), ("container", pa.string()), ("skip_reason", pa.string()),
    ("reject_field", pa.string()), ("reject_reason", pa.string()),
])
_IP = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


@dataclass
class TelemetryOptions:
    """What the user told us about the inputs; see docs/CLI.md."""
    cluster: str | None = None        # overrides any cluster label
    node: str | None = None           # node of series without a Hostname label
    interval_s: int = 60              # resolution of a device seen once in an input
    keep_raw_days: float | None = None  # prune raw rows older than this (rollup stays)


# ---------------------------------------------------------------- series identity

def parse_labels(text: str) -> dict[str, str] | None:
    """``a="x",b="y \\"q\\""`` -> dict; None when the text is not a well-formed label set."""
    out, pos = {}, 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            return None
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
    return out


def short_node(host: str) -> str:
    """Exporter host names to Slurm node names: ``gpu01.example.org`` -> ``gpu01``; IP addresses unchanged."""
    host = host.strip()
    if _IP.match(host) or ":" in host:
        return host
    return host.split(".", 1)[0]


def _instance_host(instance: str | None) -> str | None:
    if not instance:
        return None
    if instance.startswith("["):          # [::1]:9400
        return instance[1:instance.find("]")] or None
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def _int(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"\s*\d+\s*", text):
        return None
    return int(text)


def device_identity(labels: dict[str, str], opts: TelemetryOptions, default_cluster: str) -> dict:
    """The device a label set names (cluster, node, gpu key, MIG, UUID, model, job and pod labels), or a reject
    reason when it names none. Independent of the metric, so callers cache it per label set."""
    row = {"cluster": opts.cluster or labels.get("cluster") or default_cluster}
    host = labels.get("Hostname") or labels.get("hostname") or opts.node or _instance_host(labels.get("instance"))
    idx = _int(labels.get("gpu"))
    if idx is None and re.fullmatch(r"nvidia\d+", labels.get("device", "")):
        idx = int(labels["device"][6:])
    if not host:
        return {"reject_field": "Hostname", "reject_reason": "no Hostname/hostname label and no --node given"}
    if idx is None:
        return {"reject_field": "gpu", "reject_reason": ("gpu label is not a GPU index: " + labels["gpu"])
                if "gpu" in labels else "no gpu label (GPU index)"}
    mig = _int(labels.get("GPU_I_ID"))
    row.update(node=short_node(host), gpu_index=idx, mig_instance=mig,
               gpu=str(idx) if mig is None else f"{idx}/mig{mig}",
               mig_profile=labels.get("GPU_I_PROFILE") or None, uuid=labels.get("UUID") or None,
               model=labels.get("modelName") or None)
    row["hpc_job"] = next((labels[k].strip() for k in JOB_LABELS if labels.get(k, "").strip()), None)
    for col, names in POD_LABELS.items():
        row[col] = next((labels[k] for k in names if labels.get(k)), None)
    return row


def series_identity(metric: str, labels: dict[str, str] | None, opts: TelemetryOptions, default_cluster: str,
                    device: dict | None = None) -> dict:
    """Resolve one series: its metric spec and device (``device`` = a cached :func:`device_identity`), or the
    skip/reject reason it carries instead."""
    row = dict.fromkeys(n for n in SERIES_SCHEMA.names if n not in ("sid", "series_text"))
    spec = METRICS.get(metric)
    if spec is None:
        row["skip_reason"] = "metric not used by gpuledger"
        return row
    row["metric"], row["scale"], row["lo"], row["hi"] = spec
    row.update(device if device is not None else device_identity(labels or {}, opts, default_cluster))
    return row


def default_cluster(con: duckdb.DuckDBPyConnection) -> str:
    """The cluster of telemetry that names none: the only configured cluster, else the only cluster in
    ``jobs``, else ``default``."""
    for sql in ("SELECT DISTINCT cluster FROM clusters", "SELECT DISTINCT cluster FROM jobs"):
        known = [r[0] for r in con.sql(sql).fetchall()]
        if len(known) == 1:
            return known[0]
    return "default"


def series_table(rows: list[dict]) -> pa.Table:
    """Arrow series table from dicts carrying ``sid``, ``series_text`` and :func:`series_identity` keys."""
    return pa.Table.from_pylist(rows, schema=SERIES_SCHEMA)


# ---------------------------------------------------------------- classification

#: Stored columns in a fixed order; a reading's metric travels as its index here (cheap to group on).
SAMPLE_COLS = ("gpu_util", "sm_active", "gr_engine_active", "tensor_active", "fb_used_mib", "power_w", "temp_c",
               "xid")
_SENTINEL = "['BLANK', 'NOT_FOUND', 'NOT_SUPPORTED', 'NOT_PERMISSIONED']"


def _series_sql() -> str:
    """Series -> temp table ``_sv`` with a dense device number ``dev`` and metric code ``mcode``."""
    codes = " ".join(f"WHEN '{c}' THEN {i}" for i, c in enumerate(SAMPLE_COLS + EVENT_COLS))
    return f"""CREATE OR REPLACE TEMP TABLE _sv AS
               SELECT *, dense_rank() OVER (ORDER BY cluster, node, gpu)::INTEGER AS dev,
                      CASE metric {codes} END AS mcode FROM _ser"""


def _classify_sql(ts_unit: str) -> str:
    """Readings ``_pts`` -> ``_cls(line_no, sid, dev, mcode, ts, val, verdict)``; verdict NULL = loaded,
    else ``skip|reason`` or ``reject|field|reason``."""
    to_us = "1e6" if ts_unit == "s" else "1e3"
    hint = "OpenMetrics timestamps are seconds" if ts_unit == "s" else "text-format timestamps are milliseconds"
    return f"""
    CREATE OR REPLACE TEMP TABLE _cls AS
    WITH p AS (
        SELECT line_no, sid, trim(value) AS v, ts::VARCHAR AS t, coalesce(vd, TRY_CAST(value AS DOUBLE)) AS d,
               CASE WHEN ts IS NULL THEN $default_us
                    ELSE TRY_CAST(round(coalesce(td, TRY_CAST(ts AS DOUBLE)) * {to_us}) AS BIGINT) END AS us
        FROM _pts),
    q AS (
        SELECT p.line_no, p.sid, s.dev, s.mcode, p.us, p.d * s.scale AS val,
               CASE
                 WHEN s.skip_reason IS NOT NULL THEN 'skip|' || s.skip_reason
                 WHEN s.reject_reason IS NOT NULL THEN 'reject|' || s.reject_field || '|' || s.reject_reason
                 WHEN p.d IS NULL AND lower(p.v) = 'nan' THEN 'skip|NaN reading (no value)'
                 WHEN p.d IS NULL AND p.v LIKE '<<<%>>>' THEN 'skip|DCGM blank value ' || p.v
                 WHEN p.d IS NULL THEN 'reject|value|not a number: ' || p.v
                 WHEN isnan(p.d) THEN 'skip|NaN reading (no value)'
                 WHEN isinf(p.d) THEN 'reject|value|not a finite number: ' || p.v
                 WHEN p.d >= 2147483632 THEN CASE
                   WHEN TRY_CAST(p.v AS HUGEINT) BETWEEN 9223372036854775792 AND 9223372036854775807 THEN 'skip|DCGM blank sentinel (INT64 '
                        || coalesce({_SENTINEL}[(TRY_CAST(p.v AS HUGEINT) - 9223372036854775792)::INT + 1], 'BLANK') || ')'
                   WHEN p.d >= 140737488355328.0 AND p.d < 140737488355344.0 THEN 'skip|DCGM blank sentinel (FP64 '
                        || coalesce({_SENTINEL}[(p.d - 140737488355328.0)::INT + 1], 'BLANK') || ')'
                   WHEN p.d <= 2147483647 THEN 'skip|DCGM blank sentinel (INT32 '
                        || coalesce({_SENTINEL}[(p.d - 2147483632)::INT + 1], 'BLANK') || ')'
                   WHEN p.d > s.hi THEN 'reject|value|out of range for ' || s.metric || ' [' || s.lo || ', ' || s.hi || ']: ' || p.v
                 END
                 WHEN p.d < s.lo OR p.d > s.hi THEN 'reject|value|out of range for ' || s.metric
                      || ' [' || s.lo || ', ' || s.hi || ']: ' || p.v
                 WHEN p.t IS NOT NULL AND p.us IS NULL THEN 'reject|timestamp|not a number: ' || p.t
                 -- the plausible window (ingest/plausible.py); milliseconds read as seconds (or the reverse) land
                 -- outside it
                 WHEN p.us IS NULL OR p.us NOT BETWEEN epoch_us($win_lo) AND epoch_us($win_hi)
                   THEN 'reject|timestamp|' || {plausible.sql_reason("coalesce(p.t, strftime(make_timestamp(p.us), '%Y-%m-%dT%H:%M:%S'), '')")}
                        || '; {hint}'
               END AS verdict
        FROM p JOIN _sv s USING (sid))
    SELECT line_no, sid, dev, mcode, verdict, CASE WHEN verdict IS NULL THEN us END AS us,
           CASE WHEN mcode BETWEEN 1 AND 3 THEN least(val, 1.0) ELSE val END AS val
    FROM q"""


def _account(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun) -> int:
    """Count skips and quarantine rejects of ``_cls``; returns the number of loaded readings."""
    for verdict, n, first in con.sql("""SELECT split_part(verdict, '|', 2), count(*), min(line_no) FROM _cls
                                        WHERE verdict LIKE 'skip|%' GROUP BY 1 ORDER BY 1""").fetchall():
        run.skip(verdict, n, first)
    run.rejected += con.execute("""
        INSERT INTO rejects
        SELECT ?, c.line_no, split_part(c.verdict, '|', 2),
               substr(c.verdict, length(split_part(c.verdict, '|', 2)) + 9),
               s.series_text || ' ' || p.value || coalesce(' ' || p.ts::VARCHAR, '')
        FROM _cls c JOIN _pts p USING (line_no) JOIN _sv s ON s.sid = c.sid
        WHERE c.verdict LIKE 'reject|%'""", [run.run_id]).fetchall()[0][0]
    return con.sql("SELECT count(*) FROM _cls WHERE verdict IS NULL").fetchall()[0][0]


def with_numbers(points: pa.Table) -> pa.Table:
    """Add ``vd``/``td``: value and timestamp as doubles, cast by Arrow when the whole column is numbers (the
    common case, and cheaper than casting in SQL); NULL columns otherwise (SQL then casts reading by reading and
    says which ones are not numbers)."""
    for src, dst in (("value", "vd"), ("ts", "td")):
        if dst in points.column_names:
            continue
        col = points.column(src)
        try:
            num = pc.cast(col, pa.float64()) if col.type != pa.float64() else col
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            num = pa.nulls(points.num_rows, pa.float64())
        points = points.append_column(dst, num)
    return points


def ingest_readings(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, points: pa.Table,
                    series: pa.Table, source: str, opts: TelemetryOptions, ts_unit: str = "s",
                    scrape_time: dt.datetime | None = None, interval_s: int | None = None) -> None:
    """Classify ``points`` (see module doc), then fold the good readings into the warehouse.

    ``ts_unit``: 's' (OpenMetrics, Prometheus API) or 'ms' (Prometheus text format). ``scrape_time`` (naive
    UTC) stands for readings without a timestamp. ``interval_s`` fixes the rows' resolution (the query step);
    otherwise it is inferred per device.
    """
    default_us = None if scrape_time is None else int(scrape_time.replace(tzinfo=dt.timezone.utc).timestamp() * 1e6)
    window = plausible.window()
    run.options["time_window"] = window.describe()
    con.register("_pts", with_numbers(points))
    con.register("_ser", series)
    try:
        con.execute(_series_sql())
        sql = _classify_sql(ts_unit)
        con.execute(sql, {"default_us": default_us, **plausible.sql_params(window, sql)})
        run.loaded += _account(con, run)
    finally:
        con.unregister("_pts")
        con.unregister("_ser")
    con.execute("CREATE OR REPLACE TEMP VIEW _pv AS SELECT sid, dev, mcode, us, val FROM _cls WHERE verdict IS NULL")
    write_rows(con, run, source, opts, interval_s)
    con.execute("DROP VIEW IF EXISTS _pv")
    con.execute("DROP TABLE IF EXISTS _cls")


def reject_examples(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, limit: int = 10) -> list[str]:
    """The first rejects of a run as ``INPUT:LINE: field F: reason`` lines, for the CLI."""
    rows = con.execute("SELECT line_no, field, reason FROM rejects WHERE run_id = ? ORDER BY line_no LIMIT ?",
                       [run.run_id, limit]).fetchall()
    return [f"{run.input_name}:{n}: " + (f"field {f}: " if f else "") + r for n, f, r in rows]


# ---------------------------------------------------------------- folding into rows

_FOLD = ("avg", "avg", "avg", "avg", "max", "avg", "avg")   # per SAMPLE_COLS[:7]; xid takes the minute's last


def _fold_sql(interval_s: int | None, default_interval: int, with_attrs: bool) -> str:
    aggs = ",\n".join(f"{fn}(val) FILTER (WHERE mcode = {i}) AS {SAMPLE_COLS[i]}" for i, fn in enumerate(_FOLD))
    fixed = "NULL" if interval_s is None else str(int(interval_s))
    # job/pod labels are rare: aggregate them only when some series carries one, over those series only
    attrs = f""", lab AS (SELECT * FROM _sv WHERE hpc_job IS NOT NULL OR pod IS NOT NULL OR namespace IS NOT NULL
                          OR container IS NOT NULL),
    a0 AS (SELECT DISTINCT p.dev, p.us // 60000000 AS mi, s.hpc_job, s.pod, s.namespace, s.container
           FROM _pv p JOIN lab s USING (sid) WHERE p.mcode < {len(SAMPLE_COLS)}),
    a AS (
        SELECT dev, mi, string_agg(hpc_job, ',' ORDER BY hpc_job) AS hpc_jobs, max(pod) AS pod,
               max(namespace) AS namespace, max(container) AS container
        FROM a0 GROUP BY dev, mi)""" if with_attrs else ""
    attr_cols = "a.hpc_jobs, a.pod, a.namespace, a.container" if with_attrs else \
        "NULL::VARCHAR AS hpc_jobs, NULL::VARCHAR AS pod, NULL::VARCHAR AS namespace, NULL::VARCHAR AS container"
    attr_join = "LEFT JOIN a USING (dev, mi)" if with_attrs else ""
    return f"""
    CREATE OR REPLACE TEMP TABLE _rows AS
    WITH f AS (
        SELECT dev, us // 60000000 AS mi, {aggs},
               arg_max(val, us) FILTER (WHERE mcode = 7)::INTEGER AS xid,
               count(DISTINCT us)::INTEGER AS n_raw
        FROM _pv WHERE mcode < {len(SAMPLE_COLS)} GROUP BY ALL),
    gaps AS (
        SELECT dev, median(gap) AS med FROM (
            SELECT dev, lead(mi) OVER (PARTITION BY dev ORDER BY mi) - mi AS gap FROM f)
        WHERE gap > 0 GROUP BY ALL),
    d AS (SELECT DISTINCT dev, cluster, node, gpu FROM _sv WHERE dev IS NOT NULL){attrs}
    SELECT d.cluster, d.node, d.gpu, make_timestamp(f.mi * 60000000) AS ts, f.* EXCLUDE (dev, mi, n_raw),
           {attr_cols}, f.n_raw,
           coalesce({fixed}, greatest(1, round(g.med)) * 60, {int(default_interval)})::INTEGER AS interval_s
    FROM f JOIN d USING (dev) LEFT JOIN gaps g USING (dev) {attr_join}"""


def write_rows(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, source: str, opts: TelemetryOptions,
               interval_s: int | None = None) -> None:
    """Fold ``_pv(sid, dev, mcode, ts, val)`` (readings) and ``_sv`` (series) into the telemetry tables."""
    run.stored_as = "per-minute GPU samples"
    with_attrs = con.sql("""SELECT count(*) FROM _sv WHERE hpc_job IS NOT NULL OR pod IS NOT NULL
                            OR namespace IS NOT NULL OR container IS NOT NULL""").fetchall()[0][0] > 0
    _derive_state_events(con, run, source)
    con.execute(_fold_sql(interval_s, opts.interval_s, with_attrs))
    n = con.sql("SELECT count(*) FROM _rows").fetchall()[0][0]
    if n:
        fresh = _merge_samples(con, run, source)
        _refresh_rollup(con, fresh)
        _upsert_devices(con)
        _derive_xid_events(con, run, source)
        con.execute("""INSERT INTO gpu_ingest_ranges
                       SELECT ?, cluster, node, min(ts), max(ts + to_seconds(interval_s)) FROM _rows GROUP BY ALL""",
                    [run.run_id])
        if opts.keep_raw_days is not None:
            run.options["pruned_raw_rows"] = prune_raw(con, opts.keep_raw_days)
    for t in ("_rows", "_sv", "_old"):
        con.execute(f"DROP TABLE IF EXISTS {t}")


def _merge_samples(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, source: str) -> bool:
    """Insert new keys; fill/overwrite metrics of existing keys (new readings win, absent ones keep the old).

    Returns True when the batch's devices had no rows around its time range (the rollup can then be built from
    the batch alone)."""
    lo, hi, nlo, nhi = con.sql("SELECT min(ts), max(ts), min(node), max(node) FROM _rows").fetchall()[0]
    # the node and time ranges let DuckDB skip row groups of other telemetry by their min/max; a day back
    # catches coarse rows that reach into the batch's first buckets
    con.execute("""CREATE OR REPLACE TEMP TABLE _old AS
                   SELECT g.* FROM gpu_samples g SEMI JOIN (SELECT DISTINCT cluster, node, gpu FROM _rows) d
                       ON g.cluster = d.cluster AND g.node = d.node AND g.gpu = d.gpu
                   WHERE g.node BETWEEN ? AND ? AND g.ts BETWEEN ? - INTERVAL 1 DAY AND ?""", [nlo, nhi, lo, hi])
    cols = (*SAMPLE_COLS, "hpc_jobs", "pod", "namespace", "container")
    differs = " OR ".join(f"(r.{c} IS NOT NULL AND r.{c} IS DISTINCT FROM o.{c})" for c in cols) \
        + " OR r.interval_s <> o.interval_s"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _rows AS
                    SELECT r.*, CASE WHEN o.ts IS NULL THEN 'new' WHEN {differs} THEN 'upd' ELSE 'same' END AS fate
                    FROM _rows r LEFT JOIN _old o USING (cluster, node, gpu, ts)""")
    counts = dict(con.sql("SELECT fate, count(*) FROM _rows GROUP BY fate").fetchall())
    counts["fresh"] = not con.sql("SELECT count(*) FROM _old").fetchall()[0][0]
    run.inserted += counts.get("new", 0)
    run.updated += counts.get("upd", 0)
    run.unchanged += counts.get("same", 0)
    if counts.get("upd"):
        _replace_updated(con, cols, source, run.run_id, (nlo, nhi, lo, hi))
    con.execute(f"""INSERT INTO gpu_samples (cluster, node, gpu, ts, interval_s, {', '.join(cols)}, n_raw, source,
                                             ingest_run_id)
                    SELECT cluster, node, gpu, ts, interval_s, {', '.join(cols)}, n_raw, ?, ?
                    FROM _rows WHERE fate = 'new' ORDER BY cluster, node, gpu, ts""", [source, run.run_id])
    return counts["fresh"]


def _replace_updated(con: duckdb.DuckDBPyConnection, cols: tuple[str, ...], source: str, run_id: int,
                     bounds: tuple) -> None:
    """Rows of ``_rows`` marked 'upd' replace their keys in gpu_samples: new readings win, absent ones keep the
    old value, n_raw is the larger. Delete + insert, because DuckDB's UPDATE of many columns through a join
    costs seconds per 10,000 rows (150,000 updated rows took over a minute; this takes about one second)."""
    merged = ", ".join(f"coalesce(r.{c}, o.{c}) AS {c}" for c in cols)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _upd AS
                    SELECT r.cluster, r.node, r.gpu, r.ts, r.interval_s, {merged},
                           greatest(o.n_raw, r.n_raw) AS n_raw
                    FROM (SELECT * FROM _rows WHERE fate = 'upd') r JOIN _old o USING (cluster, node, gpu, ts)""")
    nlo, nhi, lo, hi = bounds
    con.execute("""DELETE FROM gpu_samples g USING _upd u
                   WHERE g.cluster = u.cluster AND g.node = u.node AND g.gpu = u.gpu AND g.ts = u.ts
                     AND g.node BETWEEN ? AND ? AND g.ts BETWEEN ? AND ?""", [nlo, nhi, lo, hi])
    con.execute(f"""INSERT INTO gpu_samples (cluster, node, gpu, ts, interval_s, {', '.join(cols)}, n_raw, source,
                                             ingest_run_id)
                    SELECT cluster, node, gpu, ts, interval_s, {', '.join(cols)}, n_raw, ?, ?
                    FROM _upd ORDER BY cluster, node, gpu, ts""", [source, run_id])
    con.execute("DROP TABLE _upd")


def _minute_rows(where: str, table: str = "gpu_samples") -> str:
    """Rows of ``table`` in ``where``, one per covered minute (rows coarser than a minute are spread out)."""
    cols = "cluster, node, gpu, ts, interval_s, " + ", ".join(SAMPLE_COLS)
    return f"""
        SELECT {cols}, ts AS m FROM {table} g WHERE interval_s = 60 AND {where}
        UNION ALL
        SELECT {cols}, unnest(generate_series(ts, ts + to_seconds(interval_s - 60), INTERVAL 1 MINUTE)) AS m
        FROM {table} g WHERE interval_s <> 60 AND {where}"""


def _refresh_rollup(con: duckdb.DuckDBPyConnection, fresh: bool = False) -> None:
    """Recompute the 5-minute buckets the batch touched: from the batch alone when its devices had no other rows
    nearby (``fresh``), else from gpu_samples."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _bk AS
                   SELECT DISTINCT cluster, node, gpu, time_bucket(INTERVAL 5 MINUTE, b) AS bucket FROM (
                       SELECT cluster, node, gpu,
                              unnest(generate_series(ts, ts + to_seconds(interval_s - 60), INTERVAL 1 MINUTE)) AS b
                       FROM _rows)""")
    lo, hi, nlo, nhi = con.sql("""SELECT min(bucket), max(bucket) + INTERVAL 5 MINUTE, min(node), max(node)
                                  FROM _bk""").fetchall()[0]
    con.execute("""DELETE FROM gpu_samples_5m r USING _bk k
                   WHERE r.cluster = k.cluster AND r.node = k.node AND r.gpu = k.gpu AND r.bucket = k.bucket
                     AND r.node BETWEEN ? AND ? AND r.bucket BETWEEN ? AND ?""", [nlo, nhi, lo, hi])
    stats = ",\n".join(f"min({c}) AS {c}_min, avg({c}) AS {c}_mean, max({c}) AS {c}_max" for c in ACTIVITY_COLUMNS)
    if fresh:
        source = _minute_rows("TRUE", table="_rows")
        keep = ""
    else:
        source = _minute_rows("g.node BETWEEN $nlo AND $nhi AND g.ts >= $lo - INTERVAL 1 DAY AND g.ts < $hi")
        keep = """SEMI JOIN _bk k ON g.cluster = k.cluster AND g.node = k.node AND g.gpu = k.gpu
                      AND time_bucket(INTERVAL 5 MINUTE, g.m) = k.bucket"""
    # rows are spread to minutes first, so means are time-weighted and coarse rows land in every bucket they cover
    con.execute(f"""
        INSERT INTO gpu_samples_5m
        SELECT g.cluster, g.node, g.gpu, time_bucket(INTERVAL 5 MINUTE, g.m) AS bucket,
               (60 * count(*))::INTEGER AS covered_s, count(DISTINCT g.ts)::INTEGER AS n_rows, {stats},
               avg(fb_used_mib), max(fb_used_mib), avg(power_w), max(power_w), avg(temp_c), max(temp_c),
               sum(power_w) * 60, max(xid)
        FROM ({source}) g {keep}
        GROUP BY ALL ORDER BY 1, 2, 3, 4""", {} if fresh else {"lo": lo, "hi": hi, "nlo": nlo, "nhi": nhi})
    con.execute("DROP TABLE IF EXISTS _bk")


def _upsert_devices(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("""
        INSERT INTO gpu_devices
        SELECT s.cluster, s.node, s.gpu, any_value(s.gpu_index), any_value(s.mig_instance),
               max(s.mig_profile), max(s.uuid), max(s.model), r.lo, r.hi
        FROM _sv s JOIN (SELECT cluster, node, gpu, min(ts) AS lo, max(ts) AS hi FROM _rows GROUP BY ALL) r
             USING (cluster, node, gpu)
        GROUP BY s.cluster, s.node, s.gpu, r.lo, r.hi
        ON CONFLICT (cluster, node, gpu) DO UPDATE SET
            first_seen = least(first_seen, excluded.first_seen), last_seen = greatest(last_seen, excluded.last_seen),
            uuid = coalesce(excluded.uuid, uuid), model = coalesce(excluded.model, model),
            mig_profile = coalesce(excluded.mig_profile, mig_profile),
            gpu_index = coalesce(excluded.gpu_index, gpu_index)""")


def _derive_xid_events(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, source: str) -> None:
    """XID events in the batch's range: nonzero readings that differ from the device's previous reading."""
    if not con.sql("SELECT count(*) FROM _rows WHERE xid IS NOT NULL").fetchall()[0][0]:
        return
    con.execute("""CREATE OR REPLACE TEMP TABLE _xr AS SELECT cluster, node, gpu, min(ts) AS lo,
                   max(ts) + INTERVAL 1 DAY AS hi FROM _rows WHERE xid IS NOT NULL GROUP BY ALL""")
    con.execute("""DELETE FROM gpu_events e USING _xr r WHERE e.kind = 'xid' AND e.cluster = r.cluster
                   AND e.node = r.node AND e.gpu = r.gpu AND e.ts BETWEEN r.lo AND r.hi""")
    con.execute("""
        INSERT INTO gpu_events
        SELECT cluster, node, gpu, ts, 'xid', xid, ?, ? FROM (
            SELECT g.cluster, g.node, g.gpu, g.ts, g.xid, r.lo, r.hi,
                   lag(g.xid) OVER (PARTITION BY g.cluster, g.node, g.gpu ORDER BY g.ts) AS prev
            FROM gpu_samples g JOIN _xr r USING (cluster, node, gpu)
            WHERE g.xid IS NOT NULL AND g.ts BETWEEN r.lo - INTERVAL 1 DAY AND r.hi)
        WHERE ts BETWEEN lo AND hi AND xid <> 0 AND prev IS DISTINCT FROM xid""", [source, run.run_id])
    con.execute("DROP TABLE IF EXISTS _xr")


def _derive_state_events(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun, source: str) -> None:
    """Throttle, row-remap-failure and ECC double-bit events (EVENT_COLS) from the batch's readings: per device,
    kind and minute the last reading; an event where it is nonzero and differs from the previous minute's (the
    batch's first reading of a device counts when nonzero). Replaces the events of those kinds in the batch's span
    for its devices, so re-ingesting an input changes nothing."""
    first = len(SAMPLE_COLS)
    kinds = " ".join(f"WHEN {first + i} THEN '{k}'" for i, k in enumerate(EVENT_COLS))
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _sev AS
        WITH r AS (SELECT dev, mcode, us // 60000000 AS mi, arg_max(val, us)::BIGINT AS v
                   FROM _pv WHERE mcode >= {first} GROUP BY ALL),
        l AS (SELECT *, CASE WHEN mcode = {first} THEN v & {THROTTLE_MASK} ELSE v END AS code FROM r),
        p AS (SELECT *, lag(code) OVER (PARTITION BY dev, mcode ORDER BY mi) AS prev,
                     min(mi) OVER (PARTITION BY dev, mcode) AS lo, max(mi) OVER (PARTITION BY dev, mcode) AS hi FROM l),
        d AS (SELECT DISTINCT dev, cluster, node, gpu FROM _sv WHERE dev IS NOT NULL)
        SELECT d.cluster, d.node, d.gpu, CASE p.mcode {kinds} END AS kind, make_timestamp(p.mi * 60000000) AS ts,
               p.code, p.prev, make_timestamp(p.lo * 60000000) AS lo, make_timestamp(p.hi * 60000000) AS hi
        FROM p JOIN d USING (dev)""")
    if not con.sql("SELECT count(*) FROM _sev").fetchall()[0][0]:
        con.execute("DROP TABLE _sev")
        return
    con.execute("""DELETE FROM gpu_events e USING (SELECT DISTINCT cluster, node, gpu, kind, lo, hi FROM _sev) r
                   WHERE e.kind = r.kind AND e.cluster = r.cluster AND e.node = r.node AND e.gpu = r.gpu
                     AND e.ts BETWEEN r.lo AND r.hi""")
    con.execute("""INSERT INTO gpu_events SELECT cluster, node, gpu, ts, kind, code::INTEGER, ?, ? FROM _sev
                   WHERE code <> 0 AND prev IS DISTINCT FROM code""", [source, run.run_id])
    con.execute("DROP TABLE _sev")


def prune_raw(con: duckdb.DuckDBPyConnection, keep_days: float) -> int:
    """Delete raw rows older than ``keep_days`` before each cluster's newest row; the 5-minute rollup stays.

    The cut falls on a 5-minute boundary, so every bucket is either all raw or all rollup (the efficiency
    model reads a bucket from one or the other). Returns the number of rows deleted.
    """
    return con.execute("""
        DELETE FROM gpu_samples g USING (SELECT cluster, time_bucket(INTERVAL 5 MINUTE, max(ts)
                                                 - to_seconds(?::DOUBLE * 86400)) AS cut
                                          FROM gpu_samples GROUP BY cluster) c
        WHERE g.cluster = c.cluster AND g.ts + to_seconds(g.interval_s) <= c.cut""",
                       [keep_days]).fetchall()[0][0]


# ---------------------------------------------------------------- shared input helpers

def parse_time(text: str, what: str = "time", tz: str | None = None) -> dt.datetime:
    """A user-given time as naive UTC (the one parser, ingest/warehouse/times.py); an unreadable time or zone is an
    InputError naming ``what``."""
    try:
        return warehouse.parse_time(text, what, tz)
    except warehouse.TimeParseError as exc:
        raise InputError(what, str(exc).split(": ", 1)[-1]) from None


def summary(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun) -> dict:
    """The run's summary for the CLI, with the first rejects spelled out."""
    out = run.summary()
    out["reject_examples"] = reject_examples(con, run) if run.rejected else []
    out["pruned_raw_rows"] = run.options.get("pruned_raw_rows", 0)
    return out
