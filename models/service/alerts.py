"""Alert rules (``[[alerts]]`` in gpuledger.toml): evaluated by the service after a refresh, stored, delivered as
per-person digests (models/service/delivery.py). The service is the only writer; the figures come from the models
the reports and the dashboard read, so an email says what `gpuledger report ...` says.

- **Episodes.** A rule's condition is evaluated per subject (a budget, a team, a job, a pool, a source, a cluster).
  When it starts to hold, an ``alerts`` row opens (fired); while it holds, the row's ``last_seen`` and
  ``last_value`` move; the first evaluation that no longer sees it closes the row (resolved). One episode is one
  alert and one resolution, however many evaluations it spans. A rule that fails to evaluate (a model error)
  changes nothing: its open alerts neither resolve nor fire again.
- **Who was told what, when.** Every fired and resolved event is owed to each recipient of its rule
  (``notify``: email addresses and ``webhook:NAME``); the events owed to one recipient go out as one digest, and
  each attempt is an ``alert_deliveries`` row. An event not delivered (SMTP down) stays owed and is tried again
  at later evaluations, up to ``[delivery] max_attempts``; events older than :data:`MAX_AGE` are no longer owed.
- Kinds and their values (``threshold`` in the same unit): docs/METRICS.md, "Alerts".
"""
from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field

import polars as pl

from ingest.warehouse import has_table, utcnow
from models.definitions.policy import CostError, current_policy
from models.forecasting import budgets, capacity
from models.metrics import blocked, efficiency, timeline
from models.service import delivery
from models.service.config import AlertRule, DeliveryConfig

log = logging.getLogger("gpuledger.alerts")

#: events older than this are no longer delivered (a recipient added to a rule is not sent last month's alerts)
MAX_AGE = dt.timedelta(days=1)
JOBS_NAMED = 10


@dataclass(frozen=True)
class Condition:
    """A subject whose condition holds now: its value (the kind's unit), one line, detail lines, facts."""
    subject: str
    value: float | None
    summary: str
    lines: tuple = ()
    facts: dict = field(default_factory=dict)


# ------------------------------------------------------------------ conditions, one function per kind

def _gpus(n: float) -> str:
    return f"{n:g} GPU" + ("" if n == 1 else "s")


def _budget(con, rule: AlertRule, hz, now) -> list[Condition]:
    try:
        rep = budgets.report(con)
        cur = current_policy(con).currency
    except CostError:
        return []
    out = []
    for r in rep.filter(pl.col("forecast_pct") > rule.threshold).iter_rows(named=True):
        if rule.teams and not (r["scope"] == "team" and r["name"] in rule.teams):
            continue
        unit = cur if r["unit"] == "money" else "GPU-h"
        who = f"{'team' if r['scope'] == 'team' else 'cost centre'} {r['name']}"
        out.append(Condition(
            f"{r['scope']}:{r['name']}:{r['period']}:{r['unit']}", r["forecast_pct"],
            f"{who} forecast at {r['forecast_pct']:.1f} % of its {r['period']} budget "
            f"({r['forecast']:,.2f} of {r['budget']:,.2f} {unit})",
            (f"charged so far: {r['actual']:,.2f} {unit} ({r['actual_pct']:.1f} %)",
             f"forecast for the rest of {r['period']}: {r['forecast_rest']:,.2f} {unit}",
             f"data horizon: {r['horizon']:%Y-%m-%d %H:%M} UTC"),
            {k: r[k] for k in ("name", "period", "unit", "budget", "actual", "forecast_rest", "forecast",
                               "forecast_pct")}))
    return out


def _idle(con, rule: AlertRule, hz, now) -> list[Condition]:
    lo = hz - dt.timedelta(seconds=rule.window_s)
    teams = efficiency.by_group(con, lo, hz, by=["team"], bucket=None)
    teams = teams.filter(pl.col("team").is_not_null() & (pl.col("idle_alloc_gpu_h") > rule.threshold))
    if rule.teams:
        teams = teams.filter(pl.col("team").is_in(rule.teams))
    if teams.is_empty():
        return []
    jobs = efficiency.per_job(con, lo, hz).filter(pl.col("idle_alloc_gpu_h") > 0)
    out = []
    for t in teams.iter_rows(named=True):
        mine = jobs.filter(pl.col("team") == t["team"]).sort("idle_alloc_gpu_h", descending=True)
        lines = tuple(f"job {j['job_id']} ({j['user']}, {_gpus(j['ngpus'])}{', running' if j['running'] else ''}): "
                      f"{j['idle_alloc_gpu_h']:,.2f} idle GPU-h of {j['alloc_gpu_h']:,.2f}"
                      for j in mine.head(JOBS_NAMED).iter_rows(named=True))
        more = mine.height - JOBS_NAMED
        out.append(Condition(
            t["team"], t["idle_alloc_gpu_h"],
            f"team {t['team']}: {t['idle_alloc_gpu_h']:,.2f} idle-allocated GPU-hours from "
            f"{lo:%Y-%m-%d %H:%M} to {hz:%Y-%m-%d %H:%M} UTC (threshold {rule.threshold:g})",
            lines + ((f"... and {more} more jobs",) if more > 0 else ()),
            {"team": t["team"], "idle_alloc_gpu_h": t["idle_alloc_gpu_h"], "from": lo, "to": hz,
             "jobs": [{"job_id": j["job_id"], "user": j["user"], "idle_alloc_gpu_h": j["idle_alloc_gpu_h"]}
                      for j in mine.head(JOBS_NAMED).iter_rows(named=True)]}))
    return out


def _zero(con, rule: AlertRule, hz, now) -> list[Condition]:
    lo = hz - dt.timedelta(seconds=rule.window_s)
    runs = efficiency.zero_runs(con, lo, hz, rule.threshold).filter(pl.col("zero_hours") > rule.threshold)
    if rule.teams:
        runs = runs.filter(pl.col("team").is_in(rule.teams))
    return [Condition(
        f"{j['cluster']}/{j['job_id']}", j["zero_hours"],
        f"job {j['job_id']} of {j['user']} (team {j['team'] or 'unmapped'}) held {_gpus(j['ngpus'])} at 0 % "
        f"for {j['zero_hours']:g} h",
        (f"from {j['zero_from']:%Y-%m-%d %H:%M} to {j['zero_to']:%Y-%m-%d %H:%M} UTC: "
         f"{j['zero_gpu_h']:,.2f} GPU-hours allocated at 0 %",),
        {"cluster": j["cluster"], "job_id": j["job_id"], "user": j["user"], "team": j["team"],
         "zero_hours": j["zero_hours"], "zero_gpu_h": j["zero_gpu_h"]})
        for j in runs.iter_rows(named=True)]


def _exhaustion(con, rule: AlertRule, hz, now) -> list[Condition]:
    res = capacity.forecast_warehouse(con, min(365, max(14, int(rule.threshold) + 1)), by=("pool",),
                                      measure="demanded")
    return exhaustion_conditions(res.get("capacity"), rule.threshold, hz)


def exhaustion_conditions(cap: pl.DataFrame | None, threshold: float, hz) -> list[Condition]:
    """A condition per pool of the forecast's capacity table whose upper 80 % exhaustion date is fewer than
    ``threshold`` days after the data horizon ``hz`` (UTC); a pool already above its target is at 0 days."""
    if cap is None or cap.is_empty():
        return []
    keys = [k for k in ("cluster", "pool") if k in cap.columns]
    out = []
    for r in cap.filter(pl.col("exhausted_upper80").is_not_null()).iter_rows(named=True):
        when = r["exhausted_upper80"]
        when = when if isinstance(when, dt.datetime) else dt.datetime.combine(when, dt.time())
        already = bool(r.get("already_above"))
        days = 0.0 if already else (when - hz).total_seconds() / 86400
        if days < threshold:
            pool = "/".join(str(r[k]) for k in keys)
            out.append(Condition(
                pool, round(days, 1),
                f"pool {pool}: demand is already above the target, {r['recent_gpus']:,.1f} GPUs over the last days "
                f"against {r['target_gpus']:g} of {r['capacity_gpus']:g}" if already else
                f"pool {pool}: the upper 80 % demand forecast reaches {r['target_gpus']:g} of "
                f"{r['capacity_gpus']:g} GPUs on {when:%Y-%m-%d} ({days:.1f} days after the data horizon)",
                (f"recent demand: {r['recent_gpus']:,.1f} GPUs",),
                {"pool": pool, "exhausted_upper80": when, "days": days, "capacity_gpus": r["capacity_gpus"]}))
    return out


def _stale(con, rule: AlertRule, hz, now) -> list[Condition]:
    """Sources of the service (``source_status``) without a success for more than ``threshold`` minutes; one that
    was tried but never succeeded is stale at once (value NULL)."""
    if not has_table(con, "source_status"):
        return []
    rows = con.execute("""SELECT cluster, source, last_success, last_error FROM source_status
                          WHERE last_success IS NULL OR last_success < ?""",
                       [now - dt.timedelta(minutes=rule.threshold)]).fetchall()
    out = []
    for cluster, source, ok, err in rows:
        mins = None if ok is None else (now - ok).total_seconds() / 60
        out.append(Condition(
            f"{cluster}/{source}", None if mins is None else round(mins, 1),
            f"source {source} of {cluster}: "
            + (f"no success for {mins:,.0f} min (last success {ok:%Y-%m-%d %H:%M} UTC)" if ok else "never succeeded"),
            (f"last error: {err}",) if err else (),
            {"cluster": cluster, "source": source, "last_success": ok, "minutes": mins}))
    return out


def _blocked(con, rule: AlertRule, hz, now) -> list[Condition]:
    lo = hz - dt.timedelta(seconds=rule.window_s)
    df = blocked.blocked(con, lo, hz, by=("cluster",))
    if df.is_empty():
        return []
    df = df.filter((pl.col("cluster") != "(all)") & (100 * pl.col("fragmentation_share") > rule.threshold))
    return [Condition(
        r["cluster"], 100 * r["fragmentation_share"],
        f"cluster {r['cluster']}: {100 * r['fragmentation_share']:.1f} % of waiting GPU-hours blocked by "
        f"fragmentation from {lo:%Y-%m-%d %H:%M} to {hz:%Y-%m-%d %H:%M} UTC",
        (f"{r['fragmentation_gpu_h']:,.2f} of {r['wait_gpu_h']:,.2f} waiting GPU-hours of {r['jobs']} jobs "
         "waited while enough GPUs sat idle, scattered",),
        {"cluster": r["cluster"], "fragmentation_pct": 100 * r["fragmentation_share"],
         "fragmentation_gpu_h": r["fragmentation_gpu_h"], "wait_gpu_h": r["wait_gpu_h"]})
        for r in df.iter_rows(named=True)]


CONDITIONS = {"budget": _budget, "idle_gpu_hours": _idle, "zero_util_job": _zero, "exhaustion": _exhaustion,
              "stale_source": _stale, "blocked_wait": _blocked}


# ------------------------------------------------------------------ episodes

def observe(con, rules, now: dt.datetime | None = None) -> tuple:
    """Read only: (now, data horizon, [(rule, its conditions or None when the rule failed to evaluate)])."""
    now = now or utcnow()
    hz = timeline.horizon(con)
    out = []
    for rule in rules:
        if hz is None and rule.kind != "stale_source":
            continue
        try:
            out.append((rule, CONDITIONS[rule.kind](con, rule, hz, now)))
        except Exception:                      # noqa: BLE001 -- one rule's failure leaves its episodes as they are
            log.exception("alert rule %s (%s) failed to evaluate", rule.name, rule.kind)
            out.append((rule, None))
    return now, hz, out


def store(con, observed: tuple) -> dict[str, int]:
    """Write what :func:`observe` saw: open, update and close episodes in ``alerts``, add ``alert_observations``.
    Returns counts (fired, resolved, firing, failed rules)."""
    now, hz, results = observed
    counts = {"fired": 0, "resolved": 0, "firing": 0, "failed": 0}
    for rule, conds in results:
        if conds is None:
            counts["failed"] += 1
            continue
        fired, resolved = _apply(con, rule, conds, now, hz)
        counts["fired"] += fired
        counts["resolved"] += resolved
        counts["firing"] += len(conds)
    return counts


def evaluate(con, rules, now: dt.datetime | None = None) -> dict[str, int]:
    """Evaluate every rule at ``now`` (naive UTC, default the clock) against the data horizon and store the
    outcome (:func:`observe` then :func:`store` on one read-write connection)."""
    return store(con, observe(con, rules, now))


def _apply(con, rule: AlertRule, conds: list[Condition], now, hz) -> tuple[int, int]:
    open_ = dict(con.execute("SELECT subject, alert_id FROM alerts WHERE rule = ? AND resolved_at IS NULL",
                             [rule.name]).fetchall())
    seen = {c.subject: c for c in conds}
    new = [c for s, c in seen.items() if s not in open_]
    next_id = con.sql("SELECT coalesce(max(alert_id), 0) + 1 FROM alerts").fetchall()[0][0]
    for i, c in enumerate(new):
        detail = json.dumps({"lines": list(c.lines), "facts": c.facts}, default=str)
        con.execute("INSERT INTO alerts VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)",
                    [next_id + i, rule.name, rule.kind, c.subject, now, now, c.value, c.value, rule.threshold,
                     c.summary, detail])
    for s, aid in open_.items():
        if s in seen:
            con.execute("UPDATE alerts SET last_seen = ?, last_value = ? WHERE alert_id = ?", [now, seen[s].value, aid])
        else:
            con.execute("UPDATE alerts SET resolved_at = ? WHERE alert_id = ?", [now, aid])
    obs = [(now, rule.name, "", float(len(conds)), rule.threshold, bool(conds), hz)]
    obs += [(now, rule.name, c.subject, c.value, rule.threshold, True, hz) for c in conds]
    con.executemany("INSERT INTO alert_observations VALUES (?, ?, ?, ?, ?, ?, ?)", obs)
    return len(new), sum(1 for s in open_ if s not in seen)


# ------------------------------------------------------------------ digests: what each recipient is owed

@dataclass
class Digest:
    """One message to one recipient: the events it carries ((alert_id, event) pairs) and the rendered message."""
    recipient: str
    events: list
    message: delivery.Message


def owed(con, rules, cfg: DeliveryConfig, now: dt.datetime | None = None) -> list[Digest]:
    """The digests owed now: per recipient, every fired or resolved event of its rules within :data:`MAX_AGE`
    not yet delivered to it and tried fewer than ``max_attempts`` times. An episode that fired and resolved
    before it could be sent is told once, as resolved."""
    now = now or utcnow()
    notify = {r.name: r.notify for r in rules}
    if not notify:
        return []
    ev = con.sql("""
        WITH ev AS (SELECT alert_id, 'fired' AS event, fired_at AS at FROM alerts
                    UNION ALL SELECT alert_id, 'resolved', resolved_at FROM alerts WHERE resolved_at IS NOT NULL),
        tried AS (SELECT alert_id, event, recipient, bool_or(ok) AS ok, count(*) AS n FROM alert_deliveries
                  GROUP BY ALL)
        SELECT a.alert_id, ev.event, a.rule, a.kind, a.subject, a.fired_at, a.resolved_at, a.summary, a.detail,
               list(t.recipient) FILTER (WHERE t.ok OR t.n >= $max) AS done
        FROM ev JOIN alerts a USING (alert_id) LEFT JOIN tried t USING (alert_id, event)
        WHERE ev.at >= $since GROUP BY ALL ORDER BY a.fired_at, a.alert_id, ev.event""",
                 params={"max": cfg.max_attempts, "since": now - MAX_AGE}).pl()
    per: dict[str, list[dict]] = {}
    for e in ev.iter_rows(named=True):
        for who in notify.get(e["rule"], ()):
            if who not in (e["done"] or []):
                per.setdefault(who, []).append(e)
    return [_digest(who, items, cfg) for who, items in per.items()]


def _item(e: dict) -> dict:
    d = json.loads(e["detail"])
    return {"alert_id": e["alert_id"], "rule": e["rule"], "kind": e["kind"], "subject": e["subject"],
            "summary": e["summary"], "lines": d["lines"], "facts": d["facts"],
            "since": f"{e['fired_at']:%Y-%m-%d %H:%M}",
            "resolved_at": f"{e['resolved_at']:%Y-%m-%d %H:%M}" if e["resolved_at"] else ""}


def _digest(who: str, items: list[dict], cfg: DeliveryConfig) -> Digest:
    resolved_ids = {e["alert_id"] for e in items if e["event"] == "resolved"}
    firing = [_item(e) for e in items if e["event"] == "fired" and e["alert_id"] not in resolved_ids]
    resolved = [_item(e) for e in items if e["event"] == "resolved"]
    ctx = {"recipient": who.removeprefix("webhook:"), "firing": firing, "resolved": resolved,
           "dashboard_url": cfg.dashboard_url}
    facts = {"firing": [{k: i[k] for k in ("rule", "kind", "subject", "summary", "facts")} for i in firing],
             "resolved": [{k: i[k] for k in ("rule", "kind", "subject", "summary", "resolved_at")} for i in resolved]}
    msg = delivery.render("digest", ctx, cfg.template_dir or None, json.loads(json.dumps(facts, default=str)))
    return Digest(who, [(e["alert_id"], e["event"]) for e in items], msg)


def send(cfg: DeliveryConfig, digests: list[Digest]) -> list[tuple[Digest, delivery.Delivery]]:
    """Send each digest (no warehouse here: the service sends with the warehouse closed)."""
    out = []
    for d in digests:
        if d.recipient.startswith("webhook:"):
            res = delivery.post_webhook(cfg.webhooks[d.recipient[8:]], d.message)
        else:
            res = delivery.send_email(cfg.smtp, [d.recipient], d.message)
        if not res.ok:
            log.error("delivery to %s failed after %d attempts: %s", d.recipient, res.attempts, res.error)
        out.append((d, res))
    return out


def record(con, results: list[tuple[Digest, delivery.Delivery]]) -> None:
    """One ``alert_deliveries`` row per event of each digest sent (or not)."""
    rows = [(aid, event, d.recipient, res.channel, dt.datetime.fromtimestamp(res.at, dt.timezone.utc).replace(tzinfo=None),
             res.ok, res.attempts, res.error or None, d.message.subject)
            for d, res in results for aid, event in d.events]
    if rows:
        con.executemany("INSERT INTO alert_deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
