"""Errors an ingestor raises for input a user must fix: printed as one line naming file, line and field."""
from __future__ import annotations


class InputError(Exception):
    """Input that cannot be read at all (missing file, wrong format); nothing of it is loaded."""

    def __init__(self, source: str, message: str, line_no: int | None = None, field: str | None = None):
        self.source, self.line_no, self.field, self.message = source, line_no, field, message
        where = source + (f":{line_no}" if line_no is not None else "")
        what = f"field {field}: " if field else ""
        super().__init__(f"{where}: {what}{message}")
