"""The DuckDB warehouse: where it lives, how it is opened and migrated, and the ingest audit.

Every ingestor writes through :class:`IngestRun`, which makes one input one transaction and records
what happened to every input line (loaded, skipped with a reason, or rejected with a reason) in
``ingest_runs``, ``ingest_skips`` and ``rejects``.

Concurrency (see docs/ARCHITECTURE.md): one process may hold the warehouse read-write. Dashboards never
open it; they read the *serving snapshot* that :func:`publish_serving` writes next to it and swaps in
atomically by rename, so an ingest never waits for a dashboard and a dashboard never sees half a batch.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable

import duckdb
import pyarrow as pa

DEFAULT_DB = Path("data") / "warehouse.duckdb"
ENV_DB = "GPULEDGER_DB"
ENV_LOCK_TIMEOUT = "GPULEDGER_LOCK_TIMEOUT"
ENV_MEMORY_LIMIT = "GPULEDGER_MEMORY_LIMIT"   # DuckDB memory_limit for every connection, e.g. 8GB
#: Tables too large or too raw to copy into the serving snapshot.
SERVING_EXCLUDE = frozenset({"gpu_samples", "schema_migrations"})


class WarehouseError(Exception):
    """A problem with the warehouse file itself (locked, unreadable, newer schema)."""


class IngestAccountingError(Exception):
    """lines read != loaded + skipped + rejected: a bug in an ingestor, never silently committed."""


def resolve_path(path: str | os.PathLike | None = None) -> Path:
    """The warehouse path: the explicit ``--db``, else ``$GPULEDGER_DB``, else data/warehouse.duckdb."""
    if path:
        return Path(path)
    if os.environ.get(ENV_DB):
        return Path(os.environ[ENV_DB])
    return DEFAULT_DB


def serving_path(db_path: str | os.PathLike) -> Path:
    """Where the read-only serving snapshot of ``db_path`` lives (``X.duckdb`` -> ``X.serving.duckdb``)."""
    p = Path(db_path)
    return p.with_name(p.stem + ".serving" + (p.suffix or ".duckdb"))


def connect(path: str | os.PathLike | None = None, read_only: bool = False,
            lock_timeout: float | None = None, migrate_schema: bool = True) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) and migrate the warehouse; session time zone is UTC.

    A file locked by another process is retried for ``lock_timeout`` seconds (default
    ``$GPULEDGER_LOCK_TIMEOUT`` or 60) before failing with a one-line :class:`WarehouseError`.
    """
    p = resolve_path(path)
    if read_only and not p.exists():
        raise WarehouseError(f"{p}: no warehouse here yet (run `gpuledger ingest ...` or `gpuledger demo`)")
    if not read_only:
        p.parent.mkdir(parents=True, exist_ok=True)
    timeout = float(os.environ.get(ENV_LOCK_TIMEOUT, 60) if lock_timeout is None else lock_timeout)
    con = _open_with_retry(p, read_only, timeout)
    con.execute("SET TimeZone = 'UTC'")
    if os.environ.get(ENV_MEMORY_LIMIT):
        con.execute("SET memory_limit = ?", [os.environ[ENV_MEMORY_LIMIT]])
    if migrate_schema and not read_only:
        migrate(con)
    if not read_only:
        remove_orphaned_snapshots(p)
    elif read_only:
        _check_version(con, p)
    return con


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection):
    """BEGIN ... COMMIT around the block; ROLLBACK and re-raise if it fails."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def bounded_memory(con: duckdb.DuckDBPyConnection, limit: str):
    """DuckDB's memory limit set to ``limit`` (e.g. "2GB") inside the block, unless ``$GPULEDGER_MEMORY_LIMIT``
    sets one for the whole session.

    DuckDB keeps the pages it writes cached up to its limit (80 % of RAM by default), so a long streaming
    load grows to gigabytes it does not need; the work of each of its batches fits in far less."""
    if os.environ.get(ENV_MEMORY_LIMIT):
        yield
        return
    con.execute("SET memory_limit = ?", [limit])
    try:
        yield
    finally:
        con.execute("RESET memory_limit")


def _open_with_retry(p: Path, read_only: bool, timeout: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(p), read_only=read_only)
        except duckdb.IOException as exc:
            msg = str(exc)
            if "lock" not in msg.lower():
                raise WarehouseError(f"{p}: cannot open warehouse: {msg.splitlines()[0]}") from exc
            if time.monotonic() >= deadline:
                holder = re.search(r"PID (\d+)", msg)
                who = f" by process {holder.group(1)}" if holder else ""
                raise WarehouseError(
                    f"{p}: warehouse is locked{who} and stayed locked for {timeout:.0f} s; "
                    "is another ingest running?") from exc
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


# ---------------------------------------------------------------- migrations

def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped in ingest/migrations, in order."""
    out = []
    for entry in resources.files("ingest.migrations").iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    return sorted(out)


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_migrations'").fetchall()[0][0]
    if not exists:
        return 0
    return con.sql("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply every migration newer than the warehouse's version, each in its own transaction."""
    con.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)""")
    have = {r[0] for r in con.sql("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for version, name, sql in migration_files():
        if version in have:
            continue
        with transaction(con):
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, name, utcnow()])
        applied.append(version)
    return applied


def _check_version(con: duckdb.DuckDBPyConnection, p: Path) -> None:
    latest = max((v for v, _, _ in migration_files()), default=0)
    have = schema_version(con)
    if have > latest:
        raise WarehouseError(f"{p}: schema version {have} is newer than this gpuledger knows ({latest}); upgrade gpuledger")


# ---------------------------------------------------------------- time helpers

def utcnow() -> dt.datetime:
    """Current UTC time as a naive datetime (the warehouse stores naive UTC), to the microsecond."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


# ---------------------------------------------------------------- ingest audit

@dataclass
class IngestRun:
    """One input, one transaction, one ``ingest_runs`` row.

    Use as a context manager. Inside, record skips with :meth:`skip` and rejects with :meth:`reject_rows`,
    and set ``loaded``/``inserted``/``updated``/``unchanged``. On leaving, the counts must add up
    (``lines_read == loaded + skipped + rejected``) or the batch is rolled back. If the body raises,
    everything it wrote is rolled back and a ``failed`` run is recorded on its own.
    """

    con: duckdb.DuckDBPyConnection
    source: str
    input_name: str
    sha256: str | Future | None = None     # hex digest of the input, or a Future of it (computed meanwhile)
    nbytes: int | None = None
    cluster: str | None = None
    options: dict = field(default_factory=dict)
    lines_read: int = 0
    loaded: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    skips: dict = field(default_factory=dict)   # reason -> [count, first_line_no]
    rejected: int = 0
    run_id: int = 0
    started_at: dt.datetime | None = None

    @property
    def skipped(self) -> int:
        return sum(c for c, _ in self.skips.values())

    def __enter__(self) -> "IngestRun":
        self.started_at = utcnow()
        self.run_id = self.con.sql("SELECT nextval('seq_ingest_run')").fetchall()[0][0]
        self.con.execute("BEGIN TRANSACTION")
        return self

    def skip(self, reason: str, count: int = 1, first_line_no: int | None = None) -> None:
        """Count ``count`` input lines as skipped for ``reason`` (e.g. 'job step (.batch)')."""
        if count <= 0:
            return
        cur = self.skips.get(reason)
        if cur is None:
            self.skips[reason] = [count, first_line_no]
        else:
            cur[0] += count
            if first_line_no is not None and (cur[1] is None or first_line_no < cur[1]):
                cur[1] = first_line_no

    def reject_rows(self, table: pa.Table | str) -> int:
        """Quarantine rejected lines: an Arrow table or a SQL relation name with columns
        (line_no, field, reason, raw). Returns how many were added."""
        if isinstance(table, str):
            rel = table
        else:
            self.con.register("_rejects_in", table)
            rel = "_rejects_in"
        n = self.con.execute(
            f"INSERT INTO rejects SELECT ?, line_no, field, reason, raw FROM {rel}", [self.run_id]
        ).fetchall()[0][0]
        if rel == "_rejects_in":
            self.con.unregister("_rejects_in")
        self.rejected += n
        return n

    def reject(self, line_no: int, reason: str, raw: str | None, field_name: str | None = None) -> None:
        self.con.execute("INSERT INTO rejects VALUES (?, ?, ?, ?, ?)",
                         [self.run_id, line_no, field_name, reason, raw])
        self.rejected += 1

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            if self.loaded + self.skipped + self.rejected == self.lines_read:
                self._write_run("ok", None)
                self.con.execute("COMMIT")
                return False
            exc = IngestAccountingError(
                f"{self.input_name}: ingest accounting does not add up: read {self.lines_read} != loaded "
                f"{self.loaded} + skipped {self.skipped} + rejected {self.rejected}")
        self.con.execute("ROLLBACK")
        self._record_failure(f"{type(exc).__name__}: {exc}")
        if exc_type is None:
            raise exc
        return False

    def _record_failure(self, message: str) -> None:
        try:
            self.con.execute("BEGIN TRANSACTION")
            self.rejected = self.loaded = self.inserted = self.updated = self.unchanged = 0
            self.skips = {}
            self._write_run("failed", message[:2000])
            self.con.execute("COMMIT")
        except duckdb.Error:  # the audit row is best effort; the original error matters more
            self.con.execute("ROLLBACK")

    def _write_run(self, status: str, message: str | None) -> None:
        if isinstance(self.sha256, Future):
            self.sha256 = self.sha256.result()
        self.con.execute(
            """INSERT INTO ingest_runs (run_id, source, input_name, sha256, bytes, cluster, lines_read, loaded,
                   skipped, rejected, inserted, updated, unchanged, started_at, finished_at, status, message, options)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [self.run_id, self.source, self.input_name, self.sha256, self.nbytes, self.cluster, self.lines_read,
             self.loaded, self.skipped, self.rejected, self.inserted, self.updated, self.unchanged,
             self.started_at, utcnow(), status, message, json.dumps(self.options, sort_keys=True, default=str)])
        for reason, (count, first) in self.skips.items():
            self.con.execute("INSERT INTO ingest_skips VALUES (?, ?, ?, ?)", [self.run_id, reason, count, first])

    def summary(self) -> dict:
        """The run's counts for the CLI; ``error`` is set when it loaded nothing from an input with data
        (:func:`nothing_loaded`), which the CLI reports and exits 1 for."""
        return {"run_id": self.run_id, "input": self.input_name, "read": self.lines_read, "loaded": self.loaded,
                "skipped": self.skipped, "rejected": self.rejected, "inserted": self.inserted,
                "updated": self.updated, "unchanged": self.unchanged,
                "skip_reasons": {k: v[0] for k, v in self.skips.items()}, "error": nothing_loaded(self)}


# ---------------------------------------------------------------- ingest outcome

#: Lines that carry no records: an input made only of these (an empty export: a header and nothing under it,
#: sacctmgr events with no node outage) loads nothing and that is no error.
NO_DATA_SKIPS = frozenset({"blank line", "header line", "comment line", "# HELP/# TYPE/# UNIT line", "# EOF marker",
                           "shell prompt line", "cluster-level event (no node)"})


def nothing_loaded(run: IngestRun) -> str | None:
    """One line saying why a committed run that loaded nothing from an input with data is an error, else None.

    Every line rejected (a binary, a file with a BOM or the wrong layout) or skipped as something gpuledger does
    not load (only job steps, only unused metrics) means the user gave the wrong input: exit 0 would hide it."""
    data_skips = {r: c for r, (c, _) in run.skips.items() if r not in NO_DATA_SKIPS}
    if run.loaded or not (run.rejected or data_skips):
        return None
    parts = ([f"{run.rejected} rejected"] if run.rejected else []) + [f"{c} skipped ({r})" for r, c in sorted(data_skips.items())]
    msg = f"{run.input_name}: nothing loaded from {run.lines_read} lines: " + ", ".join(parts)
    first = run.con.execute("SELECT line_no, field, reason, raw FROM rejects WHERE run_id = ? ORDER BY line_no "
                            "LIMIT 1", [run.run_id]).fetchall()
    if first:
        line_no, field_name, reason, raw = first[0]
        msg += f"; first: line {line_no}: " + (f"field {field_name}: " if field_name else "") + reason[:200]
        msg += _not_text_hint(raw or "")
    return msg


def _not_text_hint(raw: str) -> str:
    """A hint when a rejected line does not look like text at all."""
    if "\x00" in raw:
        # UTF-16 puts a NUL beside every ASCII character: every other character of the line
        nul_every_other = max(raw[0::2].count("\x00"), raw[1::2].count("\x00")) >= 0.8 * (len(raw) // 2) > 1
        return (" (the input looks like UTF-16 text: convert it, e.g. iconv -f UTF-16 -t UTF-8)" if nul_every_other
                else " (the input looks binary, not text: is it the right file?)")
    if raw.count("\ufffd") > max(2, len(raw) // 10):
        return " (the input is mostly not UTF-8 text: is it the right file?)"
    return ""


# ---------------------------------------------------------------- watermarks

def get_watermark(con, source: str, cluster: str) -> dt.datetime | None:
    rows = con.execute("SELECT value FROM watermarks WHERE source = ? AND cluster = ?", [source, cluster]).fetchall()
    return rows[0][0] if rows else None


def set_watermark(con, source: str, cluster: str, value: dt.datetime) -> None:
    con.execute("""INSERT INTO watermarks VALUES (?, ?, ?, ?)
                   ON CONFLICT (source, cluster) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at""",
                [source, cluster, value, utcnow()])


# ---------------------------------------------------------------- serving snapshot

def _sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def table_names(con, schema: str = "main") -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND database_name = current_database() "
        "ORDER BY table_name", [schema]).fetchall()]


def publish_serving(con: duckdb.DuckDBPyConnection, db_path: str | os.PathLike,
                    exclude: Iterable[str] = SERVING_EXCLUDE) -> Path:
    """Copy every table but ``exclude`` into a fresh snapshot file and swap it in by rename.

    Readers that still have the previous snapshot open keep reading it (POSIX rename semantics);
    new readers see the new one. Returns the snapshot path.
    """
    target = serving_path(db_path)
    remove_orphaned_snapshots(db_path)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    for stale in (tmp, Path(str(tmp) + ".wal")):
        stale.unlink(missing_ok=True)
    skip = set(exclude)
    con.execute(f"ATTACH {_sql_string(str(tmp))} AS serving_snap")
    try:
        for t in table_names(con):
            if t not in skip:
                con.execute(f'CREATE TABLE serving_snap."{t}" AS SELECT * FROM main."{t}"')
        con.execute("CREATE TABLE serving_snap.snapshot_info AS SELECT ?::TIMESTAMP AS published_at, ? AS source_db",
                    [utcnow(), str(Path(db_path).resolve())])
    finally:
        con.execute("DETACH serving_snap")
    os.replace(tmp, target)
    return target


# ---------------------------------------------------------------- orphaned snapshot files

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's live process
        return True
    return True


def remove_orphaned_snapshots(db_path: str | os.PathLike) -> list[Path]:
    """Delete the ``X.serving.duckdb.tmpPID`` files (and their ``.wal``) that a publish killed mid-way left behind:
    those whose process is gone. A live process's file may be a publish in progress and is kept (so is one whose
    PID was reused: it goes on a later call). Returns the paths removed."""
    target = serving_path(db_path)
    pattern = re.compile(re.escape(target.name) + r"\.tmp(\d+)(\.wal)?")
    removed = []
    try:
        names = os.listdir(target.parent)
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            (target.parent / name).unlink(missing_ok=True)
            removed.append(target.parent / name)
    return removed
