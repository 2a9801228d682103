"""`sacct --json` and slurmrestd's slurmdbd job lists (`/slurmdb/v0.0.XX/jobs`) as sacct records.

Slurm prints the same accounting as JSON since 21.08 (data parsers v0.0.37-v0.0.44 differ in detail: a number
is either a plain integer or ``{"set", "infinite", "number"}``, a state either a string or a list of flags).
Each job object becomes one line of ``--parsable2`` text in :data:`FIELDS` (times as UTC epoch seconds, written
out in UTC), which the sacct ingestor loads as it loads any sacct export: the same conforming, checks, merge
and rejects. A job's line number is its position in ``jobs`` (1-based), and the run counts records, not the
file's text lines. The job steps nested in a job are not loaded (as sacct's ``.batch``/``.N`` lines are
skipped). slurmctld's live job list (``/slurm/v0.0.XX/jobs``: ``job_state``, ``submit_time``) is another
format and is named in the error.
"""
from __future__ import annotations

import json

from ingest.errors import InputError
from ingest.slurm_json import number, utc_text

#: The sacct fields each job is written as; ``jobname`` last, the free-text field that absorbs a '|' in a name.
FIELDS = ["jobid", "jobidraw", "cluster", "partition", "qos", "account", "group", "user", "submit", "eligible",
          "start", "end", "elapsedraw", "exitcode", "state", "nnodes", "ncpus", "reqcpus", "reqtres", "alloctres",
          "timelimitraw", "nodelist", "reservation", "reason", "jobname"]

#: What the run notes about its counts (``ingest_runs.options``).
RECORDS_NOTE = "jobs (lines_read counts the JSON's job records; a line number is a job's position in `jobs`)"


def _tres(items) -> str:
    """A TRES list ([{"type", "name", "count"}]) as sacct's AllocTRES/ReqTRES text (mem in MB)."""
    out = []
    for t in items or []:
        count = number(t.get("count"))
        if count is None or count < 0:    # energy and the like report -2 when not gathered
            continue
        name = f"{t['type']}/{t['name']}" if t.get("name") else t["type"]
        out.append(f"{name}={count}M" if name == "mem" else f"{name}={count}")
    return ",".join(out)


def _state(job: dict) -> str:
    state = job.get("state") or {}
    cur = state.get("current") if isinstance(state, dict) else state
    base = cur[0] if isinstance(cur, list) and cur else cur if isinstance(cur, str) else ""
    by = job.get("kill_request_user")
    return f"{base} by {by}" if base == "CANCELLED" and isinstance(by, (int, str)) and str(by).isdigit() else base


def _exit(job: dict, state: str) -> str:
    ec = job.get("exit_code") or {}
    rc = number(ec.get("return_code")) if isinstance(ec, dict) else ec
    sig = ec.get("signal", {}) if isinstance(ec, dict) else {}
    sig = number(sig.get("id")) if isinstance(sig, dict) else None
    if rc is None or (state == "FAILED" and not rc and not sig):
        # Slurm 22.05's JSON (v0.0.38) prints SUCCESS/0 for a FAILED job whose sacct ExitCode is 3:0: a failure
        # with a clean exit cannot be, so the code is unknown rather than a false 0
        return ""
    return f"{rc}:{sig or 0}"


def _count(items, kind: str):
    """The count of TRES ``kind`` (cpu, node) in a TRES list, or None."""
    return next((number(x.get("count")) for x in items or [] if x.get("type") == kind), None)


def _ids(job: dict) -> tuple[str, str]:
    """(JobID as sacct prints it: 7_3 for an array task, 7+1 for a het component; JobIDRaw)."""
    raw = str(job["job_id"])
    arr, het = job.get("array") or {}, job.get("het") or {}
    task = number(arr.get("task_id")) if isinstance(arr, dict) else None
    if arr.get("job_id") and task is not None:
        return f"{arr['job_id']}_{task}", raw
    offset = number(het.get("job_offset")) if isinstance(het, dict) else None
    if het.get("job_id") and offset is not None:
        return f"{het['job_id']}+{offset}", raw
    return raw, raw


def _reservation(res) -> str | None:
    """The reservation's name; Slurm 22.05 prints {"id": 0, "name": 0} for none."""
    name = res.get("name") if isinstance(res, dict) else res
    return name if isinstance(name, str) and name else None


def _text(v) -> str:
    """Free text in a '|'-separated line: no separator, no line break."""
    return "" if v is None else str(v).replace("|", "/").replace("\n", " ")


def _line(job: dict) -> str:
    jobid, raw = _ids(job)
    t = job.get("time") or {}
    req = job.get("required") or {}
    tres = job.get("tres") or {}
    res = job.get("reservation") or {}
    state = job.get("state") or {}
    state_text = _state(job)
    # a job that never ran has no allocation: sacct prints its requested nodes and CPUs there, and so do we
    alloc, asked = tres.get("allocated"), tres.get("requested")
    nnodes = number(job.get("allocation_nodes")) or _count(alloc, "node") or _count(asked, "node")
    ncpus = _count(alloc, "cpu") or number(req.get("CPUs")) or _count(asked, "cpu")
    vals = [jobid, raw, job.get("cluster"), job.get("partition"), job.get("qos"), job.get("account"),
            job.get("group"), job.get("user"), utc_text(t.get("submission")), utc_text(t.get("eligible")),
            utc_text(t.get("start")), utc_text(t.get("end")), number(t.get("elapsed")), _exit(job, state_text.split()[0]
                                                                                      if state_text else ""),
            state_text, nnodes, ncpus, number(req.get("CPUs")), _tres(asked), _tres(alloc),
            number(t.get("limit")), job.get("nodes"), _reservation(res),
            state.get("reason") if isinstance(state, dict) else None, job.get("name")]
    return "|".join(_text(v) for v in vals)


_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _iter_jobs(text: str):
    """The records of the top-level ``jobs`` array, decoded one at a time: the document's other members (meta,
    errors, warnings) are decoded and dropped, and no list of every job is ever built (json.loads of a 100,000-job
    document held 1.7 GB of Python objects; one record at a time holds one). Raises ValueError (not a JSON
    object) or KeyError (no ``jobs`` array)."""
    i = _skip(text, 0)
    if text[i:i + 1] != "{":
        raise ValueError("not a JSON object")
    i, found = _skip(text, i + 1), False
    while text[i:i + 1] != "}":
        key, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if text[i:i + 1] != ":":
            raise ValueError(f"expected ':' at character {i}")
        i = _skip(text, i + 1)
        if key == "jobs" and text[i:i + 1] == "[":
            found, i = True, _skip(text, i + 1)
            while text[i:i + 1] != "]":
                job, i = _DECODER.raw_decode(text, i)
                yield job
                i = _skip(text, i)
                if text[i:i + 1] == ",":
                    i = _skip(text, i + 1)
                elif text[i:i + 1] != "]":
                    raise ValueError(f"expected ',' or ']' at character {i}")
            i += 1
        else:
            _, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if text[i:i + 1] == ",":
            i = _skip(text, i + 1)
        elif text[i:i + 1] != "}":
            raise ValueError(f"expected ',' or '}}' at character {i}")
    if not found:
        raise KeyError("jobs")


def _not_jobs(text: str) -> str:
    """What a JSON document without a `jobs` list is, as far as we can tell."""
    try:
        doc = json.loads(text) if '"nodes"' in text[:1 << 16] else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "nodes" in doc:
        return ("this is a node list (slurmrestd /slurm/.../nodes, `scontrol show nodes --json`): load it with "
                "`gpuledger ingest nodes`")
    return "JSON without a `jobs` list: not `sacct --json` or slurmrestd /slurmdb/.../jobs"


def to_sacct_text(data: bytes, name: str) -> bytes:
    """The jobs of a `sacct --json` / slurmdbd jobs document as ``|``-separated lines in :data:`FIELDS`, one per
    job in the document's order; an error names what the input is when it is not that."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(name, f"not JSON: {exc}") from exc
    out = []
    try:
        for n, job in enumerate(_iter_jobs(text), start=1):
            if n == 1 and isinstance(job, dict) and "job_state" in job and "state" not in job:
                raise InputError(name, "this is slurmctld's live job list (slurmrestd /slurm/.../jobs, "
                                       "`squeue --json`): load it with `gpuledger ingest squeue`; accounting comes "
                                       "from `sacct --json` or /slurmdb/.../jobs")
            try:
                out.append(_line(job))
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                # a record we cannot read becomes a line the sacct checks reject, with its place kept
                out.append(f"bad job record {n}: {type(exc).__name__} {exc}".replace("|", "/"))
    except KeyError:
        raise InputError(name, _not_jobs(text)) from None
    except ValueError as exc:     # json.JSONDecodeError included
        raise InputError(name, f"not JSON: {exc}") from exc
    return ("\n".join(out) + ("\n" if out else "")).encode()
