"""Scheduled reports (issue 19 part 4): who gets which report, when it is due, and the stored runs that make each
one go out once per period, even across restarts. The service loop runs :func:`step` in each cycle.

Configuration, in the service's file (data/gpuledger.example.toml documents it)::

    [delivery]                  # shared with the alerts (models/service/config.py): SMTP server, sender, retries
    smtp_host = "mail.example.org"
    [[reports]]
    name = "managers-weekly"    # unique; the key runs are stored under
    kind = "weekly"             # weekly (the Overview), team_note (one team's week), finance (a closed month)
    to = ["head@example.org"]
    team = "nlp"                # team_note only: whose note
    pdf = true                  # weekly, team_note: attach the PDF (headless chromium)
    retry = "15m"               # a failed delivery is tried again after this, at most [delivery] max_attempts times

Periods: weekly and team notes cover the last complete ISO week (Monday to Monday, UTC) and are due once it has
ended; the finance pack covers the newest closed month and is due once the month is closed. A (report, period,
recipient) with a ``sent`` row in ``report_runs`` is done; ``refused`` (the recipient's dashboard role may not see
the report) is not tried again for that period; ``failed`` (SMTP unreachable, rendering failed) is tried again
after the report's ``retry``, at most ``[delivery] max_attempts`` times, and reported on every attempt, never
fatal to the loop. As the alerts do, what is owed is read inside the cycle and the mail is sent with the warehouse
closed (an SMTP server retried with backoff must not hold it); the outcomes are then recorded in one transaction.

Rendering is the presentation layer's (dashboards/reports.py reads the serving snapshot as the dashboard does);
the service is given it as ``render`` by `gpuledger serve`, so this module stays below the dashboards.
Delivery is at least once: a crash between the SMTP server's acceptance and the rows' commit sends it again.
"""
from __future__ import annotations

import base64
import datetime as dt
import logging
import re
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
               "retry": Key("duration", 900, "wait before a failed delivery is tried again"),
               "template_dir": Key("path", "", "a directory of site templates overriding the packaged ones")}


@dataclass(frozen=True)
class ReportConfig:
    name: str
    kind: str
    to: tuple[str, ...]
    team: str = ""
    pdf: bool = True
    template_dir: str = ""
    retry_s: int = 900


@dataclass(frozen=True)
class ReportsConfig:
    reports: tuple[ReportConfig, ...]
    smtp: delivery.SmtpSettings | None          # [delivery]'s; None without reports
    max_attempts: int = 5


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
    """``[[reports]]`` of the service config (``cfg.extra``; ``text`` is the file's text, for the line of an error),
    sent through ``[delivery]`` (``cfg.delivery``, parsed with the alerts). Raises InputError (file:line: key ...)."""
    chk, base = _Where(str(cfg.path), text), cfg.path.resolve().parent
    raw = cfg.extra.get("reports") or []
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
        out.append(ReportConfig(v["name"], v["kind"], tuple(v["to"]), v["team"], v["pdf"], v["template_dir"],
                                v["retry"]))
    if out and (cfg.delivery is None or cfg.delivery.smtp is None):
        chk.fail(("reports", 0), "scheduled reports are sent by email: set [delivery] smtp_host")
    return ReportsConfig(tuple(out), cfg.delivery.smtp if out else None,
                         cfg.delivery.max_attempts if out else 5)


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


def pending(con, report: ReportConfig, period: str, now: dt.datetime, max_attempts: int) -> list[str]:
    """Recipients of ``report`` for ``period`` still to be sent: no ``sent`` or ``refused`` row, fewer than
    ``max_attempts`` failures, the last more than the report's ``retry`` ago."""
    rows = con.execute("""SELECT recipient, bool_or(status IN ('sent', 'refused')) AS done,
                                 count(*) FILTER (WHERE status = 'failed') AS failures,
                                 max(ended_at) FILTER (WHERE status = 'failed') AS failed_at
                          FROM report_runs WHERE report = ? AND period = ? GROUP BY recipient""",
                       [report.name, period]).fetchall()
    seen = {r: (done, n, failed) for r, done, n, failed in rows}
    cutoff = now - dt.timedelta(seconds=report.retry_s)
    out = []
    for who in report.to:
        done, n, failed = seen.get(who, (False, 0, None))
        if not done and n < max_attempts and (failed is None or failed <= cutoff):
            out.append(who)
    return out


class Clock:
    """The service's time: ``now`` (naive UTC) when the step began, advanced by the real time elapsed since, so
    stored times are true in the service and consistent with an injected ``now`` in tests."""

    def __init__(self, now: dt.datetime | None = None):
        self.start, self.m0 = now or warehouse.utcnow(), time.monotonic()

    def __call__(self) -> dt.datetime:
        return self.start + dt.timedelta(seconds=time.monotonic() - self.m0)


def owed(con, cfg: ReportsConfig, clock: Clock) -> list[tuple[ReportConfig, str, str]]:
    """(report, period, recipient) due at the clock's time and not yet done (read on the cycle's connection)."""
    out = []
    for report in cfg.reports:
        period = period_due(con, report, clock.start)
        if period is not None:
            out += [(report, period, who) for who in pending(con, report, period, clock(), cfg.max_attempts)]
    return out


# ---------------------------------------------------------------- sending (the warehouse closed)

_DATA_IMAGE = re.compile(r'src="data:(image/[a-z]+);base64,([A-Za-z0-9+/=]+)"')


def message(r: Rendered) -> delivery.Message:
    """The email of a rendered report: its ``data:`` images (self-contained for the file and the PDF) become
    related parts referenced by ``cid:`` (web mail clients block ``data:`` images)."""
    inline = []

    def to_cid(m: re.Match) -> str:
        cid = f"chart{len(inline) + 1}@gpuledger"
        inline.append((cid, base64.b64decode(m.group(2)), m.group(1)))
        return f'src="cid:{cid}"'
    html = _DATA_IMAGE.sub(to_cid, r.html)
    return delivery.Message(r.subject, r.text, html, dict(r.facts), tuple(r.attachments), tuple(inline))


def attempt(cfg: ReportsConfig, report: ReportConfig, period: str, who: str, render: Render, clock: Clock,
            send=delivery.send_email) -> tuple:
    """Render ``report`` for ``who`` and send it: the ``report_runs`` row of the outcome (status sent, failed or
    refused)."""
    def row(status, attempts, error, subject):
        return (report.name, report.kind, period, who, status, attempts, error, subject, clock())
    try:
        r = render(report, period, who)
    except PermissionError as exc:
        log.warning("report %s %s not sent to %s: %s", report.name, period, who, exc)
        return row("refused", 0, str(exc), None)
    except Exception as exc:                    # noqa: BLE001 -- one report's failure never stops the loop
        text = str(exc).strip().splitlines()
        log.exception("report %s %s for %s: rendering failed", report.name, period, who)
        return row("failed", 0, f"rendering failed: {type(exc).__name__}: {text[0] if text else ''}", None)
    d = send(cfg.smtp, [who], message(r))
    (log.info if d.ok else log.error)("report %s %s to %s: %s%s", report.name, period, who,
                                      "sent" if d.ok else "failed", f" ({d.error})" if d.error else "")
    return row("sent" if d.ok else "failed", d.attempts, d.error or None, r.subject)


def record(con, rows: list[tuple]) -> None:
    """Store the outcomes in ``report_runs`` (one transaction)."""
    if rows:
        con.executemany("INSERT INTO report_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def deliver(db, lock_timeout: int, cfg: ReportsConfig, due: list, render: Render, clock: Clock,
            send=delivery.send_email) -> dict[str, int]:
    """Send ``due`` (from :func:`owed`) with the warehouse closed, then open it to record the outcomes; counts by
    status. Unrecorded outcomes (the warehouse held too long) are logged and go out again: at least once."""
    rows = [attempt(cfg, report, period, who, render, clock, send) for report, period, who in due]
    counts = {"sent": 0, "failed": 0, "refused": 0}
    for r in rows:
        counts[r[4]] += 1
    if rows:
        try:
            con = warehouse.connect(db, lock_timeout=lock_timeout)
        except warehouse.WarehouseError as exc:
            log.error("report runs not recorded (they will be sent again): %s", exc)
            return counts
        try:
            record(con, rows)
        finally:
            con.close()
    return counts


def step(db, lock_timeout: int, cfg: ReportsConfig, render: Render):
    """The service's after-cycle step (models/service/loop.py ``Collector.after_cycle``): reads what is owed on
    the cycle's connection and returns the follow-up that sends it once the warehouse is closed."""
    def scheduled_reports(con):
        clock = Clock()
        due = owed(con, cfg, clock)
        return (lambda: deliver(db, lock_timeout, cfg, due, render, clock)) if due else None
    return scheduled_reports


def run_due(db, cfg: ReportsConfig, render: Render, now: dt.datetime | None = None, lock_timeout: int = 60,
            send=delivery.send_email) -> dict[str, int]:
    """One scheduling pass outside the loop (as the step and its follow-up do): counts by status."""
    clock = Clock(now)
    con = warehouse.connect(db, lock_timeout=lock_timeout)
    try:
        due = owed(con, cfg, clock)
    finally:
        con.close()
    return deliver(db, lock_timeout, cfg, due, render, clock, send)
