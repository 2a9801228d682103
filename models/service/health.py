"""The service's own health: ``/healthz`` (200 or 503 with a short JSON reason) and ``/metrics`` (Prometheus text
exposition format 0.0.4, written here: no client library), served from a thread of the collector's process.

Both read only the collector's in-memory snapshot and the warehouse file's size: never the warehouse itself, which
the collector holds only during its cycles.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _unix(t: dt.datetime | None) -> float | None:
    """A naive-UTC datetime as Unix seconds."""
    return t.replace(tzinfo=dt.timezone.utc).timestamp() if t else None


def status(snap: dict, now: float | None = None) -> tuple[int, dict]:
    """(HTTP status, body) of /healthz: 200 when the loop is alive and its last cycle ended recently without a
    cycle-level error, and the dashboard child (if any) still runs; else 503 with the reason."""
    now = time.time() if now is None else now
    max_age = snap["max_cycle_age_s"]
    body = {"cycles": snap["cycles"], "failing_sources": sorted(
        f"{s['cluster']}/{s['source']}" for s in snap["sources"] if s["consecutive_failures"])}
    last = snap["last_cycle_end"]
    body["last_cycle_age_s"] = None if last is None else round(now - last, 1)
    reason = None
    if time.monotonic() - snap["heartbeat"] > max_age:
        reason = f"the collector loop has not run for {time.monotonic() - snap['heartbeat']:.0f} s"
    elif snap["cycle_error"]:
        reason = f"last cycle failed: {snap['cycle_error']}"
    elif last is None:
        reason = ("no cycle has ended yet (starting)" if now - snap["started"] <= max_age
                  else f"no cycle has ended in {now - snap['started']:.0f} s")
    elif now - last > max_age:
        reason = f"the last cycle ended {now - last:.0f} s ago (limit {max_age} s)"
    elif snap["child_exit"] is not None:
        reason = f"the dashboard child exited with status {snap['child_exit']}"
    body["status"] = "ok" if reason is None else "unhealthy"
    if reason:
        body["reason"] = reason
    return (200 if reason is None else 503), body


def _label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _family(out: list[str], name: str, kind: str, help_: str, samples: list[tuple[dict, float]]) -> None:
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        lab = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
        out.append(f"{name}{{{lab}}} {value!r}" if lab else f"{name} {value!r}")


def warehouse_bytes(path: str) -> int:
    """The warehouse file's size with its write-ahead log (0 if absent)."""
    return sum(os.path.getsize(p) for p in (path, path + ".wal") if os.path.exists(p))


def metrics(snap: dict, now: float | None = None) -> str:
    """The /metrics text for one snapshot of the collector."""
    now = time.time() if now is None else now
    out: list[str] = []
    src = snap["sources"]

    def per(fn) -> list[tuple[dict, float]]:
        return [({"cluster": s["cluster"], "source": s["source"]}, v) for s in src if (v := fn(s)) is not None]
    _family(out, "gpuledger_source_last_success_timestamp_seconds", "gauge",
            "Unix time the last successful collection of the source started.",
            per(lambda s: _unix(s["last_success"])))
    _family(out, "gpuledger_source_last_success_age_seconds", "gauge",
            "Seconds since the last successful collection of the source started (its lag).",
            per(lambda s: round(now - _unix(s["last_success"]), 3) if s["last_success"] else None))
    _family(out, "gpuledger_source_complete_to_age_seconds", "gauge",
            "Seconds since the time up to which the source's data is complete (its watermark): grows while "
            "collections succeed without moving it (sacct: slurmctld still holds records for slurmdbd).",
            per(lambda s: round(now - _unix(s["complete_to"]), 3) if s.get("complete_to") else None))
    _family(out, "gpuledger_source_up", "gauge", "1 when the source's last collection succeeded, else 0.",
            per(lambda s: float(s["attempts"] > 0 and s["consecutive_failures"] == 0)))
    _family(out, "gpuledger_source_consecutive_failures", "gauge",
            "Failed collections of the source since its last success.", per(lambda s: float(s["consecutive_failures"])))
    _family(out, "gpuledger_source_attempts_total", "counter", "Collections of the source attempted.",
            per(lambda s: float(s["attempts"])))
    _family(out, "gpuledger_source_failures_total", "counter", "Collections of the source that failed.",
            per(lambda s: float(s["failures"])))
    _family(out, "gpuledger_source_lines_total", "counter",
            "Input lines of the source's collections, by outcome (loaded, skipped, rejected).",
            [({"cluster": s["cluster"], "source": s["source"], "outcome": k}, float(s["lines"][k]))
             for s in src for k in ("loaded", "skipped", "rejected")])
    t = snap["timings"]
    _family(out, "gpuledger_cycle_refresh_seconds", "gauge", "Seconds the last refresh of the marts took.",
            [({}, round(t["refresh"], 6))])
    _family(out, "gpuledger_cycle_publish_seconds", "gauge", "Seconds the last publish of the serving snapshot took.",
            [({}, round(t["publish"], 6))])
    _family(out, "gpuledger_cycle_seconds", "gauge", "Seconds the last cycle took (collection, refresh, publish).",
            [({}, round(t["cycle"], 6))])
    _family(out, "gpuledger_cycles_total", "counter", "Cycles completed since the service started.",
            [({}, float(snap["cycles"]))])
    if snap["last_cycle_end"] is not None:
        _family(out, "gpuledger_last_cycle_timestamp_seconds", "gauge", "Unix time the last cycle ended.",
                [({}, snap["last_cycle_end"])])
    _family(out, "gpuledger_up", "gauge", "1 when /healthz answers 200.", [({}, float(status(snap, now)[0] == 200))])
    _family(out, "gpuledger_warehouse_size_bytes", "gauge", "Size of the warehouse file and its write-ahead log.",
            [({}, float(warehouse_bytes(snap["warehouse"])))])
    if "alerts" in snap:                         # issue 19: a failing mail server shows here, not only in logs
        _family(out, "gpuledger_alert_events_total", "counter", "Alert episodes fired and resolved since start.",
                [({"event": e}, float(snap["alerts"][e])) for e in ("fired", "resolved")])
        _family(out, "gpuledger_alert_deliveries_total", "counter", "Digests delivered and not delivered (after "
                "retries) since start.", [({"outcome": o}, float(snap["alerts"][o])) for o in ("delivered", "undelivered")])
    return "\n".join(out) + "\n"


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True       # a restart binds at once, even with the old socket in TIME_WAIT
    daemon_threads = True


def start(listen: tuple[str, int], snapshot: Callable[[], dict]) -> ThreadingHTTPServer:
    """Serve /healthz and /metrics on ``listen`` (port 0: any free one) in a daemon thread; returns the server
    (``server_address`` has the port; ``shutdown()`` stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):                          # noqa: N802 -- http.server's name
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                code, body = status(snapshot())
                self._send(code, "application/json", json.dumps(body).encode())
            elif path == "/metrics":
                self._send(200, CONTENT_TYPE, metrics(snapshot()).encode())
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /healthz or /metrics\n")

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):         # scrapes every few seconds must not flood the log
            pass

    server = _Server(listen, Handler)
    threading.Thread(target=server.serve_forever, name="gpuledger-health", daemon=True).start()
    return server
