"""Scheduled reports (issue 19 part 4): who gets which report, when it is due, and the stored runs that make each
one go out once per period, even across restarts. The service loop calls :func:`run_due` after each cycle.

Configuration, in the service's file (data/gpuledger.example.toml documents it)::

    [smtp]                      # where mail leaves (models/service/delivery.py; AUTH from the environment)
    host = "mail.example.org"
    [[reports]]
    name = "managers-weekly"    # unique; the key runs are stored under
    kind = "weekly"             # weekly (the Overview), team_note (one team's week), finance (a closed month)
    to = ["head@example.org"]
    team = "nlp"                # team_note only: whose note
    pdf = true                  # weekly, team_note: attach the PDF (headless chromium)

Periods: weekly and team notes cover the last complete ISO week (Monday to Monday, UTC) and are due once it has
ended; the finance pack covers the newest closed month and is due once the month is closed. A (report, period,
recipient) with a ``sent`` row in ``report_runs`` is done; ``refused`` (the recipient's dashboard role may not see
the report) is not tried again for that period; ``failed`` (SMTP unreachable, rendering failed) is tried again
after ``[reports_schedule] retry`` and reported on every attempt, never fatal to the loop.

Rendering is the presentation layer's (dashboards/reports.py reads the serving snapshot as the dashboard does);
the service is given it as ``render`` by `gpuledger serve`, so this module stays below the dashboards.
Delivery is at least once: a crash between the SMTP server's acceptance and the row's commit sends it again.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from ingest import warehouse
from models.metrics import chargeback
from models.service import delivery
from models.service.config import ServiceConfig, _table, _Where
from models.service.sources import Key

log = logging.getLogger("gpuledger.reports")

KINDS = ("weekly", "team_note", "finance")
REPORT_KEYS = {"name": Key("str", None, "unique name; runs are stored under it"),
               "kind": Key("str", None, "weekly, team_note or finance"),
               "to": Key("strings", None, "recipients' email addresses"),
               "team": Key("str", "", "team_note: the team"),
               "pdf": Key("bool", True, "weekly, team_note: attach the PDF"),
               "template_dir": Key("path", "", "a directory of site templates overriding the packaged ones")}
SMTP_KEYS = {"host": Key("str", "localhost", "SMTP server"), "port": Key("port", 587, "SMTP port"),
             "security": Key("str", "starttls", "starttls, tls or none"),
             "sender": Key("str", "gpuledger@localhost", "From address"),
             "ca_file": Key("path", "", "CA bundle for the server's certificate (default: the system's)"),
             "timeout": Key("duration", 30, "per SMTP connection"),
             "retries": Key("int", 3, "attempts after the first, with backoff"),
             "backoff": Key("duration", 5, "first wait between attempts; doubles")}
SCHEDULE_KEYS = {"retry": Key("duration", 900, "wait before a failed delivery is tried again")}


@dataclass(frozen=True)
class ReportConfig:
    name: str
    kind: str
    to: tuple[str, ...]
    team: str = ""
    pdf: bool = True
    template_dir: str = ""


@dataclass(frozen=True)
class ReportsConfig:
    reports: tuple[ReportConfig, ...]
    smtp: delivery.SmtpSettings
    retry_s: int = 900


class Rendered(Protocol):
    subject: str
    text: str
    html: str
    facts: dict
    attachments: tuple


#: render(report, period, recipient) -> the recipient's report; raises PermissionError for a recipient whose
#: role may not see it
Render = Callable[[ReportConfig, str, str], Rendered]


# ---------------------------------------------------------------- configuration

def parse(cfg: ServiceConfig, text: str) -> ReportsConfig:
    """``[[reports]]``, ``[smtp]`` and ``[reports_schedule]`` of the service config (``cfg.extra``; ``text`` is the
    file's text, for the line of an error). Raises InputError (file:line: key ...: problem)."""
    chk, base, doc = _Where(str(cfg.path), text), cfg.path.resolve().parent, cfg.extra
    raw = doc.get("reports") or []
    if not isinstance(raw, list):
        chk.fail(("reports",), "must be an array of tables: [[reports]]")
    out, names = [], set()
    for i, r in enumerate(raw):
        v = _table(chk, ("reports", i), r, REPORT_KEYS, base)
        if v["kind"] not in KINDS:
            chk.fail(("reports", i, "kind"), f"must be one of {', '.join(KINDS)}, got {v['kind']!r}")
        if v["name"] in names:
            chk.fail(("reports", i, "name"), f"report {v['name']!r} is configured twice")
        if not v["to"] or not all("@" in a for a in v["to"]):
            chk.fail(("reports", i, "to"), "must list at least one email address")
        if (v["kind"] == "team_note") != bool(v["team"]):
            chk.fail(("reports", i, "team"), "a team_note names its team; other kinds take none")
        names.add(v["name"])
        out.append(ReportConfig(v["name"], v["kind"], tuple(v["to"]), v["team"], v["pdf"], v["template_dir"]))
    s = _table(chk, ("smtp",), doc.get("smtp"), SMTP_KEYS, base)
    if s["security"] not in ("starttls", "tls", "none"):
        chk.fail(("smtp", "security"), f"must be starttls, tls or none, got {s['security']!r}")
    smtp = delivery.SmtpSettings(s["host"], s["port"], s["security"], s["sender"], s["ca_file"], float(s["timeout"]),
                                 s["retries"], float(s["backoff"]))
    sched = _table(chk, ("reports_schedule",), doc.get("reports_schedule"), SCHEDULE_KEYS, base)
    return ReportsConfig(tuple(out), smtp, sched["retry"])


# ---------------------------------------------------------------- what is due

def week_label(day: dt.date) -> str:
    y, w, _ = day.isocalendar()
    return f"{y}-W{w:02d}"


def period_due(con, report: ReportConfig, now: dt.datetime) -> str | None:
    """The period ``report`` covers at ``now`` (naive UTC): the last complete ISO week, or the newest closed
    month (None before any month is closed)."""
    if report.kind == "finance":
        closed = chargeback.closed_periods(con)
        return max(closed) if closed else None
    return week_label(now.date() - dt.timedelta(days=7))


def pending(con, report: ReportConfig, period: str, now: dt.datetime, retry_s: int) -> list[str]:
    """Recipients of ``report`` for ``period`` still to be sent: no ``sent`` or ``refused`` row, and no failure
    within the last ``retry_s`` seconds."""
    rows = con.execute("""SELECT recipient, bool_or(status IN ('sent', 'refused')) AS done,
                                 max(ended_at) FILTER (WHERE status = 'failed') AS failed_at
                          FROM report_runs WHERE report = ? AND period = ? GROUP BY recipient""",
                       [report.name, period]).fetchall()
    seen = {r: (done, failed) for r, done, failed in rows}
    cutoff = now - dt.timedelta(seconds=retry_s)
    out = []
    for who in report.to:
        done, failed = seen.get(who, (False, None))
        if not done and (failed is None or failed <= cutoff):
            out.append(who)
    return out


# ---------------------------------------------------------------- sending

def message(r: Rendered) -> delivery.Message:
    return delivery.Message(r.subject, r.text, r.html, dict(r.facts), tuple(r.attachments))


class Clock:
    """The service's time: ``now`` (naive UTC) when the step began, advanced by the real time elapsed since, so
    stored times are true in the service and consistent with an injected ``now`` in tests."""

    def __init__(self, now: dt.datetime | None = None):
        self.start, self.m0 = now or warehouse.utcnow(), time.monotonic()

    def __call__(self) -> dt.datetime:
        return self.start + dt.timedelta(seconds=time.monotonic() - self.m0)


def _record(con, clock: Clock, report: ReportConfig, period: str, who: str, status: str, attempts: int,
            error: str | None, subject: str | None) -> None:
    con.execute("INSERT INTO report_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [report.name, report.kind, period, who, status, attempts, error, subject, clock()])


def send_one(con, cfg: ReportsConfig, report: ReportConfig, period: str, who: str, render: Render,
             send=delivery.send_email, clock: Clock | None = None) -> str:
    """Render ``report`` for ``who``, send it and store the outcome; the status (sent, failed, refused)."""
    clock = clock or Clock()
    try:
        r = render(report, period, who)
    except PermissionError as exc:
        _record(con, clock, report, period, who, "refused", 0, str(exc), None)
        log.warning("report %s %s not sent to %s: %s", report.name, period, who, exc)
        return "refused"
    except Exception as exc:                    # noqa: BLE001 -- one report's failure never stops the loop
        text = str(exc).strip().splitlines()
        error = f"rendering failed: {type(exc).__name__}: {text[0] if text else ''}"
        _record(con, clock, report, period, who, "failed", 0, error, None)
        log.exception("report %s %s for %s: rendering failed", report.name, period, who)
        return "failed"
    d = send(cfg.smtp, [who], message(r))
    status = "sent" if d.ok else "failed"
    _record(con, clock, report, period, who, status, d.attempts, d.error or None, r.subject)
    (log.info if d.ok else log.error)("report %s %s to %s: %s%s", report.name, period, who, status,
                                      f" ({d.error})" if d.error else "")
    return status


def run_due(con, cfg: ReportsConfig, render: Render, now: dt.datetime | None = None,
            send=delivery.send_email) -> dict[str, int]:
    """Send every report that is due at ``now`` (naive UTC; default the clock) to every recipient still owed it,
    storing each outcome in ``report_runs`` on ``con`` (the service's read-write connection). Counts by status."""
    clock = Clock(now)
    counts = {"sent": 0, "failed": 0, "refused": 0}
    for report in cfg.reports:
        period = period_due(con, report, clock.start)
        if period is None:
            continue
        for who in pending(con, report, period, clock(), cfg.retry_s):
            counts[send_one(con, cfg, report, period, who, render, send, clock)] += 1
    return counts
