"""models/definitions/losses_sql.py: the checkpoint rule, one definition for the loss marts (every cause) and
preemption's work lost, on hand-computed jobs through the real sacct and governance ingestors and refresh."""
from __future__ import annotations

import datetime as dt

import duckdb
import pytest
from hypothesis import given, settings, strategies as st

from models.definitions import losses_sql as L
from models.metrics import losses, preemption
from tests.test_losses import CKPT_HEADER, NODES, _gov, _refresh
from tests.timeline_fixtures import load


def _jobs(tmp_path) -> str:
    """Two preempted runs of 4,800 s on 1 GPU (01:00:00 to 02:20:00 UTC, not hour-aligned in their minutes' sense:
    the last checkpoint is start + 1 h), one of team research (1-h checkpoints), one of product (no rule)."""
    rows = [(1, "train", "ml", "gpu01"), (2, "train", "cv", "gpu03")]
    lines = [CKPT_HEADER] + [f"{i}|{i}|{n}|tc|a100|{a}|u|PREEMPTED|2024-03-01T00:59:00|2024-03-01T01:00:00|"
                             f"2024-03-01T02:20:00|1|8|cpu=8,gres/gpu=1,node=1|{node}\n" for i, n, a, node in rows]
    p = tmp_path / "pre.psv"
    p.write_text("".join(lines))
    return str(p)


def test_4800_gpu_seconds_with_hourly_checkpoints_lose_1200_in_both_models(con, db_path, tmp_path):
    """1 GPU x 4,800 s, checkpoints every 3,600 s from the start: the last one at 3,600 s, so 1,200 GPU-s are
    lost (basis checkpoint); without a rule all 4,800 GPU-s (basis since start). The loss mart's preemption cause
    and preemption's work lost give the same figures, from the same definition."""
    from ingest import sacct
    load(con, "tc", [], NODES, refresh=False)
    assert sacct.ingest_path(con, _jobs(tmp_path), sacct.SacctOptions(tz="UTC"))["rejected"] == 0
    _gov(con, tmp_path, '[[checkpoints]]\nteam = "research"\ninterval = "1h"\n')
    _refresh(con, db_path)
    mart = {r["job_id"]: r for r in losses.jobs(con).iter_rows(named=True)}
    assert {k: (v["cause"], v["basis"], v["checkpoint_s"], round(v["lost_gpu_h"] * 3600, 6))
            for k, v in mart.items()} == {"1": ("preemption", "checkpoint", 3600, 1200),
                                          "2": ("preemption", "since start", None, 4800)}
    day = (dt.datetime(2024, 3, 1), dt.datetime(2024, 3, 2))   # the horizon is the last end: give the window
    pre = {r["job_id"]: r for r in preemption.victims(con, *day).iter_rows(named=True)}
    assert {k: (v["basis"], v["checkpoint_s"], round(v["work_lost_gpu_h"] * 3600, 6), round(v["gpu_h"] * 3600, 6))
            for k, v in pre.items()} == {"1": ("checkpoint", 3600, 1200, 4800), "2": ("since start", None, 4800, 4800)}
    teams = {r["team"]: r for r in preemption.by_victim(con, *day).iter_rows(named=True)}
    assert round(teams["research"]["work_lost_gpu_h"] * 3600, 6) == 1200
    assert round(teams["research"]["preempted_gpu_h"] * 3600, 6) == 4800


@settings(max_examples=60, deadline=None)
@given(elapsed=st.integers(1, 10 ** 6), interval=st.one_of(st.none(), st.integers(1, 10 ** 5)))
def test_lost_from_is_the_last_checkpoint_before_the_end(elapsed, interval):
    """start <= lost_from <= end; end - lost_from < interval (else it is the start); a whole multiple of the
    interval after the start."""
    start = dt.datetime(2024, 3, 1, 0, 59, 17)
    end = start + dt.timedelta(seconds=elapsed)
    with duckdb.connect() as own:           # not duckdb's process-wide default connection: other tests use it
        got, basis = own.sql(f"SELECT {L.lost_from_sql('$s', '$e', '$i')}, {L.basis_sql('$i')}",
                             params={"s": start, "e": end, "i": interval}).fetchall()[0]
    assert start <= got <= end
    if interval is None:
        assert (got, basis) == (start, L.SINCE_START)
    else:
        lost = (end - got).total_seconds()
        assert basis == L.CHECKPOINT and 0 <= lost < interval
        assert (got - start).total_seconds() % interval == 0
