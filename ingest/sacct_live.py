"""`gpuledger ingest sacct --live` (and the service's sacct source): read Slurm accounting from the watermark to now.

Three rules keep a read from losing what accounting learns late:

- **Overlap.** Each read starts :data:`LIVE_OVERLAP_S` before the watermark: slurmdbd commits records seconds after
  the events.
- **The watermark waits for slurmctld's queue.** slurmctld hands job records to slurmdbd through a queue (sdiag's
  "DBD Agent queue size"). While slurmdbd is down or behind, records wait there, and after it comes back they drain
  over seconds to minutes, keeping their own (past) times. A read in that interval succeeds without them, and a
  watermark moved to its end would start every later read after their times: they would never be read. So the
  watermark moves to a read's end only when the queue was empty just before the read; otherwise it stays, and the
  next read covers the same times again (the merge makes re-reading a no-op).
- **Open jobs accounting no longer lists are read by id.** A job stored running or pending is in every time-window
  read while accounting still has it open; when a window read leaves one out, its end reached accounting with a
  time before the window (recorded late), and ``sacct --jobs`` brings its final state. Left alone it would stay
  running in the warehouse, holding its GPUs up to the horizon in every report and charge.
"""
from __future__ import annotations

import datetime as dt
import re

from ingest import sacct, warehouse
from ingest.errors import InputError
from ingest.inputs import run_slurm
from ingest.slurm_sql import FINAL_STATES

#: Re-read this much before the watermark: slurmdbd commits records late.
LIVE_OVERLAP_S = 600
#: What --live asks for: XDMoD's fields, then the reservation a job ran in and its (last) pending reason, which
#: land in jobs.extra (models/metrics/reservations.py, pending.py read them).
LIVE_FIELDS = [*sacct.XDMOD_FIELDS, "reservation", "reason"]
#: Job ids per ``sacct --jobs`` call (a command line of about 10 kB).
IDS_PER_CALL = 1000
#: sdiag's line for the records slurmctld holds for slurmdbd (Slurm 2.x to 25.x).
DBD_QUEUE = re.compile(rb"^\s*DBD Agent queue size:\s*([0-9]+)\s*$", re.M)


def dbd_queue(sdiag_cmd: str, cluster: str | None, timeout_s: int = 60) -> int:
    """How many records slurmctld holds for slurmdbd (sdiag's "DBD Agent queue size"). An InputError when sdiag
    cannot be run or does not say (slurmctld down, an sdiag without the line)."""
    cmd = [*sdiag_cmd.split(), *(["-M", cluster] if cluster else [])]
    out = run_slurm(cmd, timeout_s, "sdiag")
    m = DBD_QUEUE.search(out)
    if not m:
        raise InputError(" ".join(cmd), "no 'DBD Agent queue size' line in its output")
    return int(m.group(1))


def _base_cmd(sacct_cmd: str, cluster: str | None) -> list[str]:
    return [*sacct_cmd.split(), "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader",
            "--format", ",".join(LIVE_FIELDS), *(["--clusters", cluster] if cluster else [])]


def _listed_ids(out: bytes) -> set[str]:
    """The JobIDRaw (second field) of every record of a --parsable2 read of :data:`LIVE_FIELDS`."""
    return {line.split(b"|", 2)[1].decode("utf-8", "replace") for line in out.splitlines() if line.count(b"|") >= 2}


def _open_ids(con, cluster: str, listed: set[str]) -> list[str]:
    """Job ids (JobIDRaw) of the cluster's jobs stored open (not in a final state) that ``listed`` lacks, the
    longest open first."""
    rows = con.execute("""SELECT job_id_raw FROM jobs
                          WHERE cluster = ? AND source LIKE 'sacct%' AND NOT list_contains(?, state)
                            AND regexp_full_match(job_id_raw, '[0-9]+')
                          GROUP BY job_id_raw ORDER BY min(submit), job_id_raw""",
                       [cluster, list(FINAL_STATES)]).fetchall()
    return [r[0] for r in rows if r[0] not in listed]


def _reread_open(con, cluster: str, listed: set[str], base: list[str], opts: sacct.SacctOptions,
                 timeout_s: int) -> dict | None:
    """Read by id the open jobs a window read did not list, and load them as one run; None when there are none.
    ``still_open``: those of them accounting still gives as open or no longer has at all."""
    ids = _open_ids(con, cluster, listed)
    if not ids:
        return None
    out = b"".join(run_slurm([*base, "--jobs", ",".join(ids[i:i + IDS_PER_CALL])], timeout_s, "sacct")
                   for i in range(0, len(ids), IDS_PER_CALL))
    name = f"{' '.join(base[:1])} --jobs ({len(ids)} open job(s) the time window left out)"
    summary = sacct.ingest_bytes(con, out, name, opts, source="sacct-live")
    left = set(_open_ids(con, cluster, set()))
    summary.update(ids=ids, still_open=[i for i in ids if i in left])
    return summary


def _since(con, cluster: str | None) -> str:
    mark = warehouse.get_watermark(con, "sacct-live", cluster) if cluster else None
    return (mark - dt.timedelta(seconds=LIVE_OVERLAP_S)).strftime("%Y-%m-%dT%H:%M:%S") \
        if mark else "1970-01-01T00:00:00"


def ingest_live(con, opts: sacct.SacctOptions, since: str | None = None, sacct_cmd: str = "sacct",
                timeout_s: int = 900, sdiag_cmd: str | None = "sdiag") -> dict:
    """Run ``sacct`` (TZ=UTC, :data:`LIVE_FIELDS`) from the watermark less the overlap (or ``since``, UTC) to now,
    load it, read by id the open jobs it left out, and move the watermark to now unless slurmctld held records
    for slurmdbd before the read or could not say (``sdiag_cmd``; None or empty: not asked, the watermark moves).

    The watermark is kept per cluster: ``--cluster``, else the cluster of the only live watermark so far,
    else the cluster sacct itself reports in its output. The summary is the window read's, with ``reread`` (the
    summary of the read by id, or None), ``dbd_queue`` (None: unknown), ``since`` and ``cluster``.
    """
    marks = [r[0] for r in con.execute("SELECT cluster FROM watermarks WHERE source = 'sacct-live'").fetchall()]
    cluster = opts.cluster or (marks[0] if len(marks) == 1 else None)
    notes, queued = [], None
    if sdiag_cmd:
        try:
            queued = dbd_queue(sdiag_cmd, opts.cluster, min(timeout_s, 60))
        except InputError as exc:       # slurmctld down: the records it saved at its stop may still come
            notes.append(f"slurmctld's queue for slurmdbd unknown ({exc}): the watermark stays")
    now = warehouse.utcnow().replace(microsecond=0)       # after sdiag: what was queued then is older than now
    since = since or _since(con, cluster)
    base = _base_cmd(sacct_cmd, opts.cluster)
    cmd = [*base, "--starttime", since, "--endtime", now.strftime("%Y-%m-%dT%H:%M:%S")]
    out = run_slurm(cmd, timeout_s, "sacct")
    live_opts = sacct.SacctOptions(cluster=opts.cluster, tz="UTC", fields=",".join(LIVE_FIELDS), delimiter="|",
                                   strict=opts.strict)
    summary = sacct.ingest_bytes(con, out, " ".join(cmd), live_opts, source="sacct-live")
    if cluster is None:
        seen = [r[0] for r in con.execute("SELECT DISTINCT cluster FROM jobs WHERE ingest_run_id = ? "
                                          "OR updated_run_id = ?", [summary["run_id"]] * 2).fetchall()]
        cluster = seen[0] if len(seen) == 1 else sacct.default_cluster(con, opts)
    summary["reread"] = _reread_open(con, cluster, _listed_ids(out), base, live_opts, timeout_s)
    if queued:
        notes.append(f"slurmctld held {queued} record(s) for slurmdbd before this read: the watermark stays")
    if queued == 0 or not sdiag_cmd:
        warehouse.set_watermark(con, "sacct-live", cluster, now)
    elif notes:
        notes[-1] += f" (the next read starts at {_since(con, cluster)})"
    summary["notes"] = summary.get("notes", []) + notes
    summary.update(cluster=cluster, since=since, dbd_queue=queued)
    return summary
