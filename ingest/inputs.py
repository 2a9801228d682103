"""Reading an ingestor's input: a file, or standard input for '-'."""
from __future__ import annotations

import sys
from pathlib import Path

from ingest.errors import InputError


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
