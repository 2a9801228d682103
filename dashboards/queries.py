"""Cached reads of the serving snapshot that pages share.

Every function here takes the snapshot's version (so a new snapshot invalidates the cache; the read is of that
version) and the :class:`~dashboards.filters.Filters` (so each filter set is computed once). Business figures
come from the ``models`` package; the SQL here only reads the audit tables and lists what the filters can offer.
All SQL is parameterised: filter values never become SQL text.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl
import streamlit as st

from dashboards import access, snapshot
from dashboards.budget import BUDGET
from dashboards.filters import Filters
from dashboards.theme import UNMAPPED

#: Every cached view: per-function bounds from the budget; old snapshots' entries age out (a new snapshot
#: changes every key) and the server bounds their bytes together (server.maxCacheDataSize = BUDGET.views).
CACHE = dict(max_entries=BUDGET.max_entries, ttl=BUDGET.ttl, show_spinner=False)


def current() -> snapshot.Snapshot:
    """The snapshot of the warehouse this dashboard serves ($GPULEDGER_DB, else the default path)."""
    return snapshot.for_warehouse(None)


def cursor(version: str):
    """A cursor on the snapshot version, in the data scope, that the cache key ``version`` carries
    (dashboards/access.py), so a cached view holds the data its key names (the current version's if that one
    is no longer open: dashboards/snapshot.py)."""
    return current().cursor(access.scope_key(version), access.snapshot_version(version))


def _frame(version: str, sql: str, params: list | dict | None = None) -> pl.DataFrame:
    """A query on the snapshot version and in the data scope the cache key ``version`` carries."""
    return current().frame(sql, params, scope=access.scope_key(version), version=access.snapshot_version(version))


def _tables(version: str) -> set[str]:
    return current().tables(access.snapshot_version(version))


# ---------------------------------------------------------------- what the snapshot holds

@dataclass(frozen=True)
class Catalogue:
    """What the sidebar can offer and how far the data reaches."""
    tables: frozenset[str]
    jobs: int
    first_day: dt.date | None          # first UTC day with a submitted job
    last_day: dt.date | None           # the data horizon's UTC day
    horizon: dt.datetime | None        # latest time the accounting covers
    clusters: tuple[str, ...]
    pools: tuple[str, ...]
    partitions: tuple[str, ...]
    teams: tuple[str, ...]             # includes UNMAPPED when some jobs have no team
    all_teams: tuple[str, ...]         # every team known (for stable colours)
    node_gpus: tuple[tuple[str, int], ...] = ()   # (pool, GPUs of its most common current node)

    @property
    def pool_keys(self) -> tuple[str, ...]:
        """What identifies a pool: its GPU type, and its cluster when there are several (two clusters may both
        have an "a100" pool, each with its own capacity)."""
        return ("cluster", "pool") if len(self.clusters) > 1 else ("pool",)


@st.cache_data(**CACHE)
def catalogue(version: str) -> Catalogue:
    tables = frozenset(_tables(version))
    if "jobs" not in tables:
        return Catalogue(tables, 0, None, None, None, (), (), (), (), ())
    ext = _frame(version, """SELECT count(*)::BIGINT AS n, min(submit) AS first,
                           greatest(max("end"), max(start), max(submit)) AS horizon FROM jobs""").row(0, named=True)
    def distinct(sql: str) -> tuple[str, ...]:
        return tuple(sorted(v for v in _frame(version, sql)[:, 0].to_list() if v))
    clusters = distinct("SELECT DISTINCT cluster FROM jobs UNION SELECT DISTINCT cluster FROM nodes")
    pools = distinct("SELECT DISTINCT gpu_type FROM nodes WHERE gpus > 0 UNION SELECT DISTINCT gpu_type FROM jobs")
    partitions = distinct("""SELECT DISTINCT partition FROM jobs UNION
                             SELECT DISTINCT trim(unnest(string_split(partitions, ','))) FROM nodes""")
    named = distinct("SELECT DISTINCT team FROM jobs UNION SELECT team FROM teams")
    unmapped = _frame(version, "SELECT count(*)::BIGINT FROM jobs WHERE team IS NULL")[0, 0] > 0
    first = ext["first"].date() if ext["first"] else None
    horizon = ext["horizon"]
    node_gpus = tuple(_frame(version, """SELECT gpu_type, mode(gpus)::INTEGER AS gpus FROM nodes
                                WHERE valid_to IS NULL AND gpus > 0 AND gpu_type IS NOT NULL
                                GROUP BY gpu_type ORDER BY gpu_type""").iter_rows())
    return Catalogue(tables, ext["n"], first, horizon.date() if horizon else None, horizon, clusters, pools,
                     partitions, named + ((UNMAPPED,) if unmapped else ()), named, node_gpus)


@st.cache_data(**CACHE)
def access_roles(version: str) -> access.Roles:
    """The governance file's roles and contact (unscoped: who may see what is decided before any scope)."""
    tables = _tables(version)
    if "access_roles" not in tables:
        return access.Roles()
    rows = _frame(version, "SELECT user_name, role, teams FROM access_roles").rows()
    contact = (_frame(version, "SELECT min(contact) FROM access_settings")[0, 0]
               if "access_settings" in tables else None)
    return access.roles_from_rows(rows, contact)


# ---------------------------------------------------------------- freshness

@st.cache_data(**CACHE)
def freshness(version: str) -> pl.DataFrame:
    """Last successful ingest per source (UTC), the runs counted, and when the snapshot was published."""
    tables = _tables(version)
    if "ingest_runs" not in tables:
        return pl.DataFrame(schema={"source": pl.String, "last_ingest": pl.Datetime, "runs": pl.Int64})
    return _frame(version, """SELECT source, max(finished_at) AS last_ingest, count(*)::BIGINT AS runs
                     FROM ingest_runs WHERE status = 'ok' GROUP BY source ORDER BY source""")


@st.cache_data(**CACHE)
def published_at(version: str) -> dt.datetime | None:
    if "snapshot_info" not in _tables(version):
        return None
    return _frame(version, "SELECT max(published_at) FROM snapshot_info")[0, 0]


# ---------------------------------------------------------------- data health (audit tables)
# What the page may show of the audit: input files by base name (where they were on the ingesting machine is
# not the viewers' business), run messages with every absolute path cut to its base name, and rejected lines
# as line number, field and reason, never their raw content (it stays in the warehouse's ``rejects`` table).

#: SQL: a path's last component
_BASE_NAME = r"regexp_replace({}, '^.*[/\\]', '')"
#: SQL: text with the directories of every absolute path in it removed (the file's base name stays)
_NO_DIRS = r"""regexp_replace({}, '(^|[\s''"(=,;])(?:[A-Za-z]:)?[/\\](?:[^\s/\\''"]*[/\\])+', '\1', 'g')"""
#: SQL: an ingest run's message as shown (its input named by base name, no absolute paths)
_MESSAGE = _NO_DIRS.format("replace(message, coalesce(input_name, ''), "
                           + _BASE_NAME.format("coalesce(input_name, '')") + ")")


@st.cache_data(**CACHE)
def ingest_runs(version: str, f: Filters) -> pl.DataFrame:
    """Ingest runs that started in the window (newest first), with their line accounting."""
    return _frame(version, f"""SELECT run_id, source, {_BASE_NAME.format("input_name")} AS input_name, cluster, status,
                             lines_read, loaded, skipped, rejected, inserted, updated, unchanged, started_at,
                             finished_at, {_MESSAGE} AS message
                     FROM ingest_runs
                     WHERE started_at >= ? AND started_at < ?
                       AND (len(?::VARCHAR[]) = 0 OR cluster IS NULL OR list_contains(?::VARCHAR[], cluster))
                     ORDER BY started_at DESC, run_id DESC""",
                  [f.t0, f.t1, list(f.clusters), list(f.clusters)])


@st.cache_data(**CACHE)
def all_ingest_runs(version: str) -> pl.DataFrame:
    """Every ingest run, newest first (the Data health page falls back to it when the window has none)."""
    return _frame(version, f"""SELECT run_id, source, {_BASE_NAME.format("input_name")} AS input_name, cluster, status,
                             lines_read, loaded, skipped, rejected, inserted, updated, unchanged, started_at,
                             finished_at, {_MESSAGE} AS message
                     FROM ingest_runs ORDER BY started_at DESC, run_id DESC""")


@st.cache_data(**CACHE)
def rejects(version: str, run_ids: tuple[int, ...], limit: int = 5000) -> pl.DataFrame:
    """Rejected input lines of the given runs: input base name, line number, field and reason, newest run first.
    Not the raw line (it may hold anything the input held; operators read it in the ``rejects`` table)."""
    return _frame(version, f"""SELECT r.run_id, i.source, {_BASE_NAME.format("i.input_name")} AS input_name, r.line_no,
                            r.field, r.reason
                     FROM rejects r JOIN ingest_runs i USING (run_id)
                     WHERE list_contains(?::BIGINT[], r.run_id)
                     ORDER BY r.run_id DESC, r.line_no LIMIT ?""", [list(run_ids), limit])


@st.cache_data(**CACHE)
def reject_reasons(version: str, run_ids: tuple[int, ...]) -> pl.DataFrame:
    return _frame(version, """SELECT reason, count(*)::BIGINT AS lines FROM rejects
                     WHERE list_contains(?::BIGINT[], run_id) GROUP BY reason ORDER BY lines DESC, reason""",
                  [list(run_ids)])


@st.cache_data(**CACHE)
def skip_reasons(version: str, run_ids: tuple[int, ...]) -> pl.DataFrame:
    return _frame(version, """SELECT reason, sum(lines)::BIGINT AS lines FROM ingest_skips
                     WHERE list_contains(?::BIGINT[], run_id) GROUP BY reason ORDER BY lines DESC, reason""",
                  [list(run_ids)])


@st.cache_data(**CACHE)
def unmapped_accounts(version: str, f: Filters) -> pl.DataFrame:
    """Slurm accounts whose jobs (submitted in the window) map to no team, with their jobs and GPU-hours.

    GPU-hours here are whole-job (GPUs x elapsed), a size indicator for triage, not a billed figure.
    """
    return _frame(version, """SELECT cluster, account, count(*)::BIGINT AS jobs,
                            count(DISTINCT "user")::BIGINT AS users,
                            round(sum(ngpus * coalesce(elapsed_s, 0)) / 3600.0, 2)::DOUBLE AS gpu_hours,
                            min(submit) AS first_seen, max(submit) AS last_seen
                     FROM jobs
                     WHERE team IS NULL AND submit >= ? AND submit < ?
                       AND (len(?::VARCHAR[]) = 0 OR list_contains(?::VARCHAR[], cluster))
                       AND (len(?::VARCHAR[]) = 0 OR list_contains(?::VARCHAR[], partition))
                       AND (len(?::VARCHAR[]) = 0 OR list_contains(?::VARCHAR[], gpu_type))
                     GROUP BY cluster, account ORDER BY gpu_hours DESC, jobs DESC, account""",
                  [f.t0, f.t1, list(f.clusters), list(f.clusters), list(f.partitions), list(f.partitions),
                   list(f.pools), list(f.pools)])



@st.cache_data(**CACHE)
def source_status(version: str) -> pl.DataFrame:
    """Per (cluster, source) the collector service collects (`gpuledger serve`): last attempt and success (UTC),
    the time its data is complete to (UTC, sources with a watermark), consecutive failures and the last error
    (its absolute paths cut to base names); empty without the service."""
    if "source_status" not in _tables(version):
        return pl.DataFrame()
    return _frame(version, f"""SELECT cluster, source, last_attempt, last_success, complete_to, consecutive_failures,
                             {_NO_DIRS.format("last_error")} AS last_error, next_attempt,
                             lines_loaded, lines_skipped, lines_rejected
                      FROM source_status ORDER BY cluster, source""")
