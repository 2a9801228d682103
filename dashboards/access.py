"""Who is looking, and what they may see: identity from a trusted reverse proxy, roles from the governance file,
and the scoping of every data read.

Identity. The service configuration's ``[access]`` table (``gpuledger dashboard --config F``; ``$GPULEDGER_CONFIG``
for the app) names the header a trusted reverse proxy sets (oauth2-proxy's ``X-Auth-Request-Email`` by default)
and the proxy's addresses. The header is believed only on a connection whose peer is one of those addresses; any
other connection is refused. Without an ``[access]`` table the dashboard binds loopback only and serves the local
operator with full rights.

Roles come from the governance file's ``[[access]]`` entries (ingest/governance.py, table ``access_roles``):
admin and manager see everything; finance sees everything but Data health and may close a period; a team lead
and a member see their teams' rows, every other team merged into one "other teams" group with its users, job
names and job ids removed. A member differs from a team lead only in that no action is ever open to them.

Scoping is one mechanism, in the reads: :func:`views` gives the views of one scope, created once per snapshot in a
schema of the reader connection's in-memory catalog; a scoped cursor puts that schema first on its search path
(:func:`search_path`), so they shadow the snapshot's tables and every model, page and download reading through
the cursor sees the scoped rows. Other teams are merged, not dropped, so every total
(capacity, allocation, idle share, cluster cost) stays the cluster's own. The scope travels in the version key
the caches use (:func:`scoped_version`), so a cached view is never shared between scopes.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Iterable, Mapping

import streamlit as st

from ingest import encoding
from ingest.errors import InputError, load_toml
from models.metrics import reservations as reservations_mod

#: the environment variable that names the service configuration file for the dashboard process
CONFIG_ENV = "GPULEDGER_CONFIG"
DEFAULT_HEADER = "X-Auth-Request-Email"
#: the label every other team's rows carry in a team-scoped read
OTHER = "other teams"
ROLES = ("admin", "manager", "finance", "team_lead", "member")
FULL_ROLES = frozenset({"admin", "manager", "finance"})
HEALTH_ROLES = frozenset({"admin", "manager"})      # Data health names input files and sources
CLOSE_ROLES = frozenset({"admin", "manager", "finance"})
ACCESS_KEYS = {"header", "trusted_proxies", "contact"}
DASHBOARD_KEYS = {"host", "port"}
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class Forbidden(Exception):
    """An action the viewer's role does not allow; the message says which and why."""


# ---------------------------------------------------------------- the configuration

@dataclass(frozen=True)
class AccessConfig:
    """The ``[access]`` table of a service configuration file."""
    header: str = DEFAULT_HEADER
    proxies: tuple = ()            # ip_network objects
    contact: str | None = None
    source: str = ""


@dataclass(frozen=True)
class DashboardConfig:
    """What the dashboard reads of a service configuration: [dashboard] host and port, [access], and the
    warehouse of [service] (so one file configures the collector and the dashboard alike)."""
    host: str | None = None
    port: int | None = None
    access: AccessConfig | None = None
    warehouse: str | None = None      # as written: relative to the configuration file's directory


def _fail(path: str, text: str, key: str, problem: str) -> None:
    """One line naming the file, the line of ``key`` (else of its table's header) and the key."""
    table, _, rest = key.partition(".")
    leaf = rest.split("[")[0]
    header = line = None
    in_table = False
    for n, ln in enumerate(text.split("\n"), 1):
        s = ln.strip()
        if s.startswith("["):
            in_table = s.strip("[] ") == table
            header = n if in_table and header is None else header
        elif in_table and leaf and line is None and re.match(rf"{re.escape(leaf)}\s*=", s):
            line = n
    raise InputError(path, f"key {key}: {problem}", line_no=line or header)


def parse_config(text: str, source: str = "<config>") -> DashboardConfig:
    """The ``[dashboard]`` host/port and ``[access]`` tables of a service configuration (other tables are the
    service's: models/service). Raises InputError (one line: file, line, key) for a bad value."""
    doc = load_toml(text, source)
    dash = doc.get("dashboard", {})
    if not isinstance(dash, dict):
        _fail(source, text, "dashboard", "must be a table ([dashboard])")
    host, port = dash.get("host"), dash.get("port")
    if host is not None and (not isinstance(host, str) or not host.strip()):
        _fail(source, text, "dashboard.host", f"must be an address like \"127.0.0.1\", got {host!r}")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        _fail(source, text, "dashboard.port", f"must be a TCP port 1-65535, got {port!r}")
    svc = doc.get("service", {})
    wh = svc.get("warehouse") if isinstance(svc, dict) else None
    if wh is not None and (not isinstance(wh, str) or not wh.strip()):
        _fail(source, text, "service.warehouse", f"must be a file path, got {wh!r}")
    acc = doc.get("access")
    if acc is None:
        return DashboardConfig(host, port, None, wh)
    if not isinstance(acc, dict):
        _fail(source, text, "access", "must be a table ([access])")
    for k in acc:
        if k not in ACCESS_KEYS:
            _fail(source, text, f"access.{k}", f"unknown key (allowed: {', '.join(sorted(ACCESS_KEYS))})")
    header = acc.get("header", DEFAULT_HEADER)
    if not isinstance(header, str) or not re.fullmatch(r"[A-Za-z0-9-]+", header):
        _fail(source, text, "access.header", f"must be an HTTP header name like {DEFAULT_HEADER}, got {header!r}")
    raw = acc.get("trusted_proxies")
    if not isinstance(raw, list) or not raw:
        _fail(source, text, "access.trusted_proxies",
              "is required: a list of the reverse proxy's addresses or networks, e.g. [\"127.0.0.1\"]")
    proxies = []
    for i, p in enumerate(raw):
        try:
            proxies.append(ipaddress.ip_network(str(p).strip(), strict=False))
        except ValueError:
            _fail(source, text, f"access.trusted_proxies[{i}]", f"not an IP address or network: {p!r}")
    contact = acc.get("contact")
    if contact is not None and (not isinstance(contact, str) or not contact.strip()):
        _fail(source, text, "access.contact", f"must be a non-empty string, got {contact!r}")
    return DashboardConfig(host, port, AccessConfig(header, tuple(proxies), contact and contact.strip(), source), wh)


def read_config(path: str | os.PathLike) -> DashboardConfig:
    """:func:`parse_config` of a file, its [service] warehouse made absolute (relative to the file's directory)."""
    p = Path(path)
    cfg = parse_config(encoding.read_text(p), str(p))
    if cfg.warehouse:
        cfg = DashboardConfig(cfg.host, cfg.port, cfg.access, str((p.resolve().parent / cfg.warehouse).resolve()))
    return cfg


_cached: dict[str, tuple[int, DashboardConfig]] = {}


def config_from_env() -> AccessConfig | None:
    """The ``[access]`` table of ``$GPULEDGER_CONFIG`` (re-read when the file changes); None without one."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    mtime = Path(path).stat().st_mtime_ns
    hit = _cached.get(path)
    if hit is None or hit[0] != mtime:
        hit = _cached[path] = (mtime, read_config(path))
    return hit[1].access


def is_loopback(host: str | None) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(addr in net for net in LOOPBACK)


# ---------------------------------------------------------------- who is looking

@dataclass(frozen=True)
class Scope:
    """What one viewer may see and do."""
    role: str
    teams: tuple[str, ...] = ()
    user: str = ""

    @property
    def full(self) -> bool:
        return self.role in FULL_ROLES

    @property
    def key(self) -> str:
        """The data scope as text: '' for everything, else the teams whose rows are shown (two leads of one team
        share their caches)."""
        return "" if self.full else "teams:" + json.dumps(sorted(set(self.teams)), separators=(",", ":"))

    def may(self, action: str) -> bool:
        return {"close": self.role in CLOSE_ROLES, "health": self.role in HEALTH_ROLES}.get(action, False)


LOCAL_OPERATOR = Scope("admin", (), "local operator")


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused, in words for the page."""
    title: str
    reason: str


@dataclass(frozen=True)
class Roles:
    """The governance file's ``[[access]]`` entries: user (lower case) -> (role, teams), and whom to ask."""
    users: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    contact: str | None = None


def identify(headers: Iterable[tuple[str, str]], peer: str | None, cfg: AccessConfig | None,
             roles: Roles) -> Scope | Refusal:
    """The viewer of a request: ``headers`` its (name, value) pairs, ``peer`` the connection's own address (None
    for loopback, as Streamlit reports it)."""
    if cfg is None:
        if is_loopback(peer):
            return LOCAL_OPERATOR
        return Refusal("This dashboard serves only its own machine",
                       "No [access] table is configured, so only connections from this machine are served.")
    if not _trusted(peer, cfg):
        return Refusal("Please use the site's address",
                       "This connection did not come through the authenticating proxy; it is refused.")
    name = cfg.header.lower()
    values = [v.strip() for k, v in headers if k.lower() == name]
    if len(values) != 1 or not values[0]:
        return Refusal("No identity", f"The proxy sent {'no' if not values else 'more than one'} {cfg.header} "
                                      "header, so who is asking is unknown; the request is refused.")
    user = values[0]
    hit = roles.users.get(user.lower())
    if hit is None:
        whom = cfg.contact or roles.contact or "the administrator of this gpuledger site"
        return Refusal("No access yet", f"{user} has no role on this dashboard. To get one, ask {whom}.")
    role, teams = hit
    return Scope(role, tuple(teams), user)


def _trusted(peer: str | None, cfg: AccessConfig) -> bool:
    try:
        addr = ipaddress.ip_address(peer) if peer else ipaddress.ip_address("127.0.0.1")
    except ValueError:
        return False
    return any(addr.version == net.version and addr in net for net in cfg.proxies)


def require(scope: Scope, action: str) -> None:
    """Raise Forbidden unless ``scope`` may perform ``action`` (checked in the action itself, on the server)."""
    if not scope.may(action):
        raise Forbidden(f"{scope.user or 'this viewer'} ({scope.role.replace('_', ' ')}) may not {action} here; "
                        "finance, managers and admins may")


# ---------------------------------------------------------------- the scope in the cache key

_SEP = "|scope="


def scoped_version(version: str, scope: Scope) -> str:
    """The key the dashboard's caches use: the snapshot version, plus the data scope unless it is everything."""
    return version + (_SEP + scope.key if scope.key else "")


def scope_key(version: str) -> str:
    """The data scope a cache key carries ('' for everything)."""
    return version.partition(_SEP)[2]


def snapshot_version(version: str) -> str:
    return version.partition(_SEP)[0]


# ---------------------------------------------------------------- scoping the reads

#: table -> columns shown as OTHER for other teams' rows (the team itself and names that group)
_AS_OTHER = {
    "jobs": ("team", "account", "user", "group"),
    "tl_blocked_daily": ("team", "account", "user"),
    "tl_decay_daily": ("team", "account"),
    "tl_demand_daily": ("team", "account", "user"),
    "gpu_efficiency_notel_day": ("team", "account", "user"),
    "tl_pending_team_daily": ("team",),
    "demand_day": ("team",),
    "entitlements": ("team",),
    "teams": ("team", "display", "cost_center"),
    "team_map": ("team",),
    "statement_lines": ("team", "account", "cost_center"),
    "open_statement_lines": ("team", "account", "cost_center"),
    "statement_rates": ("team", "account", "cost_center"),
    "open_statement_rates": ("team", "account", "cost_center"),
    "statement_jobs": ("team", "account", "user", "cost_center"),
    "loss_jobs": ("team",),
    "loss_days": ("team",),
    "checkpoint_intervals": ("team",),
}
#: table -> columns removed (NULL) from other teams' rows: identities and ids
_AS_NULL = {
    "jobs": ("job_id", "job_id_raw", "array_job_id", "array_task_id", "array_task_spec", "het_job_id", "uid", "gid",
             "job_name", "extra", "cancelled_by_uid"),
    "tl_blocked_daily": ("job_id",),
    "team_map": ("account_pattern", "user_pattern"),
    "statement_lines": ("job_refs",),
    "open_statement_lines": ("job_refs",),
    "statement_jobs": ("job_id",),
    "loss_jobs": ("job_id",),
    "checkpoint_intervals": ("job_name_like",),
}
#: columns removed from every row in a scoped read (who drained a node; raw input lines and paths; job ids
#: where the table holds no team to tell whose they are)
_ALWAYS_NULL = {
    "job_nodes": ("job_id_raw",),
    "node_events": ("user",),
    "rejects": ("raw",),
    "ingest_runs": ("input_name", "message", "options"),
    # queue snapshots carry no team: who asked is removed from every row (a reservation's owner is kept where
    # it is a scoped team's: view_sql)
    "squeue_snapshots": ("account", "user", "job_name"),
}
#: tables a scoped read sees empty (alerts: their lines name other teams' jobs and people; report_runs: who was
#: sent what)
_EMPTY = ("access_roles", "access_settings", "alerts", "alert_observations", "alert_deliveries", "report_runs")


def _literal(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def view_sql(table: str, columns: set[str], teams: tuple[str, ...], catalog: str, schema: str) -> str | None:
    """The view ``schema``.``table`` that shadows ``catalog``'s ``table`` in a read scoped to ``teams`` (None: the
    table is shown as it is)."""
    src, name = f'{catalog}.main."{table}"', f'{schema}."{table}"'
    if table in _EMPTY:
        return f"CREATE VIEW {name} AS SELECT * FROM {src} WHERE false"
    listed = ", ".join(map(_literal, teams))
    if table == "team_tree":   # one node for every other team, their shares summed
        mine = f"(coalesce(node IN ({listed}), false) OR NOT coalesce(is_team, false))" if teams else "NOT is_team"
        return (f"CREATE VIEW {name} AS SELECT CASE WHEN {mine} THEN node ELSE {_literal(OTHER)} END AS node, "
                f"parent, sum(raw_shares) AS raw_shares, is_team FROM {src} GROUP BY ALL")
    if table == "reservations":   # who owns one is kept where its owner maps to a scoped team, else removed
        owner = reservations_mod.owner_team_sql("r", f"{catalog}.main.team_map")
        mine = f"coalesce({owner} IN ({listed}), false)" if teams else "false"
        return (f'CREATE VIEW {name} AS SELECT r.* REPLACE (CASE WHEN {mine} THEN r.users END AS users, '
                f"CASE WHEN {mine} THEN r.accounts END AS accounts) FROM {src} r")
    if table == "budgets":        # the scoped teams' own budgets (a cost centre's spans other teams: not shown)
        mine = f"scope = 'team' AND name IN ({listed})" if teams else "false"
        return f"CREATE VIEW {name} AS SELECT * FROM {src} WHERE {mine}"
    if table == "cost_centers":   # a cost centre (and its owner) of the scoped teams only
        mine = (f"coalesce(cost_center IN (SELECT cost_center FROM {catalog}.main.teams WHERE team IN ({listed})), "
                "false)") if teams else "false"
        keep = [f'CASE WHEN {mine} THEN "{c}" ELSE {_literal(OTHER)} END AS "{c}"' for c in ("cost_center", "name")]
        return (f'CREATE VIEW {name} AS SELECT DISTINCT * REPLACE ({", ".join(keep)}, CASE WHEN {mine} THEN owner '
                f"END AS owner) FROM {src}")
    mine = f"coalesce(team IN ({listed}), false)" if teams else "false"
    repl = []
    for c in _AS_OTHER.get(table, ()):
        if c in columns:
            repl.append(f'CASE WHEN {mine} THEN "{c}" ELSE {_literal(OTHER)} END AS "{c}"')
    for c in _AS_NULL.get(table, ()):
        if c in columns:
            repl.append(f'CASE WHEN {mine} THEN "{c}" END AS "{c}"')
    for c in _ALWAYS_NULL.get(table, ()):
        if c in columns:
            repl.append(f'NULL AS "{c}"')
    if not repl:
        return None
    # every CASE reads the stored columns (a select list sees the FROM's columns, not its own replacements)
    return f'CREATE VIEW {name} AS SELECT * REPLACE ({", ".join(repl)}) FROM {src}'


def scoped_tables() -> set[str]:
    return (set(_AS_OTHER) | set(_AS_NULL) | set(_ALWAYS_NULL) | set(_EMPTY) | set(_DOCUMENTS)
            | {"team_tree", "open_statements", "cost_centers", "budgets", "reservations"})


#: tables holding the governance document (teams, mappings, tree, entitlements) -> its column
_DOCUMENTS = {"governance": "document", "statements": "policy_document"}


def mask_document(document: str, teams: tuple[str, ...]) -> str:
    """The governance document (models/definitions/policy.py reads it) with every other team merged into
    OTHER: one team row, one tree node with their shares summed, their entitlements summed per pool and
    validity, their mappings without patterns. The figures the policy gives a scoped read stay the cluster's."""
    d = json.loads(document)
    other = lambda t: t is not None and t not in teams   # noqa: E731
    add = lambda a, b: None if a is None and b is None else str(Decimal(a or 0) + Decimal(b or 0))  # noqa: E731
    d["teams"] = [t for t in d.get("teams", []) if not other(t[0])] + (
        [[OTHER, None, OTHER]] if any(other(t[0]) for t in d.get("teams", [])) else [])
    d["team_map"] = _unique([[OTHER, None, None, *m[3:]] if other(m[0]) else m for m in d.get("team_map", [])])
    tree: dict = {}
    for node, parent, shares, is_team in d.get("team_tree", []):
        key = (OTHER if is_team and other(node) else node, parent, is_team)
        tree[key] = shares if key not in tree else (None if tree[key] is None and shares is None
                                                    else (tree[key] or 0) + (shares or 0))
    d["team_tree"] = [[n, p, sh, it] for (n, p, it), sh in tree.items()]
    ent: dict = {}
    for team, cluster, gpu_type, share, gpus, t0, t1 in d.get("entitlements", []):
        key = (OTHER if other(team) else team, cluster, gpu_type, t0, t1, share is None)
        old = ent.get(key)
        ent[key] = (share, gpus) if old is None else (add(old[0], share), add(old[1], gpus))
    d["entitlements"] = [[t, c, g, sh, n, a, b] for (t, c, g, a, b, _), (sh, n) in ent.items()]
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def _unique(rows: list) -> list:
    out = []
    for r in rows:
        if r not in out:
            out.append(r)
    return out


def teams_of(key: str) -> tuple[str, ...]:
    if not key.startswith("teams:"):
        raise ValueError(f"unknown data scope {key!r}")
    return tuple(json.loads(key.removeprefix("teams:")))


def schema_of(key: str) -> str:
    """The name of the schema holding ``key``'s views (a digest: team names never become identifiers)."""
    return "scope_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _document_views(con, table: str, column: str, teams: tuple[str, ...], catalog: str, schema: str,
                    hashes: bool) -> list[str]:
    """Views over the tables that hold governance documents, each document swapped for its masked form (and the
    stored open statements' policy hash for the masked document's, so they stay usable)."""
    docs = [r[0] for r in con.execute(f'SELECT DISTINCT "{column}" FROM {catalog}.main."{table}" '
                                      f'WHERE "{column}" IS NOT NULL').fetchall()]
    masked = {doc: mask_document(doc, teams) for doc in docs}
    case = " ".join(f"WHEN md5({column}) = {_literal(hashlib.md5(d.encode()).hexdigest())} THEN {_literal(m)}"
                    for d, m in masked.items())
    out = [f'CREATE VIEW {schema}."{table}" AS SELECT * REPLACE '
           f'({f"CASE {case} END" if case else "NULL"} AS "{column}") FROM {catalog}.main."{table}"']
    if table == "governance" and hashes:
        sha = " ".join(f"WHEN {_literal(hashlib.sha256(d.encode()).hexdigest())} "
                       f"THEN {_literal(hashlib.sha256(m.encode()).hexdigest())}" for d, m in masked.items())
        out.append(f'CREATE VIEW {schema}."open_statements" AS SELECT * REPLACE '
                   f'({f"CASE policy_sha {sha} END" if sha else "NULL"} AS policy_sha) '
                   f'FROM {catalog}.main."open_statements"')
    return out


def create_views(con, key: str, catalog: str, home: str = "memory") -> str:
    """Create the views of scope ``key`` over ``catalog`` in a schema of catalog ``home`` (the reader
    connection's own in-memory database) and return the schema's qualified name. Once per snapshot and scope."""
    teams, schema = teams_of(key), f"{home}.{schema_of(key)}"
    rows = con.execute("""SELECT table_name, list(column_name) FROM duckdb_columns()
                          WHERE database_name = ? AND schema_name = 'main' AND list_contains(?, table_name)
                          GROUP BY table_name ORDER BY table_name""", [catalog, sorted(scoped_tables())]).fetchall()
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    have = {table for table, _ in rows}
    for table, cols in rows:
        if table in _DOCUMENTS:
            for sql in _document_views(con, table, _DOCUMENTS[table], teams, catalog, schema,
                                       hashes="open_statements" in have):
                con.execute(sql)
            continue
        sql = view_sql(table, set(cols), teams, catalog, schema)
        if sql:
            con.execute(sql)
    return schema


def search_path(schema: str, catalog: str) -> str:
    """The statement that makes a cursor read through ``schema``'s views first, then ``catalog``'s tables."""
    return f"SET search_path = '{schema},{catalog}.main'"


def roles_from_rows(rows: Iterable[tuple], contact: str | None) -> Roles:
    """Roles from ``access_roles`` rows (user_name, role, teams)."""
    return Roles({u.lower(): (r, tuple(t or ())) for u, r, t in rows}, contact)


# ---------------------------------------------------------------- the viewer of this session (the app sets it)

_VIEWER = "_gpuledger_viewer"


def remember(scope: Scope) -> None:
    """Record the viewer the entry script identified for this run (server-side session state, never a widget)."""
    st.session_state[_VIEWER] = scope


def viewer() -> Scope:
    """The viewer the entry script identified; a page run without it (a headless test of one page) is the local
    operator, as the entry script would have decided for a loopback request without an [access] table."""
    return st.session_state.get(_VIEWER, LOCAL_OPERATOR)
