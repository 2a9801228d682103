"""The serving view: what dashboards read, published in O(change) as immutable Parquet parts and a manifest.

Concurrency (docs/ARCHITECTURE.md): one process may hold the warehouse read-write. Dashboards never open it;
they read the view that :func:`publish_serving` publishes next to it, in ``X.serving/``:

- ``parts/<table>/<key>.<id>.parquet``: immutable files, one per (table, partition). A partitioned table
  (:data:`PARTITIONS`) has a part per month of a time column or per range of an integer key (job_uid, run_id);
  any other table is one part, republished when its fingerprint (row count and summed row hashes) changes. The
  tables of :data:`FINGERPRINTED` have a part per month too, each compared by fingerprint at every publish.
- ``manifest.json``: every table's columns and parts, the version, and the parts retired lately. It is
  written whole to a temporary file and renamed over the old one (atomic on POSIX), so a reader sees one
  publish or the next, never half of two. ``version`` changes exactly when the published content does.

What changed comes from :func:`note_changed`, one call by each writer of a partitioned table (the jobs merge,
the mart builders, the ingest audit), kept in the ``serving_journal`` table inside the writer's transaction.
A publish rewrites the partitions from each noted lower bound on, and only those whose row count or
fingerprint differ; the rest of the manifest is carried over. A full publish (``refresh --full``, a new or
swapped-in warehouse, a manifest that does not match the warehouse's ``serving_state``) rewrites everything.

Old parts are deleted ``$GPULEDGER_SERVING_GRACE_S`` seconds (default 600) after the publish that retired them,
so a reader still on an older manifest keeps working (each publish deletes the expired ones); files no manifest
names (a publish killed mid-way) go when the warehouse's writer next connects, those of a publish that failed in
its own process at once.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Iterable

import duckdb

from ingest.warehouse.base import utcnow

#: Tables not published: raw telemetry and its 5-minute rollup (read only by the efficiency mart's builder,
#: and by far the largest tables of a site with telemetry), ingest bookkeeping of telemetry, and our own state.
SERVING_EXCLUDE = frozenset({"gpu_samples", "gpu_samples_5m", "gpu_ingest_ranges", "schema_migrations",
                             "serving_journal", "serving_state",
                             "demand_job", "demand_state", "mart_journal",    # the demand builder's own state
                             "gpu_efficiency_notel_job", "gpu_efficiency_notel_state",   # the notel rollup's
                             "gpu_efficiency_open_hour", "gpu_efficiency_open_att"})   # the efficiency builder's

#: Width of a part of the job-keyed tables, in job_uids (a month of the 5M-job year is ~420,000; a 15-minute
#: cycle of that year touches the running jobs, whose uids span ~65,000: two parts of each job-keyed table).
UID_WIDTH = 1 << 16
#: Width of a part of the run-keyed audit tables, in run_ids.
RUN_WIDTH = 1024

#: Partitioned tables: (column, bucket) with bucket 'month', 'day', 'value' (a part per value) or an integer
#: width. Every writer of one of these calls note_changed. Interval tables are keyed on their end (t1): an
#: incremental rebuild from T deletes the segments starting after T and cuts those running past it, rows that all
#: end after T.
PARTITIONS: dict[str, tuple[str, str | int]] = {
    "jobs": ("job_uid", UID_WIDTH),
    "job_nodes": ("job_uid", UID_WIDTH),
    "tl_job_alloc": ("job_uid", UID_WIDTH),
    "gpu_efficiency_job": ("job_uid", UID_WIDTH),
    "gpu_efficiency_job_hour": ("job_uid", UID_WIDTH),
    "loss_jobs": ("job_uid", UID_WIDTH),
    "loss_days": ("job_uid", UID_WIDTH),
    "tl_node_segments": ("t1", "month"),
    "tl_hourly": ("hour", "month"),
    "tl_pending_hourly": ("hour", "month"),
    "tl_demand_daily": ("day", "month"),
    "tl_blocked_daily": ("day", "month"),
    "gpu_efficiency_notel_day": ("day", "month"),
    "node_job_days": ("day", "month"),
    "ingest_runs": ("run_id", RUN_WIDTH),
    "ingest_skips": ("run_id", RUN_WIDTH),
    "rejects": ("run_id", RUN_WIDTH),
    "statement_jobs": ("period", "value"),     # every job of every closed month
}

#: Tables that grow with history but that their writers replace whole or rewrite in place, so no writer notes
#: them: a part per month all the same, every part fingerprinted at each publish (tens of thousands of rows a
#: year: milliseconds) and only the parts whose content changed written. Unpartitioned, each was written whole
#: whenever it changed (each cycle for tl_node_state and demand_day), which grew with history.
FINGERPRINTED: dict[str, tuple[str, str]] = {
    "tl_node_state": ("t1", "month"), "node_events": ("start", "month"), "node_states": ("observed_at", "month"),
    "demand_day": ("ts", "month"), "demand_peak_day": ("ts", "month"), "tl_decay_daily": ("day", "month"),
    "tl_pending_team_daily": ("day", "month"), "tl_frag_workload_daily": ("day", "month"),
    "tl_frag_state_daily": ("day", "month"), "tl_frag_partial_daily": ("day", "month"),
}

#: Time buckets and their keys (which sort as text in time order).
TIME_FORMATS = {"month": "%Y-%m", "day": "%Y-%m-%d"}

#: ``note_changed(con, tables)``: the whole table changed.
WHOLE = "whole"
ENV_GRACE = "GPULEDGER_SERVING_GRACE_S"
MANIFEST = "manifest.json"
FORMAT = 1


def serving_dir(db_path: str | os.PathLike) -> Path:
    """The folder of the published view of ``db_path`` (``X.duckdb`` -> ``X.serving/``)."""
    p = Path(db_path)
    return p.with_name(p.stem + ".serving")


def serving_path(db_path: str | os.PathLike) -> Path:
    """The manifest of the published view of ``db_path`` (exists once a publish has run)."""
    return serving_dir(db_path) / MANIFEST


def legacy_serving_file(db_path: str | os.PathLike) -> Path:
    """Where versions before the Parquet parts kept a whole copy (``X.serving.duckdb``); removed on publish."""
    p = Path(db_path)
    return p.with_name(p.stem + ".serving" + (p.suffix or ".duckdb"))


def table_names(con, schema: str = "main") -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND database_name = current_database() "
        "ORDER BY table_name", [schema]).fetchall()]


# ---------------------------------------------------------------- the journal (writers)

def note_changed(con: duckdb.DuckDBPyConnection, tables: str | Iterable[str], since=WHOLE) -> None:
    """Tell the next publish that ``tables`` changed from partition key ``since`` on (a timestamp for month-
    partitioned tables, an int for job_uid/run_id ones; :data:`WHOLE`: everywhere; None: nothing changed).

    One call per writer of a table in :data:`PARTITIONS`, inside its transaction, so a rolled-back write
    leaves no note. Unpartitioned and :data:`FINGERPRINTED` tables need no call (their fingerprints are compared at
    each publish)."""
    if since is None:
        return
    names = [tables] if isinstance(tables, str) else list(tables)
    ts = since if isinstance(since, (dt.datetime, dt.date)) else None
    text = since if isinstance(since, str) and since is not WHOLE else None
    n = int(since) if since is not WHOLE and ts is None and text is None else None
    rows = [[t, ts, n, text, utcnow()] for t in names if t in PARTITIONS]
    if rows:    # one statement: executemany costs a statement per row (2.5 ms for three rows, 0.8 ms as one)
        con.execute("INSERT INTO serving_journal (table_name, since_ts, since_int, since_text, noted_at) VALUES "
                    + ", ".join(["(?, ?, ?, ?, ?)"] * len(rows)), [v for r in rows for v in r])


def _journal(con) -> dict[str, object]:
    """table -> the lowest noted bound (WHOLE when any note was for the whole table)."""
    out: dict[str, object] = {}
    for t, whole, lo_ts, lo_n, lo_text in con.execute("""
            SELECT table_name, bool_or(since_ts IS NULL AND since_int IS NULL AND since_text IS NULL), min(since_ts),
                   min(since_int), min(since_text)
            FROM serving_journal GROUP BY table_name""").fetchall():
        out[t] = WHOLE if whole else next(v for v in (lo_ts, lo_n, lo_text) if v is not None)
    return out


# ---------------------------------------------------------------- partitions

def _key_sql(col: str, bucket) -> str:
    """SQL for a row's partition key as text ('null' for a NULL key)."""
    if bucket in TIME_FORMATS:
        return f"coalesce(strftime(\"{col}\", '{TIME_FORMATS[bucket]}'), 'null')"
    if bucket == "value":
        return f"coalesce(\"{col}\"::VARCHAR, 'null')"
    return f"coalesce((\"{col}\" // {int(bucket)})::VARCHAR, 'null')"


def _range_sql(col: str, bucket, key: str) -> tuple[str, list]:
    """WHERE clause (and its parameters) selecting the rows of partition ``key`` (a range: zone maps prune)."""
    if key == "null":
        return f'"{col}" IS NULL', []
    if bucket == "value":
        return f'"{col}" >= ? AND "{col}" <= ?', [key, key]
    if bucket in TIME_FORMATS:
        lo = dt.datetime.strptime(key, TIME_FORMATS[bucket])
        hi = (lo + dt.timedelta(days=1) if bucket == "day"
              else dt.datetime(lo.year + lo.month // 12, lo.month % 12 + 1, 1))
        return f'"{col}" >= ? AND "{col}" < ?', [lo, hi]
    k = int(key)
    return f'"{col}" >= ? AND "{col}" < ?', [k * int(bucket), (k + 1) * int(bucket)]


def _key_of(bucket, since) -> str:
    if bucket in TIME_FORMATS:
        return since.strftime(TIME_FORMATS[bucket])
    if bucket == "value":
        return str(since)
    return str(int(since) // int(bucket))


def _key_order(bucket, key: str):
    """Sortable form of a key (NULL last), so 'from key k on' compares correctly for integer keys."""
    if key == "null":
        return (1, 0)
    return (0, key) if bucket in TIME_FORMATS or bucket == "value" else (0, int(key))


# ---------------------------------------------------------------- publishing

def _read_manifest(d: Path) -> dict | None:
    try:
        return json.loads((d / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _state(con) -> dict[str, str]:
    return dict(con.execute("SELECT key, value FROM serving_state").fetchall())


def _columns(con) -> dict[str, list[list[str]]]:
    cols: dict[str, list[list[str]]] = {}
    for t, c, ty in con.execute("""SELECT table_name, column_name, data_type FROM duckdb_columns()
                                   WHERE schema_name = 'main' AND database_name = current_database()
                                   ORDER BY table_name, column_index""").fetchall():
        cols.setdefault(t, []).append([c, ty])
    return cols


def _sizes(con) -> dict[str, int]:
    return dict(con.execute("SELECT table_name, estimated_size FROM duckdb_tables() "
                            "WHERE schema_name = 'main' AND database_name = current_database()").fetchall())


def _fingerprints(con, t: str, key_sql: str, where: str = "true", params: list | None = None,
                  extra: str | None = None) -> dict[str, list]:
    """key -> [rows, fingerprint] of table ``t``'s rows matching ``where``, grouped by ``key_sql``; with
    ``extra`` (an aggregate over ``_row``), [rows, fingerprint, extra] (the lake's parts record their rows'
    serving keys)."""
    more = f", {extra}" if extra else ""
    rows = con.execute(f"""SELECT {key_sql} AS _serving_key, count(*), sum(hash(_row)::HUGEINT)::VARCHAR{more}
                           FROM main."{t}" _row WHERE {where} GROUP BY _serving_key""", params or []).fetchall()
    return {r[0]: list(r[1:]) for r in rows}


def _write_part(con, d: Path, t: str, key: str, where: str, params: list) -> str:
    rel = f"parts/{t}/{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}.{uuid.uuid4().hex[:12]}.parquet"
    (d / rel).parent.mkdir(parents=True, exist_ok=True)
    con.execute(f"""COPY (SELECT * FROM main."{t}" WHERE {where}) TO '{_sql_path(d / rel)}'
                    (FORMAT parquet, COMPRESSION zstd)""", params)
    return rel


def _sql_path(p: Path) -> str:
    # COPY takes no bound parameter for its target; the path is configuration (--db), never user data.
    return str(p).replace("'", "''")


def _spec(t: str, cols) -> tuple[str, str | int] | None:
    spec = PARTITIONS.get(t) or FINGERPRINTED.get(t)
    return spec if spec and spec[0] in {c for c, _ in cols} else None


def _whole_fingerprints(con, names: list[str]) -> dict[str, dict[str, list]]:
    """{table: {'all': [rows, fingerprint]}} of unpartitioned tables, in one query (empty tables: {})."""
    if not names:
        return {}
    rows = con.execute(" UNION ALL ".join(
        f"""SELECT '{t}', count(*), sum(hash(_row)::HUGEINT)::VARCHAR FROM main."{t}" _row"""
        for t in names)).fetchall()
    return {t: ({"all": [n, fp]} if n else {}) for t, n, fp in rows}


def _publish_table(con, d: Path, t: str, cols, prev: dict | None, since, size: int,
                   whole: dict | None = None) -> tuple[dict, list[str]]:
    """The manifest entry of table ``t`` and the parts it no longer uses. ``prev`` is its previous entry (None:
    publish it whole); ``since`` the journal's bound for it (None: not noted); ``whole`` the fingerprints of an
    unpartitioned table, computed beforehand."""
    spec = _spec(t, cols)
    part_by = list(spec) if spec else None
    if prev is not None and (prev.get("columns") != cols or prev.get("partition") != part_by):
        prev = None
    if spec is None:
        col, bucket, key_sql = None, None, "'all'"
    else:
        col, bucket = spec
        key_sql = _key_sql(col, bucket)
    if prev is not None and t in FINGERPRINTED and spec is not None:
        since = WHOLE                       # never noted: every part compared
    if prev is not None and spec is not None and since is None:
        if size <= prev.get("size", 0):
            return prev, []                 # not noted, not grown: unchanged
        print(f"gpuledger publish: {t} grew without a serving_journal note; republishing it whole "
              "(a writer is missing warehouse.note_changed)", file=sys.stderr)
        since = WHOLE
    old_parts = dict(prev["parts"]) if prev is not None else {}
    stale = set(old_parts)
    if spec is None:
        fresh = whole if whole is not None else (_fingerprints(con, t, key_sql) if size else {})
    elif prev is None or since is WHOLE:
        fresh = _fingerprints(con, t, key_sql)
    else:
        k0 = _key_of(bucket, since)
        lo = _range_sql(col, bucket, k0)[1][0]
        fresh = _fingerprints(con, t, key_sql, f'"{col}" >= ? OR "{col}" IS NULL', [lo])
        stale = {k for k in old_parts if _key_order(bucket, k) >= _key_order(bucket, k0)}
    parts = {k: v for k, v in old_parts.items() if k not in stale}
    retired = []
    for k in stale - set(fresh):
        retired.append(old_parts[k]["file"])
    for k, (n, fp) in fresh.items():
        old = old_parts.get(k)
        if old is not None and old["rows"] == n and old["fp"] == fp:
            parts[k] = old
            continue
        if old is not None:
            retired.append(old["file"])
        where, params = ("true", []) if spec is None else _range_sql(col, bucket, k)
        parts[k] = {"file": _write_part(con, d, t, k, where, params), "rows": n, "fp": fp}
    return {"columns": cols, "partition": part_by, "size": size, "parts": parts}, retired


def publish_serving(con: duckdb.DuckDBPyConnection, db_path: str | os.PathLike,
                    exclude: Iterable[str] = SERVING_EXCLUDE, full: bool = False) -> Path:
    """Publish the warehouse's tables but ``exclude`` as the serving view; returns the manifest's path.

    Incremental: only the partitions noted in ``serving_journal`` are compared, and only those whose content
    changed are written again. With ``full``, or when the manifest does not belong to this warehouse file
    (its epoch or sequence number differ from ``serving_state``), every partition of every table is compared.
    When no content changed, the version readers see stays as it was."""
    d = serving_dir(db_path)
    (d / "parts").mkdir(parents=True, exist_ok=True)
    # What a killed publish left is removed when the writer connects (connection.connect); sweeping every part
    # file here at each publish cost O(history). A publish failing in this process removes its own parts below.
    _remove_dead_temp_files(db_path)
    old = _read_manifest(d)
    if old is not None and old.get("format") != FORMAT:
        old = None
    state = _state(con)
    matches = old is not None and state.get("epoch") == old["epoch"] and state.get("seq") == str(old["seq"])
    cols, sizes = _columns(con), _sizes(con)
    names = sorted(set(cols) - set(exclude))
    journal = {t: WHOLE for t in names} if full or not matches else _journal(con)
    prev_tables = old["tables"] if old is not None else {}
    tables, retired = {}, []
    whole = _whole_fingerprints(con, [t for t in names if _spec(t, cols[t]) is None and sizes.get(t, 0)])
    try:
        for t in names:
            tables[t], gone = _publish_table(con, d, t, cols[t], prev_tables.get(t), journal.get(t),
                                             sizes.get(t, 0), whole.get(t, {}))
            retired += gone
    except BaseException:
        collect_garbage(db_path)        # the parts written so far: no manifest names them
        raise
    for t in set(prev_tables) - set(tables):
        retired += [p["file"] for p in prev_tables[t]["parts"].values()]
    same = matches and _content(tables) == _content(prev_tables)
    epoch = old["epoch"] if matches else uuid.uuid4().hex
    seq = (int(old["seq"]) if same else int(old["seq"]) + 1) if matches else 1
    now = time.time()
    keep = {p["file"] for e in tables.values() for p in e["parts"].values()}
    gone = {f: at for f, at in (old or {}).get("retired", {}).items() if f not in keep}
    gone.update({f: now for f in retired if f not in keep})
    expired = {f for f, at in gone.items() if at + grace_seconds() <= now}
    gone = {f: at for f, at in gone.items() if f not in expired}
    if not same or tables != prev_tables or expired:   # sizes alone: same version, the new sizes kept
        published_at = old["published_at"] if same else utcnow().isoformat()
        # The version names the warehouse file and the content too: a copied warehouse (a restored backup, a
        # test's copy) keeps epoch and sequence, and a dashboard's caches key on the version alone.
        tag = hashlib.sha256(json.dumps([str(Path(db_path).resolve()), _content(tables)], sort_keys=True,
                                        default=str).encode()).hexdigest()[:8]
        _write_manifest(d, {"format": FORMAT, "epoch": epoch, "seq": seq, "version": f"{epoch[:12]}-{seq}-{tag}",
                            "published_at": published_at, "source_db": str(Path(db_path).resolve()),
                            "tables": tables, "retired": gone})
    # The manifest is in place; now the warehouse records it. A crash between the two leaves sequence numbers
    # that differ, which the next publish answers with a full one.
    con.execute("DELETE FROM serving_journal")
    if not same:
        con.execute("INSERT OR REPLACE INTO serving_state VALUES ('epoch', ?), ('seq', ?)", [epoch, str(seq)])
    legacy = legacy_serving_file(db_path)
    for f in (legacy, Path(str(legacy) + ".wal")):
        f.unlink(missing_ok=True)
    for f in expired:                   # past the grace period: no reader's manifest names them any more
        (d / f).unlink(missing_ok=True)
    return d / MANIFEST


def current_entries(con: duckdb.DuckDBPyConnection) -> dict[str, dict]:
    """The published manifest's entries (columns, partition, parts' rows and fingerprints) of the partitioned
    tables whose published content is the warehouse's now, by the rule a publish itself applies: the manifest
    belongs to this warehouse (epoch and sequence of ``serving_state``), the table has no ``serving_journal``
    note and has not grown since. Unpartitioned tables are not vouched for (a publish fingerprints them whole).
    Empty for an in-memory warehouse or before the first publish. Reads only."""
    path = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    if not path or not path[0][0]:
        return {}
    m = read_manifest(path[0][0])
    state = _state(con)
    if m is None or m.get("format") != FORMAT or state.get("epoch") != m["epoch"] or state.get("seq") != str(m["seq"]):
        return {}
    noted, sizes = set(_journal(con)), _sizes(con)
    return {t: e for t, e in m["tables"].items()
            if e.get("partition") and t not in noted and sizes.get(t, 0) <= e.get("size", 0)}


def _content(tables: dict) -> dict:
    """What readers see of a manifest's tables: columns and parts (not the bookkeeping sizes)."""
    return {t: (e["columns"], {k: p["file"] for k, p in e["parts"].items()}) for t, e in tables.items()}


def _write_manifest(d: Path, manifest: dict) -> None:
    tmp = d / f"{MANIFEST}.tmp{os.getpid()}"
    text = json.dumps(manifest, separators=(",", ":"))     # at once: json.dump's many small writes are slower
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, d / MANIFEST)


def read_manifest(db_path: str | os.PathLike) -> dict | None:
    """The published manifest of ``db_path`` (None before the first publish)."""
    return _read_manifest(serving_dir(db_path))


# ---------------------------------------------------------------- garbage

def grace_seconds() -> float:
    return float(os.environ.get(ENV_GRACE, 600))


def collect_garbage(db_path: str | os.PathLike, now: float | None = None) -> list[Path]:
    """Delete parts retired more than the grace period ago (dropping them from the manifest's list), and
    files no manifest names: parts and manifests a publish killed mid-way left behind. Only the warehouse's
    writer calls this (it holds the warehouse lock, so no other publish is running). Returns what it removed."""
    d = serving_dir(db_path)
    m = _read_manifest(d)
    removed = []
    if m is not None:
        now = time.time() if now is None else now
        live = {p["file"] for e in m["tables"].values() for p in e["parts"].values()}
        retired = m.get("retired", {})
        expired = {f for f, at in retired.items() if at + grace_seconds() <= now and f not in live}
        if expired:
            m["retired"] = {f: at for f, at in retired.items() if f not in expired}
            _write_manifest(d, m)
        known = live | set(m["retired"])
        for part in (d / "parts").glob("*/*.parquet"):
            rel = part.relative_to(d).as_posix()
            if rel not in known:
                part.unlink(missing_ok=True)
                removed.append(part)
    for tmp in d.glob(f"{MANIFEST}.tmp*"):
        if _pid_of(tmp.name) != os.getpid():
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _pid_of(name: str) -> int | None:
    m = re.search(r"\.tmp(\d+)", name)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- orphaned files

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's live process
        return True
    return True


def remove_orphaned_snapshots(db_path: str | os.PathLike) -> list[Path]:
    """What a publish killed mid-way left behind, removed by the warehouse's writer on connect: temporary
    manifests and copies (``X.serving.duckdb.tmpPID`` of older versions) of processes that are gone, and parts
    no manifest names. A live process's file may be a publish in progress and is kept. Returns the paths."""
    removed = _remove_dead_temp_files(db_path)
    if _read_manifest(serving_dir(db_path)) is not None:
        removed += [p for p in collect_garbage(db_path) if p.suffix == ".parquet"]
    return removed


def _remove_dead_temp_files(db_path: str | os.PathLike) -> list[Path]:
    """Temporary manifests and copies of processes that are gone (two directory listings, no part files)."""
    removed = []
    for target, directory in ((legacy_serving_file(db_path), Path(db_path).parent),
                              (serving_path(db_path), serving_dir(db_path))):
        pattern = re.compile(re.escape(target.name) + r"\.tmp(\d+)(\.wal)?")
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            m = pattern.fullmatch(name)
            if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
                (directory / name).unlink(missing_ok=True)
                removed.append(directory / name)
    return removed
