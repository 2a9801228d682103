"""The collector: one long-running writer that, cycle after cycle, collects every source that is due, then refreshes
the marts incrementally and publishes the serving snapshot.

- **One writer, only during a cycle.** The warehouse is opened read-write when a cycle has work and closed at its
  end, so CLI reports (read-only) and `chargeback --close` get the file between cycles; a cycle that finds the file
  held waits up to ``[service] lock_timeout`` and otherwise fails as a whole (retried next cycle).
- **Sources fail alone.** Each collection is the ingestor's own transaction; an exception (command missing or
  failing, Slurm down, Prometheus timing out, a bad file) is recorded for that source only, which then waits
  ``backoff_initial * 2^(failures-1)`` (at most ``backoff_max``) before its next try. Every attempt updates the
  source's row of ``source_status`` (last attempt, last success, consecutive failures, last error, line counters).
- **Catch-up from watermarks.** sacct reads from its watermark minus sacct_live.LIVE_OVERLAP_S (the watermark waits
  while slurmctld holds records for slurmdbd, and open jobs a read leaves out are read by id), Prometheus from its own
  watermark minus ``overlap`` in windows of at most ``max_window`` (a source still behind is due again at once);
  the merges are idempotent (jobs keep their most progressed version, readings one row per device-minute), so
  after downtime nothing is lost and nothing is counted twice.
- **Stopping.** SIGTERM/SIGINT set a flag: the collection or refresh in progress finishes (its transaction commits),
  the rest of the cycle is skipped, the warehouse is closed, the dashboard child is stopped and ``serve`` returns 0.
  A second signal interrupts at once (the transaction in progress rolls back).
"""
from __future__ import annotations

import datetime as dt
import logging
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ingest import warehouse
from models.pipeline import lake, refresh
from models.service import alerts, health
from models.service.config import ServiceConfig, SourceConfig
from models.service.sources import KINDS

log = logging.getLogger("gpuledger.service")
#: the longest time between two alert evaluations when no refresh triggers one (stale sources need the clock)
ALERT_EVERY_S = 300


@dataclass
class SourceState:
    """What the loop knows of one (cluster, source); mirrored in ``source_status``."""
    cfg: SourceConfig
    next_due: float = 0.0                      # time.monotonic() when it is due
    last_attempt: dt.datetime | None = None    # naive UTC
    last_success: dt.datetime | None = None
    consecutive_failures: int = 0
    last_error: str | None = None
    last_run_id: int | None = None
    complete_to: dt.datetime | None = None     # its watermark after the last success (sources that keep one)
    attempts: int = 0
    failures: int = 0
    lines: dict = field(default_factory=lambda: {"loaded": 0, "skipped": 0, "rejected": 0})


def one_line(exc: BaseException) -> str:
    """An exception as one line: an InputError's own text, else its type and first line."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return first if type(exc).__name__ in ("InputError", "WarehouseError") else f"{type(exc).__name__}: {first}"


class Collector:
    """The loop's state and its cycle; ``snapshot()`` is what /healthz and /metrics read (thread-safe)."""

    def __init__(self, cfg: ServiceConfig):
        self.cfg = cfg
        self.states = {s.key: SourceState(s) for s in cfg.sources}
        self.lock = threading.Lock()
        self.cycles = 0
        self.started = time.time()
        self.last_cycle_end: float | None = None      # Unix time of the last cycle that ended without a cycle error
        self.cycle_error: str | None = None
        self.timings = {"cycle": 0.0, "refresh": 0.0, "publish": 0.0}
        self.loaded_status = False
        self.need_refresh = True                      # the first cycle brings the marts up to date
        self.lake_due = 0.0                           # monotonic time the next lake export may run
        self.heartbeat = time.monotonic()
        self.child: subprocess.Popen | None = None
        #: steps called with the cycle's read-write connection after its refresh and publish (scheduled reports,
        #: models/service/reports.py); each may return a follow-up run once the warehouse is closed (sending
        #: mail must not hold it). Their exceptions are logged, never the cycle's failure.
        self.after_cycle: list[Callable] = []
        self.alerts_at = 0.0                          # time.monotonic() of the last alert evaluation
        self.alert_counts = {"fired": 0, "resolved": 0, "delivered": 0, "undelivered": 0}

    # ------------------------------------------------------------ schedule

    def due(self, now: float) -> list[SourceState]:
        return [s for s in self.states.values() if s.next_due <= now]

    def wait_s(self, now: float) -> float:
        """Seconds until the next source is due, between 0.05 and the cycle."""
        nxt = min((s.next_due for s in self.states.values()), default=now + self.cfg.cycle_s)
        return max(0.05, min(self.cfg.cycle_s, nxt - now))

    def _backoff(self, failures: int) -> float:
        return min(self.cfg.backoff_max_s, self.cfg.backoff_initial_s * 2 ** max(0, failures - 1))

    # ------------------------------------------------------------ one cycle

    def cycle(self, stop: threading.Event) -> bool:
        """Collect what is due, refresh if anything new was loaded (else publish if a status changed); True when
        the cycle ended without a cycle-level error (warehouse unavailable, refresh failed, status not written)."""
        try:
            return self._cycle(stop)
        except Exception as exc:                # noqa: BLE001 -- the loop outlives anything one cycle meets
            log.exception("cycle failed")
            return self._cycle_failed(one_line(exc))

    def _cycle(self, stop: threading.Event) -> bool:
        t0 = time.perf_counter()
        due = self.due(time.monotonic())
        try:
            con = warehouse.connect(self.cfg.warehouse, lock_timeout=self.cfg.lock_timeout_s)
        except warehouse.WarehouseError as exc:
            return self._cycle_failed(one_line(exc))
        try:
            if not self.loaded_status:
                self._load_status(con)
            before = warehouse.newest_run(con)
            timed = {"refresh": 0.0, "publish": 0.0}
            for st in due:
                if stop.is_set():
                    break
                self._collect(con, st)
                self.heartbeat = time.monotonic()      # a long cycle is a live loop
            if stop.is_set():
                return True
            self.need_refresh = self.need_refresh or warehouse.newest_run(con) > before
            try:
                if self.need_refresh:
                    steps = refresh.run(con, self.cfg.warehouse)
                    pub = sum(s for n, s in steps if n == "serving snapshot")
                    timed = {"refresh": sum(s for n, s in steps) - pub, "publish": pub}
                    self.need_refresh = False
                    # The lake follows the refreshes (and their publish, whose fingerprints tell the export what
                    # changed), at most every lake_interval: each export still writes the changed tables' current
                    # parts whole (docs/BENCHMARKS.md, the lake).
                    if self.cfg.lake is not None and time.monotonic() >= self.lake_due:
                        timed["lake"] = lake.export(con, self.cfg.lake)["seconds"]
                        self.lake_due = time.monotonic() + self.cfg.lake_interval_s
                elif due:
                    p0 = time.perf_counter()
                    warehouse.publish_serving(con, self.cfg.warehouse)
                    timed = {"refresh": 0.0, "publish": time.perf_counter() - p0}
            except Exception as exc:            # noqa: BLE001 -- the loop outlives a failed refresh
                log.exception("refresh failed")
                return self._cycle_failed(f"refresh failed: {one_line(exc)}")
            follow_ups = self._after_cycle(con, stop)
        finally:
            con.close()
        self._alert_round(refreshed=timed["refresh"] > 0 or timed["publish"] > 0)
        self._follow_up(follow_ups, stop)
        with self.lock:
            self.cycles += 1
            self.cycle_error = None
            self.last_cycle_end = time.time()
            self.timings = {**timed, "cycle": time.perf_counter() - t0}     # one cycle's figures together
        return True

    def _after_cycle(self, con, stop: threading.Event) -> list[Callable]:
        """Run the after-cycle steps on ``con``; the follow-ups they return (to run with the warehouse closed)."""
        out = []
        for step in self.after_cycle:
            if stop.is_set():
                break
            try:
                follow = step(con)
            except Exception:                   # noqa: BLE001 -- reports never stop collection
                log.exception("after-cycle step %s failed", getattr(step, "__name__", step))
                continue
            out += [follow] if follow else []
        return out

    def _follow_up(self, follow_ups: list[Callable], stop: threading.Event) -> None:
        for follow in follow_ups:
            if stop.is_set():
                return
            try:
                follow()
            except Exception:                   # noqa: BLE001 -- reports never stop collection
                log.exception("after-cycle follow-up %s failed", getattr(follow, "__name__", follow))

    # ------------------------------------------------------------ alerts (issue 19)

    def _alert_round(self, refreshed: bool) -> None:
        """After a refresh (or every ALERT_EVERY_S, for the wall-clock rules): evaluate the rules on a read-only
        connection (readers keep the file meanwhile), store the episodes and compute the digests owed on a short
        read-write one, send them with the warehouse closed (an SMTP server retried with backoff must not hold
        it), then record the deliveries. Alerting never fails the cycle: its errors are logged; deliveries not
        recorded stay owed and go out again."""
        if not self.cfg.alerts or not (refreshed or time.monotonic() - self.alerts_at >= ALERT_EVERY_S):
            return
        self.alerts_at = time.monotonic()
        try:
            con = warehouse.connect(self.cfg.warehouse, read_only=True, lock_timeout=self.cfg.lock_timeout_s)
            try:
                observed = alerts.observe(con, self.cfg.alerts)
            finally:
                con.close()
            con = warehouse.connect(self.cfg.warehouse, lock_timeout=self.cfg.lock_timeout_s)
            try:
                counts = alerts.store(con, observed)
                digests = alerts.owed(con, self.cfg.alerts, self.cfg.delivery)
            finally:
                con.close()
            with self.lock:
                self.alert_counts["fired"] += counts["fired"]
                self.alert_counts["resolved"] += counts["resolved"]
            results = alerts.send(self.cfg.delivery, digests)
            with self.lock:
                self.alert_counts["delivered"] += sum(1 for _, r in results if r.ok)
                self.alert_counts["undelivered"] += sum(1 for _, r in results if not r.ok)
            if results:
                con = warehouse.connect(self.cfg.warehouse, lock_timeout=self.cfg.lock_timeout_s)
                try:
                    alerts.record(con, results)
                finally:
                    con.close()
        except Exception:                      # noqa: BLE001 -- collecting data matters more than alerting
            log.exception("alert round failed")

    def _cycle_failed(self, msg: str) -> bool:
        log.error("cycle failed: %s", msg)
        with self.lock:
            self.cycle_error = msg
        return False

    def _collect(self, con, st: SourceState) -> None:
        src, started, m0 = st.cfg, warehouse.utcnow(), time.monotonic()
        try:
            summary = KINDS[src.kind].collect(con, src.where, src.opts)
            error = summary.get("error")
        except Exception as exc:                # noqa: BLE001 -- one source's failure never stops the others
            summary, error = None, one_line(exc)
        wm = KINDS[src.kind].watermark
        mark = warehouse.get_watermark(con, wm, src.where.cluster) if wm and error is None else None
        with self.lock:
            st.attempts += 1
            st.last_attempt = started
            if summary is not None:               # committed, even with an error (its rejects are readable)
                for k in st.lines:
                    st.lines[k] += int(summary.get(k) or 0)
                st.last_run_id = summary.get("run_id") or st.last_run_id
            if error is None:
                st.last_success, st.consecutive_failures, st.last_error = started, 0, None
                st.complete_to = mark
                st.next_due = m0 if summary.get("more") else m0 + src.interval_s
            else:
                st.consecutive_failures += 1
                st.failures += 1
                st.last_error = error
                st.next_due = time.monotonic() + self._backoff(st.consecutive_failures)
            wait = st.next_due - time.monotonic()
        if error is None:
            log.info("%s/%s: loaded %s, skipped %s, rejected %s (run %s) in %.2f s", *src.key, summary.get("loaded"),
                     summary.get("skipped"), summary.get("rejected"), summary.get("run_id"), time.monotonic() - m0)
            for note in summary.get("notes", []):       # unattended: the log is where an operator reads them
                log.warning("%s/%s: note: %s", *src.key, note)
        else:
            log.warning("%s/%s failed (%d in a row; next try in %.0f s): %s", *src.key, st.consecutive_failures,
                        max(0.0, wait), error)
        self._store_status(con, st, started + dt.timedelta(seconds=max(0.0, wait)))

    # ------------------------------------------------------------ source_status

    def _store_status(self, con, st: SourceState, next_attempt: dt.datetime) -> None:
        con.execute("""INSERT OR REPLACE INTO source_status VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [*st.cfg.key, st.last_attempt, st.last_success, st.consecutive_failures, st.last_error,
                     st.last_run_id, next_attempt, st.attempts, st.failures, st.lines["loaded"],
                     st.lines["skipped"], st.lines["rejected"], warehouse.utcnow(), st.complete_to])

    def _load_status(self, con) -> None:
        """Counters and last success survive a restart (every source is due at once after one)."""
        rows = con.execute("""SELECT cluster, source, last_attempt, last_success, consecutive_failures, last_error,
                                     last_run_id, attempts, failures, lines_loaded, lines_skipped, lines_rejected,
                                     complete_to
                              FROM source_status""").fetchall()
        with self.lock:
            for c, s, la, ls, cf, le, rid, att, fl, lo, sk, rj, ct in rows:
                st = self.states.get((c, s))
                if st:
                    st.last_attempt, st.last_success, st.consecutive_failures, st.last_error = la, ls, cf, le
                    st.last_run_id, st.attempts, st.failures, st.complete_to = rid, att, fl, ct
                    st.lines = {"loaded": lo, "skipped": sk, "rejected": rj}
            self.loaded_status = True

    # ------------------------------------------------------------ what /healthz and /metrics read

    def snapshot(self) -> dict:
        with self.lock:
            return {"started": self.started, "cycles": self.cycles, "last_cycle_end": self.last_cycle_end,
                    "cycle_error": self.cycle_error, "timings": dict(self.timings), "heartbeat": self.heartbeat,
                    "cycle_s": self.cfg.cycle_s, "max_cycle_age_s": self.cfg.max_cycle_age_s,
                    "warehouse": str(self.cfg.warehouse), "alerts": dict(self.alert_counts),
                    "child_exit": self.child.poll() if self.child is not None else None,
                    "sources": [{"cluster": st.cfg.key[0], "source": st.cfg.key[1],
                                 "last_attempt": st.last_attempt, "last_success": st.last_success,
                                 "complete_to": st.complete_to,
                                 "consecutive_failures": st.consecutive_failures, "last_error": st.last_error,
                                 "attempts": st.attempts, "failures": st.failures, "lines": dict(st.lines)}
                                for st in self.states.values()]}

    # ------------------------------------------------------------ the loop

    def run(self, stop: threading.Event, once: bool = False) -> None:
        """Cycle until ``stop`` is set (``once``: a single cycle of every source)."""
        while not stop.is_set():
            self.heartbeat = time.monotonic()
            if self.due(self.heartbeat) or self.need_refresh:
                self.cycle(stop)
            if once:
                return
            self.heartbeat = time.monotonic()
            stop.wait(self.wait_s(self.heartbeat))


def serve(cfg: ServiceConfig, dashboard: Callable[[], subprocess.Popen] | None = None, once: bool = False,
          after_cycle: tuple[Callable, ...] = ()) -> int:
    """Run the service until SIGTERM/SIGINT: /healthz and /metrics (``[health] listen``), the dashboard child
    (``dashboard()`` starts it) and the collector loop in this thread. Returns the exit status: 0; with ``once``
    (one cycle, no health server, no dashboard) 1 when the cycle or a source failed. ``after_cycle``: steps run
    with the cycle's read-write connection after its refresh and publish (scheduled reports)."""
    stop = threading.Event()
    collector = Collector(cfg)
    collector.after_cycle.extend(after_cycle)

    def on_signal(signum, frame):
        if stop.is_set():                       # a second signal: interrupt now (the transaction rolls back)
            raise KeyboardInterrupt
        log.warning("signal %d: finishing the current step, then stopping", signum)
        stop.set()
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    http = health.start(cfg.health_listen, collector.snapshot) if cfg.health_listen and not once else None
    try:
        if dashboard is not None and not once:
            collector.child = dashboard()
        log.info("gpuledger serve: %d sources of %d clusters into %s, cycle %d s%s", len(cfg.sources),
                 len(cfg.clusters), cfg.warehouse, cfg.cycle_s,
                 f"; health on http://{cfg.health_listen[0]}:{http.server_address[1]}" if http else "")
        collector.run(stop, once=once)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if http is not None:
            http.shutdown()
            http.server_close()
        _stop_child(collector.child)
    log.info("gpuledger serve: stopped after %d cycles", collector.cycles)
    if once:       # cron-style: say whether everything worked
        snap = collector.snapshot()
        return 1 if snap["cycle_error"] or any(s["consecutive_failures"] for s in snap["sources"]) else 0
    return 0


def _stop_child(child: subprocess.Popen | None) -> None:
    if child is None or child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=5)
