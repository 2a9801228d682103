"""Node lists as JSON (`scontrol show nodes --json`, slurmrestd's ``/slurm/v0.0.XX/nodes``, and Slurm 22.05's
`sinfo --json`) as `scontrol show node -o` lines.

Each node object becomes the one-line record scontrol prints for it (NodeName=, Gres=, State=...), which the
node ingestor loads as it loads any scontrol snapshot: the same parsing, checks, validity periods and rejects.
A node's line number is its position in ``nodes`` (1-based), and the run counts records, not the file's text
lines. Data parsers differ in detail: v0.0.38 (22.05) prints ``state`` as a string with ``state_flags`` beside
it and features as text; v0.0.39 and later print ``state`` as a list (``["IDLE", "DRAIN"]``) and features as
lists; a number is either plain or ``{"set", "infinite", "number"}`` (read by :func:`slurm_json.number`).
"""
from __future__ import annotations

from ingest.slurm_json import list_text, meta_cluster, number, records, utc_text

#: What the run notes about its counts (``ingest_runs.options``).
RECORDS_NOTE = "nodes (lines_read counts the JSON's node records; a line number is a node's position in `nodes`)"


def _state(node: dict) -> str:
    """scontrol's State: the base state and its flags joined by '+', '*' when the node is not responding."""
    state = node.get("state")
    tokens = [str(t).upper() for t in (state if isinstance(state, list) else [state] if state else [])]
    tokens += [str(t).upper() for t in node.get("state_flags") or []]
    responding = [t for t in tokens if t != "NOT_RESPONDING"]
    star = "*" if len(responding) < len(tokens) else ""
    return ("+".join(responding) or "UNKNOWN") + star


def _reason(node: dict) -> str:
    """The Reason as scontrol prints it: the text, then who set it and when (UTC), ``Down [root@2026-...]``."""
    text, who = list_text(node.get("reason")), node.get("reason_set_by_user")
    if not text or not who:
        return text
    when = utc_text(node.get("reason_changed_at"))
    return f"{text} [{who}@{when}]" if when != "Unknown" else f"{text} [{who}]"


def _line(node: dict) -> str:
    """One node object as the line `scontrol show node -o` prints (only the keys the ingestor reads; Reason last,
    since it is free text)."""
    pairs = {"NodeName": node["name"], "Gres": list_text(node.get("gres")) or "(null)",
             "CfgTRES": list_text(node.get("tres")), "Partitions": list_text(node.get("partitions")),
             "CPUTot": number(node.get("cpus")), "RealMemory": number(node.get("real_memory")),
             "ActiveFeatures": list_text(node.get("active_features") or node.get("features")),
             "State": _state(node), "GresUsed": list_text(node.get("gres_used")),
             "AllocTRES": list_text(node.get("tres_used")), "Reason": _reason(node)}
    return " ".join(f"{k}={'' if v is None else v}" for k, v in pairs.items())


def to_scontrol_lines(data: bytes, name: str) -> tuple[list[str | None], dict[int, str], str | None]:
    """The nodes of a JSON node list as `scontrol show node -o` lines, in the document's order (None for an
    object we cannot read), the reasons of those by position (1-based), and the cluster the document's ``meta``
    names (slurmrestd 24.05 and later) or None. An error names what the input is when it is not such a list."""
    doc, items = records(data, name, "nodes", "`scontrol show nodes --json` or slurmrestd /slurm/.../nodes",
                         {"sinfo": " (`sinfo --json` of Slurm 23.02 and later lists groups of nodes: give `scontrol "
                                   "show nodes --json` or slurmrestd's /slurm/v0.0.XX/nodes)"})
    lines: list[str | None] = []
    bad: dict[int, str] = {}
    for n, node in enumerate(items, start=1):
        try:
            lines.append(_line(node))
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as exc:
            lines.append(None)
            bad[n] = f"cannot read node record {n}: {type(exc).__name__} {exc}"
    return lines, bad, meta_cluster(doc)
