"""Reservations: reserved vs used GPU-hours per advance reservation, the reserved GPUs left idle, and who owns them.

Definitions (docs/METRICS.md, "Reservations"):

- a reservation's GPUs on each of its nodes: the node's GPUs in the inventory valid at the reservation's start;
  when its TRES prints ``gres/gpu=N`` the nodes' GPUs are scaled to N in total (a partial reservation);
- reserved GPU-seconds = GPUs x the part of [start, end) inside the window and the cluster's data span;
- used = GPU-seconds of the jobs that ran inside it (sacct's ``Reservation`` column, kept in ``jobs.extra``) on
  its nodes during it; other = GPU-seconds of any other job on its nodes during it (``IGNORE_JOBS`` lets a
  reservation start over running jobs);
- reserved idle, per node = max(0, min(reserved - used, node GPUs x time - all jobs' GPUs x time)): reserved GPUs
  that no job held (a GPU another job held is not idle);
- owner: the first of the reservation's Accounts, else of its Users; team = the governance team map's match for
  that account/user (the jobs' rule: lowest priority number wins), else ``(unmapped)``.

Times naive UTC, windows half-open; GPU-hours = GPU-seconds / 3600.
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from ingest.warehouse import frame, has_table
from models.definitions.jobs_sql import end_eff_sql
from models.definitions.labels import UNMAPPED, UNTYPED
from models.metrics import timeline

#: Per reservation, node and pool: reserved, used (jobs inside it), all jobs' and idle GPU-seconds in [$s, $e).
PER_NODE_SQL = f"""
    WITH r AS (
      SELECT r.*, nullif(split_part(coalesce(r.accounts, ''), ',', 1), '') AS owner_account,
             nullif(split_part(coalesce(r.users, ''), ',', 1), '') AS owner_user,
             greatest(r.start, $s, c.data_start) AS w0, least(r."end", $e, c.horizon) AS w1
      FROM reservations r JOIN tl_clusters c USING (cluster)
      WHERE r.start < $e AND r."end" > $s),
    rn AS (
      SELECT r.cluster, r.name, r.start, r.w0, r.w1, r.gpus AS tres_gpus, trim(x.node) AS node
      FROM r, unnest(string_split(coalesce(r.nodes, ''), ',')) AS x(node) WHERE r.w1 > r.w0 AND x.node <> ''),
    inv AS (
      SELECT rn.*, coalesce(n.gpus, 0) AS node_gpus, coalesce(n.gpu_type, '{UNTYPED}') AS gpu_type,
             sum(coalesce(n.gpus, 0)) OVER (PARTITION BY rn.cluster, rn.name, rn.start) AS resv_node_gpus
      FROM rn LEFT JOIN nodes n ON n.cluster = rn.cluster AND n.node = rn.node
       AND (n.valid_from IS NULL OR n.valid_from <= rn.start) AND (n.valid_to IS NULL OR n.valid_to > rn.start)),
    -- the placements on reserved nodes that overlap any reservation, first (materialised: the planner must not
    -- join every job to every placement before the node filter)
    x AS MATERIALIZED (
      SELECT jn.cluster, jn.node, jn.job_uid, jn.gpus_on_node, j.start, {end_eff_sql('c.horizon')} AS e,
             coalesce(json_extract_string(j.extra, '$.reservation'), '') AS resv
      FROM job_nodes jn JOIN jobs j ON j.job_uid = jn.job_uid JOIN tl_clusters c ON c.cluster = j.cluster
      WHERE (jn.cluster, jn.node) IN (SELECT cluster, node FROM inv)
        AND j.start < (SELECT max(w1) FROM inv) AND {end_eff_sql('c.horizon')} > (SELECT min(w0) FROM inv)),
    held AS (
      SELECT inv.cluster, inv.name, inv.start, inv.node, x.job_uid, x.resv = inv.name AS inside,
             x.gpus_on_node * greatest(0, epoch(least(x.e, inv.w1) - greatest(x.start, inv.w0))) AS gpu_s
      FROM inv JOIN x ON x.cluster = inv.cluster AND x.node = inv.node
      WHERE x.start < inv.w1 AND x.e > inv.w0),
    h AS (SELECT cluster, name, start, node, sum(gpu_s) FILTER (inside) AS used_s, sum(gpu_s) AS all_s,
                 count(DISTINCT job_uid) FILTER (inside) AS jobs
          FROM held GROUP BY ALL)
    SELECT inv.cluster, inv.name, inv.start, inv.node, inv.gpu_type, inv.w0, inv.w1,
           CASE WHEN inv.tres_gpus IS NULL OR inv.resv_node_gpus = 0 THEN inv.node_gpus
                ELSE inv.node_gpus * inv.tres_gpus / inv.resv_node_gpus END AS gpus,
           epoch(inv.w1 - inv.w0) AS span_s, inv.node_gpus * epoch(inv.w1 - inv.w0) AS node_s,
           coalesce(h.used_s, 0) AS used_s, coalesce(h.all_s, 0) AS all_s, coalesce(h.jobs, 0) AS jobs
    FROM inv LEFT JOIN h USING (cluster, name, start, node)"""

def owner_team_sql(r: str, team_map: str = "team_map") -> str:
    """SQL for the team owning the reservation row aliased ``r``: its first account and first user matched against
    ``team_map``'s patterns as a job's account and user are (the lowest priority number wins); NULL when no mapping
    matches. One rule for the report and for a team-scoped read (dashboards/access.py), which keeps a team's own
    reservations' owners."""
    account = f"nullif(split_part(coalesce({r}.accounts, ''), ',', 1), '')"
    user = f"nullif(split_part(coalesce({r}.users, ''), ',', 1), '')"
    return f"""(SELECT arg_min(t.team, t.priority) FROM {team_map} t
        WHERE (t.cluster IS NULL OR t.cluster = {r}.cluster)
          AND (t.account_pattern IS NULL OR {account} LIKE t.account_pattern ESCAPE '\\')
          AND (t.user_pattern IS NULL OR {user} LIKE t.user_pattern ESCAPE '\\')
          AND (t.account_pattern IS NOT NULL OR t.user_pattern IS NOT NULL))"""


#: Owner and team of each reservation (the jobs' team rule over team_map: lowest priority number wins).
OWNER_SQL = f"""
    SELECT r.cluster, r.name, r.start, r."end", r.accounts, r.users, r.flags, r.nodelist,
           nullif(split_part(coalesce(r.accounts, ''), ',', 1), '') AS owner_account,
           nullif(split_part(coalesce(r.users, ''), ',', 1), '') AS owner_user,
           coalesce({owner_team_sql('r')}, '{UNMAPPED}') AS team
    FROM reservations r"""


def per_node(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Per reservation, node and pool inside [start, end): gpus, reserved/used/idle GPU-seconds (see module)."""
    if not has_table(con, "reservations") or not has_table(con, "tl_clusters"):
        return pl.DataFrame()
    df = frame(con, PER_NODE_SQL, {"s": start, "e": end})
    if df.is_empty():
        return df
    return df.with_columns((pl.col("gpus") * pl.col("span_s")).alias("reserved_s")).with_columns(
        pl.max_horizontal(pl.lit(0.0), pl.min_horizontal(pl.col("reserved_s") - pl.col("used_s"),
                                                         pl.col("node_s") - pl.col("all_s"))).alias("idle_s"))


def loaded(con) -> bool:
    """Whether any reservation was ever loaded (`ingest reservations`): without, "0 reserved idle" is not known."""
    return has_table(con, "reservations") and bool(con.sql("SELECT count(*) FROM reservations").fetchall()[0][0])


def report(con, start=None, end=None) -> pl.DataFrame:
    """One row per reservation overlapping [start, end): owner (account, user, team), its interval, nodes, GPUs,
    reserved, used (by jobs inside it), other jobs' and idle GPU-hours, and the share used."""
    win = timeline.resolve_window(con, start, end)
    if win is None or not has_table(con, "reservations"):
        return pl.DataFrame()
    nodes = per_node(con, *win)
    owners = frame(con, OWNER_SQL)
    if nodes.is_empty() or owners.is_empty():
        return pl.DataFrame()
    per = nodes.group_by("cluster", "name", "start").agg(
        pl.col("gpus").sum().alias("gpus"), pl.col("gpu_type").unique().sort().str.join("+").alias("gpu_type"),
        (pl.col("reserved_s").sum() / 3600).alias("reserved_gpu_h"), (pl.col("used_s").sum() / 3600).alias("used_gpu_h"),
        ((pl.col("all_s") - pl.col("used_s")).sum() / 3600).alias("other_jobs_gpu_h"),
        (pl.col("idle_s").sum() / 3600).alias("reserved_idle_gpu_h"), pl.col("jobs").max().alias("jobs"))
    out = owners.join(per, on=["cluster", "name", "start"], how="inner").with_columns(
        (pl.col("used_gpu_h") / pl.col("reserved_gpu_h")).fill_nan(None).alias("used_share"))
    return out.select("cluster", "name", "team", "owner_account", "owner_user", "start", "end", "nodelist", "gpu_type",
                      "gpus", "flags", "jobs", "reserved_gpu_h", "used_gpu_h", "other_jobs_gpu_h",
                      "reserved_idle_gpu_h", "used_share").sort("cluster", "start", "name")


def idle_by_owner(con, windows: list[tuple[dt.datetime, dt.datetime]]) -> pl.DataFrame:
    """Reserved-idle GPU-seconds per window (w0, w1), cluster, pool and owner (team, else account): the chargeback's
    "reserved idle" lines (models/metrics/chargeback.py)."""
    schema = {"w0": pl.Datetime("us"), "w1": pl.Datetime("us"), "cluster": pl.String, "gpu_type": pl.String,
              "name": pl.String, "team": pl.String, "account": pl.String, "idle_s": pl.Float64}
    if not loaded(con):
        return pl.DataFrame(schema=schema)
    owners = frame(con, OWNER_SQL).select("cluster", "name", "start", "team", "owner_account", "owner_user")
    frames = []
    for w0, w1 in windows:
        n = per_node(con, w0, w1)
        if n.height:
            frames.append(n.with_columns(w0=pl.lit(w0, pl.Datetime("us")), w1=pl.lit(w1, pl.Datetime("us"))))
    if not frames:
        return pl.DataFrame(schema=schema)
    df = pl.concat(frames).join(owners, on=["cluster", "name", "start"], how="inner")
    return (df.with_columns(pl.when(pl.col("team") == UNMAPPED).then(None).otherwise(pl.col("team")).alias("team"),
                            pl.when(pl.col("team") == UNMAPPED)
                            .then(pl.coalesce("owner_account", "owner_user", pl.lit("(none)")))
                            .alias("account"))
            .group_by("w0", "w1", "cluster", "gpu_type", "name", "team", "account")
            .agg(pl.col("idle_s").sum()).filter(pl.col("idle_s") > 0).select(list(schema)).cast(schema)
            .sort("w0", "cluster", "gpu_type", "name"))
