"""Failure losses (models/marts/losses.py, models/metrics/losses.py): hand-computed jobs through the real
ingestors (sacct, scontrol show node, sacctmgr show event, DCGM text, governance TOML) and the real refresh."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest import governance, warehouse
from models.definitions.losses_sql import CAUSES
from models.marts import losses as losses_mart, timeline as timeline_mart
from models.metrics import losses
from models.pipeline import refresh
from tests.telemetry_fixtures import add_jobs, at, load_readings, readings
from tests.timeline_fixtures import Job, load


def T(s: str) -> dt.datetime:
    """"03-01 10:17:23" -> 2024-03-01 10:17:23."""
    return dt.datetime.fromisoformat(f"2024-{s}")

NODES = [("gpu01", 8, "a100", "a100"), ("gpu02", 8, "a100", "a100"), ("gpu03", 8, "h100", "h100")]
GOV = """
currency = "EUR"
[[teams]]
name = "research"
accounts = ["ml"]
[[teams]]
name = "product"
accounts = ["cv"]
{extra}
"""


def _refresh(con, db_path):
    refresh.run(con, db_path, publish=False)


def _gov(con, tmp_path, extra: str = "") -> None:
    p = tmp_path / "gov.toml"
    p.write_text(GOV.format(extra=extra))
    governance.ingest_path(con, p)


def test_node_fail_two_nodes_loses_gpus_times_elapsed(con, db_path, tmp_path):
    """A 16-GPU job on two nodes ends NODE_FAIL at 13:42:11 (started 10:17:23) as gpu02 goes DOWN at 13:41:50:
    16 x 12,288 s = 196,608 GPU-seconds of node-failure loss, to the second; a completed job loses nothing."""
    jobs = [Job(1, "alice", "ml", "a100", 16, ["gpu01", "gpu02"], start=T("03-01 10:17:23"),
                end=T("03-01 13:42:11"), state="NODE_FAIL"),
            Job(2, "bob", "cv", "h100", 4, ["gpu03"], start=T("03-01 09:00"), end=T("03-01 15:00"))]
    load(con, "tc", jobs, NODES, [("gpu02", T("03-01 13:41:50"), T("03-01 16:00"), "DOWN", "Not responding")],
         refresh=False)
    _gov(con, tmp_path)
    _refresh(con, db_path)
    j = losses.jobs(con)
    assert j.height == 1
    r = j.row(0, named=True)
    assert (r["cause"], r["detail"], r["event_node"], r["basis"]) == ("node_failure", "Not responding", "gpu02",
                                                                      "since start")
    elapsed = (T("03-01 13:42:11") - T("03-01 10:17:23")).total_seconds()
    assert elapsed == 12288
    assert r["lost_gpu_h"] * 3600 == pytest.approx(16 * elapsed, abs=1e-6)
    rep = losses.report(con, bucket=None, by=["team"])
    research = rep.filter(pl.col("team") == "research").row(0, named=True)
    assert research["node_failure_gpu_h"] * 3600 == pytest.approx(16 * 12288)
    assert research["allocated_gpu_h"] * 3600 == pytest.approx(16 * 12288)
    assert research["goodput_share"] == pytest.approx(0.0)
    product = rep.filter(pl.col("team") == "product").row(0, named=True)
    assert (product["lost_gpu_h"], product["goodput_share"]) == (0.0, 1.0)
    nodes = losses.report(con, bucket=None, by=["node"])
    assert dict(zip(nodes["node"], nodes["lost_gpu_h"] * 3600)) == pytest.approx({"gpu01": 8 * 12288,
                                                                                  "gpu02": 8 * 12288})
    # node events were loaded, GPU telemetry was not: its 0 GPU XID GPU-hours are "not known", not "none"
    assert losses.basis(con)["unknown"] == {"gpu_xid": "no GPU telemetry loaded (`gpuledger ingest prometheus|dcgm`)"}


def test_xid_during_job_classifies_by_class(con, db_path, tmp_path):
    """Job 1 (8 GPUs on n1) fails at minute 95.5 after GPU 3 of n1 reported XID 79 at minute 90: a gpu_xid loss
    of class 'bus', 8 x 5,730 s. Job 2 fails after an application XID 13: the user's failure, not the GPU's.
    Job 3 is cancelled with no event near: no loss."""
    add_jobs(con, tmp_path, [
        {"id": 1, "start": 0, "end": 95.5, "gpus": 8, "nodes": "n1", "state": "FAILED"},
        {"id": 2, "start": 0, "end": 40, "gpus": 2, "nodes": "n2", "state": "FAILED"},
        {"id": 3, "start": 0, "end": 50, "gpus": 2, "nodes": "n2", "state": "CANCELLED"}])
    xid = {("n1", "3", None, "DCGM_FI_DEV_XID_ERRORS"): {m: (79 if m >= 90 else 0) for m in range(0, 96)},
           ("n2", "0", None, "DCGM_FI_DEV_XID_ERRORS"): {m: (13 if m >= 30 else 0) for m in range(0, 41)}}
    assert load_readings(con, readings(xid))["rejected"] == 0
    _refresh(con, db_path)
    j = {r["job_id"]: r for r in losses.jobs(con).iter_rows(named=True)}
    assert set(j) == {"1", "2"}
    assert (j["1"]["cause"], j["1"]["detail"], j["1"]["xid"], j["1"]["event_node"]) == ("gpu_xid", "bus", 79, "n1")
    assert j["1"]["event_start"] == at(90)
    assert j["1"]["lost_gpu_h"] * 3600 == pytest.approx(8 * 95.5 * 60)
    assert (j["2"]["cause"], j["2"]["detail"], j["2"]["xid"]) == ("user_failure", "application XID", 13)
    assert j["2"]["lost_gpu_h"] * 3600 == pytest.approx(2 * 40 * 60)
    assert set(losses.basis(con)["unknown"]) == {"outage"}          # telemetry, but no node events


CKPT_HEADER = "JobID|JobIDRaw|JobName|Cluster|Partition|Account|User|State|Submit|Start|End|NNodes|NCPUS|AllocTRES|NodeList\n"


def _ckpt_jobs(tmp_path) -> str:
    rows = [  # id, name, account, state, start, end, gpus, node
        (1, "train-a", "ml", "FAILED", "2024-03-01T00:00:00", "2024-03-01T01:47:13", 4, "gpu01"),
        (2, "ckpt-b", "ml", "TIMEOUT", "2024-03-01T00:00:00", "2024-03-01T01:47:13", 4, "gpu02"),
        (3, "other", "cv", "PREEMPTED", "2024-03-01T00:00:00", "2024-03-01T01:47:13", 2, "gpu03"),
    ]
    lines = [CKPT_HEADER] + [f"{i}|{i}|{n}|tc|a100|{a}|u|{s}|{t0}|{t0}|{t1}|1|8|cpu=8,gres/gpu={g},node=1|{node}\n"
                             for i, n, a, s, t0, t1, g, node in rows]
    p = tmp_path / "ckpt.psv"
    p.write_text("".join(lines))
    return str(p)


def test_checkpoint_interval_limits_the_loss(con, db_path, tmp_path):
    """Each job ran 6,433 s. research checkpoints every 30 min, job names ckpt-* every 10 min (the name rule wins):
    job 1 loses since 01:30 (1,033 s x 4 GPUs), job 2 since 01:40 (433 s x 4), job 3 (product, no rule) since its
    start (6,433 s x 2). Goodput of research = 1 - lost / allocated."""
    from ingest import sacct
    load(con, "tc", [], NODES, refresh=False)
    assert sacct.ingest_path(con, _ckpt_jobs(tmp_path), sacct.SacctOptions())["rejected"] == 0
    _gov(con, tmp_path, '[[checkpoints]]\nteam = "research"\ninterval = "30m"\n'
                        '[[checkpoints]]\njob_name = "ckpt-*"\ninterval = 600\n')
    _refresh(con, db_path)
    j = {r["job_id"]: r for r in losses.jobs(con).iter_rows(named=True)}
    assert {k: (v["cause"], v["basis"], v["checkpoint_s"]) for k, v in j.items()} == {
        "1": ("user_failure", "checkpoint", 1800), "2": ("timeout", "checkpoint", 600),
        "3": ("preemption", "since start", None)}
    assert {k: round(v["lost_gpu_h"] * 3600, 6) for k, v in j.items()} == {"1": 4 * 1033, "2": 4 * 433, "3": 2 * 6433}
    assert j["1"]["lost_gpu_h"] * 3600 == pytest.approx(4 * 1033)
    rep = losses.report(con, bucket="day", by=["team"])
    research = rep.filter(pl.col("team") == "research").row(0, named=True)
    assert research["allocated_gpu_h"] * 3600 == pytest.approx(8 * 6433)
    assert research["lost_gpu_h"] * 3600 == pytest.approx(4 * 1033 + 4 * 433)
    assert research["goodput_share"] == pytest.approx(1 - (4 * 1033 + 4 * 433) / (8 * 6433))
    assert losses.basis(con)["checkpoint_gpu_h"] * 3600 == pytest.approx(4 * 1033 + 4 * 433)


def test_bad_checkpoint_section_is_one_line_error(con, tmp_path):
    p = tmp_path / "gov.toml"
    p.write_text(GOV.format(extra='[[checkpoints]]\nteam = "research"\ninterval = "soon"\n'))
    with pytest.raises(Exception) as exc:
        governance.ingest_path(con, p)
    msg = str(exc.value)
    assert "\n" not in msg and "checkpoints[0].interval" in msg and "gov.toml:11:" in msg


END_STATES = ["COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "REQUEUED", "OUT_OF_MEMORY"]


def _timeline_and_losses(con) -> None:
    """The two refresh steps the loss marts need (the rest of `gpuledger refresh` is tested above)."""
    timeline_mart.build(con)
    losses_mart.build(con)


def _marts(con) -> tuple:
    return (con.sql("SELECT * FROM loss_jobs ORDER BY job_uid").fetchall(),
            con.sql("SELECT job_uid, node, day, round(lost_gpu_s, 6) FROM loss_days ORDER BY ALL").fetchall(),
            con.sql("SELECT * FROM node_job_days ORDER BY ALL").fetchall())


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_losses_add_up_and_never_exceed_allocation(tmp_path_factory, data):
    """On random small clusters with random end states and outages: losses by cause add up to the total lost,
    every job loses at most what it held, every (team, day) at most its allocation; an incremental refresh after
    a late outage equals a full rebuild."""
    from tests.timeline_fixtures import clusters
    nodes, jobs, events = data.draw(clusters())
    for j in jobs:
        if j.end is not None:
            j.state = data.draw(st.sampled_from(END_STATES))
    path = tmp_path_factory.mktemp("prop") / "w.duckdb"
    con = warehouse.connect(path)
    try:
        load(con, "tc", jobs, nodes, events, [("research", "acct0")], refresh=False)
        _timeline_and_losses(con)
        lj = con.sql("SELECT lost_gpu_s, alloc_gpu_s FROM loss_jobs").pl()
        assert (lj["lost_gpu_s"] <= lj["alloc_gpu_s"] + 1e-6).all()
        rep = losses.report(con, bucket="day", by=["team"])
        if rep.height:
            causes = rep.select(pl.sum_horizontal([f"{c}_gpu_h" for c in CAUSES])).to_series()
            assert (causes - rep["lost_gpu_h"]).abs().max() < 1e-9
            assert (rep["lost_gpu_h"] <= rep["allocated_gpu_h"] + 1e-9).all()
            total = con.sql("SELECT coalesce(sum(lost_gpu_s), 0) / 3600 FROM loss_jobs").fetchall()[0][0]
            assert rep["lost_gpu_h"].sum() == pytest.approx(total, abs=1e-9)
        # a late outage on the first node, then an incremental refresh = a full rebuild
        s = dt.datetime(2024, 3, 1) + dt.timedelta(minutes=15 * data.draw(st.integers(0, 180)))
        load(con, "tc", [], events=[(nodes[0][0], s, s + dt.timedelta(hours=1), "DOWN", "Xid 48")], refresh=False)
        _timeline_and_losses(con)
        incremental = _marts(con)
        losses_mart.build(con, full=True)
        assert _marts(con) == incremental
    finally:
        con.close()


def test_philly_attempts_and_failures_reach_the_loss_report(con, db_path):
    """The Philly job log's failed attempts (REQUEUED instances) and FAILED jobs arrive as requeue and job-failure
    losses: the first attempt of job 14199 held 8 GPUs for 74 s; job 20001 failed on m[10-11]."""
    from ingest import traces
    from tests.conftest import FIXTURES
    traces.ingest(con, "philly", FIXTURES / "traces" / "philly")
    _refresh(con, db_path)
    j = losses.jobs(con).sort("job_id")
    got = {(r["job_id"], r["state"], r["cause"]): r for r in j.iter_rows(named=True)}
    req = got[("application_1506638472019_14199", "REQUEUED", "requeue")]
    assert req["lost_gpu_h"] * 3600 == pytest.approx(8 * 74)
    failed = next(r for k, r in got.items() if k[0].endswith("_20001"))
    assert failed["cause"] == "user_failure"
    assert failed["lost_gpu_h"] == pytest.approx(failed["allocated_gpu_h"]) and failed["lost_gpu_h"] > 0
    # a job log alone: outages and XIDs cannot be seen, and the report says so rather than showing "none"
    assert set(losses.basis(con)["unknown"]) == {"outage", "gpu_xid"}


def test_cli_says_which_hardware_causes_are_not_known(run_cli, tmp_path):
    from tests.conftest import FIXTURES
    assert run_cli("ingest", "trace", "philly", str(FIXTURES / "traces" / "philly"))[0] == 0
    code, out, err = run_cli("report", "losses", "--total")
    assert code == 0 and "user_failure_gpu_h" in out
    assert ("not known, read as 0: outage_gpu_h, no node events loaded (`gpuledger ingest events`); gpu_xid_gpu_h, "
            "no GPU telemetry loaded (`gpuledger ingest prometheus|dcgm`)") in err
    # the reliability summary's per-team losses say it too (its XIDs under its own telemetry note)
    code, out, err = run_cli("report", "reliability", "--view", "teams", "--from", "2017-01-01", "--to", "2018-01-01")
    assert code == 0 and "outage_gpu_h" in out
    assert "outage_gpu_h not known, read as 0: no node events loaded (`gpuledger ingest events`)" in err


def test_supercloud_sample_failure_states_reach_the_loss_report(con, db_path):
    """Every ended, placed GPU job of the real MIT SuperCloud sample whose state loses work is in the loss mart
    with the cause its state gives, and (no checkpoint intervals) loses exactly what it held."""
    from ingest import traces
    from tests.conftest import shared_path
    traces.ingest(con, "mit-supercloud", shared_path("traces", "mit-supercloud-sample", "slurm-log-queueing-clean.csv"))
    _refresh(con, db_path)
    want = dict(con.sql("""
        SELECT state, count(*) FROM jobs j WHERE ngpus > 0 AND start IS NOT NULL AND "end" > start
          AND state IN ('FAILED', 'NODE_FAIL', 'TIMEOUT', 'PREEMPTED', 'OUT_OF_MEMORY', 'BOOT_FAIL', 'DEADLINE')
          AND EXISTS (SELECT 1 FROM job_nodes n WHERE n.job_uid = j.job_uid) GROUP BY state""").fetchall())
    assert sum(want.values()) > 0
    got = dict(con.sql("SELECT state, count(*) FROM loss_jobs WHERE state <> 'CANCELLED' GROUP BY state").fetchall())
    assert got == want
    lost, alloc = con.sql("SELECT sum(lost_gpu_s), sum(alloc_gpu_s) FROM loss_jobs").fetchall()[0]
    assert lost == pytest.approx(alloc)
