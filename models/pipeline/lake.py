"""`gpuledger export lake DIR`: the warehouse as an open lake of Hive-partitioned Parquet that Spark, DuckDB,
Trino or a lakehouse read without gpuledger (docs/SCALE.md, docs/ARCHITECTURE.md "The lake").

Layout: ``DIR/<table>/cluster=<c>/month=<YYYY-MM>/part-<id>.parquet`` (a table without a cluster column has no
``cluster=`` level, one without a time column no ``month=`` level), and ``DIR/manifest.json``: the schema
version, every table's columns (DuckDB type and the lake's), and per part its file, row count, the row-content
fingerprint and the file's sha256. The partition columns live in the path only (Hive's convention); ``month`` is
the UTC month of the table's time column (:data:`MONTH_COLUMNS`), or its ``period`` for the statement tables.

Types: timestamps are written as Parquet timestamps adjusted to UTC (the warehouse's naive UTC ``TIMESTAMP``
becomes ``TIMESTAMP WITH TIME ZONE``: Spark reads an instant, not a wall-clock time); money stays ``DECIMAL``
with the warehouse's precision and scale; everything else as in docs/SCHEMA.md.

Incremental, with the serving view's change detection (ingest.warehouse.serving: row count and summed row
hashes per partition): an export writes only the parts whose fingerprint changed and carries the others over.
Which parts it fingerprints (:func:`_may_have_changed`): for a table the serving view partitions (jobs, the
timeline and efficiency marts, the audit tables), the view's current part fingerprints, computed by its publish,
say whether anything changed since the last export and where (the manifest keeps, per table, the view's
fingerprints it was exported against and, per part, the serving partitions of its rows); a table the view does
not partition is compared by its whole fingerprint. Without a current serving view (never published, or changed
since the last publish), the table's every part is fingerprinted.

Atomic: new parts get new file names, then the manifest is replaced by rename; readers that go through the
manifest (:func:`part_files`) see one export or the next. Replaced parts are deleted ``$GPULEDGER_LAKE_GRACE_S``
seconds (default 600) later, so a reader on the previous manifest keeps working; files no manifest names (an
export killed mid-way) go at the next export. One export runs at a time per lake (a lock file). Reading never
writes the warehouse.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
import uuid
from pathlib import Path

import duckdb

from ingest.warehouse import serving
from ingest.warehouse.base import utcnow

FORMAT = 1
MANIFEST = "manifest.json"
ENV_GRACE = "GPULEDGER_LAKE_GRACE_S"
#: Hive's name for a NULL partition value (Spark and DuckDB read it as NULL).
NULL_PART = "__HIVE_DEFAULT_PARTITION__"
#: The lake holds what the serving view holds (canonical tables and marts; not raw telemetry or bookkeeping).
LAKE_EXCLUDE = serving.SERVING_EXCLUDE | {"mart_state"}
#: The time column that gives a table's month, first present wins: a statement's period, when a job was submitted
#: (never changes, so a job's rows stay in one part), when an interval starts, the hour or day of a rollup, then
#: the starts of the tables that grow with history without those (loss_jobs, node_events, gpu_efficiency_job,
#: ingest_runs, node_states).
MONTH_COLUMNS = ("period", "submit", "t0", "hour", "day", "time", "ts", "start", "window_start", "started_at",
                 "observed_at")


class LakeError(Exception):
    """The lake directory cannot be written (not a lake, locked by another export)."""


def grace_seconds() -> float:
    return float(os.environ.get(ENV_GRACE, 600))


def read_manifest(lake: str | os.PathLike) -> dict | None:
    """The lake's manifest (None before the first export)."""
    try:
        return json.loads((Path(lake) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def part_files(lake: str | os.PathLike, table: str, manifest: dict | None = None) -> list[str]:
    """Absolute paths of ``table``'s parts in the manifest (read with Hive partitioning and basePath
    ``DIR/<table>``); a reader lists these rather than the directory, which may hold parts of the next export."""
    m = manifest if manifest is not None else read_manifest(lake)
    if m is None or table not in m["tables"]:
        return []
    return [str(Path(lake) / p["file"]) for p in m["tables"][table]["parts"].values()]


# ---------------------------------------------------------------- partitions

def _spec(cols: list[list[str]]) -> tuple[bool, str | None, str | None]:
    """(has a cluster column, the month column, its serving bucket: 'month' for times, 'value' for periods)."""
    types = dict(cols)
    month = next((c for c in MONTH_COLUMNS if c in types), None)
    bucket = None if month is None else ("value" if types[month] == "VARCHAR" else "month")
    return "cluster" in types, month, bucket


def _key_sql(has_cluster: bool, month: str | None, bucket: str | None) -> str:
    """SQL of a row's part key: JSON [cluster, month] (null parts as JSON null)."""
    c = '"cluster"' if has_cluster else "NULL"
    m = f"nullif({serving._key_sql(month, bucket)}, 'null')" if month else "NULL"
    return f"to_json([{c}::VARCHAR, {m}])::VARCHAR"


def _where(has_cluster: bool, month: str | None, bucket: str | None, key: list) -> tuple[str, list]:
    """WHERE clause selecting the rows of part ``key`` (a month range: zone maps prune)."""
    clauses, params = [], []
    if has_cluster:
        clauses.append('"cluster" IS NOT DISTINCT FROM ?')
        params.append(key[0])
    if month:
        sql, p = serving._range_sql(month, bucket, "null" if key[1] is None else key[1])
        clauses.append(sql)
        params += p
    return " AND ".join(clauses) or "true", params


def _escape(value: str | None) -> str:
    """A Hive path value: Hive's %XX escapes for anything but letters, digits and ``_.-``."""
    if value is None:
        return NULL_PART
    return re.sub(r"[^A-Za-z0-9_.-]", lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), value)


def _part_dir(t: str, has_cluster: bool, month: str | None, key: list) -> str:
    parts = [t] + ([f"cluster={_escape(key[0])}"] if has_cluster else []) + (
        [f"month={_escape(key[1])}"] if month else [])
    return "/".join(parts)


def _select(cols: list[list[str]], has_cluster: bool, month: str | None) -> str:
    """The exported columns: all but the path's; naive UTC timestamps as UTC instants."""
    out = []
    for c, ty in cols:
        if c == "cluster" and has_cluster:
            continue
        out.append(f"timezone('UTC', \"{c}\") AS \"{c}\"" if ty == "TIMESTAMP" else f'"{c}"')
    return ", ".join(out)


def _lake_type(ty: str) -> str:
    return "TIMESTAMP WITH TIME ZONE (UTC)" if ty == "TIMESTAMP" else ty


# ---------------------------------------------------------------- export

def export(con: duckdb.DuckDBPyConnection, lake: str | os.PathLike, full: bool = False) -> dict:
    """Export the warehouse to the lake at ``lake``; returns a summary: parts written, kept and retired, rows and
    bytes written, seconds. Only parts whose content changed are written (``full``: all of them)."""
    t0 = time.perf_counter()
    d = Path(lake)
    d.mkdir(parents=True, exist_ok=True)
    if any(d.iterdir()) and not (d / MANIFEST).exists() and not (d / ".lock").exists():
        raise LakeError(f"{d}: not empty and not a gpuledger lake (no {MANIFEST}); choose an empty directory")
    with open(d / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise LakeError(f"{d}: another export is writing this lake") from exc
        old = read_manifest(d)
        old = old if old is not None and old.get("format") == FORMAT else None
        stats = {"written": 0, "kept": 0, "retired": 0, "rows_written": 0, "bytes_written": 0, "fingerprinted": 0}
        cols = serving._columns(con)
        names = sorted(set(cols) - LAKE_EXCLUDE)
        prev = {} if old is None or full else old["tables"]
        published = serving.current_entries(con)
        whole = {t: (f or {}).get("all", [0, None]) for t, f in serving._whole_fingerprints(
            con, [t for t in names if serving._spec(t, cols[t]) is None]).items()}
        tables, retired = {}, []
        for t in names:
            src = published.get(t)
            tables[t], gone = _export_table(con, d, t, cols[t], prev.get(t), stats,
                                            src if src is not None and src["columns"] == cols[t] else None,
                                            whole.get(t))
            retired += gone
        for t in set((old or {}).get("tables", {})) - set(tables):
            retired += [p["file"] for p in old["tables"][t]["parts"].values()]
        if full and old is not None:
            keep = {p["file"] for e in tables.values() for p in e["parts"].values()}
            retired += [p["file"] for e in old["tables"].values() for p in e["parts"].values() if p["file"] not in keep]
        stats["retired"] = len(retired)
        _swap_manifest(con, d, old, tables, retired)
        stats["removed"] = len(collect_garbage(d))
    stats["seconds"] = time.perf_counter() - t0
    return stats


def _export_table(con, d: Path, t: str, cols, prev: dict | None, stats: dict, src: dict | None = None,
                  whole: list | None = None) -> tuple[dict, list[str]]:
    """Table ``t``'s manifest entry and the files of its previous parts it no longer uses. ``src``: the serving
    view's entry of ``t`` when it is current (:func:`ingest.warehouse.serving.current_entries`); ``whole``: the
    [rows, fingerprint] of a table the serving view does not partition (:func:`_may_have_changed`)."""
    has_cluster, month, bucket = _spec(cols)
    part_by = [*(["cluster"] if has_cluster else []), *(["month"] if month else [])]
    lake_cols = [[c, ty, _lake_type(ty)] for c, ty in cols]
    if prev is not None and (prev["columns"] != lake_cols or prev["partition_by"] != part_by):
        prev = None                                 # schema changed: every part anew
    old_parts = prev["parts"] if prev is not None else {}
    key_sql, sspec = _key_sql(has_cluster, month, bucket), serving._spec(t, cols)
    todo = _may_have_changed(con, t, key_sql, prev, src, whole, sspec)
    if todo is None:
        fresh, gone = _fingerprints(con, t, key_sql, sspec), set(old_parts)
    else:
        wheres = [_where(has_cluster, month, bucket, json.loads(k)) for k in sorted(todo)]
        fresh = _fingerprints(con, t, key_sql, sspec, " OR ".join(f"({w})" for w, _ in wheres),
                              [p for _, ps in wheres for p in ps]) if todo else {}
        gone = todo & set(old_parts)
    stats["fingerprinted"] += len(fresh)
    parts = {k: p for k, p in old_parts.items() if k not in gone}
    stats["kept"] += len(parts)
    retired = [old_parts[k]["file"] for k in gone - set(fresh)]
    select = _select(cols, has_cluster, month)
    for k, (n, fp, skeys) in sorted(fresh.items()):
        old = old_parts.get(k)
        if old is not None and old["rows"] == n and old["fp"] == fp:
            parts[k] = {**old, "skeys": skeys}
            stats["kept"] += 1
            continue
        if old is not None:
            retired.append(old["file"])
        key = json.loads(k)
        where, params = _where(has_cluster, month, bucket, key)
        rel = f"{_part_dir(t, has_cluster, month, key)}/part-{uuid.uuid4().hex[:16]}.parquet"
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        con.execute(f"""COPY (SELECT {select} FROM main."{t}" WHERE {where}) TO '{serving._sql_path(d / rel)}'
                        (FORMAT parquet, COMPRESSION zstd)""", params)
        parts[k] = {"file": rel, "cluster": key[0], "month": key[1], "rows": n, "fp": fp, "skeys": skeys,
                    "sha256": _sha256(d / rel), "bytes": (d / rel).stat().st_size}
        stats["written"] += 1
        stats["rows_written"] += n
        stats["bytes_written"] += parts[k]["bytes"]
    entry = {"columns": lake_cols, "partition_by": part_by, "month_from": month,
             "rows": sum(p["rows"] for p in parts.values()), "parts": dict(sorted(parts.items()))}
    if sspec is None:
        entry["whole"] = whole
    elif src is not None:
        entry["serving"] = {"partition": src["partition"],
                            "parts": {k: [p["rows"], p["fp"]] for k, p in src["parts"].items()}}
    return entry, retired


def _fingerprints(con, t: str, key_sql: str, sspec, where: str = "true", params: list | None = None) -> dict:
    """part key -> [rows, fingerprint, the serving partitions its rows are in] of ``t``'s rows matching
    ``where``. The fingerprint is the serving view's (:func:`ingest.warehouse.serving._fingerprints`)."""
    # sorted by the key itself (``ORDER BY 1`` in an aggregate sorts by the constant 1: any order, and the
    # manifest of an unchanged export would differ from the last one's)
    skeys = f"list(DISTINCT {serving._key_sql(*sspec)} ORDER BY {serving._key_sql(*sspec)})" if sspec else "NULL"
    return serving._fingerprints(con, t, key_sql, where, params, extra=skeys)


def _may_have_changed(con, t: str, key_sql: str, prev: dict | None, src: dict | None, whole: list | None,
                      sspec) -> set[str] | None:
    """The keys of ``t``'s parts that may differ from the previous export (None: any may; fingerprint all).

    Change detection without reading every row (an unchanged export of the 5M-job year fingerprinted 63 tables
    in 15 s). A table the serving view does not partition is compared by its whole fingerprint, one pass over
    small tables. A partitioned one (jobs, the timeline and efficiency marts...) by the serving view's current
    part fingerprints (its publish already computed them): no serving partition changed since the last export,
    nothing did; else the parts holding rows of a changed serving partition now (an index-pruned read of those
    rows) or before (each part records the serving partitions of its rows, ``skeys``)."""
    if prev is None:
        return None
    if sspec is None:
        return set() if whole is not None and prev.get("whole") == whole else None
    before = (prev.get("serving") or {}).get("parts")
    if src is None or before is None or prev["serving"]["partition"] != src["partition"] \
            or any("skeys" not in p for p in prev["parts"].values()):
        return None
    now = {k: [p["rows"], p["fp"]] for k, p in src["parts"].items()}
    changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    if not changed:
        return set()
    ranges = [serving._range_sql(*sspec, k) for k in changed]
    touched = con.execute(f"""SELECT DISTINCT {key_sql} FROM main."{t}" _row
                              WHERE {" OR ".join(f"({w})" for w, _ in ranges)}""",
                          [p for _, ps in ranges for p in ps]).fetchall()
    return {r[0] for r in touched} | {k for k, p in prev["parts"].items() if set(changed) & set(p["skeys"])}


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _swap_manifest(con, d: Path, old: dict | None, tables: dict, retired: list[str]) -> None:
    """Write the new manifest beside the old and rename it over (atomic on POSIX); unchanged content keeps the
    version number."""
    keep = {p["file"] for e in tables.values() for p in e["parts"].values()}
    now = time.time()
    gone = {f: at for f, at in (old or {}).get("retired", {}).items() if f not in keep}
    gone.update({f: now for f in retired if f not in keep})
    same = old is not None and _content(old["tables"]) == _content(tables)
    version = (old["version"] if same else old["version"] + 1) if old is not None else 1
    schema = con.execute("SELECT max(version) FROM schema_migrations").fetchall()[0][0]
    manifest = {"format": FORMAT, "schema_version": schema, "version": version,
                "exported_at": old["exported_at"] if same else utcnow().isoformat(timespec="seconds") + "Z",
                "tables": tables, "retired": gone}
    tmp = d / f"{MANIFEST}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, separators=(",", ":"), sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, d / MANIFEST)


def _content(tables: dict) -> dict:
    return {t: (e["columns"], {k: p["file"] for k, p in e["parts"].items()}) for t, e in tables.items()}


def collect_garbage(lake: str | os.PathLike, now: float | None = None) -> list[Path]:
    """Delete parts retired more than the grace period ago, and Parquet files and temporary manifests no
    manifest names (an export killed mid-way). Called by the export, under the lake's lock."""
    d = Path(lake)
    m = read_manifest(d)
    if m is None:
        return []
    now = time.time() if now is None else now
    live = {p["file"] for e in m["tables"].values() for p in e["parts"].values()}
    expired = {f for f, at in m["retired"].items() if at + grace_seconds() <= now and f not in live}
    if expired:
        m["retired"] = {f: at for f, at in m["retired"].items() if f not in expired}
        tmp = d / f"{MANIFEST}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(m, separators=(",", ":"), sort_keys=True), encoding="utf-8")
        os.replace(tmp, d / MANIFEST)
    known = live | set(m["retired"])
    removed = []
    for part in d.rglob("*.parquet"):
        if part.relative_to(d).as_posix() not in known:
            part.unlink(missing_ok=True)
            removed.append(part)
    for tmp in d.glob(f"{MANIFEST}.tmp*"):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(sub.iterdir()):
            sub.rmdir()
    return removed

