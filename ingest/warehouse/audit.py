"""The ingest audit: every input is one transaction and one ``ingest_runs`` row that says what happened to
each of its lines (loaded, skipped with a reason, or rejected with a reason, in ``ingest_skips`` and
``rejects``); and the watermarks from which live collection resumes."""
from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import Future
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from ingest.warehouse.base import utcnow
from ingest.warehouse.serving import note_changed


class IngestAccountingError(Exception):
    """lines read != loaded + skipped + rejected: a bug in an ingestor, never silently committed."""


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
    #: what inserted/updated/unchanged count when it is not one row per loaded line (telemetry readings of a
    #: GPU-minute fold into one sample; a Philly job splits into its attempts)
    stored_as: str = "rows"
    skips: dict = field(default_factory=dict)   # reason -> [count, first_line_no]
    rejected: int = 0
    run_id: int = 0
    started_at: dt.datetime | None = None
    #: what a reader of the run must know beside its counts (fields kept in jobs.extra, GPUs kept from the
    #: inventory): the run's message (the Data health page shows it) and the summary's ``notes``
    notes: list = field(default_factory=list)

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

    def mark_lines(self, lines: list[str], skipped=(), rejected=()) -> None:
        """A line parser's verdicts: ``skipped`` (line_no, reason) count one line each; ``rejected`` (line_no,
        field, reason) are quarantined with the line's text (line numbers 1-based), in one insert: one row at a
        time took 0.8 ms a line, 8 s for a file of 10,000 bad lines."""
        for ln, reason in skipped:
            self.skip(reason, 1, ln)
        rows = list(rejected)
        if rows:
            line_no, fields, reasons = zip(*rows)
            raw = [lines[n - 1] if 0 < n <= len(lines) else None for n in line_no]
            self.reject_rows(pa.table({"line_no": pa.array(line_no, pa.int64()), "field": pa.array(fields, pa.string()),
                                       "reason": pa.array(reasons, pa.string()), "raw": pa.array(raw, pa.string())}))

    def reject(self, line_no: int, reason: str, raw: str | None, field_name: str | None = None) -> None:
        self.con.execute("INSERT INTO rejects VALUES (?, ?, ?, ?, ?)",
                         [self.run_id, line_no, field_name, reason, raw])
        self.rejected += 1

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            if self.loaded + self.skipped + self.rejected == self.lines_read:
                self._write_run("ok", "; ".join(f"note: {n}" for n in self.notes)[:2000] or None)
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
        note_changed(self.con, ("ingest_runs", "ingest_skips", "rejects"), self.run_id)

    def summary(self) -> dict:
        """The run's counts for the CLI; ``error`` is set when it loaded nothing from an input with data
        (:func:`nothing_loaded`), which the CLI reports and exits 1 for."""
        return {"run_id": self.run_id, "input": self.input_name, "read": self.lines_read, "loaded": self.loaded,
                "skipped": self.skipped, "rejected": self.rejected, "inserted": self.inserted,
                "updated": self.updated, "unchanged": self.unchanged, "stored_as": self.stored_as,
                "read_as": self.options.get("read_as", "lines"),
                "skip_reasons": {k: v[0] for k, v in self.skips.items()}, "error": nothing_loaded(self),
                "notes": list(self.notes)}


# ---------------------------------------------------------------- ingest outcome

#: Lines that carry no records: an input made only of these (an empty export: a header and nothing under it,
#: sacctmgr events with no node outage) loads nothing and that is no error.
NO_DATA_SKIPS = frozenset({"blank line", "header line", "comment line", "# HELP/# TYPE/# UNIT line", "# EOF marker",
                           "shell prompt line", "cluster-level event (no node)", "no reservations line"})


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
