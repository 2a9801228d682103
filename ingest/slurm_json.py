"""What every Slurm JSON answer shares (`sacct --json`, `squeue --json`, `scontrol show nodes --json` and
slurmrestd's /slurm and /slurmdb answers, data parsers v0.0.37-v0.0.44): recognising JSON, reading its numbers
and times, finding its list of records and the cluster its ``meta`` names. Each source's module
(``sacct_json``, ``squeue_json``, ``slurm_nodes_json``, ``reservations_json``) writes its records as the text
lines of the command users already run.
"""
from __future__ import annotations

import datetime as dt
import json

from ingest.errors import InputError

_EPOCH = dt.datetime(1970, 1, 1)


def looks_like_json(data: bytes) -> bool:
    """Whether an input is JSON rather than sacct text (its first non-blank byte opens an object)."""
    head = bytes(data[:4096]).lstrip()
    return head[:1] == b"{"


def number(v):
    """A number as Slurm's JSON prints it: an integer, or {"set": .., "infinite": .., "number": ..}."""
    if isinstance(v, dict):
        return None if not v.get("set", True) or v.get("infinite") else v.get("number")
    return v


def utc_text(v) -> str:
    """Epoch seconds (0 or unset: not happened) as sacct prints a UTC time; a value that is no time gives a text
    the time checks reject (naming it), never an exception."""
    n = number(v)
    if not n:
        return "Unknown"
    try:
        return (_EPOCH + dt.timedelta(seconds=int(n))).strftime("%Y-%m-%dT%H:%M:%S")
    except (TypeError, ValueError, OverflowError):
        return f"not-a-time-{type(n).__name__}"


def records(data: bytes, name: str, key: str, what: str, hints: dict | None = None) -> tuple[dict, list]:
    """(document, its ``key`` list) of a JSON answer; InputError naming the input when it is not JSON or has no
    such list (``what``: the commands that print one; ``hints``: {another key: what to add when the document
    has it}, e.g. the answer of another command)."""
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(name, f"not JSON: {exc}") from exc
    items = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        hint = next((h for k, h in (hints or {}).items() if isinstance(doc, dict) and k in doc), "")
        raise InputError(name, f"JSON without a `{key}` list: not {what}{hint}")
    return doc, items


def meta_cluster(doc: dict) -> str | None:
    """The cluster an answer's ``meta.slurm.cluster`` names (slurmrestd 24.05 and later), else None."""
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    slurm = meta.get("slurm") if isinstance(meta.get("slurm"), dict) else {}
    return slurm.get("cluster") or None


def list_text(v) -> str:
    """A list (v0.0.39+) or a string (v0.0.38) as the text commands print: comma-separated."""
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return "" if v is None else str(v)


def record_lines(items: list, line, unreadable) -> list[str]:
    """``line(item)`` for each record of a JSON list, in order; a record it cannot read (a missing key, a value of
    the wrong kind) becomes ``unreadable(n, item, exc)``, a line the text checks reject, its place kept."""
    out = []
    for n, item in enumerate(items, start=1):
        try:
            out.append(line(item))
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as exc:
            out.append(unreadable(n, item, exc))
    return out
