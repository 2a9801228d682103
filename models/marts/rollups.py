"""Daily and hourly rollups of the timeline by job attributes (a step of :mod:`models.marts.timeline`):

- ``tl_demand_daily``: GPU-seconds held per UTC day, node class and job attributes (team, account, user, job
  partition, QOS) — what slurmdbd's association usage tables are to sreport's per-account reports;
- ``tl_pending_hourly``: GPU-seconds of eligible waits per hour and request (partitions named, typed GPU);
- ``tl_pending_team_daily``, ``tl_decay_daily``: the fairness report's pending demand per pool and team, and
  allocated GPU-seconds decayed to each day's start at the governance's half-life (the pending intervals of
  models/definitions/jobs_sql.py, the decay of models/kernels/decay.py).

Both are rebuilt from a given day / hour on. Intervals are integrated period by period in numpy
(:func:`models.kernels.intervals.hour_integrals`): one row per job piece or wait, never one per hour it lasted.
"""
from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from ingest import warehouse
from models.definitions.jobs_sql import (PARTITION_POOL_SQL, PENDING_TEAM_INTERVALS_SQL, pending_from_sql,
                                         pending_until_sql, req_gpus_sql)
from models.kernels.decay import DECAY_PIECES_SQL
from models.kernels.intervals import DAY_US, HOUR_US, decayed_day_integrals, hour_integrals

DEMAND_KEYS = ("gpu_type", "partitions", "team", "account", "user", "job_partition", "qos")
PENDING_KEYS = ("partition", "gpu_type")

#: Job pieces holding GPUs from $H on (a UTC midnight), with the job's attributes and their hash as group key.
DEMAND_PIECES_SQL = """
    SELECT hash(a.gpu_type, a.partitions, j.team, j.account, j."user", j.partition, j.qos) AS k,
           a.gpu_type, a.partitions, j.team, j.account, j."user", j.partition AS job_partition, j.qos,
           epoch_us(greatest(a.t0, $H)) AS t0, epoch_us(a.t1) AS t1, a.gpus AS v
    FROM tl_job_alloc a JOIN jobs j ON j.job_uid = a.job_uid
    WHERE a.cluster = $c AND a.t1 > $H"""

#: Queue waits of GPU jobs from $H on, clipped to the data span [$ds, $hz) (models/definitions/jobs_sql.py: from
#: queue entry to start; a job never started waits until it ended (cancelled) or, still pending, the horizon).
PENDING_WAITS_SQL = f"""
    SELECT hash(partition, gpu_type) AS k, partition, gpu_type, epoch_us(p0) AS t0, epoch_us(p1) AS t1, g AS v
    FROM (SELECT j.partition, j.gpu_type, {req_gpus_sql()} AS g,
                 greatest({pending_from_sql()}, $H, $ds) AS p0, {pending_until_sql('$hz')} AS p1
          FROM jobs j WHERE j.cluster = $c AND {pending_from_sql()} < $hz)
    WHERE g > 0 AND p1 > p0"""


def _rollup(con, c: str, H: dt.datetime, sql: str, keys: tuple[str, ...], value: str, table: str,
            params: dict, period: str) -> None:
    """Integrate the intervals ``sql`` returns (k, keys..., t0, t1, v) per key and ``period`` (hour or day)
    into ``table``, from H on."""
    con.execute(f"DELETE FROM {table} WHERE cluster = $c AND {period} >= $H", {"c": c, "H": H})
    warehouse.note_changed(con, table, H)
    con.execute("CREATE OR REPLACE TEMP TABLE _rollup_in AS " + sql, params)
    try:
        arr = _numbered(con, keys)
        if not len(arr["gid"]):
            return
        g, when, out = hour_integrals(arr["gid"], arr["t0"], arr["t1"], {value: arr["v"].astype(float)},
                                      DAY_US if period == "day" else HOUR_US)
        _insert(con, c, table, period, keys, pl.DataFrame({"gid": g, "t": pl.Series(when).cast(pl.Datetime("us")),
                                                           value: out[value]}))
    finally:
        con.execute("DROP TABLE IF EXISTS _rollup_in")
        con.execute("DROP TABLE IF EXISTS _rollup_keys")


def _numbered(con, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The intervals of ``_rollup_in`` with a dense group number ``gid`` per key tuple, numbered by DuckDB's hash
    aggregate into ``_rollup_keys`` (a numpy sort of millions of hashes cost seconds)."""
    cols = ", ".join(f'"{k}"' for k in keys)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _rollup_keys AS
                    SELECT (row_number() OVER () - 1)::BIGINT AS gid, * FROM (SELECT DISTINCT k, {cols} FROM _rollup_in)""")
    return con.sql("SELECT g.gid, r.t0, r.t1, r.v FROM _rollup_in r JOIN _rollup_keys g USING (k)").fetchnumpy()


def _insert(con, c: str, table: str, period: str, keys: tuple[str, ...], frame: pl.DataFrame) -> None:
    """Insert per-group results (``gid``, ``t``, value columns) into ``table`` with the group's key columns."""
    cols = [f'"{k}"' for k in keys]
    values = [v for v in frame.columns if v not in ("gid", "t")]
    con.register("_rollup_out", frame)
    try:
        con.execute(f"""INSERT INTO {table} (cluster, {period}, {', '.join(cols + values)})
                        SELECT $c, f.t, {', '.join('n.' + k for k in cols)}, {', '.join('f.' + v for v in values)}
                        FROM _rollup_out f JOIN _rollup_keys n USING (gid) ORDER BY f.t""", {"c": c})
    finally:
        con.unregister("_rollup_out")


def demand_rollup(con, c: str, D: dt.datetime) -> None:
    """Rebuild tl_demand_daily of cluster ``c`` from UTC midnight ``D`` on (tl_job_alloc must be current)."""
    _rollup(con, c, D, DEMAND_PIECES_SQL, DEMAND_KEYS, "gpu_s", "tl_demand_daily", {"c": c, "H": D}, "day")


def pending_rollup(con, c: str, H: dt.datetime, ds: dt.datetime, hz: dt.datetime) -> None:
    """Rebuild tl_pending_hourly of cluster ``c`` from hour ``H`` on."""
    _rollup(con, c, H, PENDING_WAITS_SQL, PENDING_KEYS, "pend_s", "tl_pending_hourly",
            {"c": c, "H": H, "ds": ds, "hz": hz}, "hour")


def fairness_rollup(con, c: str, D: dt.datetime, hz: dt.datetime, half_life_s: float | None) -> None:
    """Rebuild cluster ``c``'s tl_pending_team_daily and tl_decay_daily from UTC midnight ``D`` on (tl_job_alloc
    must be current); without a half-life (no governance loaded) there is nothing to decay."""
    _rollup(con, c, D, PENDING_TEAM_INTERVALS_SQL, ("pool", "team"), "pend_s", "tl_pending_team_daily",
            {"c": c, "H": D, "hz": hz}, "day")
    con.execute("DELETE FROM tl_decay_daily WHERE cluster = $c AND day >= $H", {"c": c, "H": D})
    if half_life_s is None:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE _rollup_in AS " + DECAY_PIECES_SQL, {"c": c, "H": D})
    try:
        keys = ("pool", "team", "account")
        arr = _numbered(con, keys)
        if not len(arr["gid"]):
            return
        g, day, val = decayed_day_integrals(arr["gid"], arr["t0"], arr["t1"], arr["v"].astype(float), half_life_s)
        _insert(con, c, "tl_decay_daily", "day", keys,
                pl.DataFrame({"gid": g, "t": pl.Series(day).cast(pl.Datetime("us")), "decayed_s": val}))
    finally:
        con.execute("DROP TABLE IF EXISTS _rollup_in")
        con.execute("DROP TABLE IF EXISTS _rollup_keys")


def fairness_fingerprint(con, c: str, half_life_s: float | None) -> int:
    """A hash of what the fairness rollups depend on besides the jobs: each partition's pool from the current
    inventory (the pool of an untyped request) and the half-life. A change rebuilds them whole."""
    return con.execute(f"""SELECT ((coalesce(sum(hash(partition || '|' || coalesce(pool, '<none>'))), 0)
                                    + hash(coalesce($h, -1.0))) % 18446744073709551557)::UBIGINT
                           FROM ({PARTITION_POOL_SQL}) WHERE cluster = $c""",
                       {"c": c, "h": half_life_s}).fetchall()[0][0]


def team_fingerprint(con, c: str) -> int:
    """A hash of cluster ``c``'s team mapping as the jobs carry it (each account and user with its team): when
    governance re-maps teams, the rollups keyed by team are rebuilt whole. New jobs of known accounts and users
    leave it unchanged (their rows are rebuilt from their own times); a new account or user changes it."""
    # a sum of hashes of one string per combination (DuckDB combines multi-argument hashes by xor, which would
    # cancel for two combinations sharing a team)
    return con.execute("""SELECT (coalesce(sum(hash(s)), 0) % 18446744073709551557)::UBIGINT
                          FROM (SELECT DISTINCT coalesce(account, '<none>') || '|' || coalesce("user", '<none>')
                                                || '|' || coalesce(team, '<unmapped>') AS s
                                FROM jobs WHERE cluster = ?)""", [c]).fetchall()[0][0]
