"""models/service/reports.py: [[reports]] in the service config, sent once per period to each recipient in their
dashboard scope, stored in report_runs so a restart sends nothing twice; an unreachable SMTP server is retried and
reported, never fatal. Real aiosmtpd servers receive the mail; the warehouse is a private copy of the dashboard
tests' lab cluster (its governance file gives admin, finance, an nlp team lead and a vision member). SMTP settings
come from [delivery], which the alerts share (models/service/config.py)."""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from pathlib import Path

import pytest

import dashboard_fixtures as dfx
import gpuledger
from dashboard_fixtures import lab_copy, lab_db  # noqa: F401 (fixtures)
from dashboards import reports as rendering
from ingest import warehouse
from ingest.errors import InputError
from mail_servers import MailBox, smtp_server, unreachable_port
from models.service import config, reports

NOW = dt.datetime(2026, 10, 20, 6, 0)          # a Tuesday: 2026-W42 (12-18 October) has ended
CONFIG = """
[service]
warehouse = "{db}"
[health]
listen = ""
[governance]
path = "{gov}"
[delivery]
smtp_host = "127.0.0.1"
smtp_port = {port}
smtp_security = "none"
sender = "gpuledger@lab.example"
retries = 1
backoff = 1
max_attempts = 3

[[reports]]
name = "managers"
kind = "weekly"
to = ["admin@lab.example", "NLP-Lead@lab.example"]
pdf = false
retry = "10m"

[[reports]]
name = "nlp-note"
kind = "team_note"
team = "nlp"
to = ["nlp-lead@lab.example", "vision-member@lab.example"]
pdf = false

[[reports]]
name = "finance"
kind = "finance"
to = ["fin@lab.example", "nlp-lead@lab.example"]
"""


def _config(tmp_path: Path, db: Path, port: int, text: str = CONFIG) -> tuple[config.ServiceConfig, str]:
    body = text.format(db=db, gov=dfx.FIX / "governance.toml", port=port)
    path = tmp_path / "gpuledger.toml"
    path.write_text(body)
    return config.parse(body, str(path)), body


def _query(db: Path, sql: str) -> list[tuple]:
    con = warehouse.connect(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _runs(db: Path) -> list[tuple]:
    return _query(db, "SELECT report, period, recipient, status FROM report_runs "
                      "ORDER BY report, period, recipient, ended_at")


def test_the_reports_config_is_checked_with_file_and_line(tmp_path):
    cfg, text = _config(tmp_path, tmp_path / "w.duckdb", 2525)
    r = reports.parse(cfg, text)
    assert [(x.name, x.kind, x.team, x.pdf, x.retry_s) for x in r.reports] == [
        ("managers", "weekly", "", False, 600), ("nlp-note", "team_note", "nlp", False, 900),
        ("finance", "finance", "", True, 900)]
    assert (r.smtp.host, r.smtp.port, r.smtp.security, r.smtp.retries, r.max_attempts) == (
        "127.0.0.1", 2525, "none", 1, 3)
    for bad, where, problem in (('kind = "weekly"', 'kind = "daily"', "must be one of weekly, team_note, finance"),
                                ('team = "nlp"', 'team = ""', "a team_note names its team"),
                                ('pdf = false\nretry = "10m"\n\n[[reports]]\nname = "nlp-note"',
                                 'pdf = false\nretry = "10m"\n\n[[reports]]\nname = "managers"', "configured twice"),
                                ('retry = "10m"', 'retry = "10m"\ncolour = 1', "unknown key"),
                                ('smtp_host = "127.0.0.1"', 'smtp_host = ""', "set [delivery] smtp_host")):
        body = text.replace(bad, where, 1)
        with pytest.raises(InputError) as exc:
            reports.parse(config.parse(body, str(tmp_path / "gpuledger.toml")), body)
        msg = str(exc.value)
        key = where.split("\n")[-1] if "smtp_host" not in where else "[[reports]]"
        line = (max if "twice" in problem else min)(
            i for i, ln in enumerate(body.split("\n"), 1) if key in ln)
        assert problem in msg and f"gpuledger.toml:{line}:" in msg, msg


def test_each_report_goes_out_once_per_period_in_the_recipients_scope(lab_copy, tmp_path, monkeypatch):
    dfx.cli(lab_copy, "chargeback", "--period", "2026-09", "--close")
    monkeypatch.setenv("GPULEDGER_DB", str(lab_copy))
    with smtp_server() as mail:
        cfg, text = _config(tmp_path, lab_copy, mail.port)
        rcfg = reports.parse(cfg, text)
        counts = reports.run_due(lab_copy, rcfg, rendering.for_recipient, now=NOW)
        assert counts == {"sent": 4, "failed": 0, "refused": 2}
        got = {(env[1][0], m["Subject"]) for m, env in zip(mail.wait(4), mail.envelopes)}
        assert ("fin@lab.example", next(s for _, s in got if s.startswith("GPU chargeback 2026-09"))) in got
        assert {to for to, s in got if s.startswith("GPU cluster weekly report 2026-W42")} == {
            "admin@lab.example", "NLP-Lead@lab.example"}
        assert {to for to, s in got if s.startswith("GPU usage of team nlp, 2026-W42")} == {"nlp-lead@lab.example"}
        weekly = next(m for m, env in zip(mail.messages, mail.envelopes)
                      if env[1] == ["admin@lab.example"] and "weekly" in m["Subject"])
        html = MailBox.body(weekly, "html")
        cids = re.findall(r'src="cid:([^"]+)"', html)
        related = {p["Content-ID"].strip("<>"): p.get_content() for p in weekly.walk() if p["Content-ID"]}
        assert len(cids) == 2 and set(cids) == set(related) and "data:image" not in html
        assert all(png.startswith(b"\x89PNG") for png in related.values())      # the charts, as related parts
        fin = next(m for m, env in zip(mail.messages, mail.envelopes) if env[1] == ["fin@lab.example"])
        assert {p.get_filename() for p in fin.iter_attachments()} == {
            "chargeback-2026-09.xlsx", "reconciliation-2026-09.csv", "adjustments-2026-09.csv"}
        refused = _query(lab_copy, "SELECT report, recipient, error FROM report_runs WHERE status = 'refused' "
                                   "ORDER BY report")
        assert [(r, who) for r, who, _ in refused] == [("finance", "nlp-lead@lab.example"),
                                                        ("nlp-note", "vision-member@lab.example")]
        # a restart (a new pass reads the stored runs): nothing is sent twice
        assert reports.run_due(lab_copy, rcfg, rendering.for_recipient, now=NOW + dt.timedelta(hours=5)) == {
            "sent": 0, "failed": 0, "refused": 0}
        assert len(mail.messages) == 4
        # next week: the weekly report and the note again (and the refusal again); the finance pack not
        counts = reports.run_due(lab_copy, rcfg, rendering.for_recipient, now=NOW + dt.timedelta(days=7))
        assert counts == {"sent": 3, "failed": 0, "refused": 1}
        assert {m["Subject"].split(":")[0] for m in mail.wait(7)[4:]} == {
            "GPU cluster weekly report 2026-W43", "GPU usage of team nlp, 2026-W43"}
        assert len(_runs(lab_copy)) == 10


def test_an_unreachable_smtp_server_is_retried_and_reported_not_fatal(lab_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("GPULEDGER_DB", str(lab_copy))
    one = CONFIG.split("[[reports]]\nname = \"nlp-note\"")[0].replace('"NLP-Lead@lab.example"', '"fin@lab.example"')
    cfg, text = _config(tmp_path, lab_copy, unreachable_port(), one)
    rcfg = reports.parse(cfg, text)
    rcfg = replace(rcfg, smtp=replace(rcfg.smtp, backoff_s=0.05))
    assert reports.run_due(lab_copy, rcfg, rendering.for_recipient, now=NOW) == {"sent": 0, "failed": 2, "refused": 0}
    rows = _query(lab_copy, "SELECT recipient, attempts, error FROM report_runs WHERE status = 'failed'")
    assert len(rows) == 2 and all(a == 2 and "Connection refused" in e or "ConnectionRefused" in e
                                  for _, a, e in rows), rows
    # not again before the report's retry has passed ...
    assert reports.run_due(lab_copy, rcfg, rendering.for_recipient, now=NOW + dt.timedelta(minutes=5))["failed"] == 0
    # ... then again, to a server that is up now: sent, and never again
    with smtp_server() as mail:
        up = replace(rcfg, smtp=mail.settings())
        assert reports.run_due(lab_copy, up, rendering.for_recipient, now=NOW + dt.timedelta(minutes=11)) == {
            "sent": 2, "failed": 0, "refused": 0}
        assert len(mail.wait(2)) == 2
        assert reports.run_due(lab_copy, up, rendering.for_recipient, now=NOW + dt.timedelta(hours=1))["sent"] == 0


def test_failed_deliveries_stop_after_max_attempts(lab_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("GPULEDGER_DB", str(lab_copy))
    one = CONFIG.split("[[reports]]\nname = \"nlp-note\"")[0].replace(', "NLP-Lead@lab.example"', "")
    cfg, text = _config(tmp_path, lab_copy, unreachable_port(), one)
    rcfg = reports.parse(cfg, text)
    rcfg = replace(rcfg, smtp=replace(rcfg.smtp, retries=0))
    tries = [reports.run_due(lab_copy, rcfg, rendering.for_recipient, now=NOW + dt.timedelta(minutes=11 * k))["failed"]
             for k in range(5)]
    assert tries == [1, 1, 1, 0, 0]                         # [delivery] max_attempts = 3


def test_the_service_loop_sends_the_due_reports_once(lab_copy, tmp_path, monkeypatch):
    """`gpuledger serve --once` twice (two runs of the service): the week that ended last is reported once."""
    monkeypatch.setenv("GPULEDGER_DB", str(lab_copy))
    with smtp_server() as mail:
        _config(tmp_path, lab_copy, mail.port, CONFIG.split("[[reports]]\nname = \"nlp-note\"")[0].replace(
            'to = ["admin@lab.example", "NLP-Lead@lab.example"]', 'to = ["admin@lab.example"]'))
        for _ in range(2):
            assert gpuledger.main(["-q", "serve", "--config", str(tmp_path / "gpuledger.toml"), "--once",
                                   "--no-dashboard"]) == 0
        assert len(mail.wait(1)) == 1
        week = reports.week_label(dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=7))
        assert mail.messages[0]["Subject"].startswith(f"GPU cluster weekly report {week}")
        assert "Allocation ratio" in MailBox.body(mail.messages[0])
    assert _runs(lab_copy) == [("managers", week, "admin@lab.example", "sent")]


def test_the_example_config_documents_every_reports_key():
    example = Path(__file__).resolve().parent.parent / "data" / "gpuledger.example.toml"
    text = example.read_text()
    r = reports.parse(config.load(example), text)
    assert [(x.name, x.kind, x.team, x.pdf, x.retry_s) for x in r.reports] == [
        ("managers-weekly", "weekly", "", True, 900), ("nlp-weekly-note", "team_note", "nlp", False, 900),
        ("finance-pack", "finance", "", True, 900)]
    assert (r.smtp.host, r.smtp.port, r.smtp.security, r.max_attempts) == ("smtp.example.org", 587, "starttls", 5)
    keys = set(reports.REPORT_KEYS)
    assert not [k for k in sorted(keys) if f"{k} =" not in text]
