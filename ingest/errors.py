"""Errors an ingestor raises for input a user must fix: printed as one line naming file, line and field."""
from __future__ import annotations

import re
import tomllib


class InputError(Exception):
    """Input that cannot be read at all (missing file, wrong format); nothing of it is loaded."""

    def __init__(self, source: str, message: str, line_no: int | None = None, field: str | None = None):
        self.source, self.line_no, self.field, self.message = source, line_no, field, message
        where = source + (f":{line_no}" if line_no is not None else "")
        what = f"field {field}: " if field else ""
        super().__init__(f"{where}: {what}{message}")


def load_toml(text: str, source: str) -> dict:
    """Parse a TOML document; a syntax error becomes one InputError line naming the file and line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"at line (\d+)", str(exc))
        raise InputError(source, f"not valid TOML: {str(exc).split(' (at line')[0]}",
                         line_no=int(m.group(1)) if m else None) from None
