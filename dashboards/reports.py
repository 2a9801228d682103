"""Scheduled reports (issue 19 part 4): the weekly manager report, a team lead's weekly note and the monthly
finance pack, rendered from the serving snapshot through the same reads the dashboard's pages make.

- **The dashboard's numbers.** Every figure comes from :mod:`dashboards.model_reads` (the functions the Overview's
  tiles and table call, with the same :class:`~dashboards.filters.Filters`), so an email says what the page says
  for the same window; tests/test_reports.py holds them equal.
- **The dashboard's scopes.** A recipient reads in the scope the dashboard would give them
  (:func:`recipient_scope`: their role in the governance file's ``[[access]]``); a team note is always its
  team's view (other teams merged into "other teams", :mod:`dashboards.access`).
- **Self-contained.** HTML with inline CSS and charts as inline PNG (``data:`` URIs, matplotlib): nothing is
  fetched when it is opened; the PDF is that HTML printed by Debian's headless chromium (:mod:`dashboards.pdf`).
- **Reads never write.** Rendering only reads the snapshot; the service (models/service/reports.py) stores who was
  sent what.
"""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import jinja2
import polars as pl

# Outside a Streamlit server (the CLI, the service) the pages' caches fall back to process memory, which is what a
# report wants; Streamlit warns about it on every cached function and call (a filter, set before the cached
# functions are defined: Streamlit resets its loggers' levels).
for _name in ("cache_data_api", "cache_resource_api"):
    logging.getLogger(f"streamlit.runtime.caching.{_name}").addFilter(
        lambda rec: "No runtime found" not in rec.getMessage())

from dashboards import access, exports, model_reads as mr, pdf, queries, report_charts  # noqa: E402
from dashboards.filters import Filters  # noqa: E402
from models.definitions.labels import UNMAPPED  # noqa: E402
from models.metrics import chargeback  # noqa: E402

TEMPLATES = Path(__file__).resolve().parent / "report_templates"
KINDS = ("weekly", "team_note", "finance")


@dataclass(frozen=True)
class Report:
    """One rendered report: subject, self-contained HTML, plain text, the figures as data (webhook facts, tests)
    and attachments ``(file name, bytes, MIME type)``."""
    kind: str
    period: str
    subject: str
    html: str
    text: str
    facts: dict = field(default_factory=dict)
    attachments: tuple = ()


class NotAllowed(PermissionError):
    """A recipient whose dashboard role may not see this report (the message says why, in one line)."""


# ---------------------------------------------------------------- periods

def week_of(day: dt.date) -> Filters:
    """The ISO week (Monday 00:00 UTC to the next Monday) holding ``day``, as the dashboard's window."""
    monday = day - dt.timedelta(days=day.weekday())
    return Filters(monday, monday + dt.timedelta(days=7))


def last_complete_week(now: dt.datetime) -> Filters:
    """The latest ISO week that ended at or before ``now`` (naive UTC)."""
    return week_of(now.date() - dt.timedelta(days=7))


def week_label(f: Filters) -> str:
    """'2026-W42': the ISO week of the window's first day (the key a report run is stored under)."""
    y, w, _ = f.t0.isocalendar()
    return f"{y}-W{w:02d}"


# ---------------------------------------------------------------- scopes

def recipient_scope(version: str, user: str) -> access.Scope:
    """The scope the dashboard gives ``user`` (their governance ``[[access]]`` role); a site that names no roles
    is served as its local operator is on the dashboard (everything). Raises :class:`NotAllowed` for a user
    without a role on a site that has roles."""
    roles = queries.access_roles(version)
    if not roles.users:
        return access.LOCAL_OPERATOR
    hit = roles.users.get(user.lower())
    if hit is None:
        raise NotAllowed(f"{user} has no role in the governance file's [[access]] entries")
    return access.Scope(hit[0], tuple(hit[1]), user)


def team_scope(team: str) -> access.Scope:
    """A team note's view: the team's rows, every other team merged (as a team lead of ``team`` sees it)."""
    return access.Scope("team_lead", (team,), f"team note {team}")


# ---------------------------------------------------------------- the Overview's figures

def _pct(x, scale: float = 100.0):
    return None if x is None else x * scale


def _row(rows: list, name: str, unit: str, now, before, change_unit: str | None = None) -> None:
    """One line of the Overview's headline table (dashboards/views/overview.py ``_row``: same names, units, change)."""
    change = None
    if change_unit is not None and isinstance(now, (int, float)) and isinstance(before, (int, float)):
        change = f"{now - before:+,.2f}" + (f" {change_unit}" if change_unit else "")
    rows.append({"metric": name, "unit": unit, "now": now, "previous": before, "change": change})


def headline(version: str, f: Filters) -> list[dict]:
    """The Overview's headline figures for window ``f`` against the previous window of the same length, in the
    page's order and words: allocation ratio, GPU efficiency and telemetry coverage (%), FGD fragmentation
    rate, wait blocked by fragmentation (%), Jain index, capacity date, p95 wait (hours), reserved but idle
    (GPU-hours, where reservations are loaded), month's cost."""
    prev, rows = f.previous(), []
    _row(rows, "Allocation ratio", "%", _pct(mr.allocation_ratio(version, f)),
         _pct(mr.allocation_ratio(version, prev)), "pp")
    e, eb = mr.efficiency_total(version, f), mr.efficiency_total(version, prev)
    _row(rows, "GPU efficiency", "%", e and e["mean_pct"], eb and eb["mean_pct"], "pp")
    _row(rows, "Telemetry coverage (of allocated GPU-hours)", "%", e and e["coverage_pct"],
         eb and eb["coverage_pct"], "pp")
    _row(rows, "Fragmentation rate (FGD)", "%", _pct(mr.fragmentation_rate(version, f)),
         _pct(mr.fragmentation_rate(version, prev)), "pp")
    _row(rows, "Queue wait blocked by fragmentation", "%", _pct(mr.blocked_share(version, f)),
         _pct(mr.blocked_share(version, prev)), "pp")
    if isinstance(mr.fairness(version, f), dict):
        _row(rows, "Fairness (Jain index over teams with demand)", "index", mr.jain(version, f),
             mr.jain(version, prev), "")
    _capacity_row(rows, version, f)
    w, wb = mr.worst_wait(version, f), mr.worst_wait(version, prev)
    _row(rows, "p95 queue wait", "hours", w and w["wait_p95_h"], wb and wb["wait_p95_h"], "h")
    idle = mr.reserved_idle(version, f)
    if idle is not None:          # reservations loaded at all
        _row(rows, "Reserved but idle", "GPU-hours", idle, mr.reserved_idle(version, prev), "GPU-h")
    _cost_row(rows, version, f)
    return rows


def _capacity_row(rows: list, version: str, f: Filters) -> None:
    hit = mr.capacity_reached(version, f)
    if hit == {}:
        _row(rows, f"Capacity reached ({mr.CAPACITY_BASIS})", "date", "not within 90 days", None)
    elif hit:
        _row(rows, f"Capacity reached ({hit['pool']}; {mr.CAPACITY_BASIS})", "date",
             mr.reached_text(hit["date"], hit["already"]), None)


def _cost_row(rows: list, version: str, f: Filters) -> None:
    now = mr.month_cost(version, f)
    if isinstance(now, str):
        return
    before = mr.month_cost(version, f, mr.previous_month(now["month"]))
    _row(rows, mr.month_cost_label(now), now["currency"], now["cost"],
         before["cost"] if isinstance(before, dict) else None)


def fmt_value(x) -> str:
    """As the Overview's table shows a value: two decimals with thousands separators, words as they are."""
    if x is None:
        return "—"
    return f"{x:,.2f}" if isinstance(x, (int, float)) else str(x)


def fmt_gpus(x) -> str:
    """A job's GPUs: whole as a count, a part of a GPU (shards, MPS shares, shared trace pods) to 3 decimals."""
    if x is None:
        return "—"
    return f"{x:,.0f}" if x == int(x) else f"{x:,.3f}".rstrip("0")


# ---------------------------------------------------------------- rendering

def _env(template_dir: str | Path | None = None) -> jinja2.Environment:
    dirs = [str(template_dir)] if template_dir else []
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([*dirs, str(TEMPLATES)]), undefined=jinja2.StrictUndefined,
                             autoescape=jinja2.select_autoescape(["html.j2"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["v"] = fmt_value
    env.filters["n"] = lambda x: "—" if x is None else f"{int(x):,}"   # counts: jobs
    env.filters["gpus"] = fmt_gpus
    return env


def _render(kind: str, period: str, subject: str, context: dict, facts: dict, template_dir=None,
            attachments: tuple = ()) -> Report:
    env = _env(template_dir)
    ctx = {"subject": subject, "coverage": None, "outlook": None, **context}
    return Report(kind, period, subject, env.get_template(f"{kind}.html.j2").render(ctx),
                  env.get_template(f"{kind}.txt.j2").render(ctx), facts, attachments)


def _published(version: str) -> str:
    at = queries.published_at(version)
    return f"{at:%Y-%m-%d %H:%M} UTC" if at else "unknown"


def coverage(version: str, f: Filters) -> str | None:
    """A line when the accounting stops before the window ends (the collector or slurmdbd behind, a report sent on
    schedule all the same): the figures after it are missing, not zero. None when it reaches the end."""
    horizon = queries.catalogue(version).horizon
    if horizon is None or horizon >= f.t1:
        return None
    return (f"The accounting reaches only {horizon:%Y-%m-%d %H:%M} UTC, before this week ends "
            f"({f.t1:%Y-%m-%d %H:%M} UTC): what happened after it is missing from these figures, not zero (the "
            "collector or slurmdbd may be behind).")


def outlook(version: str, f: Filters, rows: list[dict]) -> str | None:
    """A line when the report is on a week that ended well before the accounting does (a past week asked for):
    its capacity date is the forecast from all the accounting, today's outlook, not the one of that week."""
    since = mr.capacity_since(version, f)
    if since is None or since <= f.t1 + dt.timedelta(days=1) or not any(
            r["metric"].startswith("Capacity reached") for r in rows):
        return None
    return (f"Capacity reached is the outlook of the forecast from the accounting before {since:%Y-%m-%d}, after "
            "this week: a report on a past week gives the latest outlook, not the one it had then.")


def weekly(version: str, f: Filters, template_dir=None) -> Report:
    """The weekly manager report for window ``f`` in the scope ``version`` carries (dashboards/access.py): the
    Overview's headline figures and its two charts (allocation ratio by pool, cost per team)."""
    rows = headline(version, f)
    cat = queries.catalogue(version)
    charts = []
    bucket = "day" if f.days <= 120 else mr.auto_bucket(f)
    pools = mr.utilization(version, f, bucket, "gpu_type")
    if pools is not None and pools.height and mr.placement_known(version, f):   # the Overview's chart rule
        charts.append(("Allocation ratio by pool per day", report_charts.allocation_png(pools, list(cat.pools))))
    cost = mr.month_cost(version, f)
    if isinstance(cost, dict) and cost["lines"].height:
        charts.append((f"Cost per team, {cost['month']} ({cost['currency']})",
                       report_charts.cost_png(cost["lines"], list(cat.all_teams), cost["currency"])))
    label = week_label(f)
    subject = f"GPU cluster weekly report {label}: {f.span_text()}"
    facts = {"period": label, "window": f.describe(), "figures": {r["metric"]: r["now"] for r in rows}}
    return _render("weekly", label, subject, {"f": f, "rows": rows, "charts": charts, "coverage": coverage(version, f),
                                              "outlook": outlook(version, f, rows), "published": _published(version)},
                   facts, template_dir)


def team_note(version: str, f: Filters, team: str, template_dir=None) -> Report:
    """A team lead's weekly note: ``team``'s usage (allocated GPU-hours, share of available), waits (p50/p95, wait
    blocked by fragmentation) and waste (idle-allocated GPU-hours and the jobs that held the most; where
    reservations are loaded, its reservations' idle GPU-hours, charged to it), read as the
    team's lead reads the dashboard (``version`` is the snapshot's unscoped version)."""
    sv = access.scoped_version(version, team_scope(team))
    tf = Filters(f.start, f.end, teams=(team,))
    usage = mr.window_totals(mr.utilization(sv, tf, "month"), tf)
    usage_prev = mr.window_totals(mr.utilization(sv, tf.previous(), "month"), tf)
    waits = mr.waits(sv, tf, ("team",))
    wait = waits.row(0, named=True) if waits is not None and waits.height else None
    eff = mr.efficiency_total(sv, tf)
    worst = mr.efficiency_jobs(sv, tf, n=10)
    cost = mr.month_cost(sv, tf)
    facts = {"team": team, "allocated_gpu_h": usage.get("allocated_gpu_h"),
             "allocated_gpu_h_previous": usage_prev.get("allocated_gpu_h"),
             "share_of_available_pct": _pct(usage.get("allocation_ratio")),
             "jobs_started": wait and wait["jobs"], "wait_p50_h": wait and wait["wait_p50_h"],
             "wait_p95_h": wait and wait["wait_p95_h"], "blocked_by_fragmentation_pct": _pct(mr.blocked_share(sv, tf)),
             "idle_alloc_gpu_h": eff and eff["idle_alloc_gpu_h"], "efficiency_pct": eff and eff["mean_pct"],
             "reserved_idle_gpu_h": mr.reserved_idle(sv, tf),
             "cost": cost["cost"] if isinstance(cost, dict) else None,
             "currency": cost["currency"] if isinstance(cost, dict) else None,
             "cost_month": cost["month"] if isinstance(cost, dict) else None}
    jobs = [] if worst is None else worst.select("job_id", "user", "ngpus", "alloc_gpu_h", "idle_alloc_gpu_h").rows(
        named=True)
    label = week_label(f)
    subject = f"GPU usage of team {team}, {label}: {f.span_text()}"
    return _render("team_note", label, subject, {"f": tf, "team": team, "x": facts, "jobs": jobs,
                                                 "coverage": coverage(version, f), "published": _published(version)},
                   {**facts, "period": label},
                   template_dir)


def finance_pack(version: str, period: str, template_dir=None) -> Report:
    """The finance pack of a closed month: the statement workbook exactly as `gpuledger chargeback --out X.xlsx`
    and the dashboard's download write it (every view, reconciliation and adjustments included), the
    reconciliation and adjustments also as CSV, and the reconciliation in the body. Raises ValueError for a
    period that is not closed (an open month's figures still move)."""
    if period not in mr.chargeback_periods(version, None, None)[1]:
        raise ValueError(f"finance pack: {period} is not closed (close it with `gpuledger chargeback --period "
                         f"{period} --close`)")
    res = mr.statement(version, period)
    if isinstance(res, str):
        raise ValueError(f"finance pack {period}: {res}")
    stmt, views = res
    t, p = stmt.total_row, stmt.policy
    money = {k: f"{t[k]:,.{p.minor_units}f}" for k in ("cluster_cost", "direct_cost", "idle_allocated",
                                                       "unallocated_idle", "rate_variance", "rounding_residue")}
    recon, adjust = views["reconciliation"], views["adjustments"]
    files = ((f"chargeback-{period}.xlsx", mr.statement_xlsx(version, period),
              "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
             (f"reconciliation-{period}.csv", exports.csv_bytes(recon), "text/csv"),
             (f"adjustments-{period}.csv", exports.csv_bytes(adjust), "text/csv"))
    by_team = views["by team"].with_columns(pl.col("team").fill_null(UNMAPPED))
    subject = f"GPU chargeback {period} (closed): {money['cluster_cost']} {p.currency}"
    facts = {"period": period, "currency": p.currency, "content_hash": stmt.content_hash, **money,
             "adjustment_lines": adjust.height}
    ctx = {"period": period, "stmt": stmt, "money": money, "currency": p.currency,
           "recon_sentence": "C" + chargeback.reconciliation_sentence(t, p.minor_units, p.currency)[1:],
           "closed_at": f"{stmt.closed_at:%Y-%m-%d %H:%M} UTC", "recon": _table(recon), "adjust": _table(adjust),
           "by_team": _table(by_team), "files": [name for name, _, _ in files], "published": _published(version)}
    return _render("finance", period, subject, ctx, facts, template_dir, files)


def _table(df: pl.DataFrame) -> dict:
    """Columns and rows as text, for a template's table."""
    return {"columns": df.columns, "rows": [[fmt_value(v) if isinstance(v, (int, float)) or v is None else str(v)
                                             for v in r] for r in df.rows()]}


# ---------------------------------------------------------------- one recipient's report (what the service sends)

def week_window(label: str) -> Filters:
    """'2026-W42' -> that ISO week's window (Monday 00:00 UTC to the next Monday)."""
    year, _, week = label.partition("-W")
    return week_of(dt.date.fromisocalendar(int(year), int(week), 1))


def for_recipient(report, period: str, who: str) -> Report:
    """``report`` (a [[reports]] entry: kind, team, pdf, template_dir) for ``period`` as ``who`` may see it, read
    from the snapshot of $GPULEDGER_DB: the weekly report in their dashboard scope, a team note only to someone
    who may see that team, the finance pack only to full roles (it names every team). Raises :class:`NotAllowed`
    (a PermissionError) otherwise."""
    version = queries.current().version
    scope = recipient_scope(version, who)
    if report.kind == "finance":
        if not scope.full:
            raise NotAllowed(f"{who} ({scope.role}) may not receive the finance pack: it names every team")
        return finance_pack(version, period, report.template_dir or None)
    f = week_window(period)
    if report.kind == "team_note":
        if not scope.full and report.team not in scope.teams:
            raise NotAllowed(f"{who} ({scope.role}) may not see team {report.team}")
        r = team_note(version, f, report.team, report.template_dir or None)
    else:
        r = weekly(access.scoped_version(version, scope), f, report.template_dir or None)
    return with_pdf(r) if report.pdf else r


def with_pdf(r: Report) -> Report:
    """``r`` with its HTML printed to PDF attached (dashboards/pdf.py)."""
    name = f"{r.kind.replace('_', '-')}-{r.period}.pdf"
    return replace(r, attachments=(*r.attachments, (name, pdf.html_to_pdf(r.html), "application/pdf")))
