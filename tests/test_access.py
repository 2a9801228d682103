"""dashboards/access.py and the access section of ingest/governance.py: the [access] configuration, who a request
is, and the team scoping of every data read, on the lab warehouse (real inputs through the CLI, refreshed and
published). The property: for any team lead's scope, each page's model gives the scoped teams exactly the
unscoped figures and "other teams" exactly the rest, and no other team's user, job name or job id is readable
through the scoped cursor in any table."""
from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import subprocess
import sys
import threading
from decimal import Decimal

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as hs

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (the shared lab warehouse)
from dashboards import access, actions, server
from dashboards.snapshot import Snapshot
from ingest import governance, warehouse
from ingest.errors import InputError
from models.definitions.labels import UNMAPPED
from models.metrics import chargeback, demand, efficiency, fairness, queue, reservations, utilization

OTHER = access.OTHER
T0, T1 = dt.datetime(2026, 9, 21, 6, 30), dt.datetime(2026, 10, 20, 13, 15)   # not on day boundaries
TEAMS = ("nlp", "platform", "vision")


# ---------------------------------------------------------------- the [access] configuration

CONFIG = """[service]
name = "lab"

[dashboard]
host = "0.0.0.0"
port = 8600

[access]
header = "X-Forwarded-User"
trusted_proxies = ["127.0.0.1", "10.1.0.0/24"]
contact = "gpu-admins@lab.example"
"""


def test_config_reads_dashboard_and_access(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "svc.toml").write_text('[service]\nwarehouse = "../var/w.duckdb"\n' + CONFIG.split("\n", 2)[2])
    assert access.read_config(tmp_path / "etc" / "svc.toml").warehouse == str(tmp_path / "var" / "w.duckdb")
    cfg = access.parse_config(CONFIG, "svc.toml")
    assert (cfg.host, cfg.port) == ("0.0.0.0", 8600)
    assert cfg.access.header == "X-Forwarded-User" and cfg.access.contact == "gpu-admins@lab.example"
    assert [str(n) for n in cfg.access.proxies] == ["127.0.0.1/32", "10.1.0.0/24"]
    assert access.parse_config("[dashboard]\nport = 9000\n").access is None
    assert access.parse_config('[access]\ntrusted_proxies = ["::1"]\n').access.header == "X-Auth-Request-Email"


@pytest.mark.parametrize("text,where", [
    ('[access]\ntrusted_proxies = ["127.0.0.1", "proxy.lab"]\n', "svc.toml:2: key access.trusted_proxies[1]: not an"),
    ("[access]\nheader = \"X-Auth-Request-Email\"\n", "svc.toml:1: key access.trusted_proxies: is required"),
    ('[access]\ntrusted_proxies = ["127.0.0.1"]\nheader = "X User"\n', "svc.toml:3: key access.header: must be"),
    ('[access]\ntrusted_proxies = ["127.0.0.1"]\nproxy = 1\n', "svc.toml:3: key access.proxy: unknown key"),
    ('[dashboard]\nport = 70000\n', "svc.toml:2: key dashboard.port: must be a TCP port"),
    ('[dashboard\n', "svc.toml:1: not valid TOML"),
])
def test_config_errors_are_one_line_naming_file_line_and_key(text, where):
    with pytest.raises(InputError) as exc:
        access.parse_config(text, "svc.toml")
    assert str(exc.value).startswith(where) and "\n" not in str(exc.value)


# ---------------------------------------------------------------- who is asking

ROLES = access.Roles({"ana@lab.example": ("team_lead", ("nlp",)), "fin@lab.example": ("finance", ())},
                     contact="the governance contact")
CFG = access.parse_config(CONFIG).access


def test_identity_is_believed_only_from_the_proxy():
    h = [("X-Forwarded-User", "Ana@Lab.Example")]
    assert access.identify(h, None, CFG, ROLES) == access.Scope("team_lead", ("nlp",), "Ana@Lab.Example")  # loopback
    assert access.identify(h, "10.1.0.7", CFG, ROLES).role == "team_lead"
    refused = access.identify(h, "10.2.0.7", CFG, ROLES)              # the header from anyone else counts for nothing
    assert isinstance(refused, access.Refusal) and "did not come through" in refused.reason
    assert isinstance(access.identify([], None, CFG, ROLES), access.Refusal)                      # proxy, no header
    two = [("x-forwarded-user", "fin@lab.example"), ("X-Forwarded-User", "ana@lab.example")]
    assert "more than one" in access.identify(two, None, CFG, ROLES).reason                      # ambiguous
    other_header = [("X-Auth-Request-Email", "fin@lab.example")]                                  # not the configured one
    assert isinstance(access.identify(other_header, None, CFG, ROLES), access.Refusal)


def test_unknown_user_is_told_whom_to_ask():
    r = access.identify([("X-Forwarded-User", "eve@lab.example")], None, CFG, ROLES)
    assert r.title == "No access yet" and "ask gpu-admins@lab.example" in r.reason      # the config's contact first
    bare = access.AccessConfig(header="X-Forwarded-User", proxies=CFG.proxies)
    assert "ask the governance contact" in access.identify([("X-Forwarded-User", "eve")], None, bare, ROLES).reason


def test_without_access_config_only_loopback_is_served_as_local_operator():
    assert access.identify([("X-Forwarded-User", "eve")], None, None, ROLES) is access.LOCAL_OPERATOR
    assert access.identify([], "::1", None, ROLES) is access.LOCAL_OPERATOR
    assert isinstance(access.identify([], "192.0.2.9", None, ROLES), access.Refusal)


def test_roles_and_what_they_may_do():
    lead, member, fin = (access.Scope("team_lead", ("nlp",)), access.Scope("member", ("nlp",)),
                         access.Scope("finance"))
    assert (lead.key, member.key, fin.key, access.Scope("admin").key) == ('teams:["nlp"]', 'teams:["nlp"]', "", "")
    assert access.Scope("team_lead", ("vision", "nlp")).key == 'teams:["nlp","vision"]'
    odd = access.Scope("team_lead", ("a,b", "c|scope=d"))          # any team name survives the cache key
    assert access.teams_of(access.scope_key(access.scoped_version("1-2-3", odd))) == ("a,b", "c|scope=d")
    assert [s.may("close") for s in (lead, member, fin, access.Scope("manager"))] == [False, False, True, True]
    assert [s.may("health") for s in (lead, fin, access.Scope("admin"))] == [False, False, True]
    with pytest.raises(access.Forbidden, match="may not close"):
        access.require(member, "close")
    v = access.scoped_version("123-456-789", lead)
    assert access.scope_key(v) == 'teams:["nlp"]' and access.snapshot_version(v) == "123-456-789"
    assert access.scoped_version("123-456-789", fin) == "123-456-789"


# ---------------------------------------------------------------- roles in the governance file

GOV_HEAD = (dfx.FIX / "governance.toml").read_text().split("# Dashboard access")[0]


def test_governance_access_section_parses(lab_db):
    gov = governance.parse((dfx.FIX / "governance.toml").read_text(), "g.toml")
    assert gov.access_contact == "the lab's GPU admins (gpu-admins@lab.example)"
    assert ("nlp-lead@lab.example", "team_lead", ["nlp"]) in gov.access        # stored lower case
    with warehouse.connect(lab_db, read_only=True) as con:
        rows = con.sql("SELECT user_name, role, teams FROM access_roles ORDER BY user_name").fetchall()
        assert rows[-1] == ("vision-member@lab.example", "member", ["vision"]) and len(rows) == 4
        assert "access" not in json.loads(con.sql("SELECT document FROM governance").fetchall()[0][0])


@pytest.mark.parametrize("extra,where", [
    ('[[access]]\nuser = "a"\nrole = "boss"\n', "key access[0].role: unknown role 'boss'"),
    ('[[access]]\nuser = "a"\nrole = "member"\n', "key access[0].teams: a member needs a list of teams"),
    ('[[access]]\nuser = "a"\nrole = "team_lead"\nteams = ["nope"]\n', "key access[0].teams: team 'nope' is not"),
    ('[[access]]\nuser = "a"\nrole = "finance"\nteams = ["nlp"]\n', "key access[0].teams: the finance role sees"),
    ('[[access]]\nuser = "A"\nrole = "admin"\n[[access]]\nuser = "a"\nrole = "admin"\n',
     "key access[1].user: user 'a' is given a role twice"),
    ('[access_policy]\nwho = "x"\n', "key access_policy.who: unknown key"),
])
def test_governance_access_errors_name_line_and_key(extra, where):
    text = GOV_HEAD + extra
    with pytest.raises(InputError) as exc:
        governance.parse(text, "g.toml")
    msg = str(exc.value)
    assert where in msg and "\n" not in msg
    line = int(msg.split(":")[1])
    assert text.split("\n")[line - 1].split("=")[0].strip() in where or text.split("\n")[line - 1].startswith("[")


# ---------------------------------------------------------------- scoping on the lab warehouse

@pytest.fixture(scope="module")
def snap(lab_db):
    s = Snapshot(lab_db)
    yield s
    s.close()


#: columns that say whose a row is, or name a person or a job
_WHOSE = {"team", "user", "account", "job_id", "job_name", "users", "accounts", "cost_center"}
#: published tables with such a column that a scoped read may show as they are, and why
_UNSCOPED_OK = {
    "node_events": "'user' is removed in every scoped read (_ALWAYS_NULL); no team",
    "cost_centers": "scoped as part of the governance document",
}


def test_every_published_table_naming_a_team_person_or_job_is_scoped(snap):
    """A new table (a mart, an ingestor's) that carries a team, a user, an account or a job id must be added to
    the scoping rules (dashboards/access.py), or a team lead would read other teams' rows through it."""
    cur = snap.cursor()
    try:
        cols = cur.sql("SELECT table_name, list(column_name) FROM duckdb_columns() WHERE database_name = 'snapshot' "
                       "AND schema_name = 'main' GROUP BY table_name").fetchall()
    finally:
        cur.close()
    unscoped = sorted(t for t, c in cols if _WHOSE & set(c) and t not in access.scoped_tables()
                      and t not in _UNSCOPED_OK)
    assert not unscoped, f"tables with team/user/account/job columns but no scoping rule: {unscoped}"


def _merge(df: pl.DataFrame, scope: tuple[str, ...], keys: list[str], sums: list[str], team: str = "team",
           keep: tuple = ()) -> pl.DataFrame:
    """The unscoped frame as a team lead of ``scope`` should see it: every other team's rows summed as OTHER."""
    label = (pl.when(pl.col(team).is_in(list(scope) + list(keep))).then(pl.col(team)).otherwise(pl.lit(OTHER)))
    return _sums(df.with_columns(label.alias(team)), keys, sums)


def _sums(df: pl.DataFrame, keys: list[str], sums: list[str]) -> pl.DataFrame:
    return (df.group_by(keys).agg(*[pl.col(c).cast(pl.Float64).sum() for c in sums])
            .sort(keys, nulls_last=True))


def _same(got: pl.DataFrame, want: pl.DataFrame, what: str) -> None:
    assert got.columns == want.columns and got.height == want.height, (what, got, want)
    for c in got.columns:
        if got[c].dtype == pl.Float64:
            assert (got[c] - want[c]).abs().max() < 1e-6, (what, c, got, want)
        else:
            assert got[c].to_list() == want[c].to_list(), (what, c)


def _pages(con) -> dict[str, pl.DataFrame]:
    """What the pages read, as additive team-level frames (the models the dashboards call)."""
    util = utilization.by_bucket(con, T0, T1, "week", by=["team"])
    eff = efficiency.by_group(con, T0, T1, by=["team"], bucket=None)
    fair = fairness.report(con, [("window", T0, T1)])["teams"]
    waits = queue.waits(con, T0, T1, by=("team",))
    dem = demand.series(con, "demanded", "day", by=("team",))
    stmt = chargeback.statement(con, "2026-09")
    return {"util": util, "eff": eff.with_columns(pl.col("team").fill_null("(unmapped)")), "fair": fair,
            "waits": waits, "demand": dem, "lines": stmt.lines.with_columns(pl.col("team").fill_null("(unmapped)")),
            "jobs": stmt.jobs.with_columns(pl.col("team").fill_null("(unmapped)"))}


@pytest.fixture(scope="module")
def unscoped(snap):
    return _pages(snap.cursor())


@pytest.fixture(scope="module")
def identities(snap):
    """Per team: its users, job names and job ids (the unmapped jobs under None)."""
    rows = snap.frame("""SELECT team, list(DISTINCT "user") AS users, list(DISTINCT job_name) AS names,
                                list(DISTINCT job_id) AS ids FROM jobs GROUP BY team""")
    return {r["team"]: r for r in rows.iter_rows(named=True)}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scope=hs.sets(hs.sampled_from(TEAMS), min_size=1, max_size=2).map(lambda s: tuple(sorted(s))))
def test_team_lead_sees_own_figures_and_the_rest_as_other_teams(snap, unscoped, identities, scope):
    got = _pages(snap.cursor(access.Scope("team_lead", scope).key))
    u, g = unscoped, got
    _same(_sums(g["util"], ["bucket", "team"], ["allocated_gpu_h", "capacity_gpu_h", "idle_gpu_h"]),
          _merge(u["util"], scope, ["bucket", "team"], ["allocated_gpu_h", "capacity_gpu_h", "idle_gpu_h"],
                 keep=("(all)",)), "utilization")
    _same(_sums(g["eff"], ["team"], ["alloc_gpu_h", "idle_alloc_gpu_h", "jobs"]),
          _merge(u["eff"], scope, ["team"], ["alloc_gpu_h", "idle_alloc_gpu_h", "jobs"]), "efficiency")
    fair_sums = ["usage_gpu_h", "entitled_gpu_h", "decayed_gpu_h", "pending_gpu_h"]
    _same(_sums(g["fair"], ["pool", "team"], fair_sums), _merge(u["fair"], scope, ["pool", "team"], fair_sums),
          "fairness")
    mine = pl.col("team").is_in(list(scope))          # percentiles and factors: the scoped teams' own are exact
    _same(g["fair"].filter(mine).sort("pool", "team").select("team", "fairshare_classic", "level_fs", "usage_share"),
          u["fair"].filter(mine).sort("pool", "team").select("team", "fairshare_classic", "level_fs", "usage_share"),
          "fair-share factors")
    _same(g["waits"].filter(mine).sort("team").drop("p95_vs_all"), u["waits"].filter(mine).sort("team")
          .drop("p95_vs_all"), "queue waits")
    _same(_sums(g["demand"], ["ts", "team"], ["value"]), _merge(u["demand"], scope, ["ts", "team"], ["value"]),
          "demand")
    money = ["direct_cost", "idle_share", "total", "gpu_hours"]
    own = lambda df: _sums(df.filter(mine), ["team", "gpu_type"], money)  # noqa: E731
    _same(own(g["lines"]), own(u["lines"]), "statement lines of the scoped teams")
    others = lambda df: df.filter(~mine).select(money).sum()  # noqa: E731
    # other teams' amounts are one line per pool, each rounded once: within a cent per merged line
    assert (others(g["lines"]).to_numpy() - others(u["lines"]).to_numpy()).__abs__().max() <= 0.01 * 4
    assert set(g["lines"]["team"]) <= set(scope) | {OTHER}
    _no_other_identity(snap, scope, identities, g["jobs"])


def _no_other_identity(snap, scope, identities, jobs: pl.DataFrame) -> None:
    """No user, job name or job id of another team in any table the scoped cursor reads, nor in the detail."""
    mine = {v for t in scope for k in ("users", "names", "ids") for v in identities[t][k]}
    foreign = {str(v) for t, r in identities.items() if t not in scope
               for k in ("users", "names", "ids") for v in r[k]} - {str(v) for v in mine}
    assert foreign
    leaked = jobs.filter(~pl.col("team").is_in(list(scope)))
    assert leaked["job_id"].null_count() == leaked.height and set(leaked["user"]) <= {OTHER}
    cur = snap.cursor(access.Scope("team_lead", scope).key)
    tables = [r[0] for r in cur.sql("SELECT table_name FROM duckdb_tables() WHERE database_name = 'snapshot'")
              .fetchall()]
    for t in tables:
        cols = cur.sql(f'SELECT * FROM "{t}" LIMIT 0').columns
        types = cur.sql(f'SELECT * FROM "{t}" LIMIT 0').dtypes
        text = [c for c, ty in zip(cols, types) if str(ty) in ("VARCHAR", "BIGINT", "INTEGER", "VARCHAR[]")
                and c not in ("job_uid", "run_id", "ingest_run_id", "line_no", "row_no")]
        if not text:
            continue
        values = cur.sql(f'SELECT DISTINCT unnest([{", ".join(f"{q}::VARCHAR" for q in map(_q, text))}]) FROM "{t}"')
        found = {v for (v,) in values.fetchall()} & foreign
        # numbers in other columns (counts, GPUs) may equal a job id by chance; an id column may not
        if found and t in ("jobs", "statement_jobs", "tl_blocked_daily", "job_nodes"):
            found_in_ids = cur.sql(f"""SELECT DISTINCT v FROM (SELECT unnest([{", ".join(f"{q}::VARCHAR"
                                   for q in map(_q, [c for c in text if c in ("job_id", "job_id_raw", "user",
                                   "job_name", "account")]))}]) AS v FROM "{t}") WHERE v IS NOT NULL""").fetchall()
            assert not ({v for (v,) in found_in_ids} & foreign), (t, found)
        elif found:
            assert not {v for v in found if not v.isdigit()}, (t, found)


def _q(c: str) -> str:
    return '"' + c + '"'


def test_a_team_lead_sees_the_owner_of_the_team_s_own_reservations_only(tmp_path_factory):
    """The real capture's reservation gl-resv (Accounts=vision Users=carol, tests/fixtures/slurm_waiting): vision's
    lead reads it with its owner, and its reserved idle under vision as the unscoped report has it; ml's lead reads
    its times and GPUs but not who holds it (before, every scoped read lost every owner: a lead's own reservation
    showed as unmapped and its idle GPU-hours fell out of the team's figures)."""
    from waiting_fixtures import shared_db
    s = Snapshot(shared_db(tmp_path_factory))
    t0, t1 = dt.datetime(2026, 12, 1), dt.datetime(2026, 12, 5)
    full = reservations.report(s.cursor(), t0, t1).select("name", "team", "owner_account", "owner_user",
                                                          "reserved_idle_gpu_h").rows()
    assert full == [("gl-resv", "vision", "vision", "carol", pytest.approx(full[0][4]))] and full[0][4] > 0
    own = reservations.report(s.cursor(access.Scope("team_lead", ("vision",)).key), t0, t1)
    assert own.select("name", "team", "owner_account", "owner_user", "reserved_idle_gpu_h").rows() == full
    other = s.cursor(access.Scope("team_lead", ("ml",)).key)
    assert other.sql("SELECT users, accounts FROM reservations").fetchall() == [(None, None)]
    assert reservations.report(other, t0, t1).select("team", "owner_account", "reserved_gpu_h").rows() == [
        (UNMAPPED, None, pytest.approx(reservations.report(s.cursor(), t0, t1)["reserved_gpu_h"][0]))]
    s.close()


def test_another_team_s_reservation_reads_other_teams_on_the_pages_as_its_jobs_do(tmp_path_factory, monkeypatch):
    from dashboards import model_reads as mr, queries
    from dashboards.filters import Filters
    from waiting_fixtures import shared_db
    monkeypatch.setenv("GPULEDGER_DB", str(shared_db(tmp_path_factory)))
    v, f = queries.current().version, Filters(dt.date(2026, 12, 1), dt.date(2026, 12, 5))
    assert mr.reservations(v, f)["team"].to_list() == ["vision"]
    for team, shown in (("vision", "vision"), ("ml", access.OTHER)):
        scoped = access.scoped_version(v, access.Scope("team_lead", (team,)))
        assert mr.reservations(scoped, f)["team"].to_list() == [shown]
    assert mr.reserved_idle(access.scoped_version(v, access.Scope("team_lead", ("ml",))),
                            Filters(f.start, f.end, teams=("ml",))) == 0


def test_full_roles_read_the_snapshot_as_it_is(snap):
    a = snap.frame("SELECT team, count(*)::BIGINT AS n FROM jobs GROUP BY team ORDER BY team NULLS LAST")
    assert a["team"].to_list() == ["nlp", "platform", "vision", None]
    lead = snap.frame("SELECT team, count(*)::BIGINT AS n FROM jobs GROUP BY team ORDER BY team",
                      scope=access.Scope("member", ("vision",)).key)
    assert lead["team"].to_list() == [OTHER, "vision"] and lead["n"].sum() == a["n"].sum()
    # audit details, node drainers and the access table itself stay with the full roles
    assert snap.frame("SELECT count(*) FROM access_roles", scope=access.Scope("member", ("vision",)).key)[0, 0] == 0
    assert snap.frame("SELECT count(raw) FROM rejects", scope=access.Scope("member", ("vision",)).key)[0, 0] == 0
    assert snap.frame("SELECT count(raw) FROM rejects")[0, 0] > 0
    # cost centres: the scoped teams' own (CC-100 is vision's and nlp's), every other one merged
    assert snap.frame("SELECT cost_center FROM cost_centers ORDER BY 1", scope=access.Scope("member", ("vision",)).key)["cost_center"].to_list() \
        == ["CC-100", OTHER]


HOLD = """import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
con.close()
"""


def test_closed_statement_is_verified_then_read_scoped(lab_db, tmp_path):
    """A finance user closes 2026-09 through the dashboard's action; a team lead's read of the frozen statement
    is masked (its hash verified on the stored rows first); a member's close is refused on the server."""
    db = tmp_path / "lab.duckdb"
    shutil.copy(lab_db, db)
    with pytest.raises(access.Forbidden):
        actions.close_period(access.Scope("member", ("vision",), "vision-member@lab.example"), db, "2026-09")
    with pytest.raises(access.Forbidden):
        actions.close_period(access.Scope("team_lead", ("nlp",), "nlp-lead@lab.example"), db, "2026-09")
    # the collector holds the warehouse (another process, read-write) for a moment
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = actions.close_period(access.Scope("finance", (), "fin@lab.example"), db, "2026-09", wait=0.3)
        assert not busy.ok and "locked" in busy.message and "try again" in busy.message
        threading.Timer(3.0, lambda: holder.communicate("release\n")).start()   # the cycle ends meanwhile
        done = actions.close_period(access.Scope("finance", (), "fin@lab.example"), db, "2026-09", wait=60)
    finally:
        holder.wait(timeout=60)
    assert done.ok and done.message.startswith("closed 2026-09 at ") and "fin@lab.example" in done.message
    again = actions.close_period(access.Scope("admin", (), "admin@lab.example"), db, "2026-09")
    assert not again.ok and "already closed" in again.message
    snap = Snapshot(db)
    try:
        full = chargeback.statement(snap.cursor(), "2026-09")
        assert full.status == "closed"
        with pytest.raises(Exception, match="content hash"):
            chargeback.statement(snap.cursor(access.Scope("team_lead", ("nlp",)).key), "2026-09")      # masked rows never pass as frozen ones
        lead = chargeback.statement(snap.cursor(access.Scope("team_lead", ("nlp",)).key), "2026-09", verify=False)
        assert set(lead.lines["team"].drop_nulls()) == {"nlp", OTHER}
        assert lead.total_row["cluster_cost"] == full.total_row["cluster_cost"]
        total = lambda s: sum((x for x in s.lines["total"].to_list()), Decimal(0))  # noqa: E731
        assert total(lead) == total(full)
    finally:
        snap.close()


def test_close_refuses_a_period_the_accounting_has_not_finished(lab_db, tmp_path):
    db = tmp_path / "lab.duckdb"
    shutil.copy(lab_db, db)
    out = actions.close_period(access.Scope("finance", (), "fin@lab.example"), db, "2026-10")
    assert not out.ok and "does not reach the end of the period" in out.message


# ---------------------------------------------------------------- the port check (dashboards/server.py)

def test_port_check_accepts_a_port_in_time_wait_and_refuses_a_listening_one():
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as Streamlit's server socket (uvicorn) is
    lsn.bind(("127.0.0.1", 0))
    lsn.listen()
    port = lsn.getsockname()[1]
    with pytest.raises(server.PortInUse, match=f"port {port}"):
        server.check_port(port)
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = lsn.accept()
    conn.close()                         # the server side closes first: its socket on `port` enters TIME_WAIT
    cli.recv(1)
    cli.close()
    lsn.close()
    server.check_port(port)              # without SO_REUSEADDR this raised for about a minute
