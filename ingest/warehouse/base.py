"""The warehouse's ground rules: its errors, its clock (naive UTC) and its transactions."""
from __future__ import annotations

import contextlib
import datetime as dt
import os

import duckdb

ENV_MEMORY_LIMIT = "GPULEDGER_MEMORY_LIMIT"   # DuckDB memory_limit for every connection, e.g. 8GB


class WarehouseError(Exception):
    """A problem with the warehouse file itself (missing, locked, unreadable, newer schema)."""


def utcnow() -> dt.datetime:
    """Current UTC time as a naive datetime (the warehouse stores naive UTC), to the microsecond."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection):
    """BEGIN ... COMMIT around the block; ROLLBACK and re-raise if it fails."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def bounded_memory(con: duckdb.DuckDBPyConnection, limit: str):
    """DuckDB's memory limit set to ``limit`` (e.g. "2GB") inside the block, unless ``$GPULEDGER_MEMORY_LIMIT``
    sets one for the whole session.

    DuckDB keeps the pages it writes cached up to its limit (80 % of RAM by default), so a long streaming
    load grows to gigabytes it does not need; the work of each of its batches fits in far less."""
    if os.environ.get(ENV_MEMORY_LIMIT):
        yield
        return
    con.execute("SET memory_limit = ?", [limit])
    try:
        yield
    finally:
        con.execute("RESET memory_limit")
