"""slurmrestd's reservation list (``/slurm/v0.0.XX/reservations``, and `scontrol show reservation --json` where
Slurm has it) as `scontrol show reservation -o` lines.

Each reservation object becomes the one-line record scontrol prints for it (ReservationName=, StartTime= and
EndTime= in UTC, Nodes=, TRES=, Users=, Accounts=, Flags=), which the reservation ingestor loads as it loads any
scontrol listing: the same checks, merge and rejects. A reservation's line number is its position in
``reservations`` (1-based). Data parsers differ in detail: times are plain numbers (v0.0.38) or ``{"set",
"infinite", "number"}`` (read by :func:`slurm_json.number`), flags a list. The cluster the answer names
(``meta.slurm.cluster``, 24.05 and later) is returned for the ingestor's default.
"""
from __future__ import annotations

from ingest.slurm_json import list_text, meta_cluster, number, record_lines, records, utc_text


def _text(v) -> str:
    """A list or a string as scontrol prints it: comma-separated, no spaces (a value ends at a space)."""
    return list_text(v).replace(" ", "_")


def _time(v) -> str:
    """UTC as scontrol prints it with TZ=UTC; an unset or infinite time is left for the checks to name."""
    return "" if number(v) is None else utc_text(v)


def _line(res: dict) -> str:
    pairs = {"ReservationName": _text(res["name"]), "StartTime": _time(res.get("start_time")),
             "EndTime": _time(res.get("end_time")), "Nodes": _text(res.get("node_list")),
             "TRES": _text(res.get("tres")), "Users": _text(res.get("users")),
             "Accounts": _text(res.get("accounts")), "Flags": _text(res.get("flags"))}
    return " ".join(f"{k}={v if v else '(null)'}" for k, v in pairs.items())


def to_scontrol_lines(data: bytes, name: str) -> tuple[list[str], str | None]:
    """The reservations of a JSON reservation list as `scontrol show reservation -o` lines, in the document's
    order (an object we cannot read becomes a line the checks reject, its place kept), and the cluster its
    ``meta`` names or None. An error names what the input is when it is not such a list."""
    doc, items = records(data, name, "reservations", "slurmrestd /slurm/.../reservations")
    return record_lines(items, _line, _unreadable), meta_cluster(doc)


def _unreadable(n: int, res, exc: Exception) -> str:
    """A record the checks reject: no name (what a KeyError means here), else a start no one can read."""
    named = _text(res.get("name")) if isinstance(res, dict) else ""
    return f"ReservationName={named} StartTime=unreadable-record-{n}:{type(exc).__name__}"
