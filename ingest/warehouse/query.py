"""Running SQL with named ``$parameters``: DuckDB rejects parameters a statement does not use, so these pass
only the ones it names (the models build statements from fragments that need different subsets)."""
from __future__ import annotations

import re

import duckdb
import polars as pl


def used_params(sql: str, params: dict | None) -> dict:
    """The entries of ``params`` that ``sql`` names as ``$name``."""
    names = set(re.findall(r"\$(\w+)", sql))
    return {k: v for k, v in (params or {}).items() if k in names}


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> pl.DataFrame:
    """Run ``sql`` with the named $parameters it uses and return a Polars DataFrame."""
    return con.sql(sql, params=used_params(sql, params)).pl()


def execute(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None):
    """Execute a statement with the named $parameters it uses; returns the connection's result."""
    return con.execute(sql, used_params(sql, params))


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """True when the database has table ``name`` (a migration newer than the file may not have run). On the
    dashboards' serving view the published tables are views over Parquet parts: those count too."""
    return bool(con.execute("""SELECT (SELECT count(*) FROM duckdb_tables() WHERE table_name = $n)
                                    + (SELECT count(*) FROM duckdb_views() WHERE view_name = $n AND NOT internal)""",
                            {"n": name}).fetchall()[0][0])


def known_clusters(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every cluster the warehouse knows of: configured (governance, traces), in the jobs, or in the node
    inventory (a warehouse may start with `ingest nodes --cluster C`), sorted."""
    return [r[0] for r in con.sql("""SELECT cluster FROM clusters UNION SELECT DISTINCT cluster FROM jobs
                                     UNION SELECT DISTINCT cluster FROM nodes ORDER BY 1""").fetchall()]


def only_cluster(con: duckdb.DuckDBPyConnection) -> str | None:
    """The one cluster the warehouse knows (:func:`known_clusters`), else None: an input that names no cluster
    lands there, never in a made-up one."""
    known = known_clusters(con)
    return known[0] if len(known) == 1 else None
