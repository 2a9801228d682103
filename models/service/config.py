"""The service's configuration (``gpuledger serve --config gpuledger.toml``; data/gpuledger.example.toml documents
every key). Errors are one line naming the file, the line (where it can be found) and the key.

Tables this module owns: ``[service]``, ``[health]``, ``[dashboard]``, ``[[clusters]]`` (with one sub-table per
source kind of :data:`models.service.sources.KINDS`) and the global kinds' tables (``[governance]``). Other
top-level tables (``[access]``, read by the dashboard) pass through untouched in :attr:`ServiceConfig.extra`.
Relative paths are relative to the config file's directory. Durations are seconds or ``90s``, ``5m``, ``2h``, ``1d``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest import encoding, warehouse
from ingest.errors import InputError, load_toml
from models.definitions.times import parse_duration
from models.service.delivery import SHAPES, SmtpSettings, Webhook
from models.service.sources import GLOBAL, KINDS, Key, Where

#: keys every source table accepts besides its kind's own
COMMON = {"enabled": Key("bool", True, "collect this source"),
          "interval": Key("duration", None, "seconds between collections (default per kind)")}
SECTIONS: dict[str, dict[str, Key]] = {
    "service": {"warehouse": Key("path", "", "the warehouse file (default $GPULEDGER_DB, else data/warehouse.duckdb)"),
                "cycle": Key("duration", 60, "how often the loop looks for due sources"),
                "backoff_initial": Key("duration", 30, "wait after a source's first failure; doubles per failure"),
                "backoff_max": Key("duration", 900, "the longest wait between retries of a failing source"),
                "lock_timeout": Key("duration", 60, "how long a cycle waits for a warehouse another process holds"),
                # the lake (models/pipeline/lake.py): exported after each refresh
                "lake": Key("path", "", "directory of the open Parquet lake written after refreshes (empty: none)"),
                "lake_interval": Key("duration", 3600, "the least time between two lake exports")},
    "health": {"listen": Key("str", "127.0.0.1:9464", "HOST:PORT of /healthz and /metrics; empty: off"),
               "max_cycle_age": Key("duration", 0, "/healthz fails when no cycle ended for this long "
                                                   "(0: 3 cycles + 60 s)")},
    "dashboard": {"enabled": Key("bool", True, "start the dashboard child (also --no-dashboard)"),
                  "host": Key("str", "127.0.0.1", "bind address"),
                  "port": Key("port", 8501, "TCP port")},
}
CLUSTER_KEYS = {"name": Key("str", None, "the cluster's name in Slurm and in the warehouse"),
                "slurm_conf": Key("path", "", "SLURM_CONF for this cluster's commands (default: the host's)")}


@dataclass(frozen=True)
class SourceConfig:
    kind: str
    where: Where
    interval_s: int
    opts: dict

    @property
    def key(self) -> tuple[str, str]:
        """(cluster, source): the row of ``source_status``."""
        return self.where.cluster, self.kind


@dataclass(frozen=True)
class ServiceConfig:
    path: Path
    warehouse: Path
    cycle_s: int
    backoff_initial_s: int
    backoff_max_s: int
    lock_timeout_s: int
    sources: tuple[SourceConfig, ...]
    clusters: tuple[str, ...]
    health_listen: tuple[str, int] | None
    max_cycle_age_s: int
    dashboard: bool
    dashboard_host: str
    dashboard_port: int
    extra: dict = field(default_factory=dict)
    alerts: tuple = ()                     # AlertRule, from [[alerts]] (issue 19)
    delivery: "DeliveryConfig | None" = None
    lake: Path | None = None          # `gpuledger export lake` after refreshes (None: no lake) ...
    lake_interval_s: int = 3600       # ... at most this often


class _Where:
    """Finds the line of a key path such as ('clusters', 1, 'prometheus', 'step') in the TOML text."""

    def __init__(self, source: str, text: str):
        self.source, self.lines = source, text.split("\n")

    def fail(self, path: tuple, problem: str):
        name = "".join(f"[{p}]" if isinstance(p, int) else ("." if i else "") + str(p) for i, p in enumerate(path))
        raise InputError(self.source, f"key {name}: {problem}", line_no=self.line(path))

    def _header(self, pattern: str, start: int, stop: int, nth: int = 0) -> int | None:
        hits = [n for n in range(start, stop) if re.match(pattern, self.lines[n].strip())]
        return hits[nth] if nth < len(hits) else None

    def line(self, path: tuple) -> int | None:
        lo, hi, scope = 0, len(self.lines), []
        i = 0
        while i < len(path):
            part, nxt = path[i], path[i + 1] if i + 1 < len(path) else None
            name = re.escape(".".join(scope + [str(part)]))
            if isinstance(nxt, int):                      # the nxt-th [[part]]
                at = self._header(rf"\[\[\s*{name}\s*\]\]", lo, hi, nxt)
                if at is None:
                    return None
                end = self._header(rf"\[\[\s*{name}\s*\]\]", at + 1, hi)
                lo, hi, scope, i = at, end if end is not None else hi, scope + [str(part)], i + 2
                continue
            at = self._header(rf"\[\s*{name}\s*\]", lo, hi)
            if at is not None and nxt is not None:
                lo, scope, i = at, scope + [str(part)], i + 1
                continue
            for n in range(lo + (1 if scope else 0), hi):
                if n > lo and self.lines[n].lstrip().startswith("[") and scope:
                    break
                if re.match(rf"\s*{re.escape(str(part))}\s*=", self.lines[n]):
                    return n + 1
            return at + 1 if at is not None else lo + 1
        return lo + 1


def _value(chk: _Where, path: tuple, key: Key, value: Any, base: Path) -> Any:
    """``value`` checked against ``key``'s type (None: the default; a required key without one fails)."""
    if value is None:
        if key.default is None and key.type != "duration":
            chk.fail(path, "is required")
        return key.default
    t = key.type
    if t == "duration":
        if isinstance(value, bool):
            chk.fail(path, f"must be a duration (seconds, or e.g. 90s, 5m, 2h), got {value!r}")
        try:
            return parse_duration(value)
        except ValueError as exc:
            chk.fail(path, str(exc))
    if t == "bool" and not isinstance(value, bool):
        chk.fail(path, f"must be true or false, got {value!r}")
    if t == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        chk.fail(path, f"must be a whole number >= 0, got {value!r}")
    if t == "port" and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536):
        chk.fail(path, f"must be a TCP port 1-65535, got {value!r}")
    if t in ("str", "path") and not isinstance(value, str):
        chk.fail(path, f"must be a string, got {value!r}")
    if key.choices and value not in key.choices:
        chk.fail(path, f"must be one of {', '.join(key.choices)}, got {value!r}")
    if t == "strings" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        chk.fail(path, f"must be a list of strings, got {value!r}")
    if t == "path":
        return str(base / value) if value else ""
    return value


def _table(chk: _Where, path: tuple, doc: Any, keys: dict[str, Key], base: Path) -> dict:
    """A table's keys checked and defaulted; unknown keys fail (a typo must not pass as a default)."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        chk.fail(path, "must be a table")
    for k in doc:
        if k not in keys:
            chk.fail(path + (k,), f"unknown key (allowed: {', '.join(sorted(keys))})")
    return {k: _value(chk, path + (k,), spec, doc.get(k), base) for k, spec in keys.items()}


def _source(chk: _Where, path: tuple, kind: str, doc: Any, where: Where, base: Path) -> SourceConfig | None:
    spec = KINDS[kind]
    opts = _table(chk, path, doc, {**COMMON, **spec.keys}, base)
    if not opts.pop("enabled"):
        return None
    interval = opts.pop("interval") or parse_duration(spec.interval)
    return SourceConfig(kind, where, interval, opts)


def _clusters(chk: _Where, doc: Any, base: Path) -> list[SourceConfig]:
    if doc is None:
        return []
    if not isinstance(doc, list):
        chk.fail(("clusters",), "must be an array of tables: [[clusters]]")
    out, names = [], set()
    kinds = {k for k, s in KINDS.items() if s.scope == "cluster"}
    for i, c in enumerate(doc):
        if not isinstance(c, dict):
            chk.fail(("clusters", i), "must be a table")
        for k in c:
            if k not in CLUSTER_KEYS and k not in kinds:
                chk.fail(("clusters", i, k), f"unknown key (allowed: {', '.join(sorted({*CLUSTER_KEYS, *kinds}))})")
        own = _table(chk, ("clusters", i), {k: v for k, v in c.items() if k in CLUSTER_KEYS}, CLUSTER_KEYS, base)
        if own["name"] in names:
            chk.fail(("clusters", i, "name"), f"cluster {own['name']!r} is configured twice")
        names.add(own["name"])
        where = Where(own["name"], (("SLURM_CONF", own["slurm_conf"]),) if own["slurm_conf"] else ())
        for kind in (k for k in KINDS if k in kinds and k in c):     # in KINDS' order: accounting first
            src = _source(chk, ("clusters", i, kind), kind, c[kind], where, base)
            if src:
                out.append(src)
    return out


def parse(text: str, source: str) -> ServiceConfig:
    """Validate a service config; raises InputError (one line: file:line: key ...: problem)."""
    chk = _Where(source, text)
    doc = load_toml(text, source)
    base = Path(source).resolve().parent
    sec = {name: _table(chk, (name,), doc.get(name), keys, base) for name, keys in SECTIONS.items()}
    sources = []
    for kind, spec in KINDS.items():      # governance first: the cycle's jobs map to the teams in force
        if spec.scope == "global" and kind in doc:
            src = _source(chk, (kind,), kind, doc[kind], Where(GLOBAL), base)
            sources += [src] if src else []
    sources += _clusters(chk, doc.get("clusters"), base)
    if not sources:
        chk.fail(("clusters",), "nothing to collect: add a [[clusters]] entry with a source table "
                                "(e.g. [clusters.sacct]) or a [governance] table")
    svc, health, dash = sec["service"], sec["health"], sec["dashboard"]
    listen = _listen(chk, health["listen"])
    known = {*SECTIONS, "clusters", *(k for k, s in KINDS.items() if s.scope == "global"), *ALERT_TABLES}
    delivery, rules = _alerting(chk, doc, base)
    return ServiceConfig(
        path=Path(source), warehouse=Path(svc["warehouse"]) if svc["warehouse"] else warehouse.resolve_path(None),
        cycle_s=svc["cycle"], backoff_initial_s=svc["backoff_initial"], backoff_max_s=svc["backoff_max"],
        lock_timeout_s=svc["lock_timeout"], sources=tuple(sources),
        clusters=tuple(dict.fromkeys(s.where.cluster for s in sources if s.where.cluster != GLOBAL)),
        health_listen=listen, max_cycle_age_s=health["max_cycle_age"] or 3 * svc["cycle"] + 60,
        dashboard=dash["enabled"], dashboard_host=dash["host"], dashboard_port=dash["port"],
        extra={k: v for k, v in doc.items() if k not in known}, alerts=rules, delivery=delivery,
        lake=Path(svc["lake"]) if svc["lake"] else None, lake_interval_s=svc["lake_interval"])


def parse_listen(text: str, what: str = "listen") -> tuple[str, int] | None:
    """'HOST:PORT' -> (host, port); '' -> None (off); a ValueError naming ``what`` otherwise."""
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{what}: expected HOST:PORT (e.g. 127.0.0.1:9464), got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _listen(chk: _Where, text: str) -> tuple[str, int] | None:
    try:
        return parse_listen(text)
    except ValueError as exc:
        chk.fail(("health", "listen"), str(exc).removeprefix("listen: "))


def load(path: str | Path) -> ServiceConfig:
    """Read (UTF-8, or UTF-16 with its mark: ingest/encoding.py) and validate the config file at ``path``."""
    return parse(encoding.read_text(path), str(Path(path)))


# ---------------------------------------------------------------- alerts and delivery (issue 19)
# [delivery] (SMTP, templates), [[webhooks]] (name, url, shape) and [[alerts]] (rules the service evaluates after
# each refresh: models/service/alerts.py). Credentials only from the environment (models/service/delivery.py).

ALERT_TABLES = ("delivery", "webhooks", "alerts")
ALERT_KINDS = ("budget", "idle_gpu_hours", "zero_util_job", "exhaustion", "stale_source", "blocked_wait")
#: per kind: what threshold means, and the window's default (None: the kind takes no window)
KIND_HELP = {"budget": ("forecast % of budget", None), "idle_gpu_hours": ("idle-allocated GPU-hours", "7d"),
             "zero_util_job": ("hours at 0 %", "1d"), "exhaustion": ("days until exhaustion", None),
             "stale_source": ("minutes since the last success", None), "blocked_wait": ("% of waiting GPU-hours", "7d")}
DELIVERY_KEYS = {
    "smtp_host": Key("str", "", "SMTP server; empty: no email (webhooks only)"),
    "smtp_port": Key("port", 587, "SMTP port"),
    "smtp_security": Key("str", "starttls", "starttls, tls (implicit, port 465) or none (a trusted local relay)"),
    "sender": Key("str", "gpuledger@localhost", "From: address"),
    "ca_file": Key("path", "", "CA bundle that signs the server's certificate (default: the system's)"),
    "timeout": Key("duration", 30, "per connection attempt"),
    "retries": Key("int", 3, "retries of a failed delivery within one evaluation (backoff doubles)"),
    "backoff": Key("duration", 5, "wait before the first retry"),
    "max_attempts": Key("int", 5, "evaluations that try an undelivered message before giving up"),
    "template_dir": Key("path", "", "site templates (digest.subject.j2, digest.txt.j2, digest.html.j2) first"),
    "dashboard_url": Key("str", "", "link in every message"),
}
WEBHOOK_KEYS = {"name": Key("str", None, "referred to as webhook:NAME in notify"),
                "url": Key("str", None, "the incoming-webhook URL"),
                "shape": Key("str", "json", "json, slack or teams"),
                "timeout": Key("duration", 15, "per request")}
#: the keys of an [[alerts]] rule besides ``threshold`` (a number >= 0 whose unit is the kind's: KIND_HELP)
ALERT_KEYS = {"name": Key("str", None, "unique rule name"),
              "kind": Key("str", None, ", ".join(ALERT_KINDS)),
              "window": Key("duration", None, "trailing window ending at the data horizon"),
              "teams": Key("strings", [], "only these teams (budget, idle_gpu_hours, zero_util_job)"),
              "notify": Key("strings", None, "email addresses and webhook:NAME"),
              "enabled": Key("bool", True, "evaluate this rule")}


@dataclass(frozen=True)
class AlertRule:
    name: str
    kind: str
    threshold: float
    window_s: int | None
    teams: tuple
    notify: tuple


@dataclass(frozen=True)
class DeliveryConfig:
    smtp: Any                          # delivery.SmtpSettings, or None without smtp_host
    webhooks: dict                     # name -> delivery.Webhook
    max_attempts: int
    template_dir: str
    dashboard_url: str


def _number(chk: _Where, path: tuple, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        chk.fail(path, f"must be a number >= 0, got {value!r}")
    return float(value)


def _alerting(chk: _Where, doc: dict, base: Path) -> tuple[DeliveryConfig | None, tuple]:
    """[delivery], [[webhooks]] and [[alerts]] checked: (None, ()) when none is configured."""
    if not any(t in doc for t in ALERT_TABLES):
        return None, ()
    d = _table(chk, ("delivery",), doc.get("delivery"), DELIVERY_KEYS, base)
    if d["smtp_security"] not in ("starttls", "tls", "none"):
        chk.fail(("delivery", "smtp_security"), f"must be starttls, tls or none, got {d['smtp_security']!r}")
    smtp = SmtpSettings(d["smtp_host"], d["smtp_port"], d["smtp_security"], d["sender"], d["ca_file"],
                        d["timeout"], d["retries"], d["backoff"]) if d["smtp_host"] else None
    hooks = {}
    for i, w in enumerate(_array_of(chk, doc, "webhooks")):
        h = _table(chk, ("webhooks", i), w, WEBHOOK_KEYS, base)
        if h["shape"] not in SHAPES:
            chk.fail(("webhooks", i, "shape"), f"must be one of {', '.join(SHAPES)}, got {h['shape']!r}")
        if not re.match(r"https?://", h["url"]):
            chk.fail(("webhooks", i, "url"), f"must be an http:// or https:// URL, got {h['url']!r}")
        if h["name"] in hooks:
            chk.fail(("webhooks", i, "name"), f"webhook {h['name']!r} is configured twice")
        hooks[h["name"]] = Webhook(h["name"], h["url"], h["shape"], h["timeout"], d["retries"], d["backoff"])
    rules = tuple(r for i, a in enumerate(_array_of(chk, doc, "alerts"))
                  if (r := _rule(chk, i, a, base, smtp is not None, hooks)) is not None)
    names = [r.name for r in rules]
    for i, n in enumerate(names):
        if n in names[:i]:
            chk.fail(("alerts", i, "name"), f"rule {n!r} is configured twice")
    return DeliveryConfig(smtp, hooks, d["max_attempts"], d["template_dir"], d["dashboard_url"]), rules


def _array_of(chk: _Where, doc: dict, name: str) -> list:
    value = doc.get(name, [])
    if not isinstance(value, list):
        chk.fail((name,), f"must be an array of tables: [[{name}]]")
    return value


def _rule(chk: _Where, i: int, a: Any, base: Path, has_smtp: bool, hooks: dict) -> AlertRule | None:
    p = ("alerts", i)
    r = _table(chk, p, {k: v for k, v in a.items() if k != "threshold"} if isinstance(a, dict) else a,
               ALERT_KEYS, base)
    if r["kind"] not in ALERT_KINDS:
        chk.fail(p + ("kind",), f"must be one of {', '.join(ALERT_KINDS)}, got {r['kind']!r}")
    if "threshold" not in a:
        chk.fail(p + ("threshold",), f"is required ({KIND_HELP[r['kind']][0]})")
    threshold = _number(chk, p + ("threshold",), a["threshold"])
    default_window = KIND_HELP[r["kind"]][1]
    if r["window"] is not None and default_window is None:
        chk.fail(p + ("window",), f"a {r['kind']} rule takes no window")
    window = r["window"] or (parse_duration(default_window) if default_window else None)
    if not r["notify"]:
        chk.fail(p + ("notify",), "must name at least one email address or webhook:NAME")
    for n in r["notify"]:
        if n.startswith("webhook:") and n[8:] not in hooks:
            chk.fail(p + ("notify",), f"{n!r}: no [[webhooks]] entry named {n[8:]!r}")
        if not n.startswith("webhook:") and not re.fullmatch(r"[^@\s]+@[^@\s]+", n):
            chk.fail(p + ("notify",), f"{n!r} is neither an email address nor webhook:NAME")
        if not n.startswith("webhook:") and not has_smtp:
            chk.fail(p + ("notify",), f"{n!r}: email needs [delivery] smtp_host")
    if not r["enabled"]:
        return None
    return AlertRule(r["name"], r["kind"], threshold, window, tuple(r["teams"]), tuple(r["notify"]))
