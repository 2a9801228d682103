"""models/metrics/preemption.py: victims, preemptors and requeues on the captured real mix
(tests/fixtures/slurm_waiting) and on hand-made jobs.

The mix: `victim` (ml, QOS scavenger, 4 a100 on gpu01) ran 05:37:40-:43 and ended PREEMPTED when `preemptor`
(vision, QOS high, 4 a100 on gpu01) started at :43; it was requeued and ran again :53-:55 (a second record).
Preempted: 4 GPUs x 3 s = 12 GPU-s; one requeue for ml.
"""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from cost_helpers import SACCT_HEADER, Job, node_line, sacct_line
from ingest import warehouse
from models.metrics import preemption
from waiting_fixtures import shared_db


@pytest.fixture(scope="module")
def ro(tmp_path_factory):
    c = warehouse.connect(shared_db(tmp_path_factory), read_only=True)
    yield c
    c.close()


def test_the_real_preemption_is_attributed_to_both_teams(ro):
    v = preemption.victims(ro).to_dicts()
    assert len(v) == 1
    assert (v[0]["job_id"], v[0]["team"], v[0]["qos"], v[0]["ngpus"]) == ("2", "ml", "scavenger", 4)
    assert (v[0]["preemptor_job_id"], v[0]["preemptor_team"], v[0]["preemptor_qos"]) == ("6", "vision", "high")
    assert round(v[0]["gpu_h"] * 3600, 6) == 12
    t = {r["team"]: r for r in preemption.by_victim(ro).to_dicts()}
    assert (t["ml"]["preempted_jobs"], t["ml"]["requeues"], t["ml"]["preemptor_found"]) == (1, 1, 1)
    assert round(t["ml"]["work_lost_gpu_h"] * 3600, 6) == 12
    p = preemption.by_preemptor(ro).to_dicts()
    assert [(r["preemptor_qos"], r["preemptor_partition"], r["preemptor_team"], r["victim_team"], r["victims"])
            for r in p] == [("high", "a100", "vision", "ml", 1)]


def test_a_job_of_the_victims_qos_or_too_late_is_no_preemptor(con, tmp_path):
    from ingest import sacct, slurm_nodes
    from models.pipeline import refresh
    t = lambda m, s=0: dt.datetime(2026, 3, 1, 10, m, s)
    jobs = [Job(1, "ml", 2, t(0), t(30, 10), node="n1", qos="scav", state="PREEMPTED"),
            Job(2, "ml", 2, t(30, 10), t(50), node="n1", qos="scav"),            # same QOS: not the preemptor
            Job(3, "vision", 2, t(30, 40), t(50), node="n1", qos="high"),        # 30 s later: the preemptor
            Job(4, "ops", 4, t(0), t(20), node="n2", qos="normal", state="PREEMPTED"),
            Job(5, "vision", 4, t(25), t(40), node="n2", qos="high")]            # 5 minutes later: none
    (tmp_path / "n.txt").write_text("\n".join(node_line(n, 4, "h100") for n in ("n1", "n2")) + "\n")
    slurm_nodes.ingest_path(con, str(tmp_path / "n.txt"), cluster="c1", as_of="2025-01-01T00:00:00")
    (tmp_path / "s.psv").write_text(SACCT_HEADER + "\n" + "\n".join(sacct_line(j) for j in jobs) + "\n")
    sacct.ingest_path(con, str(tmp_path / "s.psv"), sacct.SacctOptions(tz="UTC"))
    refresh.run(con, tmp_path / "x.duckdb", publish=False)
    v = {r["job_id"]: r for r in preemption.victims(con).to_dicts()}
    assert (v["1"]["preemptor_job_id"], v["1"]["preemptor_qos"]) == ("3", "high")
    assert v["4"]["preemptor_job_id"] is None and v["4"]["preemptor_team"] == preemption.UNKNOWN
    assert v["4"]["gpu_h"] == pytest.approx(4 * 20 / 60)
    assert preemption.victims(con, grace_s=10)["preemptor_team"].to_list() == [preemption.UNKNOWN] * 2
    # no later record of job 1 or 4: preempted but not requeued
    assert preemption.by_victim(con)["requeues"].sum() == 0


def test_a_partition_of_a_higher_tier_preempts_under_the_same_qos(con, tmp_path):
    """preempt/partition_prio: a scavenger partition overlapping the GPU partition, every job under QOS normal.
    The job of another partition that started on the victim's node is its preemptor; a job of the victim's own
    partition and QOS that started earlier is not (it could have preempted under neither PreemptType)."""
    from ingest import sacct, slurm_nodes
    from models.pipeline import refresh
    t = lambda m, s=0: dt.datetime(2026, 3, 1, 10, m, s)
    jobs = [Job(1, "ml", 2, t(0, 7), t(30, 10), node="n1", partition="scav", state="PREEMPTED"),
            Job(2, "ml", 2, t(30, 5), t(50), node="n1", partition="scav"),           # own partition and QOS
            Job(3, "vision", 2, t(30, 20), t(50), node="n1", partition="gpu")]      # 10 s after: the preemptor
    (tmp_path / "n.txt").write_text(node_line("n1", 4, "h100", "gpu,scav") + "\n")
    slurm_nodes.ingest_path(con, str(tmp_path / "n.txt"), cluster="c1", as_of="2025-01-01T00:00:00")
    (tmp_path / "s.psv").write_text(SACCT_HEADER + "\n" + "\n".join(sacct_line(j) for j in jobs) + "\n")
    sacct.ingest_path(con, str(tmp_path / "s.psv"), sacct.SacctOptions(tz="UTC"))
    refresh.run(con, tmp_path / "x.duckdb", publish=False)
    v = preemption.victims(con).to_dicts()
    assert [(r["job_id"], r["preemptor_job_id"], r["preemptor_qos"], r["preemptor_partition"]) for r in v] == [
        ("1", "3", "normal", "gpu")]
    assert v[0]["gpu_h"] == pytest.approx(2 * (30 * 60 + 3) / 3600)      # 10:00:07 to 10:30:10
    p = preemption.by_preemptor(con).to_dicts()
    assert [(r["preemptor_qos"], r["preemptor_partition"], r["victims"]) for r in p] == [("normal", "gpu", 1)]


def test_attribution_finds_the_demo_schedulers_own_preemptors(con, tmp_path):
    """The demo's scheduler preempts its `preempt` partition for jobs of the other partitions (preempt/partition_prio,
    mostly under one QOS) and records whom it preempted for. From accounting alone every victim gets a preemptor
    that started on its node in the same second as the true one, in the true one's partition; which of several
    jobs that started there in that second (tasks of one array) took the GPUs, accounting cannot say."""
    from ingest import sacct, slurm_nodes
    from models.demo import build, config, sacct_writer, slurm_writers
    from models.pipeline import refresh
    syn = build.generate(config.for_scale(0.25, seed=7, days=21, telemetry_days=0))
    cfg, inst, jobs = syn.cfg, syn.inst, syn.jobs
    for when in (syn.t0, syn.t_add):
        nodes = slurm_writers.scontrol_nodes(cfg, syn.layout, inst, syn.outages, when)
        slurm_nodes.ingest_bytes(con, nodes, "nodes", fmt="scontrol", cluster=cfg.cluster,
                                 as_of=slurm_writers.iso(when))
    frame = sacct_writer.instance_frame(cfg, jobs, syn.users, syn.layout, inst, syn.reservations)
    export = sacct_writer.export(frame, cfg.cluster, syn.t0, syn.t_end)
    sacct.ingest_bytes(con, export, "sacct.psv", sacct.SacctOptions(cluster=cfg.cluster, tz="UTC"))
    refresh.run(con, tmp_path / "x.duckdb", publish=False)

    def job_id(i: int) -> str:
        j = inst.job[i]
        return f"{jobs.array_id[j]}_{jobs.task[j]}" if jobs.array_id[j] >= 0 else str(jobs.job_id[j])
    part = [p.name for p in cfg.partitions]
    truth = {(job_id(i), int(inst.end[i])): int(inst.preempted_for[i]) for i in np.flatnonzero(inst.preempted_for >= 0)}
    epoch = lambda t: int(t.replace(tzinfo=dt.timezone.utc).timestamp())
    v = preemption.victims(con).to_dicts()
    assert len(v) == len(truth) >= 50
    exact = 0
    for r in v:
        h = truth[(r["job_id"], epoch(r["end"]))]
        assert r["partition"] == "preempt" and r["preemptor_partition"] == part[jobs.partition[inst.job[h]]], r
        assert r["preemptor_start"] is not None and epoch(r["preemptor_start"]) == inst.start[h], r
        exact += r["preemptor_job_id"] == job_id(h)
    assert exact >= 0.8 * len(v)          # 82 of 94 for this seed


def test_cli_prints_the_views(ro, tmp_path, run_cli, db_path):
    import shutil
    shutil.copyfile(ro.execute("SELECT path FROM duckdb_databases() WHERE NOT internal").fetchall()[0][0], db_path)
    code, out, err = run_cli("report", "preemption")
    assert code == 0 and "== victims" in out and "== preemptors" in out and "high" in out
    # no [[checkpoints]] in the mix's governance: the 12 GPU-s (0.00 GPU-h) are lost since the run's start
    assert "since the last checkpoint for 0.00 GPU-h" in err and "since the run's start for 0.00 GPU-h" in err
