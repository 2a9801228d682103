"""`gpuledger ingest squeue`: snapshots of the queue (``squeue``) into ``squeue_snapshots``, so that each pending
job's Slurm reason is known over its wait (models/metrics/pending.py).

The input is ``|``-delimited with a header line, as our fixed format prints it (:data:`LIVE_FORMAT`, what
``--live`` runs)::

    squeue --all --array --Format 'JobArrayID:|,Cluster:|,State:|,Reason:|,tres-per-job:|,tres-per-node:|,tres-alloc:|,
           NumNodes:|,Partition:|,Account:|,UserName:|,QOS:|,SubmitTime:|,Reservation:|,Name:'

Other ``-o``/``-O`` layouts load too when their header names the columns (titles in :data:`HEADERS`; a
header needs JOBID, STATE or ST, and REASON or NODELIST(REASON)); unknown titles are ignored. GPUs a job asks
for: TRES_ALLOC's ``gres/gpu=N``, else TRES_PER_JOB's count, else TRES_PER_NODE's x NODES (``gres:gpu:N``,
``gres:gpu:TYPE:N``, ``gres/gpu:TYPE=N``), else 0. A snapshot is (cluster, captured_at); loading the same
snapshot again replaces it. Every line is loaded, skipped (blank, header) or rejected with field and reason.

A log of ``squeue --iterate N`` holds many snapshots, each under the time line squeue prints above it
(``Mon Dec 07 21:10:45 2026``, in squeue's TZ: ``--tz``) and closed by a blank line
(tests/fixtures/slurm_real/squeue-iterate.psv): it loads as one run of those snapshots, each at its own time, with
no capture time given.

For a collector: :func:`load` takes the text and the capture time; :func:`run_live` runs squeue and returns
(text, captured_at, command).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re

import pyarrow as pa

from ingest import plausible, squeue_json, warehouse
from ingest.errors import InputError
from ingest.inputs import read_input, run_slurm
from ingest.lines import other_output, text_lines
from ingest.slurm_json import looks_like_json

#: The fixed format of ``--live`` (and of the tests' captures): one `|`-separated line per job (or array task).
#: JobArrayID, not JobID: with --array, JobID prints the array's id on every task's line (28, 28, ...), where
#: JobArrayID prints 28_0, 28_1 (both are titled JOBID).
LIVE_FIELDS = ("JobArrayID", "Cluster", "State", "Reason", "tres-per-job", "tres-per-node", "tres-alloc", "NumNodes",
               "Partition", "Account", "UserName", "QOS", "SubmitTime", "Reservation", "Name")
LIVE_FORMAT = ",".join(f"{f}:|" for f in LIVE_FIELDS)
#: The titles squeue prints over LIVE_FIELDS.
LIVE_TITLES = ("JOBID", "CLUSTER", "STATE", "REASON", "TRES_PER_JOB", "TRES_PER_NODE", "TRES_ALLOC", "NODES",
               "PARTITION", "ACCOUNT", "USER", "QOS", "SUBMIT_TIME", "RESERVATION", "NAME")

#: header title (upper case, as squeue prints it) -> our field
HEADERS = {"JOBID": "job_id", "STATE": "state", "ST": "state", "REASON": "reason", "NODELIST(REASON)": "nl_reason",
           "TRES_PER_JOB": "tres_per_job", "TRES_PER_NODE": "tres_per_node", "TRES_ALLOC": "tres_alloc",
           "NODES": "nnodes", "PARTITION": "partition", "ACCOUNT": "account", "USER": "user", "QOS": "qos",
           "SUBMIT_TIME": "submit", "RESERVATION": "reservation", "NAME": "job_name", "CLUSTER": "cluster"}
#: squeue's compact state codes (%t) -> long names (%T)
COMPACT = {"PD": "PENDING", "R": "RUNNING", "CG": "COMPLETING", "CF": "CONFIGURING", "S": "SUSPENDED",
           "CD": "COMPLETED", "CA": "CANCELLED", "F": "FAILED", "TO": "TIMEOUT", "PR": "PREEMPTED",
           "NF": "NODE_FAIL", "RQ": "REQUEUED", "RH": "REQUEUE_HOLD", "RS": "RESIZING", "SE": "SPECIAL_EXIT",
           "ST": "STOPPED", "OOM": "OUT_OF_MEMORY", "BF": "BOOT_FAIL", "DL": "DEADLINE", "RD": "RESV_DEL_HOLD",
           "RF": "REQUEUE_FED", "RV": "REVOKED", "SI": "SIGNALING", "SO": "STAGE_OUT"}
NULLS = {"", "N/A", "(null)", "None", "Unknown", "n/a"}
#: The time line ``squeue --iterate`` prints above each snapshot (Slurm's ctime: ``Mon Dec 07 21:10:45 2026``).
_TIME_LINE = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +"
                        r"\d{1,2} \d\d:\d\d:\d\d \d{4}")
TIME_LINE_SKIP = "snapshot time line (squeue --iterate)"
_GPU_TRES = re.compile(r"(?:^|,)gres[/:]gpu(?::[^=:,]+)?[=:](\d+(?:\.\d+)?)(?:,|$)")


def gpu_count(tres: str | None) -> float | None:
    """GPUs in a TRES/GRES string (``gres/gpu=4``, ``gres/gpu:a100=4``, ``gres:gpu:4``, ``gres:gpu:a100:4``),
    summed over types when only typed counts are printed; None when it names no GPU."""
    if not tres or tres in NULLS:
        return None
    parts = tres.split(",")
    untyped = [p for p in parts if re.fullmatch(r"gres/gpu=\d+(\.\d+)?", p)]
    if untyped:
        return float(untyped[0].split("=")[1])
    found = [float(m.group(1)) for p in parts for m in [_GPU_TRES.search(p)] if m]
    return sum(found) if found else None


def _time(text: str | None, field_name: str, tz: str | None, window: plausible.Window) -> dt.datetime | None:
    if text is None or text in NULLS:
        return None
    t = warehouse.parse_time(text, field_name, tz)
    if not window.contains(t):
        raise ValueError(window.reason(text))
    return t


def _header(parts: list[str]) -> list[str] | None:
    keys = [p.strip().upper() for p in parts]
    if not keys or not {"JOBID"} <= set(keys) or not ({"STATE", "ST"} & set(keys)):
        return None
    if not ({"REASON", "NODELIST(REASON)"} & set(keys)):
        return None
    return [HEADERS.get(k, "_ignored") for k in keys]


def _record(d: dict, tz: str | None, window: plausible.Window) -> tuple:
    """One data line's fields as a row; ValueError('field\\x1freason') when a field cannot be read."""
    def fail(f, why):
        raise ValueError(f"{f}\x1f{why}")
    job_id = d.get("job_id", "")
    if not re.fullmatch(r"[0-9]+(_[0-9]+|_\[[0-9,%\-]+\]|\+[0-9]+)?", job_id):
        fail("JOBID", f"not a job id: {job_id!r}")
    state = COMPACT.get(d.get("state", ""), d.get("state", ""))
    if not re.fullmatch(r"[A-Z_]+", state):
        fail("STATE", f"not a job state: {d.get('state')!r}")
    reason = d.get("reason")
    if reason is None and "nl_reason" in d:    # NODELIST(REASON): a pending job's reason is in parentheses
        m = re.fullmatch(r"\((.*)\)", d["nl_reason"])
        reason = m.group(1) if m else None
    nn = d.get("nnodes")
    if nn not in (None, *NULLS) and not re.fullmatch(r"\d+", nn):
        fail("NODES", f"not a node count: {nn!r}")
    nnodes = int(nn) if nn not in (None, *NULLS) else None
    try:
        per_job = gpu_count(d.get("tres_alloc")) or gpu_count(d.get("tres_per_job"))
        per_node = gpu_count(d.get("tres_per_node"))
    except ValueError:
        fail("TRES", "cannot read the GPU count")
    gpus = per_job if per_job is not None else (per_node * (nnodes or 1) if per_node is not None else 0.0)
    if gpus > plausible.MAX_COUNTS["gpus"]:
        fail("TRES", f"GPU count out of the plausible range 0-{plausible.MAX_COUNTS['gpus']}: {gpus:g}")
    try:
        submit = _time(d.get("submit"), "SUBMIT_TIME", tz, window)
    except ValueError as exc:
        fail("SUBMIT_TIME", str(exc).split(": ", 1)[-1])
    val = lambda k: None if d.get(k) in (None, *NULLS) else d[k]
    reason = None if reason in (None, "", "N/A", "(null)") else reason     # "None" (running) is kept as printed
    return (job_id, state, reason, gpus, nnodes,
            val("partition"), val("account"), val("user"), val("qos"), submit, val("reservation"), val("job_name"),
            val("cluster"))


def _parse(lines: list[str], tz: str | None, window: plausible.Window, cols: list[str] | None = None, first: int = 1):
    """Yield (line_no, kind, payload): 'blank', 'header', 'cluster banner', 'data' with a row tuple, or 'reject'
    (field, reason).
    ``cols``: the layout of lines before any header (a JSON job list's lines have none). A job (cluster and id)
    seen before in the snapshot is rejected: its reason and GPUs would count twice."""
    seen: dict[tuple, int] = {}
    trailing = False            # the header ended with '|' (--Format 'Name:|'): so does every line under it
    for i, line in enumerate(lines, start=first):
        if not line.strip():
            yield i, "blank", None
            continue
        if re.fullmatch(r"CLUSTER: \S+", line.strip()):     # squeue --clusters heads each cluster's table so
            yield i, "cluster banner", None
            continue
        parts = line.split("|")
        ends_empty = parts[-1] == ""
        if ends_empty and (cols is None or len(parts) == len(cols) + 1 or trailing):
            parts = parts[:-1]
        head = _header(parts)
        if head is not None:
            cols, trailing = head, ends_empty
            yield i, "header", None
            continue
        if cols is not None and cols[-1] == "job_name" and len(parts) > len(cols):
            parts = [*parts[:len(cols) - 1], "|".join(parts[len(cols) - 1:])]    # a '|' inside the last, the name
        if cols is None:
            yield i, "reject", (None, "no header line before the data (run squeue with our --Format, see "
                                      "docs/CLI.md, and without --noheader)")
            continue
        if len(parts) != len(cols):
            yield i, "reject", (None, f"expected {len(cols)} '|'-separated fields, found {len(parts)}")
            continue
        try:
            row = _record(dict(zip(cols, (p.strip() for p in parts))), tz, window)
        except ValueError as exc:
            f, _, why = str(exc).partition("\x1f")
            yield i, "reject", (f or None, why or str(exc))
            continue
        if (row[0], row[-1]) in seen:
            yield i, "reject", ("JOBID", f"job {row[0]} is on line {seen[(row[0], row[-1])]} of this snapshot "
                                         "already (squeue's JobID prints an array's id on each task's line: "
                                         "use JobArrayID)")
            continue
        seen[(row[0], row[-1])] = i
        yield i, "data", row


def _refuse_other_tables(lines: list[str], name: str) -> None:
    """One clear error for another command's output or squeue's space-aligned table, not a reject per line."""
    if any(line.lstrip().startswith("JobId=") for line in lines[:50]):
        raise InputError(name, "this is `scontrol show job` output; `ingest squeue` reads `squeue --Format` "
                               "output with '|' separators (the command: docs/CLI.md, ingest squeue)")
    first = next((i for i, line in enumerate(lines[:50]) if line.strip()
                  and not re.fullmatch(r"CLUSTER: \S+", line.strip()) and not _TIME_LINE.fullmatch(line.strip())), None)
    if first is None:
        return
    other_output(lines[first], name, first + 1, "squeue")
    if "|" not in lines[first] and _header(lines[first].split()) is not None:
        raise InputError(name, f"line {first + 1} heads squeue's space-aligned table, whose job names may hold "
                               "spaces and which prints no GPUs; run squeue with '|' separators: squeue --all "
                               f"--array --Format '{LIVE_FORMAT}'")


COLUMNS = ("job_id", "state", "reason", "gpus", "nnodes", "partition", "account", "user", "qos", "submit",
           "reservation", "job_name", "cluster")


def _blocks(lines: list[str], captured_at: dt.datetime | None, name: str) -> list[tuple[int, dt.datetime | str | None]]:
    """Where each snapshot starts (0-based line index) and its time: the whole input at ``captured_at``, or each
    block of a ``squeue --iterate`` log at the time line above it (its text, read by :func:`_block_time`); lines
    before a log's first time line form a block of no time."""
    marks = [i for i, line in enumerate(lines) if _TIME_LINE.fullmatch(line.strip())]
    if not marks:
        if captured_at is None:
            raise InputError(name, "when was it taken? give FILE@TIME or --captured-at (a `squeue --iterate` log "
                                   "prints the time above each snapshot)")
        return [(0, captured_at)]
    if captured_at is not None:
        raise InputError(name, f"line {marks[0] + 1} is a `squeue --iterate` time line: the log carries each "
                               "snapshot's time; give the file without @TIME and --captured-at")
    return ([(0, None)] if marks[0] else []) + [(i, lines[i].strip()) for i in marks]


def _block_time(text: str, tz: str | None, window: plausible.Window) -> dt.datetime:
    """A time line (squeue's TZ: ``tz``) as naive UTC; ValueError when it is out of the plausible window."""
    t = warehouse.parse_time(dt.datetime.strptime(text, "%a %b %d %H:%M:%S %Y").isoformat(), "time line", tz)
    if not window.contains(t):
        raise ValueError(window.reason(text))
    return t


def _snapshot_rows(lines: list[str], captured_at, name: str, tz: str | None, window: plausible.Window,
                   cols: list[str] | None):
    """(rows with their capture time, skips, rejects, capture times) of every snapshot of the input."""
    rows, skips, rejects, times = [], [], [], {}
    blocks = _blocks(lines, captured_at, name)
    for (a, when), (b, _) in zip(blocks, blocks[1:] + [(len(lines), None)]):
        body = a + 1 if isinstance(when, str) else a        # a log's snapshot starts after its time line
        why = None
        if when is None:
            why = "before the first `squeue --iterate` time line: no capture time"
        elif isinstance(when, str):
            try:
                when = _block_time(when, tz, window)
            except ValueError as exc:
                rejects.append((a + 1, "time line", str(exc)))
                why = f"in the snapshot of line {a + 1}, whose time is rejected"
            else:
                skips.append((a + 1, TIME_LINE_SKIP))
                if when in times:
                    why = f"a second snapshot at {when:%Y-%m-%d %H:%M:%S} (the first under line {times[when]})"
        for line_no, kind, payload in _parse(lines[body:b], tz, window, cols, first=body + 1):
            if kind in ("blank", "header", "cluster banner"):
                skips.append((line_no, f"{kind} line"))
            elif why is not None or kind == "reject":
                rejects.append((line_no, None, why) if why is not None else (line_no, *payload))
            else:
                rows.append((*payload, when))
        if why is None:
            times.setdefault(when, a + 1)
    return rows, skips, rejects, sorted(times)


def load(con, text: str | bytes, captured_at: dt.datetime | None, source_name: str, cluster: str | None = None,
         tz: str | None = None) -> dict:
    """Load one squeue snapshot taken at ``captured_at`` (naive UTC), or with ``captured_at`` None the snapshots of
    a ``squeue --iterate`` log, each at its time line, in one transaction; returns the run summary
    (loaded/skipped/rejected add up to the lines read). ``source_name`` names the input in ``ingest_runs``."""
    data = text.encode() if isinstance(text, str) else text
    is_json = looks_like_json(data)
    lines = squeue_json.to_squeue_lines(data, source_name) if is_json else text_lines(data)
    tz = "UTC" if is_json else tz
    _refuse_other_tables(lines, source_name)
    window = plausible.window()
    if captured_at is not None and not window.contains(captured_at):
        raise InputError("--captured-at", window.reason(f"{captured_at:%Y-%m-%d %H:%M:%S}"))
    default = cluster or warehouse.only_cluster(con) or "default"
    rows, skips, rejects, times = _snapshot_rows(lines, captured_at, source_name, tz, window,
                                                 _header(list(LIVE_TITLES)) if is_json else None)
    tbl = pa.table({c: [r[k] for r in rows] for k, c in enumerate((*COLUMNS, "captured_at"))},
                   schema=pa.schema([("job_id", pa.string()), ("state", pa.string()), ("reason", pa.string()),
                                     ("gpus", pa.float64()), ("nnodes", pa.int32()), ("partition", pa.string()),
                                     ("account", pa.string()), ("user", pa.string()), ("qos", pa.string()),
                                     ("submit", pa.timestamp("us")), ("reservation", pa.string()),
                                     ("job_name", pa.string()), ("cluster", pa.string()),
                                     ("captured_at", pa.timestamp("us"))]))
    when = (captured_at.isoformat() if captured_at is not None else
            f"{times[0].isoformat()}..{times[-1].isoformat()}" if times else None)
    run = warehouse.IngestRun(con, "squeue", source_name, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data),
                              cluster=default, options={"captured_at": when, "tz": tz or "UTC",
                                                        **({"snapshots": len(times)} if captured_at is None else {}),
                                                        **({"format": "json", "records": squeue_json.RECORDS_NOTE,
                                                            "read_as": "jobs and tasks"} if is_json else {})})
    with run:
        run.lines_read = len(lines)
        run.mark_lines(lines, skips, rejects)
        con.register("_sq_in", tbl)
        try:
            # loading a snapshot again replaces it (per cluster and capture time)
            replaced = con.execute("""DELETE FROM squeue_snapshots s USING
                                        (SELECT DISTINCT coalesce(cluster, $c) AS cluster, captured_at FROM _sq_in) n
                                      WHERE s.cluster = n.cluster AND s.captured_at = n.captured_at""",
                                   {"c": default}).fetchall()[0][0]
            con.execute("""INSERT INTO squeue_snapshots
                           SELECT coalesce(cluster, $c), captured_at, job_id, state, reason, gpus, nnodes, partition,
                                  account, "user", qos, submit, reservation, job_name, $run FROM _sq_in""",
                        {"c": default, "run": run.run_id})
        finally:
            con.unregister("_sq_in")
        run.loaded = len(rows)
        run.updated = min(replaced, len(rows))
        run.inserted = len(rows) - run.updated
    summary = run.summary()
    summary["reject_examples"] = [f"{source_name}:{ln}: " + (f"field {f}: " if f else "") + r
                                  for ln, f, r in rejects[:10]]
    return summary


def ingest_path(con, path: str, captured_at: dt.datetime | None, cluster: str | None = None,
                tz: str | None = None) -> dict:
    data, name = read_input(path)
    return load(con, data, captured_at, name, cluster=cluster, tz=tz)


def run_live(squeue_cmd: str = "squeue", cluster: str | None = None, timeout_s: int = 120) -> tuple[bytes, dt.datetime, str]:
    """Run squeue (TZ=UTC, :data:`LIVE_FORMAT`); returns (output, captured_at naive UTC, the command line)."""
    cmd = [*squeue_cmd.split(), "--all", "--array", "--Format", LIVE_FORMAT]
    if cluster:
        cmd += ["--clusters", cluster]
    at = warehouse.utcnow().replace(microsecond=0)
    return run_slurm(cmd, timeout_s, "squeue"), at, " ".join(cmd)


def ingest_live(con, cluster: str | None = None, squeue_cmd: str = "squeue") -> dict:
    out, at, cmd = run_live(squeue_cmd, cluster)
    return load(con, out, at, cmd, cluster=cluster, tz="UTC")

