"""`gpuledger ingest sacct --live` (and the service's sacct source): read Slurm accounting from the watermark to now.

Reads go in windows from the watermark (:data:`WINDOW_S`, sized by :class:`_Span`; a first read asks for all
history at once), each its own run, so a catch-up after downtime keeps memory bounded; a window that slurmdbd
refuses (MaxQueryTimeRange, or an answer past its size limit) is halved and read again. Three rules keep a read
from losing what accounting learns late:

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
import time

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
#: The first window of a read from a watermark (seconds); later ones are sized by :class:`_Span`.
WINDOW_S = 86400
#: slurmdbd's refusals of a span too long (its MaxQueryTimeRange) or an answer too large (over 3 GB): the window is
#: halved, down to MIN_WINDOW_S, and read again.
TOO_WIDE = ("Too wide of a date range in query", "Query result exceeds size limit")
MIN_WINDOW_S = 600
#: The lines a window aims at: sized up across an empty or quiet past, down across a busy one.
TARGET_LINES = 200_000
#: The longest window (seconds): what the first window with records may hold on a busy site bounds memory.
MAX_WINDOW_S = 30 * 86400
#: Where a first read (no watermark) starts: all history.
EPOCH = dt.datetime(1970, 1, 1)
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


def _since(con, cluster: str | None) -> dt.datetime:
    """Where the next read starts: the watermark less the overlap, else :data:`EPOCH` (all history)."""
    mark = warehouse.get_watermark(con, "sacct-live", cluster) if cluster else None
    return mark - dt.timedelta(seconds=LIVE_OVERLAP_S) if mark else EPOCH


def _fmt(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


class _Span:
    """The window of the next read: it doubles after a read of fewer than :data:`TARGET_LINES` / 2 lines, up to
    :data:`MAX_WINDOW_S`, halves after one of more than twice as many (a busy stretch), and never grows past a
    span slurmdbd refused (a first read under a 60-day MaxQueryTimeRange crosses 50 empty years in ~400 reads,
    ~50 s here: benchmarks/sacct_live_windows.py)."""

    def __init__(self, window_s: int):
        self.window_s, self.limit_s = window_s, None

    def after(self, lines: int) -> None:
        if lines < TARGET_LINES // 2:
            self.window_s = max(self.window_s, min(self.window_s * 2, MAX_WINDOW_S))
        elif lines > TARGET_LINES * 2:
            self.window_s = max(MIN_WINDOW_S, self.window_s // 2)
        if self.limit_s:
            self.window_s = min(self.window_s, self.limit_s)


def _read_window(base: list[str], start: dt.datetime, now: dt.datetime, span: _Span,
                 timeout_s: int) -> tuple[bytes, list[str], dt.datetime]:
    """(output, command, end) of one read from ``start`` over at most ``span.window_s``: halved (down to
    :data:`MIN_WINDOW_S`, and never grown past it again) while slurmdbd refuses the span (its MaxQueryTimeRange)
    or the size of the answer."""
    while True:
        end = min(now, start + dt.timedelta(seconds=span.window_s))
        cmd = [*base, "--starttime", _fmt(start), "--endtime", _fmt(end)]
        try:
            return run_slurm(cmd, timeout_s, "sacct"), cmd, end
        except InputError as exc:
            if span.window_s <= MIN_WINDOW_S or not any(m in str(exc) for m in TOO_WIDE):
                raise
            span.limit_s = span.window_s = max(MIN_WINDOW_S, span.window_s // 2)


def _read_windows(con, base: list[str], start: dt.datetime, now: dt.datetime, span: _Span,
                  live_opts: sacct.SacctOptions, cluster: str | None, moves: bool, timeout_s: int,
                  budget_s: float | None) -> tuple[list[dict], set[str], dt.datetime, int, str]:
    """Read and load windows from ``start`` until ``now`` (or past ``budget_s``), the watermark moved after each
    when ``moves``. Returns (the runs, the job ids listed, the last window's end, windows read, the cluster)."""
    runs, listed, t0, windows = [], set(), time.monotonic(), 0
    while True:
        out, cmd, end = _read_window(base, start, now, span, timeout_s)
        windows += 1
        if out.strip() or (end >= now and not runs):     # an empty stretch of the past leaves no run
            runs.append(sacct.ingest_bytes(con, out, " ".join(cmd), live_opts, source="sacct-live"))
            cluster = cluster or _cluster_of(con, runs[-1]["run_id"], live_opts)
        listed |= _listed_ids(out)
        if moves and cluster:
            warehouse.set_watermark(con, "sacct-live", cluster, end)
        span.after(out.count(b"\n"))
        start = end
        if end >= now or budget_s is not None and time.monotonic() - t0 > budget_s:
            return runs, listed, end, windows, cluster


def ingest_live(con, opts: sacct.SacctOptions, since: str | None = None, sacct_cmd: str = "sacct",
                timeout_s: int = 900, sdiag_cmd: str | None = "sdiag", window_s: int = WINDOW_S,
                budget_s: float | None = None) -> dict:
    """Read ``sacct`` (TZ=UTC, :data:`LIVE_FIELDS`) from the watermark less the overlap (or ``since``, UTC) to now
    in windows (the first ``window_s`` long, then sized by :class:`_Span`), each with records its own run, then
    read by id the open jobs the windows left out. The first read (no watermark) asks for all history at once,
    in windows only where slurmdbd refuses the span or the size. After each window the watermark moves to its
    end unless slurmctld held records for slurmdbd before the reads or could not say (``sdiag_cmd``; None or
    empty: not asked). ``budget_s``: stop after the window that passes it (``more`` is then True).

    The watermark is kept per cluster: ``--cluster``, else the cluster of the only live watermark so far,
    else the cluster sacct itself reports in its output. Returns ``runs`` (the windows' summaries, then the read
    by id's), their counts (``loaded``, ``skipped``, ``rejected``; ``run_id`` the last), ``reread`` (the read by
    id's summary, or None), ``more``, ``windows`` (reads made), ``dbd_queue`` (None: unknown), ``since``,
    ``cluster``, ``live_notes`` (the watermark's, jobs still open), ``notes`` (every run's and those) and
    ``error`` (the first).
    """
    marks = [r[0] for r in con.execute("SELECT cluster FROM watermarks WHERE source = 'sacct-live'").fetchall()]
    cluster = opts.cluster or (marks[0] if len(marks) == 1 else None)
    notes, queued = _queue_notes(sdiag_cmd, opts.cluster, timeout_s)
    moves = queued == 0 or not sdiag_cmd
    now = warehouse.utcnow().replace(microsecond=0)       # after sdiag: what was queued then is older than now
    start = warehouse.parse_time(since) if since else _since(con, cluster)
    whole = not since and start == EPOCH           # a first read asks for everything at once
    base, first = _base_cmd(sacct_cmd, opts.cluster), _fmt(start)
    span = _Span(int((now - start).total_seconds()) + 1 if whole else window_s)
    live_opts = sacct.SacctOptions(cluster=opts.cluster, tz="UTC", fields=",".join(LIVE_FIELDS), delimiter="|",
                                   strict=opts.strict)
    runs, listed, end, windows, cluster = _read_windows(con, base, start, now, span, live_opts, cluster,
                                                        moves, timeout_s, budget_s)
    reread = _reread_open(con, cluster, listed, base, live_opts, timeout_s) if end >= now else None
    if not moves and notes:
        notes[-1] += f" (the next read starts at {_fmt(_since(con, cluster))})"
    if reread and reread["still_open"]:
        left = reread["still_open"]
        notes.append(f"{len(left)} job(s) still open after their read by id (accounting has them open outside any "
                     f"time window, or no longer has them): {', '.join(left[:10])}")
    runs += [reread] if reread else []
    return {"runs": runs, "reread": reread, "more": end < now, "windows": windows, "dbd_queue": queued,
            "since": first, "cluster": cluster, "live_notes": notes,
            "notes": [n for r in runs for n in r.get("notes", [])] + notes,
            "run_id": runs[-1]["run_id"] if runs else None,
            "error": next((r["error"] for r in runs if r.get("error")), None),
            **{k: sum(r[k] for r in runs) for k in ("loaded", "skipped", "rejected")}}


def _queue_notes(sdiag_cmd: str | None, cluster: str | None, timeout_s: int) -> tuple[list[str], int | None]:
    """(notes, slurmctld's queue for slurmdbd: None when not asked or unknown) before a read."""
    if not sdiag_cmd:
        return [], None
    try:
        queued = dbd_queue(sdiag_cmd, cluster, min(timeout_s, 60))
    except InputError as exc:           # slurmctld down: the records it saved at its stop may still come
        return [f"slurmctld's queue for slurmdbd unknown ({exc}): the watermark stays"], None
    return ([f"slurmctld held {queued} record(s) for slurmdbd before this read: the watermark stays"]
            if queued else []), queued


def _cluster_of(con, run_id: int, opts: sacct.SacctOptions) -> str:
    """The cluster a read's jobs belong to, when neither the options nor a watermark named it."""
    seen = [r[0] for r in con.execute("SELECT DISTINCT cluster FROM jobs WHERE ingest_run_id = ? "
                                      "OR updated_run_id = ?", [run_id] * 2).fetchall()]
    return seen[0] if len(seen) == 1 else sacct.default_cluster(con, opts)
