"""`squeue --json` and slurmrestd's live job list (``/slurm/v0.0.XX/jobs``) as ``squeue --Format`` lines.

Each job object becomes the line ``squeue --array --Format`` prints for it in ``squeue.LIVE_FIELDS`` (SubmitTime
in UTC; the pending rest of an array one line per task, as ``--array`` prints it), which the squeue ingestor
loads as it loads any snapshot: the same checks and rejects. The run counts those lines. Data parsers differ in
detail: v0.0.38 (22.05) prints ``job_state`` as a string and numbers plain; v0.0.39 and later print ``job_state``
as a list of flags and numbers as ``{"set", "infinite", "number"}`` (read by :func:`slurm_json.number`). The list
holds every job slurmctld still knows, finished ones too (squeue's text shows only the queue); the pending-reason
model reads the PENDING rows, as it does of any snapshot.
"""
from __future__ import annotations

import re

from ingest.errors import InputError
from ingest.slurm_json import number, records, utc_text

#: Fields per line (squeue.LIVE_FIELDS, whose module imports this one).
_WIDTH = 15

#: What the run notes about its counts (``ingest_runs.options``).
RECORDS_NOTE = ("jobs (lines_read counts the jobs and array tasks of the JSON's records, in their order: a pending "
                "array record is one line per task)")


def _tasks(spec: str) -> list[int] | None:
    """Task ids of an array spec as Slurm prints it (``2-5%2``, ``1,3,7-9``, ``0-20:5``); None when unreadable."""
    out = []
    for part in spec.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not m:
            return None
        lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        out.extend(range(lo, hi + 1, max(step, 1)))
    return out


def _job_ids(job: dict) -> list[str]:
    """JobIDs as ``squeue --array`` prints them: 7_3 for an array task, one line per task for the pending rest of
    an array (7_4, 7_5 ... of ``array_task_string`` 4-9%2; 7_[spec] when the spec cannot be read), 7+1 for a het
    component, else the job id."""
    array_id, task = number(job.get("array_job_id")), number(job.get("array_task_id"))
    rest = job.get("array_task_string") or ""
    if array_id and task is not None:
        return [f"{array_id}_{task}"]
    if array_id and rest:
        tasks = _tasks(rest)
        return [f"{array_id}_{t}" for t in tasks] if tasks else [f"{array_id}_[{rest}]"]
    het_id, offset = number(job.get("het_job_id")), number(job.get("het_job_offset"))
    if het_id and offset is not None:
        return [f"{het_id}+{offset}"]
    return [str(number(job["job_id"]))]


def _state(job: dict) -> str:
    """The base state (a list's first flag, v0.0.39+; the string, v0.0.38)."""
    state = job["job_state"]
    return str(state[0] if isinstance(state, list) else state)


def _lines(job: dict) -> list[str]:
    """One job object as ``|``-separated lines in ``squeue.LIVE_FIELDS`` order (one per task of a pending
    array's rest, as ``squeue --array`` prints them)."""
    submit = utc_text(job.get("submit_time"))
    values = [job.get("cluster"), _state(job), job.get("state_reason"), job.get("tres_per_job"),
              job.get("tres_per_node"), job.get("tres_alloc_str"), number(job.get("node_count")),
              job.get("partition"), job.get("account"), job.get("user_name"), job.get("qos"),
              "" if submit == "Unknown" else submit, job.get("resv_name"), job.get("name")]
    # a '|' inside a value would shift the fields; the name is the last field, whose '|' the squeue parser keeps
    rest = "|".join("" if v is None else str(v) if k == len(values) - 1 else str(v).replace("|", "/")
                    for k, v in enumerate(values))
    return [f"{job_id}|{rest}" for job_id in _job_ids(job)]


def to_squeue_lines(data: bytes, name: str) -> list[str]:
    """The jobs of a `squeue --json` / slurmctld jobs document as lines in ``squeue.LIVE_FIELDS`` order, one per
    job in the document's order; an object we cannot read becomes a line the squeue checks reject, with its
    place kept. An error names what the input is when it is not such a list."""
    _, jobs = records(data, name, "jobs", "`squeue --json` or slurmrestd /slurm/.../jobs")
    if jobs and isinstance(jobs[0], dict) and "state" in jobs[0] and "job_state" not in jobs[0]:
        raise InputError(name, "this is accounting (`sacct --json`, slurmrestd /slurmdb/.../jobs): load it with "
                               "`gpuledger ingest sacct`; `ingest squeue` reads the queue")
    out = []
    for n, job in enumerate(jobs, start=1):
        try:
            out.extend(_lines(job))
        except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as exc:
            # a line of the same width whose JobID names the problem: rejected with it, its place kept
            out.append(f"bad job record {n}: {type(exc).__name__} {exc}".replace("|", "/") + "|" * (_WIDTH - 1))
    return out
