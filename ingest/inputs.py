"""Reading an ingestor's input: a file, or standard input for '-'."""
from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from ingest.errors import InputError


def check_zone(con, tz: str, option: str = "--tz") -> None:
    """An InputError naming ``option`` unless DuckDB knows the time zone ``tz`` (it reads the local times)."""
    try:
        con.execute("SELECT timezone(?, TIMESTAMP '2000-01-01')", [tz]).fetchall()
    except duckdb.Error:
        raise InputError(option, f"unknown time zone {tz!r} (use an IANA name like Europe/Berlin)") from None


def read_input(path: str) -> tuple[bytes, str]:
    """(bytes, display name) of a file or of stdin for '-'; a missing or unreadable file is an InputError."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    p = Path(path)
    try:
        return p.read_bytes(), str(p)
    except FileNotFoundError as exc:
        raise InputError(str(p), "no such file") from exc
    except IsADirectoryError as exc:
        raise InputError(str(p), "is a directory, expected a file") from exc
    except PermissionError as exc:
        raise InputError(str(p), "permission denied") from exc
