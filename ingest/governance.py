"""`gpuledger ingest governance FILE.toml`: teams, cost centres, mappings, entitlements, rates and policies.

The file format is documented key by key in data/governance.example.toml. :func:`parse` validates the whole
file before anything is written; a bad file raises :class:`~ingest.errors.InputError` naming the line, the key
(``rates[1].price_per_gpu_hour``) and the problem, and the warehouse is not touched. :func:`load` then replaces
the governance state in one transaction (one ``ingest_runs`` row, source ``governance``, one "line" per record)
and re-resolves ``jobs.team`` for every job.

Money is exact: amounts are read through their decimal text into :class:`decimal.Decimal`.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import zoneinfo
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation, ROUND_HALF_EVEN, localcontext
from pathlib import Path
from typing import Any

from ingest.errors import InputError, load_toml
from ingest import encoding, inputs
from ingest.jobs_store import assign_teams
from ingest.warehouse import IngestRun, utcnow

IDLE_POLICIES = ("none", "proportional_usage", "proportional_entitlement")
BILLING_BASES = ("gpu_hours", "billing_tres")
RATE_DECIMALS = Decimal("0.000001")
HOURS_PER_YEAR = Decimal(8760)
#: Priorities of the shorthand mappings in [[teams]]; explicit [[mappings]] choose their own.
USER_PRIORITY, ACCOUNT_PRIORITY = 50, 100

TOP_KEYS = {"currency", "minor_units", "period_timezone", "clusters", "cost_centers", "teams", "mappings",
            "entitlements", "rates", "billing", "idle", "fairness", "checkpoints",
            "access", "access_policy", "budgets"}
SECTION_KEYS = {
    "clusters": {"name", "timezone", "description"},
    "cost_centers": {"id", "name", "owner"},
    "teams": {"name", "display", "cost_center", "accounts", "users", "fairshare", "parent"},
    "mappings": {"team", "account", "user", "cluster", "priority"},
    "entitlements": {"team", "gpu_type", "share", "gpus", "from", "to", "cluster"},
    "rates": {"gpu_type", "partition", "cluster", "from", "to", "price_per_gpu_hour", "tco"},
    "billing": {"basis", "tres_weights", "max_tres", "partition_weights"},
    "idle": {"policy"},
    "fairness": {"half_life_days", "windows_days", "starvation_hours", "bsld_tau_minutes", "parent_shares"},
    "access": {"user", "role", "teams"},
    "access_policy": {"contact"},
    "checkpoints": {"team", "job_name", "interval"},
    "budgets": {"team", "cost_center", "period", "amount", "gpu_hours", "from", "to"},
}
TCO_KEYS = {"capex_per_gpu", "depreciation_years", "interest_rate", "power_kw_per_gpu", "pue", "price_per_kwh",
            "facility_per_gpu_year", "staff_per_gpu_year"}


@dataclass
class Governance:
    """A validated governance file: rows for each table, ready to load."""

    settings: dict
    clusters: list[tuple] = field(default_factory=list)       # (cluster, tz, description)
    cost_centers: list[tuple] = field(default_factory=list)   # (cost_center, name, owner)
    teams: list[tuple] = field(default_factory=list)          # (team, cost_center, display)
    team_map: list[tuple] = field(default_factory=list)       # (team, account_pattern, user_pattern, cluster, prio)
    team_tree: list[tuple] = field(default_factory=list)      # (node, parent, raw_shares, is_team)
    entitlements: list[tuple] = field(default_factory=list)   # (team, cluster, gpu_type, share, gpus, from, to)
    rates: list[tuple] = field(default_factory=list)          # (cluster, gpu_type, partition, from, to, price, method, derivation)
    access: list[tuple] = field(default_factory=list)         # (user lower case, role, [teams]); see _parse_access
    access_contact: str | None = None
    checkpoints: list[tuple] = field(default_factory=list)    # (team, job_name_like, interval_s, priority)
    budgets: list[tuple] = field(default_factory=list)        # see _parse_budgets

    @property
    def records(self) -> int:
        return sum(len(x) for x in (self.clusters, self.cost_centers, self.teams, self.team_map,
                                    self.entitlements, self.rates, self.checkpoints, self.access, self.budgets))


class _Checker:
    """Raises InputError for a key path, with the line the key sits on when it can be found."""

    def __init__(self, source: str, text: str):
        # TOML counts lines at LF (tomllib's error positions too), as ingest/lines.py does
        self.source, self.lines = source, [ln.removesuffix("\r") for ln in text.split("\n")]

    def fail(self, path: tuple, problem: str):
        exc = InputError(self.source, f"key {_key_name(path)}: {problem}", line_no=self._locate(path))
        exc.field = _key_name(path)
        raise exc

    def _locate(self, path: tuple) -> int | None:
        """Best effort: the line of ``path`` (e.g. ('rates', 2, 'tco', 'pue')) in the TOML text."""
        start, scope, i = 0, [], 0
        while i < len(path):
            part = path[i]
            nxt = path[i + 1] if i + 1 < len(path) else None
            if isinstance(nxt, int):   # array of tables: the (nxt+1)-th [[scope.part]] header
                header = "[[" + ".".join(scope + [part]) + "]]"
                hits = [n for n, ln in enumerate(self.lines) if ln.strip().startswith(header)]
                if nxt >= len(hits):
                    return None
                start, scope, i = hits[nxt], scope + [part], i + 2
                continue
            header = "[" + ".".join(scope + [part]) + "]"
            hit = next((n for n in range(start, len(self.lines)) if self.lines[n].strip().startswith(header)), None)
            if hit is not None and nxt is not None:
                start, scope, i = hit, scope + [part], i + 1
                continue
            key = re.compile(r"\s*" + re.escape(str(part)) + r"\s*=")
            for n in range(start, len(self.lines)):
                if n > start and self.lines[n].lstrip().startswith("[") and n != hit:
                    if not self.lines[n].lstrip().startswith("[" + ".".join(scope + [part])):
                        break
                if key.match(self.lines[n]):
                    return n + 1
            return hit + 1 if hit is not None else (start + 1 if start or scope else None)
        return start + 1


def _key_name(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out


# ---------------------------------------------------------------- value readers

def _decimal(chk: _Checker, path: tuple, value: Any, lo: Decimal | None = None, hi: Decimal | None = None,
             lo_open: bool = False) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        chk.fail(path, f"must be a decimal number (a string like \"2.85\" keeps it exact), got {value!r}")
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        chk.fail(path, f"must be a decimal number, got {value!r}")
    if not d.is_finite():
        chk.fail(path, f"must be a finite number, got {value!r}")
    if lo is not None and (d < lo or (lo_open and d == lo)):
        chk.fail(path, f"must be {'>' if lo_open else '>='} {lo}, got {value}")
    if hi is not None and d > hi:
        chk.fail(path, f"must be <= {hi}, got {value}")
    return d


def _str(chk: _Checker, path: tuple, value: Any, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        chk.fail(path, "is required" if value is None else f"must be a non-empty string, got {value!r}")
    return value.strip()


def _time(chk: _Checker, path: tuple, value: Any, required: bool = True) -> dt.datetime | None:
    if value is None:
        if required:
            chk.fail(path, "is required (a date like 2026-01-01)")
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        try:
            return _time(chk, path, dt.datetime.fromisoformat(value))
        except ValueError:
            pass
    chk.fail(path, f"must be a date (2026-01-01) or date-time, got {value!r}")


def _zone(chk: _Checker, path: tuple, value: Any) -> str:
    name = _str(chk, path, value)
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        chk.fail(path, f"unknown time zone {name!r} (use an IANA name like Europe/Berlin)")
    return name


def _table(chk: _Checker, path: tuple, value: Any, allowed: set[str]) -> dict:
    if not isinstance(value, dict):
        chk.fail(path, f"must be a table, got {type(value).__name__}")
    for k in value:
        if k not in allowed:
            chk.fail(path + (k,), f"unknown key (allowed: {', '.join(sorted(allowed))})")
    return value


def _array(chk: _Checker, doc: dict, name: str) -> list[dict]:
    value = doc.get(name, [])
    if not isinstance(value, list):
        chk.fail((name,), f"must be an array of tables ([[{name}]])")
    return [_table(chk, (name, i), v, SECTION_KEYS[name]) for i, v in enumerate(value)]


def _glob_to_like(pattern: str) -> str:
    """Shell-style glob -> SQL LIKE with ``\\`` as escape (the form ``team_map`` stores): ``*`` -> ``%``,
    ``?`` -> ``_``; a literal ``%``, ``_`` or ``\\`` in a name (``ml_team``) matches only itself."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


# ---------------------------------------------------------------- sections

def _parse_settings(chk: _Checker, doc: dict) -> dict:
    cur = _str(chk, ("currency",), doc.get("currency"))
    if not re.fullmatch(r"[A-Z]{3}", cur):
        chk.fail(("currency",), f"must be an ISO 4217 code like EUR or USD, got {cur!r}")
    minor = doc.get("minor_units", 2)
    if isinstance(minor, bool) or not isinstance(minor, int) or not 0 <= minor <= 4:
        chk.fail(("minor_units",), f"must be an integer 0-4, got {minor!r}")
    tz = _zone(chk, ("period_timezone",), doc.get("period_timezone", "UTC"))
    billing = _table(chk, ("billing",), doc.get("billing", {}), SECTION_KEYS["billing"])
    basis = billing.get("basis", "gpu_hours")
    if basis not in BILLING_BASES:
        chk.fail(("billing", "basis"), f"must be one of {', '.join(BILLING_BASES)}, got {basis!r}")
    weights = {}
    if "tres_weights" in billing:
        weights["*"] = parse_tres_weights(chk, ("billing", "tres_weights"), billing["tres_weights"])
    pw = billing.get("partition_weights", {})
    if not isinstance(pw, dict):
        chk.fail(("billing", "partition_weights"), "must be a table of partition = \"TRES weights\"")
    for part, text in pw.items():
        weights[part] = parse_tres_weights(chk, ("billing", "partition_weights", part), text)
    max_tres = billing.get("max_tres", False)
    if not isinstance(max_tres, bool):
        chk.fail(("billing", "max_tres"), f"must be true or false, got {max_tres!r}")
    idle = _table(chk, ("idle",), doc.get("idle", {}), SECTION_KEYS["idle"])
    policy = idle.get("policy", "none")
    if policy not in IDLE_POLICIES:
        chk.fail(("idle", "policy"), f"must be one of {', '.join(IDLE_POLICIES)}, got {policy!r}")
    return {"currency": cur, "minor_units": minor, "period_timezone": tz, "billing_basis": basis,
            "tres_weights": weights or None, "max_tres": max_tres, "idle_policy": policy,
            **_parse_fairness(chk, doc)}


def _parse_fairness(chk: _Checker, doc: dict) -> dict:
    f = _table(chk, ("fairness",), doc.get("fairness", {}), SECTION_KEYS["fairness"])
    out = {}
    for key, default in (("half_life_days", 7), ("starvation_hours", 24), ("bsld_tau_minutes", 10)):
        out[key] = float(_decimal(chk, ("fairness", key), f.get(key, default), lo=Decimal(0), lo_open=True))
    windows = f.get("windows_days", [7, 30])
    if not isinstance(windows, list) or not windows or not all(
            isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in windows):
        chk.fail(("fairness", "windows_days"), f"must be a non-empty list of positive whole days, got {windows!r}")
    out["windows_days"] = sorted(set(windows))
    ps = f.get("parent_shares", {})
    if not isinstance(ps, dict):
        chk.fail(("fairness", "parent_shares"), "must be a table of parent = raw shares")
    out["parent_shares"] = {k: float(_decimal(chk, ("fairness", "parent_shares", k), v, lo=Decimal(0)))
                            for k, v in ps.items()}
    return out


def parse_tres_weights(chk: _Checker, path: tuple, text: Any) -> dict[str, float]:
    """Slurm TRESBillingWeights (``CPU=1.0,Mem=0.25G,GRES/gpu=2.0,GRES/gpu:a100=3``) -> weights per unit:
    ``cpu`` per CPU, ``mem`` per MiB (a ``G``/``T`` suffix on the weight means per GiB/TiB, as in Slurm),
    ``node`` per node, ``gpu`` per GPU of any type, ``gpu:TYPE`` per GPU of that type."""
    if not isinstance(text, str) or not text.strip():
        chk.fail(path, f"must be a TRESBillingWeights string like \"CPU=1.0,Mem=0.25G,GRES/gpu=2.0\", got {text!r}")
    out: dict[str, float] = {}
    for item in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z]+(?:/[A-Za-z0-9_.:-]+)?)\s*=\s*([0-9.]+)([KMGT]?)\s*", item)
        if not m:
            chk.fail(path, f"cannot read TRES weight {item.strip()!r} (expected NAME=NUMBER, e.g. GRES/gpu=2.0)")
        name, num, unit = m.group(1), float(m.group(2)), m.group(3)
        low = name.lower()
        if low == "mem":
            out["mem"] = num / {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}[unit]
        elif low in ("cpu", "node") and not unit:
            out[low] = num
        elif low.startswith("gres/gpu") and not unit:
            out["gpu" + name[len("gres/gpu"):]] = num
        else:
            chk.fail(path, f"unsupported TRES {name!r} (supported: CPU, Mem, Node, GRES/gpu, GRES/gpu:TYPE)")
    return out


def _parse_teams(chk: _Checker, doc: dict, gov: Governance) -> None:
    ccs = {}
    for i, c in enumerate(_array(chk, doc, "cost_centers")):
        cid = _str(chk, ("cost_centers", i, "id"), c.get("id"))
        if cid in ccs:
            chk.fail(("cost_centers", i, "id"), f"cost centre {cid!r} is declared twice")
        ccs[cid] = (cid, c.get("name"), c.get("owner"))
    gov.cost_centers = list(ccs.values())
    seen: dict[str, dict] = {}
    for i, t in enumerate(_array(chk, doc, "teams")):
        name = _str(chk, ("teams", i, "name"), t.get("name"))
        if name in seen:
            chk.fail(("teams", i, "name"), f"team {name!r} is declared twice")
        seen[name] = t
        cc = _str(chk, ("teams", i, "cost_center"), t.get("cost_center"), required=False)
        if ccs and cc is not None and cc not in ccs:
            chk.fail(("teams", i, "cost_center"), f"cost centre {cc!r} is not declared in [[cost_centers]]")
        gov.teams.append((name, cc, t.get("display") or name))
        for kind, prio in (("users", USER_PRIORITY), ("accounts", ACCOUNT_PRIORITY)):
            pats = t.get(kind, [])
            if not isinstance(pats, list) or not all(isinstance(p, str) and p for p in pats):
                chk.fail(("teams", i, kind), "must be a list of names or glob patterns")
            for p in pats:
                acc, usr = (None, p) if kind == "users" else (p, None)
                gov.team_map.append((name, acc and _glob_to_like(acc), usr and _glob_to_like(usr), None, prio))
    _parse_tree(chk, doc, gov, seen)
    for i, m in enumerate(_array(chk, doc, "mappings")):
        team = _str(chk, ("mappings", i, "team"), m.get("team"))
        if team not in seen:
            chk.fail(("mappings", i, "team"), f"team {team!r} is not declared in [[teams]]")
        acc = _str(chk, ("mappings", i, "account"), m.get("account"), required=False)
        usr = _str(chk, ("mappings", i, "user"), m.get("user"), required=False)
        if acc is None and usr is None:
            chk.fail(("mappings", i), "needs an account or a user pattern")
        prio = m.get("priority", 10)
        if isinstance(prio, bool) or not isinstance(prio, int):
            chk.fail(("mappings", i, "priority"), f"must be an integer, got {prio!r}")
        cl = _str(chk, ("mappings", i, "cluster"), m.get("cluster"), required=False)
        gov.team_map.append((team, acc and _glob_to_like(acc), usr and _glob_to_like(usr), cl, prio))


def _parse_tree(chk: _Checker, doc: dict, gov: Governance, teams: dict[str, dict]) -> None:
    parents: dict[str, str | None] = {}
    for i, (name, t) in enumerate(teams.items()):
        shares = t.get("fairshare")
        if shares is not None:
            shares = float(_decimal(chk, ("teams", i, "fairshare"), shares, lo=Decimal(0)))
        parent = _str(chk, ("teams", i, "parent"), t.get("parent"), required=False)
        if parent == name:
            chk.fail(("teams", i, "parent"), "a team cannot be its own parent")
        parents[name] = parent
        gov.team_tree.append((name, parent, shares, True))
    extra = _parse_fairness(chk, doc)["parent_shares"]
    for p in sorted({p for p in parents.values() if p is not None and p not in teams}):
        gov.team_tree.append((p, None, extra.get(p, 1.0), False))
    for i, name in enumerate(teams):   # a cycle would make the tree walk endless
        node, hops = name, 0
        while node is not None and hops <= len(parents):
            node, hops = parents.get(node), hops + 1
        if node is not None:
            chk.fail(("teams", i, "parent"), f"the parent chain of team {name!r} loops")


def _parse_entitlements(chk: _Checker, doc: dict, gov: Governance, teams: set[str]) -> None:
    spans: dict[tuple, list] = {}
    for i, e in enumerate(_array(chk, doc, "entitlements")):
        p = ("entitlements", i)
        team = _str(chk, p + ("team",), e.get("team"))
        if team not in teams:
            chk.fail(p + ("team",), f"team {team!r} is not declared in [[teams]]")
        pool = _str(chk, p + ("gpu_type",), e.get("gpu_type"))
        if ("share" in e) == ("gpus" in e):
            chk.fail(p, "needs exactly one of share (a fraction of the pool) or gpus (a quota)")
        share = _decimal(chk, p + ("share",), e["share"], lo=Decimal(0), hi=Decimal(1), lo_open=True) if "share" in e else None
        gpus = _decimal(chk, p + ("gpus",), e["gpus"], lo=Decimal(0), lo_open=True) if "gpus" in e else None
        start, end = _time(chk, p + ("from",), e.get("from")), _time(chk, p + ("to",), e.get("to"), required=False)
        if end is not None and end <= start:
            chk.fail(p + ("to",), f"must be after from ({start:%Y-%m-%d %H:%M})")
        cl = _str(chk, p + ("cluster",), e.get("cluster"), required=False)
        for (s0, e0, j) in spans.setdefault((team, pool, cl), []):
            if start < (e0 or dt.datetime.max) and s0 < (end or dt.datetime.max):
                chk.fail(p + ("from",), f"overlaps entitlements[{j}] of team {team!r} in pool {pool!r}")
        spans[(team, pool, cl)].append((start, end, i))
        gov.entitlements.append((team, cl, pool, share, gpus, start, end))


def tco_rate(chk: _Checker, path: tuple, tco: dict) -> tuple[Decimal, str]:
    """Price per GPU-hour from TCO inputs, rounded half-even to 6 decimals, with the derivation in words."""
    _table(chk, path, tco, TCO_KEYS)
    def num(k, default=None, **kw):
        if k not in tco and default is None:
            chk.fail(path + (k,), "is required for a TCO-derived rate")
        return _decimal(chk, path + (k,), tco.get(k, default), **kw)
    capex = num("capex_per_gpu", lo=Decimal(0))
    years = num("depreciation_years", lo=Decimal(0), lo_open=True)
    i = num("interest_rate", "0", lo=Decimal(0))
    kw_, pue, kwh = num("power_kw_per_gpu", lo=Decimal(0)), num("pue", lo=Decimal(1)), num("price_per_kwh", lo=Decimal(0))
    fac, staff = num("facility_per_gpu_year", "0", lo=Decimal(0)), num("staff_per_gpu_year", "0", lo=Decimal(0))
    with localcontext() as ctx:
        ctx.prec = 40
        crf = 1 / years if i == 0 else i * (1 + i) ** years / ((1 + i) ** years - 1)
        cap = capex * crf / HOURS_PER_YEAR
        energy = kw_ * pue * kwh
        over = (fac + staff) / HOURS_PER_YEAR
        rate = (cap + energy + over).quantize(RATE_DECIMALS, ROUND_HALF_EVEN)
    q = lambda d: d.quantize(RATE_DECIMALS, ROUND_HALF_EVEN)
    crf_txt = f"1/{years}" if i == 0 else f"CRF(i={i}, L={years}) = {q(crf)}"
    text = (f"capital {capex} x {crf_txt} / 8760 h = {q(cap)}; "
            f"energy {kw_} kW x PUE {pue} x {kwh}/kWh = {q(energy)}; "
            f"facility+staff ({fac} + {staff}) / 8760 h = {q(over)}; "
            f"rate = {rate} per GPU-hour (rounded half-even to 6 decimals)")
    return rate, text


def _parse_rates(chk: _Checker, doc: dict, gov: Governance) -> None:
    entries: dict[tuple, list] = {}
    for i, r in enumerate(_array(chk, doc, "rates")):
        p = ("rates", i)
        pool = _str(chk, p + ("gpu_type",), r.get("gpu_type"))
        part = _str(chk, p + ("partition",), r.get("partition"), required=False)
        cl = _str(chk, p + ("cluster",), r.get("cluster"), required=False)
        start, end = _time(chk, p + ("from",), r.get("from")), _time(chk, p + ("to",), r.get("to"), required=False)
        if end is not None and end <= start:
            chk.fail(p + ("to",), f"must be after from ({start:%Y-%m-%d %H:%M})")
        if ("price_per_gpu_hour" in r) == ("tco" in r):
            chk.fail(p, "needs exactly one of price_per_gpu_hour or a [rates.tco] table")
        if "tco" in r:
            price, derivation = tco_rate(chk, p + ("tco",), r["tco"])
            method = "tco"
        else:
            price = _decimal(chk, p + ("price_per_gpu_hour",), r["price_per_gpu_hour"], lo=Decimal(0))
            if price != price.quantize(RATE_DECIMALS):
                chk.fail(p + ("price_per_gpu_hour",), f"has more than 6 decimals: {r['price_per_gpu_hour']}")
            method, derivation = "price", None
        entries.setdefault((cl, pool, part), []).append([start, end, price, method, derivation, i])
    for (cl, pool, part), items in sorted(entries.items(), key=lambda kv: str(kv[0])):
        items.sort(key=lambda x: x[0])
        for a, b in zip(items, items[1:]):
            if a[0] == b[0]:
                chk.fail(("rates", b[5], "from"), f"rates[{a[5]}] for the same pool and partition starts on the same date")
            if a[1] is not None and a[1] > b[0]:
                chk.fail(("rates", a[5], "to"), f"overlaps rates[{b[5]}], which starts {b[0]:%Y-%m-%d}")
            if a[1] is None:
                a[1] = b[0]
        for start, end, price, method, derivation, _ in items:
            gov.rates.append((cl, pool, part, start, end, price, method, derivation))


def _parse_clusters(chk: _Checker, doc: dict, gov: Governance) -> None:
    seen = set()
    for i, c in enumerate(_array(chk, doc, "clusters")):
        name = _str(chk, ("clusters", i, "name"), c.get("name"))
        if name in seen:
            chk.fail(("clusters", i, "name"), f"cluster {name!r} is declared twice")
        seen.add(name)
        gov.clusters.append((name, _zone(chk, ("clusters", i, "timezone"), c.get("timezone", "UTC")),
                             c.get("description")))


def parse(text: str, source: str = "<governance>") -> Governance:
    """Validate a governance TOML document; raises InputError (one line: where, key, problem)."""
    chk = _Checker(source, text)
    doc = load_toml(text, source)
    for k in doc:
        if k not in TOP_KEYS:
            chk.fail((k,), f"unknown key (allowed: {', '.join(sorted(TOP_KEYS))})")
    gov = Governance(settings=_parse_settings(chk, doc))
    _parse_clusters(chk, doc, gov)
    _parse_teams(chk, doc, gov)
    if not gov.teams:
        chk.fail(("teams",), "at least one [[teams]] entry is required")
    _parse_entitlements(chk, doc, gov, {t[0] for t in gov.teams})
    _parse_rates(chk, doc, gov)
    _parse_access(chk, doc, gov, {t[0] for t in gov.teams})
    _parse_checkpoints(chk, doc, gov, {t[0] for t in gov.teams})
    _parse_budgets(chk, doc, gov)
    gov.settings["document"] = _canonical(gov)
    return gov


# ---------------------------------------------------------------- access (who sees what on the dashboard)
# Kept apart from the policy: access entries are not part of the canonical document a statement freezes, so
# granting someone a role never makes a stored statement stale. dashboards/access.py says what each role sees.

ACCESS_ROLES = ("admin", "manager", "finance", "team_lead", "member")
TEAM_ROLES = ("team_lead", "member")


def _parse_access(chk: _Checker, doc: dict, gov: Governance, teams: set[str]) -> None:
    """``[[access]] user = "ana@example.org" role = "team_lead" teams = ["nlp"]``, and ``[access_policy]
    contact = "..."`` (whom an unknown user is told to ask)."""
    policy = _table(chk, ("access_policy",), doc.get("access_policy", {}), SECTION_KEYS["access_policy"])
    gov.access_contact = _str(chk, ("access_policy", "contact"), policy.get("contact"), required=False)
    seen: set[str] = set()
    for i, a in enumerate(_array(chk, doc, "access")):
        user = _str(chk, ("access", i, "user"), a.get("user")).lower()
        if user in seen:
            chk.fail(("access", i, "user"), f"user {user!r} is given a role twice")
        seen.add(user)
        role = _str(chk, ("access", i, "role"), a.get("role"))
        if role not in ACCESS_ROLES:
            chk.fail(("access", i, "role"), f"unknown role {role!r} (one of: {', '.join(ACCESS_ROLES)})")
        names = a.get("teams")
        if role in TEAM_ROLES:
            if not isinstance(names, list) or not names or not all(isinstance(t, str) and t for t in names):
                chk.fail(("access", i, "teams"), f"a {role} needs a list of teams, e.g. teams = [\"nlp\"]")
            for t in names:
                if t not in teams:
                    chk.fail(("access", i, "teams"), f"team {t!r} is not declared in [[teams]]")
        elif names is not None:
            chk.fail(("access", i, "teams"), f"the {role} role sees every team; teams applies to team_lead and member only")
        gov.access.append((user, role, sorted(set(names or []))))


def _load_access(con, gov: Governance) -> None:
    con.execute("DELETE FROM access_roles")
    con.execute("DELETE FROM access_settings")
    _insert(con, "access_roles", gov.access)
    if gov.access_contact:
        con.execute("INSERT INTO access_settings VALUES (?)", [gov.access_contact])


def _canonical(gov: Governance) -> str:
    """The validated content as canonical JSON: stored with every statement so a close records its rules."""
    body = {k: v for k, v in gov.settings.items() if k != "document"}
    for name in ("clusters", "cost_centers", "teams", "team_map", "team_tree", "entitlements", "rates"):
        body[name] = getattr(gov, name)
    return json.dumps(body, sort_keys=True, default=str, separators=(",", ":"))


# ---------------------------------------------------------------- loading

def load(con, gov: Governance, source: str, sha256: str, nbytes: int) -> dict:
    """Replace the governance state with ``gov`` in one transaction and re-resolve every job's team."""
    with IngestRun(con, "governance", source, sha256=sha256, nbytes=nbytes) as run:
        run.lines_read = run.loaded = gov.records
        for table in ("governance", "cost_centers", "team_tree", "entitlements", "rates", "team_map", "teams"):
            con.execute(f"DELETE FROM {table}")
        _insert(con, "cost_centers", gov.cost_centers)
        _insert(con, "teams", gov.teams)
        _insert(con, "team_map", gov.team_map)
        _insert(con, "team_tree", gov.team_tree)
        _insert(con, "entitlements", gov.entitlements)
        _insert(con, "rates", gov.rates)
        for name, tz, desc in gov.clusters:
            con.execute("""INSERT INTO clusters VALUES (?, ?, ?) ON CONFLICT (cluster)
                           DO UPDATE SET tz = excluded.tz, description = coalesce(excluded.description, clusters.description)""",
                        [name, tz, desc])
        s = gov.settings
        con.execute("INSERT INTO governance VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [utcnow(), source, sha256, run.run_id, s["currency"], s["minor_units"], s["period_timezone"],
                     s["billing_basis"], json.dumps(s["tres_weights"], sort_keys=True) if s["tres_weights"] else None,
                     s["max_tres"], s["idle_policy"], s["half_life_days"], s["windows_days"], s["starvation_hours"],
                     s["bsld_tau_minutes"], s["document"]])
        _load_access(con, gov)
        _load_checkpoints(con, gov)
        _load_budgets(con, gov)
        run.updated = assign_teams(con)
        run.inserted = gov.records
        run.options.update({"teams": len(gov.teams), "rates": len(gov.rates),
                            "entitlements": len(gov.entitlements), "idle_policy": s["idle_policy"],
                            "billing_basis": s["billing_basis"], "currency": s["currency"]})
    return run.summary()


# ---------------------------------------------------------------- checkpoint intervals (losses, issue 16)
# [[checkpoints]] team = "nlp" | job_name = "llm-*", interval = "30m": how often such jobs write a checkpoint, so
# a failure loses the work since the last one (models/marts/losses.py). Kept apart from the billing sections.

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
CHECKPOINT_TEAM_PRIORITY, CHECKPOINT_NAME_PRIORITY = 50, 100


def _interval_s(chk: _Checker, path: tuple, value: Any) -> int:
    """A checkpoint interval: whole seconds (an integer) or a text like '90s', '30m', '2h', '1d'; at least 60 s."""
    m = _DURATION.match(value) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        secs = float(value)
    elif m:
        secs = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    else:
        chk.fail(path, f"must be seconds or a duration like '30m', '2h', got {value!r}")
    if secs < 60 or secs != int(secs):
        chk.fail(path, f"must be whole seconds of at least 60 (one minute), got {value!r}")
    return int(secs)


def _parse_checkpoints(chk: _Checker, doc: dict, gov: Governance, teams: set[str]) -> None:
    for i, c in enumerate(_array(chk, doc, "checkpoints")):
        team = _str(chk, ("checkpoints", i, "team"), c.get("team"), required=False)
        name = _str(chk, ("checkpoints", i, "job_name"), c.get("job_name"), required=False)
        if team is None and name is None:
            chk.fail(("checkpoints", i), "needs a team or a job_name (glob) it applies to")
        if team is not None and team not in teams:
            chk.fail(("checkpoints", i, "team"), f"unknown team {team!r} (declare it in [[teams]])")
        interval = _interval_s(chk, ("checkpoints", i, "interval"), c.get("interval"))
        gov.checkpoints.append((team, None if name is None else _glob_to_like(name), interval,
                                CHECKPOINT_NAME_PRIORITY if name is not None else CHECKPOINT_TEAM_PRIORITY))


def _load_checkpoints(con, gov: Governance) -> None:
    con.execute("DELETE FROM checkpoint_intervals")
    _insert(con, "checkpoint_intervals", gov.checkpoints)


# ---------------------------------------------------------------- budgets (issue 19)
# [[budgets]] team = "nlp" | cost_center = "CC-1", period = "month" | "quarter", amount = "12000.00" (money, in the
# file's currency) | gpu_hours = 5000, optional from/to (the periods starting in [from, to)). Kept out of the
# canonical document, like access: setting a budget never makes a stored statement stale.

BUDGET_PERIODS = ("month", "quarter")


def _budget_month(chk: _Checker, path: tuple, value: Any) -> dt.datetime | None:
    """A budget's from/to: the first day of a month (a date, or text 2026-01 / 2026-01-01)."""
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}", value.strip()):
        value = value.strip() + "-01"
    t = _time(chk, path, value, required=False)
    if t is not None and (t.day != 1 or t.time() != dt.time()):
        chk.fail(path, f"must be the first day of a month (budgets apply to whole periods), got {value!r}")
    return t


def _parse_budgets(chk: _Checker, doc: dict, gov: Governance) -> None:
    teams, ccs = {t[0] for t in gov.teams}, {c[0] for c in gov.cost_centers} | {t[1] for t in gov.teams if t[1]}
    seen: dict[tuple, list] = {}
    for i, b in enumerate(_array(chk, doc, "budgets")):
        p = ("budgets", i)
        if ("team" in b) == ("cost_center" in b):
            chk.fail(p, "needs exactly one of team or cost_center")
        scope = "team" if "team" in b else "cost_center"
        name = _str(chk, p + (scope,), b[scope])
        if name not in (teams if scope == "team" else ccs):
            where = "[[teams]]" if scope == "team" else "[[cost_centers]] or a team's cost_center"
            chk.fail(p + (scope,), f"{scope.replace('_', ' ')} {name!r} is not declared in {where}")
        period = b.get("period", "month")
        if period not in BUDGET_PERIODS:
            chk.fail(p + ("period",), f"must be one of {', '.join(BUDGET_PERIODS)}, got {period!r}")
        if ("amount" in b) == ("gpu_hours" in b):
            chk.fail(p, "needs exactly one of amount (money, in the file's currency) or gpu_hours")
        unit = "money" if "amount" in b else "gpu_hours"
        value = _decimal(chk, p + (unit if unit == "gpu_hours" else "amount",), b.get("amount", b.get("gpu_hours")),
                         lo=Decimal(0), lo_open=True)
        start, end = _budget_month(chk, p + ("from",), b.get("from")), _budget_month(chk, p + ("to",), b.get("to"))
        if start and end and end <= start:
            chk.fail(p + ("to",), f"must be after from ({start:%Y-%m})")
        for s0, e0, j in seen.setdefault((scope, name, period, unit), []):
            if (start or dt.datetime.min) < (e0 or dt.datetime.max) and (s0 or dt.datetime.min) < (end or dt.datetime.max):
                chk.fail(p, f"overlaps budgets[{j}] ({scope.replace('_', ' ')} {name!r}, per {period}, {unit})")
        seen[(scope, name, period, unit)].append((start, end, i))
        gov.budgets.append((i, scope, name, period, unit, value, start, end))


def _load_budgets(con, gov: Governance) -> None:
    con.execute("DELETE FROM budgets")
    _insert(con, "budgets", gov.budgets)


def _insert(con, table: str, rows: list[tuple]) -> None:
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", [list(r) for r in rows])


def read(path: str | Path) -> tuple[str, bytes]:
    """(text, bytes as stored) of a governance file: read as every input is (ingest/inputs.py: compressed, UTF-16
    as Windows editors save "Unicode", a byte-order mark), so checking a file and loading it read the same text.
    The stored bytes are what is hashed: the service reloads the file when they change."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(str(p), f"cannot read: {exc.strerror or exc}") from None
    return encoding.text(inputs.decoded(data, str(p)), str(p)), data


def ingest_path(con, path: str | Path) -> dict:
    """Parse and load one governance file; raises InputError (and writes nothing) for a bad file."""
    text, data = read(path)
    gov = parse(text, str(path))
    return load(con, gov, str(path), hashlib.sha256(data).hexdigest(), len(data))
