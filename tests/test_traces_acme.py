"""ingest/traces/acme.py: AcmeTrace's job traces (hand-written in the upstream README's format; the traces are
not in ../shared) load with their failure states, every line accounted for, and reach the loss report."""
from __future__ import annotations

import datetime as dt

import pytest

from ingest import traces
from models.metrics import losses
from models.pipeline import refresh
from tests.conftest import FIXTURES

ACME = FIXTURES / "traces" / "acme"


def test_every_line_loaded_or_rejected_with_line_and_field(con):
    kalos, seren = traces.ingest(con, "acme", ACME)
    assert (kalos["read"], kalos["loaded"], kalos["skipped"], kalos["rejected"]) == (8, 5, 1, 2)
    assert (seren["read"], seren["loaded"], seren["skipped"], seren["rejected"]) == (3, 2, 1, 0)
    rej = con.sql("SELECT line_no, field, reason FROM rejects ORDER BY line_no").fetchall()
    assert [(r[0], r[1]) for r in rej] == [(7, "state"), (8, "submit_time")]
    assert "REQUEUE_FED" in rej[0][2]
    again = traces.ingest(con, "acme", ACME / "trace_seren.csv")[0]
    assert (again["inserted"], again["unchanged"]) == (0, 2)


def test_times_in_utc_and_failure_states_kept(con):
    traces.ingest(con, "acme", ACME)
    rows = {r[0]: r[1:] for r in con.sql("""SELECT job_id, cluster, state, job_name, start, "end", ngpus, nnodes
                                            FROM jobs""").fetchall()}
    # Seren prints +08:00: 2023-03-01 00:18:54+08:00 is 2023-02-28 16:18:54 UTC
    assert rows["6100017"] == ("seren", "FAILED", "Pretrain", dt.datetime(2023, 2, 28, 16, 18, 54),
                               dt.datetime(2023, 2, 28, 16, 20, 51), 8.0, 1)
    assert {k: v[1] for k, v in rows.items() if v[0] == "kalos"} == {
        "dlcaa01": "NODE_FAIL", "dlcaa02": "FAILED", "dlcaa03": "TIMEOUT", "dlcaa04": "CANCELLED",
        "dlcaa05": "COMPLETED"}


def test_failure_states_reach_the_loss_report_unplaced(con, db_path, tmp_path):
    """NODE_FAIL -> node failure, FAILED -> the job's failure, TIMEOUT -> timeout; the traces name no nodes, so
    each is listed with its cause and counts 0 GPU-hours (basis: unplaced jobs). A checkpoint rule for the
    workload type Pretrain (the job name) gives its jobs the checkpoint basis."""
    from ingest import governance
    traces.ingest(con, "acme", ACME)
    gov = tmp_path / "gov.toml"
    gov.write_text('currency = "EUR"\n[[teams]]\nname = "llm"\nusers = ["u*"]\n'
                   '[[checkpoints]]\njob_name = "Pretrain"\ninterval = "1h"\n')
    governance.ingest_path(con, gov)
    refresh.run(con, db_path, publish=False)
    j = {r["job_id"]: r for r in losses.jobs(con, dt.datetime(2023, 2, 1), dt.datetime(2023, 6, 1)).iter_rows(named=True)}
    assert {k: r["cause"] for k, r in j.items()} == {"dlcaa01": "node_failure", "dlcaa02": "user_failure",
                                                     "dlcaa03": "timeout", "6100017": "user_failure"}
    assert {k: r["basis"] for k, r in j.items()} == {"dlcaa01": "checkpoint", "dlcaa02": "since start",
                                                     "dlcaa03": "since start", "6100017": "checkpoint"}
    assert all(r["lost_gpu_h"] == 0 and r["allocated_gpu_h"] == 0 for r in j.values())
    b = losses.basis(con, dt.datetime(2023, 2, 1), dt.datetime(2023, 6, 1))
    assert b["unplaced_jobs"] == 4
