"""dashboards/reports.py: the scheduled reports say what the dashboard says, in the dashboard's scopes, as a
self-contained HTML email (received by a real aiosmtpd server) and a PDF printed by Debian's chromium (checked
through poppler's pdftoppm and pdftotext).

The warehouse is the dashboard tests' lab cluster (tests/fixtures/dashboard: real sacct/scontrol/DCGM formats and
a governance file with [[access]] roles); the week 2026-W42 (Monday 2026-10-12 to Monday 2026-10-19) has jobs,
waits, a day of H100 telemetry and an open month's cost.
"""
from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, strategies as st
from PIL import Image

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_copy, lab_db  # noqa: F401 (fixtures)
from dashboards import access, model_reads as mr, pdf, queries, reports
from dashboards.snapshot import Snapshot
from mail_servers import MailBox, smtp_server
from models.service.delivery import Message, send_email

WEEK = "2026-W42"
HAVE_CHROMIUM = Path(pdf.CHROMIUM).exists() or shutil.which("chromium") is not None
HAVE_POPPLER = shutil.which("pdftoppm") is not None and shutil.which("pdftotext") is not None


@pytest.fixture
def lab(lab_db, monkeypatch):
    """The lab warehouse's snapshot version, with $GPULEDGER_DB naming it (the reports read what it names)."""
    monkeypatch.setenv("GPULEDGER_DB", str(lab_db))
    return queries.current().version


class _Cells(HTMLParser):
    """The text of every table row of an HTML document: {table id: [[cell, ...], ...]}."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table, self._row, self._cell = None, None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._table = dict(attrs).get("id", f"t{len(self.tables)}")
            self.tables[self._table] = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append(self._row)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def cells(html: str) -> dict[str, list[list[str]]]:
    p = _Cells()
    p.feed(html)
    return p.tables


def test_week_windows_are_iso_weeks_in_utc():
    f = reports.week_window(WEEK)
    assert (f.t0, f.t1) == (dt.datetime(2026, 10, 12), dt.datetime(2026, 10, 19))
    assert reports.week_label(reports.week_of(dt.date(2026, 10, 18))) == WEEK           # a Sunday
    assert reports.week_label(reports.week_of(dt.date(2027, 1, 1))) == "2026-W53"       # ISO year, not calendar
    # at 00:00:01 on Monday 19 October the week of 12-18 October has just ended
    assert reports.week_label(reports.last_complete_week(dt.datetime(2026, 10, 19, 0, 0, 1))) == WEEK
    assert reports.week_label(reports.last_complete_week(dt.datetime(2026, 10, 18, 23, 59, 59))) == "2026-W41"


@given(st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2099, 12, 31)),
       st.integers(min_value=0, max_value=86_399))
def test_every_instant_lies_after_its_last_complete_week(day, second):
    """Property: the last complete week at any instant ends at or before it, within a week, on a Monday, and its
    label names it back (the service's period keys round-trip)."""
    now = dt.datetime.combine(day, dt.time()) + dt.timedelta(seconds=second)
    f = reports.last_complete_week(now)
    assert f.t1 <= now < f.t1 + dt.timedelta(days=7) and f.t0.weekday() == 0 and f.days == 7
    assert reports.week_window(reports.week_label(f)) == f


def test_the_weekly_email_says_what_the_overview_page_says(lab, lab_db, monkeypatch, tmp_path):
    """The weekly report, sent over SMTP (STARTTLS + AUTH) to a real aiosmtpd server, carries the Overview's
    headline table for the same week, figure by figure, as the page renders it."""
    r = reports.weekly(lab, reports.week_window(WEEK))
    monkeypatch.setenv("GPULEDGER_SMTP_USER", "alerts@example.org")
    monkeypatch.setenv("GPULEDGER_SMTP_PASSWORD", "s3cret-for-tests")
    with smtp_server(tls_dir=tmp_path) as mail:
        d = send_email(mail.settings(), ["head@lab.example"], Message(r.subject, r.text, r.html, r.facts))
        assert d.ok, d.error
        received = mail.wait(1)[0]
    html = MailBox.body(received, "html")
    assert received["Subject"] == r.subject and "src=\"http" not in html and "<link" not in html   # nothing fetched
    sent = {row[0]: row[2:4] for row in cells(html)["headline"][1:]}

    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "overview", f_dates=(dt.date(2026, 10, 12), dt.date(2026, 10, 18)))
    page = dfx.frame_with(at, "Figure", "This period", "Previous period")
    shown = {f: [now, before] for f, now, before in zip(page["Figure"], page["This period"], page["Previous period"])}
    assert sent == shown
    assert len(sent) == 9 and sent["Allocation ratio"][0] not in ("—", "")
    # and the two charts, inline
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', html)) == 2


def test_a_team_lead_reads_the_weekly_report_in_their_dashboard_scope(lab):
    scope = reports.recipient_scope(lab, "NLP-Lead@LAB.example")        # as the dashboard: case-insensitive
    assert (scope.role, scope.teams) == ("team_lead", ("nlp",))
    assert reports.recipient_scope(lab, "admin@lab.example").full
    with pytest.raises(reports.NotAllowed, match="no role"):
        reports.recipient_scope(lab, "stranger@lab.example")
    mine = reports.weekly(access.scoped_version(lab, scope), reports.week_window(WEEK))
    full = reports.weekly(lab, reports.week_window(WEEK))
    # the cluster's totals stay the cluster's in a scoped read; the cost chart names no other team
    assert mine.facts["figures"]["Allocation ratio"] == full.facts["figures"]["Allocation ratio"]
    # the figure beside a month's cost is the whole previous month, and its name says so (not "previous week")
    cost = "Cost 2026-10 to date (previous: all of 2026-09)"
    assert mine.facts["figures"][cost] == full.facts["figures"][cost]


def test_the_team_note_shows_its_team_and_no_other(lab):
    note = reports.team_note(lab, reports.week_window(WEEK), "nlp")
    cur = Snapshot(queries.current().db_path).cursor()
    users = dict(cur.execute("SELECT \"user\", any_value(team) FROM jobs GROUP BY ALL").fetchall())
    jobs = cells(note.html)["jobs"][1:]
    assert jobs and {users[row[1]] for row in jobs} == {"nlp"}
    # the text names each job's GPUs in the singular or plural, as the HTML's GPUs column counts them
    text_jobs = re.findall(r"^- job (\S+) \((\S+), (\d+) GPUs?\)", note.text, re.M)
    assert text_jobs == [(row[0], row[1], row[2]) for row in jobs] and {n for *_, n in text_jobs} >= {"1", "2"}
    assert all(re.search(rf"job {re.escape(j)} \(\S+, {n} GPU{'' if n == '1' else 's'}\)", note.text)
               for j, _, n in text_jobs)
    others = {u for u, t in users.items() if t != "nlp"}
    assert not [u for u in others if re.search(rf"\b{re.escape(u)}\b", note.html + note.text)]
    # usage: the team's allocated GPU-hours of the week, as the Utilization page's team split (full scope) has them
    from dashboards import model_reads as mr
    from dashboards.filters import Filters
    by_team = mr.allocation_by_team(lab, Filters(dt.date(2026, 10, 12), dt.date(2026, 10, 19)), "day")
    assert note.facts["allocated_gpu_h"] == pytest.approx(
        by_team.filter(pl.col("team") == "nlp")["allocated_gpu_h"].sum(), rel=1e-9)
    assert note.facts["jobs_started"] > 0 and note.facts["wait_p95_h"] is not None
    # the lab loaded no reservation: the note has no such line (not a 0 that is not known)
    assert note.facts["reserved_idle_gpu_h"] is None and "Reserved but idle" not in note.text + note.html


def test_the_team_note_charges_the_team_its_own_reservations_idle_gpu_hours(tmp_path_factory, monkeypatch):
    """The real capture's reservation gl-resv, owned by vision (tests/fixtures/slurm_waiting): vision's note
    says its idle GPU-hours, as `report reservations` has them for the week; ml's says 0."""
    from waiting_fixtures import shared_db
    from models.metrics import reservations
    db = shared_db(tmp_path_factory)
    monkeypatch.setenv("GPULEDGER_DB", str(db))
    week = reports.week_window("2026-W49")                    # 2026-11-30 to 12-06, the capture's 12-04 inside
    want = reservations.report(Snapshot(db).cursor(), dt.datetime(2026, 11, 30), dt.datetime(2026, 12, 7))
    assert want["team"].to_list() == ["vision"] and want["reserved_idle_gpu_h"][0] > 0
    version = queries.current().version
    vision = reports.team_note(version, week, "vision")
    assert vision.facts["reserved_idle_gpu_h"] == pytest.approx(want["reserved_idle_gpu_h"][0])
    assert f"Reserved but idle: {want['reserved_idle_gpu_h'][0]:,.2f} GPU-hours" in vision.text
    assert reports.team_note(version, week, "ml").facts["reserved_idle_gpu_h"] == 0


def test_who_may_receive_what(lab):
    class Entry:     # a [[reports]] entry as the service passes it
        def __init__(self, kind, team=""):
            self.kind, self.team, self.pdf, self.template_dir = kind, team, False, ""
    with pytest.raises(reports.NotAllowed, match="finance pack"):
        reports.for_recipient(Entry("finance"), "2026-09", "nlp-lead@lab.example")
    with pytest.raises(reports.NotAllowed, match="may not see team vision"):
        reports.for_recipient(Entry("team_note", "vision"), WEEK, "nlp-lead@lab.example")
    assert reports.for_recipient(Entry("team_note", "nlp"), WEEK, "nlp-lead@lab.example").facts["team"] == "nlp"
    with pytest.raises(ValueError, match="2026-09 is not closed"):
        reports.for_recipient(Entry("finance"), "2026-09", "fin@lab.example")


def test_the_finance_pack_is_the_closed_statement(lab_copy, monkeypatch, tmp_path, capsys):
    dfx.cli(lab_copy, "chargeback", "--period", "2026-09", "--close")
    dfx.cli(lab_copy, "chargeback", "--period", "2026-09", "--out", str(tmp_path / "cli.xlsx"))
    monkeypatch.setenv("GPULEDGER_DB", str(lab_copy))
    r = reports.finance_pack(queries.current().version, "2026-09")
    files = {name: data for name, data, _ in r.attachments}
    assert set(files) == {"chargeback-2026-09.xlsx", "reconciliation-2026-09.csv", "adjustments-2026-09.csv"}
    assert files["chargeback-2026-09.xlsx"] == (tmp_path / "cli.xlsx").read_bytes()     # the same workbook
    recon = pl.read_csv(files["reconciliation-2026-09.csv"])
    total = recon.filter(pl.col("kind") == "total").row(0, named=True)
    assert f"{total['cluster_cost']:,.2f} EUR" in r.subject
    assert total["cluster_cost"] == pytest.approx(total["direct_cost"] + total["idle_allocated"]
                                                  + total["unallocated_idle"] + total["rate_variance"]
                                                  + total["rounding_residue"], abs=0.005)
    # the reconciliation in the same words as `gpuledger chargeback` prints it (and the Chargeback page shows it)
    import gpuledger
    gpuledger.main(["--db", str(lab_copy), "chargeback", "--period", "2026-09", "--view", "summary"])
    said = capsys.readouterr().err
    line = next(x for x in said.splitlines() if x.startswith("2026-09 (closed): cluster cost"))
    m = lambda x: f"{x:,.2f}"     # noqa: E731
    assert line.endswith(f"cluster cost {m(total['cluster_cost'])} EUR = charged to teams "
                         f"{m(total['direct_cost'] + total['idle_allocated'])} (direct {m(total['direct_cost'])} + "
                         f"idle shares {m(total['idle_allocated'])}) + unallocated idle {m(total['unallocated_idle'])}"
                         f" + rate variance {m(total['rate_variance'])} + rounding residue "
                         f"{m(total['rounding_residue'])}")
    assert "C" + line.split(": ", 1)[1][1:] + "." in r.text


@pytest.mark.browser
@pytest.mark.skipif(not (HAVE_CHROMIUM and HAVE_POPPLER), reason="needs Debian's chromium and poppler-utils")
def test_the_pdf_renders(lab, tmp_path):
    """The weekly report printed by headless chromium: pdftoppm makes PNG pages that carry ink (the charts in
    colour), and pdftotext finds the headline figures."""
    r = reports.with_pdf(reports.weekly(lab, reports.week_window(WEEK)))
    name, data, mime = r.attachments[-1]
    assert (name, mime) == (f"weekly-{WEEK}.pdf", "application/pdf") and data.startswith(b"%PDF-")
    (tmp_path / "r.pdf").write_bytes(data)
    subprocess.run(["pdftoppm", "-r", "40", "-png", str(tmp_path / "r.pdf"), str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page*.png"))
    assert 1 <= len(pages) <= 3
    img = Image.open(pages[0]).convert("RGB")
    w, h = img.size
    assert abs(h / w - 297 / 210) < 0.02                              # A4 portrait
    px = np.asarray(img, dtype=np.int32)
    ink = float((px.sum(axis=2) < 600).mean())                           # not a blank page
    colour = float((px.max(axis=2) - px.min(axis=2) > 60).mean())        # the charts' lines and bars
    assert ink > 0.01 and colour > 0.001, (ink, colour)
    text = subprocess.run(["pdftotext", "-layout", str(tmp_path / "r.pdf"), "-"], check=True, capture_output=True,
                          text=True).stdout
    for row in reports.headline(lab, reports.week_window(WEEK)):
        assert row["metric"] in text
    alloc = reports.fmt_value(r.facts["figures"]["Allocation ratio"])
    assert re.search(rf"Allocation ratio\s+%\s+{re.escape(alloc)}", text)


def test_the_cli_writes_the_report_and_leaves_the_warehouse_as_it_was(lab_db, tmp_path, capsys):
    import hashlib
    import gpuledger
    before = hashlib.sha256(lab_db.read_bytes()).hexdigest()
    assert gpuledger.main(["-q", "--db", str(lab_db), "report", "weekly", "--week", WEEK, "--out", str(tmp_path)]) == 0
    html = (tmp_path / f"weekly-{WEEK}.html").read_text()
    assert gpuledger.main(["-q", "--db", str(lab_db), "report", "team-note", "--team", "nlp", "--week", WEEK]) == 0
    assert capsys.readouterr().out.startswith(f"GPU usage of team nlp, {WEEK}")
    assert hashlib.sha256(lab_db.read_bytes()).hexdigest() == before
    assert [r[0] for r in cells(html)["headline"][1:]][0] == "Allocation ratio"
    missing = tmp_path / "nowhere" / "w.duckdb"
    assert gpuledger.main(["--db", str(missing), "report", "weekly"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err and not missing.parent.exists()
    assert gpuledger.main(["--db", str(lab_db), "report", "finance-pack"]) == 1
    assert "no period is closed yet" in capsys.readouterr().err
    assert gpuledger.main(["--db", str(lab_db), "report", "weekly", "--week", "42"]) == 2


def test_a_week_the_accounting_stops_in_says_its_figures_after_that_are_missing(lab):
    """The lab's accounting stops on 2026-10-20: the week 2026-W43 (10-19 to 10-25), as the service would send it
    on 10-26 with the collector behind, says where the figures stop, in both forms; a covered week says nothing."""
    horizon = queries.catalogue(lab).horizon
    line = (f"The accounting reaches only {horizon:%Y-%m-%d %H:%M} UTC, before this week ends (2026-10-26 00:00 "
            "UTC): what happened after it is missing from these figures, not zero (the collector or slurmdbd may be "
            "behind).")
    for r in (reports.weekly(lab, reports.week_window("2026-W43")),
              reports.team_note(lab, reports.week_window("2026-W43"), "nlp")):
        assert r.text.splitlines()[2] == line
        assert f'<p class="warn" id="coverage">{line}</p>' in r.html
    for r in (reports.weekly(lab, reports.week_window(WEEK)), reports.team_note(lab, reports.week_window(WEEK), "nlp")):
        assert "The accounting reaches only" not in r.text and 'id="coverage"' not in r.html


@pytest.mark.parametrize("week", ["2026-W44", "2026-W38"])
def test_a_week_the_accounting_does_not_reach_is_refused_not_a_report_of_dashes(lab, lab_db, capsys, week):
    """The lab's accounting runs from 2026-09-21 into 2026-10-20: a later or an earlier week has nothing to report
    (it printed every figure as "—" and the month's cost as 0.00); the weeks at the data's edges still report."""
    import gpuledger
    cat = queries.catalogue(lab)        # the lab's snapshot, $GPULEDGER_DB naming it (the `lab` fixture)
    assert str(cat.first_day) == "2026-09-21" and cat.horizon.date() == dt.date(2026, 10, 20)
    for cmd in (["weekly"], ["team-note", "--team", "nlp"]):
        assert gpuledger.main(["--db", str(lab_db), "report", *cmd, "--week", week]) == 1
        err = capsys.readouterr().err
        assert err == (f"gpuledger: report: --week {week} ({reports.week_window(week).start} to "
                       f"{reports.week_window(week).end - dt.timedelta(days=1)}) is outside the data (2026-09-21 "
                       f"to {cat.horizon:%Y-%m-%d %H:%M} UTC): nothing to report\n")
    for edge in ("2026-W39", "2026-W43"):         # 09-21 to 09-27, and 10-19 to 10-25 (the horizon's day)
        assert gpuledger.main(["-q", "--db", str(lab_db), "report", "weekly", "--week", edge]) == 0


def test_a_jobs_gpus_show_a_part_of_a_gpu_as_it_is():
    """The team note's job table: a job on GPU shards holds 0.25 GPU, not "0" (tests/test_gpu_shares.py)."""
    assert [reports.fmt_gpus(x) for x in (0.25, 4.0, 1234.0, 1 / 3, 2.5, None)] == [
        "0.25", "4", "1,234", "0.333", "2.5", "—"]


def test_a_past_weeks_capacity_date_is_said_to_be_todays_outlook(lab):
    """The capacity date is the forecast from all the accounting (to 2026-10-20 in the lab; it forecasts from the
    horizon's day on): the report on week 2026-W40 (09-28 to 10-04) says so under its figures; on the last complete
    week (W42) it is that week's outlook."""
    since = mr.capacity_since(lab, reports.week_window(WEEK))
    line = (f"Capacity reached is the outlook of the forecast from the accounting before {since:%Y-%m-%d}, after "
            "this week: a report on a past week gives the latest outlook, not the one it had then.")
    past = reports.weekly(lab, reports.week_window("2026-W40"))
    assert any(m.startswith("Capacity reached") for m in past.facts["figures"])
    assert line in past.text.splitlines() and f'<p class="warn" id="outlook">{line}</p>' in past.html
    last = reports.weekly(lab, reports.week_window(WEEK))
    assert "outlook of the forecast" not in last.text and 'id="outlook"' not in last.html


def test_a_pool_already_over_its_target_reads_already_not_the_first_forecast_day():
    """The capacity row and tiles say "already" with the date (the first forecast day alone reads as tomorrow)."""
    assert mr.reached_text(dt.datetime(2024, 1, 3), True) == "already (before 2024-01-03)"
    assert mr.reached_text(dt.datetime(2024, 1, 3), False) == "2024-01-03"
