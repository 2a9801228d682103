"""Write the synthetic queue as the ``squeue`` snapshots a site collects: one log per UTC day of
``TZ=UTC squeue --iterate 900 --all --array --Format <squeue.LIVE_FORMAT>``, a snapshot every ``SQUEUE_EVERY_S``
(the longest gap over which the pending report lets one snapshot's reason hold, models/metrics/pending.py; `gpuledger
serve` takes one every 5 minutes), each under squeue's time line and closed by a blank line, as the real Slurm 22.05
of tests/fixtures/slurm_real/squeue-iterate.psv prints them.

Each snapshot lists every pending and running instance (array tasks as ``A_i``), the fields as that Slurm prints
them (TRES_PER_NODE ``gres:gpu[:type]:N``, TRES_ALLOC with the GPUs, a trailing ``|``). A pending job's Reason
is the one the demo scheduler (models/demo/scheduler.py) implies, as Slurm names it:

- ``BeginTime``: a requeued instance inside its requeue hold (its eligible time is still ahead, as Slurm sets the
  begin time of a requeued job);
- ``Resources``: the first eligible job of its partition's queue in arrival order (the head the main scheduler
  stops at when it does not fit; the preemptible partition is one queue; a reservation's jobs are its own queue,
  their RESERVATION field naming it);
- ``Priority``: every other eligible job, waiting behind that head.

Rows are built with Polars and numpy over all snapshots at once, not per job or per snapshot. A day's log is
one ingest run (`ingest squeue LOG`): a file per snapshot cost an ingest run each (~30 ms: +23 s for a week).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl

from ingest.squeue import LIVE_TITLES
from models.demo.sacct_writer import slurm_mem, slurm_time

SQUEUE_EVERY_S = 15 * 60
HEADER = "|".join(LIVE_TITLES) + "|"


def snapshot_times(t_from: int, t_end: int, every: int = SQUEUE_EVERY_S) -> np.ndarray:
    """Capture times (UTC epoch s) on the multiples of ``every`` in [t_from, t_end)."""
    first = -(-int(t_from) // every) * every
    return np.arange(first, int(t_end), every, dtype=np.int64)


def _spans(a: np.ndarray, b: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, snapshot index) of every snapshot time inside each half-open interval [a, b)."""
    k0 = np.searchsorted(times, a, side="left")
    k1 = np.searchsorted(times, b, side="left")
    n = np.maximum(k1 - k0, 0)
    row = np.repeat(np.arange(len(a)), n)
    offset = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return row, k0[row] + offset


def queue_rows(frame: pl.DataFrame, times: np.ndarray) -> pl.DataFrame:
    """One row per (snapshot, instance queued or running at it) of ``instance_frame``'s rows: ``t`` (epoch s),
    ``state`` (PENDING / RUNNING), ``reason`` and the instance's columns."""
    never = np.iinfo(np.int64).max
    start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
    # pending from submit until it started, else until it ended (cancelled while pending), else past the horizon
    pend_end = np.where(start >= 0, start, np.where(end >= 0, end, never))
    run_end = np.where(end >= 0, end, never)
    pr, pk = _spans(frame["submit"].to_numpy(), pend_end, times)
    started = np.flatnonzero(start >= 0)
    rr, rk = _spans(start[started], run_end[started], times)
    rows = pl.concat([
        frame[pr].with_columns(t=pl.Series(times[pk]), state=pl.lit("PENDING")),
        frame[started[rr]].with_columns(t=pl.Series(times[rk]), state=pl.lit("RUNNING"))])
    rows = rows.with_columns(waiting=(pl.col("state") == "PENDING") & (pl.col("eligible") <= pl.col("t")))
    # queue position: arrival (eligible) order, instance id breaking ties, as the scheduler's FIFO holds them
    rows = rows.sort("t", "eligible", "i").with_columns(
        pos=pl.int_range(pl.len()).over("t", "partition", "resv", "waiting"))
    reason = (pl.when(pl.col("state") == "RUNNING").then(pl.lit("None"))
              .when(~pl.col("waiting")).then(pl.lit("BeginTime"))
              .when(pl.col("pos") == 0).then(pl.lit("Resources"))
              .otherwise(pl.lit("Priority")))
    return rows.with_columns(reason=reason).drop("waiting", "pos").sort("t", "i")


def _lines(rows: pl.DataFrame, cluster: str) -> pl.DataFrame:
    s = lambda col: pl.col(col).cast(pl.String)  # noqa: E731
    jobid = pl.when(pl.col("task") >= 0).then(pl.concat_str([s("array_id"), pl.lit("_"), s("task")])) \
        .otherwise(s("raw"))
    per_node = (pl.col("gpus") // pl.col("nnodes")).cast(pl.String)
    typed = pl.concat_str([pl.lit("gres:gpu:"), pl.col("req_type"), pl.lit(":"), per_node])
    tres_node = typed.fill_null(pl.concat_str([pl.lit("gres:gpu:"), per_node]))
    alloc = pl.concat_str([pl.lit("cpu="), s("cpus"), pl.lit(",mem="), slurm_mem(pl.col("mem_mib")),
                           pl.lit(",node="), s("nnodes"), pl.lit(",billing="), s("cpus"), pl.lit(",gres/gpu="),
                           s("gpus")])
    line = pl.concat_str([jobid, pl.lit(cluster), s("state"), s("reason"), pl.lit("N/A"), tres_node, alloc,
                          s("nnodes"), s("partition"), s("account"), s("user"), s("qos"), slurm_time("submit"),
                          pl.col("resv").fill_null("(null)"), s("name"), pl.lit("")], separator="|")
    return rows.select("t", line.alias("line"))


def write_logs(frame: pl.DataFrame, cluster: str, t_from: int, t_end: int, outdir: Path,
               every: int = SQUEUE_EVERY_S) -> list[Path]:
    """Write the snapshots at the times in [t_from, t_end) as one ``squeue --iterate`` log per UTC day
    (``squeue-YYYY-MM-DD.log``); returns the files in time order. An empty queue prints the header alone."""
    times = snapshot_times(t_from, t_end, every)
    lines = _lines(queue_rows(frame, times), cluster)
    by_t = {int(k[0]): g["line"].to_list() for k, g in lines.group_by("t")}
    days: dict[str, list[str]] = {}
    for t in times.tolist():
        at = dt.datetime.fromtimestamp(t, dt.timezone.utc)
        days.setdefault(f"{at:%Y-%m-%d}", []).extend([f"{at:%a %b %d %H:%M:%S %Y}", HEADER, *by_t.get(t, []), ""])
    out = []
    for day, text in days.items():
        path = outdir / f"squeue-{day}.log"
        path.write_text("\n".join(text) + "\n", encoding="utf-8")
        out.append(path)
    return out
