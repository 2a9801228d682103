"""models/service/alerts.py: [[alerts]] rules evaluated on the lab warehouse (real Slurm formats) and a small
telemetry warehouse, delivered to a real SMTP server (aiosmtpd, STARTTLS + AUTH) and a real HTTP receiver on
127.0.0.1: the numbers in the email are the reports', one episode is one alert and one resolution, an
unreachable SMTP server is retried and reported, and the service loop evaluates after its refresh."""
from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import threading

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

import dashboard_fixtures as dfx
from dashboard_fixtures import FIX
from ingest import warehouse
from ingest.errors import InputError
from mail_servers import PASSWORD, USER, free_port, http_receiver, smtp_server
from models.forecasting import budgets, capacity
from models.metrics import blocked, efficiency, timeline
from models.pipeline import refresh
from models.service import alerts, config, delivery, health, loop
from telemetry_fixtures import add_jobs, busy, load_readings, readings

BUDGETS = """
[[budgets]]
team = "vision"
period = "month"
amount = "{vision}"
"""
NOW = dt.datetime(2026, 10, 20, 12, 0)


@pytest.fixture(scope="module")
def lab_base(tmp_path_factory):
    d = tmp_path_factory.mktemp("alerts-lab")
    db = dfx.build_lab(d)
    gov = d / "governance.toml"
    gov.write_text((FIX / "governance.toml").read_text() + BUDGETS.format(vision="20000.00"))
    dfx.cli(db, "ingest", "governance", str(gov))
    return db


@pytest.fixture
def lab(lab_base, tmp_path):
    db = tmp_path / "lab.duckdb"
    shutil.copyfile(lab_base, db)
    return db


@pytest.fixture
def creds(monkeypatch):
    monkeypatch.setenv(delivery.USER_ENV, USER)
    monkeypatch.setenv(delivery.PASSWORD_ENV, PASSWORD)


def service_config(tmp_path, db, mail, hook_url: str, rules: str, extra: str = "",
                   retries: int = 1) -> config.ServiceConfig:
    p = tmp_path / "gpuledger.toml"
    p.write_text(f"""
[service]
warehouse = "{db}"
cycle = 1
[health]
listen = ""
[dashboard]
enabled = false
[governance]
path = "{tmp_path / 'governance.toml'}"

[delivery]
smtp_host = "127.0.0.1"
smtp_port = {mail.port if mail else free_port()}
smtp_security = "{mail.security if mail else 'none'}"
ca_file = "{mail.ca_file if mail else ''}"
sender = "gpuledger@example.org"
timeout = 5
retries = {retries}
backoff = 1
max_attempts = 3
dashboard_url = "https://gpuledger.example.org/"

[[webhooks]]
name = "ops"
url = "{hook_url}"
shape = "slack"
{extra}
{rules}""", encoding="utf-8")
    return config.load(p)


RULES = """
[[alerts]]
name = "budget-90"
kind = "budget"
threshold = 90
notify = ["lead@example.org", "fin@example.org"]

[[alerts]]
name = "idle"
kind = "idle_gpu_hours"
threshold = 1.5
window = "9d"
notify = ["lead@example.org", "webhook:ops"]

[[alerts]]
name = "blocked"
kind = "blocked_wait"
threshold = 5
window = "14d"
notify = ["webhook:ops"]

[[alerts]]
name = "h100-soon"
kind = "exhaustion"
threshold = 30
notify = ["webhook:ops"]
"""


def run_once(db, cfg, now):
    con = warehouse.connect(db)
    try:
        counts = alerts.evaluate(con, cfg.alerts, now)
        owed = alerts.owed(con, cfg.alerts, cfg.delivery, now)
    finally:
        con.close()
    results = alerts.send(cfg.delivery, owed)
    con = warehouse.connect(db)
    try:
        alerts.record(con, results)
    finally:
        con.close()
    return counts, results


def test_digests_carry_the_reports_numbers_and_one_episode_is_one_alert_and_one_resolution(lab, tmp_path, creds):
    (tmp_path / "governance.toml").write_text("")
    with smtp_server(tls_dir=tmp_path) as mail, http_receiver() as hook:
        cfg = service_config(tmp_path, lab, mail, hook.url, RULES)
        counts, results = run_once(lab, cfg, NOW)
        assert counts == {"fired": 4, "resolved": 0, "firing": 4, "failed": 0}
        assert sorted(d.recipient for d, _ in results) == ["fin@example.org", "lead@example.org", "webhook:ops"]
        assert all(r.ok for _, r in results)
        got = {m["To"]: m for m in mail.wait(2)}
        slack = hook.wait(1)[0]

        con = warehouse.connect(lab, read_only=True)
        hz = timeline.horizon(con)
        bud = budgets.report(con).row(0, named=True)
        idle = efficiency.by_group(con, hz - dt.timedelta(days=9), hz, by=["team"], bucket=None)
        blk = blocked.blocked(con, hz - dt.timedelta(days=14), hz, by=("cluster",)).row(0, named=True)
        cap = capacity.forecast_warehouse(con, 31, by=("pool",), measure="demanded")["capacity"]
        con.close()

        lead = mail.body(got["lead@example.org"])
        assert got["lead@example.org"]["Subject"] == "[gpuledger] 2 alerts firing"   # one digest, not a flood
        assert (f"team vision forecast at {bud['forecast_pct']:.1f} % of its 2026-10 budget "
                f"({bud['forecast']:,.2f} of 20,000.00 EUR)") in lead
        assert f"charged so far: {bud['actual']:,.2f} EUR" in lead
        for t in idle.filter(pl.col("idle_alloc_gpu_h") > 1.5).iter_rows(named=True):   # vision 2.22: nlp 1.01 is under
            assert f"team {t['team']}: {t['idle_alloc_gpu_h']:,.2f} idle-allocated GPU-hours" in lead
        assert "team nlp:" not in lead
        assert re.search(r"job \d+ \(\w+, \d+ GPUs?\): [\d.]+ idle GPU-h of [\d.,]+", lead)   # jobs and their owners
        assert "https://gpuledger.example.org/" in lead
        assert "lead@example.org" not in mail.body(got["fin@example.org"]) and "idle" not in \
            mail.body(got["fin@example.org"])
        assert got["fin@example.org"]["Subject"].startswith("[gpuledger] 1 alert firing: team vision forecast at")

        text = slack["text"]
        assert f"cluster lab: {100 * blk['fragmentation_share']:.1f} % of waiting GPU-hours blocked" in text
        h100 = cap.filter(pl.col("pool") == "h100").row(0, named=True)
        assert f"pool h100: the upper 80 % demand forecast reaches 13.6 of 16 GPUs on " \
               f"{h100['exhausted_upper80']:%Y-%m-%d}" in text

        # the same data again: nothing new fires, nothing is sent again
        counts, results = run_once(lab, cfg, NOW + dt.timedelta(minutes=5))
        assert counts["fired"] == 0 and counts["firing"] == 4 and results == []

        # the budget is raised: the episode clears, once
        (tmp_path / "gov.toml").write_text((FIX / "governance.toml").read_text() + BUDGETS.format(vision="90000"))
        dfx.cli(lab, "ingest", "governance", str(tmp_path / "gov.toml"))
        counts, results = run_once(lab, cfg, NOW + dt.timedelta(minutes=10))
        assert counts["resolved"] == 1 and counts["fired"] == 0
        assert sorted(d.recipient for d, _ in results) == ["fin@example.org", "lead@example.org"]
        msgs = mail.wait(4)
        assert [m["Subject"] for m in msgs[2:]] == ["[gpuledger] 1 resolved"] * 2
        assert run_once(lab, cfg, NOW + dt.timedelta(minutes=15))[1] == []

    con = warehouse.connect(lab, read_only=True)
    rows = con.sql("SELECT rule, subject, fired_at, resolved_at FROM alerts WHERE rule = 'budget-90'").fetchall()
    assert rows == [("budget-90", "team:vision:2026-10:money", NOW, NOW + dt.timedelta(minutes=10))]
    told = con.sql("""SELECT event, recipient, ok FROM alert_deliveries d JOIN alerts a USING (alert_id)
                      WHERE a.rule = 'budget-90' ORDER BY event, recipient""").fetchall()
    assert told == [("fired", "fin@example.org", True), ("fired", "lead@example.org", True),
                    ("resolved", "fin@example.org", True), ("resolved", "lead@example.org", True)]
    assert con.sql("SELECT count(*) FROM alert_observations WHERE rule = 'budget-90' AND subject = ''"
                   ).fetchall()[0][0] == 4


def test_unreachable_smtp_is_retried_reported_and_delivered_when_it_returns(lab, tmp_path):
    (tmp_path / "governance.toml").write_text("")
    with http_receiver() as hook:
        cfg = service_config(tmp_path, lab, None, hook.url, RULES.split("[[alerts]]\nname = \"idle\"")[0])
        counts, results = run_once(lab, cfg, NOW)                 # nothing listens on the SMTP port
        assert counts["fired"] == 1
        assert [(d.recipient, r.ok, r.attempts) for d, r in results] == [("lead@example.org", False, 2),
                                                                        ("fin@example.org", False, 2)]
        assert "ConnectionRefusedError" in results[0][1].error
        with smtp_server(port=cfg.delivery.smtp.port) as mail:     # a server comes up on the configured port
            counts, results = run_once(lab, cfg, NOW + dt.timedelta(minutes=1))
            assert counts["fired"] == 0 and all(r.ok for _, r in results) and len(results) == 2
            assert len(mail.wait(2)) == 2
    con = warehouse.connect(lab, read_only=True)
    assert con.sql("SELECT recipient, ok, attempts, error IS NOT NULL FROM alert_deliveries ORDER BY ok, "
                   "recipient").fetchall() == [("fin@example.org", False, 2, True), ("lead@example.org", False, 2, True),
                                                ("fin@example.org", True, 1, False), ("lead@example.org", True, 1, False)]


def test_undelivered_events_are_given_up_after_max_attempts(lab, tmp_path):
    (tmp_path / "governance.toml").write_text("")
    cfg = service_config(tmp_path, lab, None, "http://127.0.0.1:9/x", RULES.split("[[alerts]]\nname = \"idle\"")[0],
                         retries=0)
    for k in range(3):
        assert len(run_once(lab, cfg, NOW + dt.timedelta(minutes=k))[1]) == 2
    assert run_once(lab, cfg, NOW + dt.timedelta(minutes=3))[1] == []          # max_attempts = 3


def test_zero_util_job_named_with_its_owner(tmp_path):
    """A 2-GPU job at 0 % from 10:00 to 15:00, then busy: a run of 5 whole hours at 0 %."""
    db = tmp_path / "t.duckdb"
    con = warehouse.connect(db)
    add_jobs(con, tmp_path, [{"id": 7, "start": 0, "end": 480, "gpus": 2, "nodes": "n1", "user": "carol"}])
    series = {("n1", g): {**busy(range(0, 300), 0), **busy(range(300, 480), 80)} for g in (0, 1)}
    load_readings(con, readings(series))
    refresh.run(con, db)
    hz = timeline.horizon(con)
    rule = config.AlertRule("zero", "zero_util_job", 4, 86400, (), ("a@example.org",))
    conds = alerts._zero(con, rule, hz, NOW)
    assert [(c.subject, c.value) for c in conds] == [("c1/7", 5.0)]
    assert conds[0].summary == "job 7 of carol (team unmapped) held 2 GPUs at 0 % for 5 h"
    assert conds[0].lines == ("from 2026-07-14 10:00 to 2026-07-14 15:00 UTC: 10.00 GPU-hours allocated at 0 %",)
    more = config.AlertRule("zero", "zero_util_job", 5, 86400, (), ("a@example.org",))
    assert alerts._zero(con, more, hz, NOW) == []                 # "more than 5 hours": 5 is not
    con.close()


def test_service_loop_evaluates_after_its_refresh_and_tells_of_a_stale_source(lab, tmp_path, creds):
    (tmp_path / "governance.toml").write_text((FIX / "governance.toml").read_text() + BUDGETS.format(vision="20000"))
    rules = RULES.split("[[alerts]]\nname = \"idle\"")[0] + """
[[alerts]]
name = "stale"
kind = "stale_source"
threshold = 1
notify = ["ops@example.org"]
"""
    extra = '\n[[clusters]]\nname = "lab"\n[clusters.sacct]\ncommand = "false"\n'
    with smtp_server(tls_dir=tmp_path) as mail, http_receiver() as hook:
        cfg = service_config(tmp_path, lab, mail, hook.url, rules, extra)
        c = loop.Collector(cfg)
        assert c.cycle(threading.Event())                 # governance loads, sacct fails; refresh; alerts
        msgs = {m["To"]: m for m in mail.wait(3)}
        assert set(msgs) == {"lead@example.org", "fin@example.org", "ops@example.org"}
        assert "source sacct of lab: never succeeded" in mail.body(msgs["ops@example.org"])
        assert c.snapshot()["alerts"] == {"fired": 2, "resolved": 0, "delivered": 3, "undelivered": 0}
        text = health.metrics(c.snapshot())
        assert 'gpuledger_alert_events_total{event="fired"} 2.0' in text
        assert 'gpuledger_alert_deliveries_total{outcome="delivered"} 3.0' in text


@pytest.mark.parametrize("body, key, problem", [
    ('[[alerts]]\nname = "a"\nkind = "budgets"\nthreshold = 1\nnotify = ["a@b.org"]\n', "alerts[0].kind", "must be one of"),
    ('[[alerts]]\nname = "a"\nkind = "budget"\nnotify = ["a@b.org"]\n', "alerts[0].threshold", "is required"),
    ('[[alerts]]\nname = "a"\nkind = "budget"\nthreshold = 1\nwindow = "1d"\nnotify = ["a@b.org"]\n',
     "alerts[0].window", "takes no window"),
    ('[[alerts]]\nname = "a"\nkind = "budget"\nthreshold = 1\nnotify = ["webhook:x"]\n', "alerts[0].notify",
     "no [[webhooks]] entry named 'x'"),
    ('[[alerts]]\nname = "a"\nkind = "budget"\nthreshold = "high"\nnotify = ["a@b.org"]\n', "alerts[0].threshold",
     "must be a number"),
    ('[[alerts]]\nname = "a"\nkind = "budget"\nthreshold = 1\nnotify = ["a@b.org"]\n', "alerts[0].notify",
     "email needs [delivery] smtp_host"),
    ('[[webhooks]]\nname = "x"\nurl = "ftp://x"\n', "webhooks[0].url", "http:// or https://"),
    ('[delivery]\nsmtp_host = "h"\nsmtp_security = "ssl"\n', "delivery.smtp_security", "starttls, tls or none"),
])
def test_bad_alert_config_fails_in_one_line(tmp_path, body, key, problem):
    p = tmp_path / "gpuledger.toml"
    text = '[governance]\npath = "g.toml"\n' + body
    p.write_text(text)
    with pytest.raises(InputError) as exc:
        config.load(p)
    msg = str(exc.value)
    assert "\n" not in msg and f"key {key}" in msg and problem in msg and exc.value.line_no is not None


def test_the_example_config_documents_every_alert_key_and_parses():
    from conftest import ROOT
    example = ROOT / "data" / "gpuledger.example.toml"
    cfg = config.load(example)
    assert [r.kind for r in cfg.alerts] == list(config.ALERT_KINDS)
    assert cfg.delivery.smtp.host == "smtp.example.org" and cfg.delivery.webhooks["ops-slack"].shape == "slack"
    text = example.read_text()
    keys = {*config.DELIVERY_KEYS, *config.WEBHOOK_KEYS, *config.ALERT_KEYS, "threshold"}
    assert not [k for k in sorted(keys) if f"{k} =" not in text]


def test_report_alerts_says_who_was_told_what_when(lab, tmp_path, capsys):
    (tmp_path / "governance.toml").write_text("")
    with http_receiver() as hook:
        cfg = service_config(tmp_path, lab, None, hook.url, RULES.split("[[alerts]]\nname = \"idle\"")[0]
                             .replace('["lead@example.org", "fin@example.org"]', '["webhook:ops"]'))
        run_once(lab, cfg, NOW)
    assert dfx.gpuledger.main(["--db", str(lab), "report", "alerts", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["rule"], r["subject"], r["told_fired"], r["resolved_at"]) for r in rows] == [
        ("budget-90", "team:vision:2026-10:money", "webhook:ops", None)]
    assert dfx.gpuledger.main(["--db", str(lab), "report", "alerts", "--view", "deliveries", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [(x["recipient"], x["event"], x["ok"]) for x in d] == [("webhook:ops", "fired", True)]
    assert d[0]["subject_line"].startswith("[gpuledger] 1 alert firing: team vision forecast at")


_RUNS = iter(range(10 ** 9))


@pytest.fixture(scope="module")
def episode_db(tmp_path_factory):
    con = warehouse.connect(tmp_path_factory.mktemp("episodes") / "e.duckdb")
    yield con
    con.close()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sets(st.sampled_from("abc")), min_size=1, max_size=8))
def test_each_run_of_evaluations_holding_a_condition_is_one_alert(episode_db, holds):
    """Whatever the sequence, a subject's alerts are exactly its maximal runs of consecutive evaluations that saw
    the condition: fired at the run's first, resolved at the first evaluation after it (open if none)."""
    rule = config.AlertRule(f"r{next(_RUNS)}", "stale_source", 1, None, (), ("a@example.org",))
    t0 = dt.datetime(2026, 3, 1, 0, 0, 7)
    for k, subjects in enumerate(holds):
        conds = [alerts.Condition(s, float(k), f"{s} holds") for s in sorted(subjects)]
        alerts._apply(episode_db, rule, conds, t0 + dt.timedelta(minutes=k), None)
    want = []
    for s in "abc":
        k = 0
        while k < len(holds):
            if s in holds[k]:
                j = k
                while j < len(holds) and s in holds[j]:
                    j += 1
                want.append((s, t0 + dt.timedelta(minutes=k), t0 + dt.timedelta(minutes=j) if j < len(holds) else None))
                k = j
            k += 1
    got = episode_db.execute("SELECT subject, fired_at, resolved_at FROM alerts WHERE rule = ? ORDER BY subject, "
                             "fired_at", [rule.name]).fetchall()
    assert got == sorted(want, key=lambda x: (x[0], x[1]))


def test_data_health_page_lists_the_alerts_as_the_report_does(lab, tmp_path, monkeypatch, capsys):
    (tmp_path / "governance.toml").write_text("")
    with http_receiver() as hook:
        cfg = service_config(tmp_path, lab, None, hook.url, RULES.replace(
            '["lead@example.org", "fin@example.org"]', '["webhook:ops"]').replace(
            '["lead@example.org", "webhook:ops"]', '["webhook:ops"]'))
        run_once(lab, cfg, NOW)
    con = warehouse.connect(lab)
    warehouse.publish_serving(con, lab)                  # the service publishes at its next cycle
    con.close()
    assert dfx.gpuledger.main(["--db", str(lab), "report", "alerts", "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    at = dfx.open_page(dfx.app(lab, monkeypatch), "data_health")
    page = dfx.frame_with(at, "Rule", "What was said", "Told it fired")
    assert list(page["What was said"]) == [r["summary"] for r in cli] and len(cli) == 4
    assert set(page["Told it fired"]) == {"webhook:ops"}


def test_a_pool_already_over_its_target_alerts_at_0_days_and_says_so():
    hz = dt.datetime(2026, 7, 6, 6, 39)
    cap = pl.DataFrame({"pool": ["h100", "a100"], "capacity_gpus": [256.0, 224.0], "target_gpus": [217.6, 190.4],
                        "recent_gpus": [224.07, 167.35], "already_above": [True, False],
                        "exhausted_upper80": [dt.datetime(2026, 7, 7), dt.datetime(2026, 7, 9)]})
    got = {c.subject: c for c in alerts.exhaustion_conditions(cap, 30, hz)}
    assert got["h100"].value == 0.0 and got["h100"].summary == (
        "pool h100: demand is already above the target, 224.1 GPUs over the last days against 217.6 of 256")
    assert got["a100"].value == 2.7 and "reaches 190.4 of 224 GPUs on 2026-07-09 (2.7 days" in got["a100"].summary
    assert [c.subject for c in alerts.exhaustion_conditions(cap, 1, hz)] == ["h100"]
