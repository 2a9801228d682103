"""The demo's advance reservations: where and when they fall, which jobs go into them, how the scheduler keeps
everyone else off their nodes, and that `report reservations` on the written inputs reads back the truth."""
from __future__ import annotations

import datetime as dt
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest import plausible
from models.demo import build, config, reservation_plan, scheduler, workload
from models.demo.config import GPUS_PER_NODE, ReservationSpec
from models.metrics import reservations
from models.pipeline import refresh


def tiny(**kw) -> config.Config:
    """15 nodes (6+2 H100, 7 A100), three weeks ending 2026-01-26 (Los Angeles midnight, 08:00 UTC)."""
    return config.for_scale(0.25, seed=kw.pop("seed", 7), days=kw.pop("days", 21), telemetry_days=0,
                            squeue_days=0, **kw)


@pytest.fixture(scope="module")
def syn():
    return build.generate(tiny())


def utc(*a) -> int:
    return int(dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp())


def test_reservations_fall_at_10_17_site_time_on_the_last_nodes_of_their_pool(syn):
    llm, safety = sorted(syn.reservations, key=lambda r: -r.start)
    # 9 and 20 days before the export's local date 2026-01-26, 10:17 PST = 18:17 UTC
    assert (llm.name, llm.start, llm.end) == ("llm-pt-run", utc(2026, 1, 17, 18, 17), utc(2026, 1, 24, 18, 17))
    assert (safety.name, safety.start, safety.end) == ("safety-evals", utc(2026, 1, 6, 18, 17),
                                                       utc(2026, 1, 10, 18, 17))
    # four H100 nodes at scale 1 are one at 0.25: the highest-numbered, added at the capacity addition (day 10)
    assert [syn.layout.names[n] for n in llm.nodes] == ["h100-008"] and llm.gpus == GPUS_PER_NODE
    assert [syn.layout.names[n] for n in safety.nodes] == ["a100-007"]
    # created a week ahead (the longest time limit), not before the period starts
    assert llm.created == llm.start - 7 * 86400 and safety.created == syn.t0
    # one that does not fit in the period is left out
    assert reservation_plan.plan(tiny(days=8), syn.layout, syn.t0, syn.t0 + 8 * 86400) == ()


def test_the_main_run_takes_the_whole_reservation_and_the_rest_of_the_workload_is_unchanged(syn):
    plain = build.generate(tiny(reservations=()))
    jobs, res = syn.jobs, syn.reservations
    main = []
    for r, rv in enumerate(res):
        first = np.flatnonzero((plain.jobs.team == rv.team) & (plain.jobs.partition == rv.partition)
                               & (plain.jobs.array_id < 0) & (plain.jobs.submit >= rv.start)
                               & (plain.jobs.submit < rv.start + reservation_plan.MAIN_WITHIN))
        if not len(first):             # nobody of the team submitted in its first hours: no main run
            continue
        k = int(first[0])
        main.append(k)
        assert jobs.resv[k] == r and jobs.gpus[k] == rv.gpus and jobs.nodes[k] == len(rv.nodes)
        assert rv.start <= jobs.submit[k] < rv.start + reservation_plan.MAIN_WITHIN
        assert jobs.limit_s[k] == (rv.end - jobs.submit[k]) // 60 * 60
        assert jobs.run_s[k] == np.ceil(rv.main_share * jobs.limit_s[k])
        assert workload.PLAN_STATES[jobs.plan[k]] == "COMPLETED"
    assert main, "no reservation got its main run"
    others = np.setdiff1d(np.arange(len(jobs)), main)
    for f in ("job_id", "submit", "team", "partition", "gpus", "limit_s", "run_s", "plan"):
        assert np.array_equal(getattr(jobs, f)[others], getattr(plain.jobs, f)[others]), f
    assert (plain.jobs.resv == -1).all()


def test_jobs_in_a_reservation_are_the_owner_s_that_fit_in_it_but_for_those_that_forget(syn):
    jobs = syn.jobs
    for r, rv in enumerate(syn.reservations):
        inside = jobs.resv == r
        assert (jobs.team[inside] == rv.team).all() and (jobs.partition[inside] == rv.partition).all()
        assert (jobs.array_id[inside] < 0).all() and (jobs.gpus[inside] <= rv.gpus).all()
        assert ((jobs.submit[inside] >= rv.start) & (jobs.submit[inside] + jobs.limit_s[inside] <= rv.end)).all()
    big = build.generate(config.for_scale(1.0, telemetry_days=0, squeue_days=0))
    rv = big.reservations[0]
    j = big.jobs
    fits = ((j.team == rv.team) & (j.partition == rv.partition) & (j.array_id < 0) & (j.submit >= rv.start)
            & (j.submit + j.limit_s <= rv.end) & (j.gpus <= rv.gpus))
    assert fits.sum() >= 12 and 0 < (fits & (j.resv != 0)).sum() < fits.sum() / 2


def _placements(s):
    inst = s.inst
    gi = inst.gpu_inst
    start = inst.start[gi]
    end = np.where(inst.end[gi] < 0, s.t_end, inst.end[gi])
    return gi, inst.gpu_node, start, end


def check_reservations_kept(s) -> None:
    """Nobody else starts on a reservation's nodes once it is created unless done by its start (by time limit),
    nor during it; its own jobs run only there, start inside it (whatever their limit) and end by its end (killed
    then, TIMEOUT, if still running); none still waits after its end."""
    inst, jobs = s.inst, s.jobs
    gi, node, start, end = _placements(s)
    resv_of = jobs.resv[inst.job[gi]]
    limit = jobs.limit_s[inst.job[gi]]
    for r, rv in enumerate(s.reservations):
        on = np.isin(node, rv.nodes)
        other = on & (resv_of != r)
        assert not np.any(other & (start >= rv.start) & (start < rv.end)), "another job started during it"
        before = other & (start >= rv.created) & (start < rv.start)
        assert np.all(start[before] + limit[before] <= rv.start), "a job started on it that could outlast its start"
        mine = resv_of == r
        assert np.all(on[mine]), "a reservation job ran elsewhere"
        assert np.all((start[mine] >= rv.start) & (start[mine] < rv.end) & (end[mine] <= rv.end))
        timed_out = (jobs.resv[inst.job] == r) & (inst.state == scheduler.S_TIMEOUT)
        assert np.all(inst.end[timed_out] == rv.end), "a reservation job timed out but not at its end"
        waiting = (jobs.resv[inst.job] == r) & (inst.start < 0)
        # its user gave up, or it was still queued at the end
        assert np.all((inst.state[waiting] == scheduler.S_CANCELLED) & (inst.end[waiting] <= rv.end))


def test_the_scheduler_keeps_the_reservations(syn):
    check_reservations_kept(syn)
    assert (syn.jobs.resv[syn.inst.job[syn.inst.start >= 0]] >= 0).sum() >= 2   # something ran in them


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rate=st.floats(0.3, 3.0), mtbf=st.floats(2.0, 60.0),
       days=st.floats(0.3, 2.5), share=st.floats(0.1, 0.95))
def test_reservations_are_kept_for_any_workload(seed, rate, mtbf, days, share):
    spec = ReservationSpec("r", "llm-pretrain", "h100", 20, 3, days, share)
    s = build.generate(config.for_scale(0.1, seed=seed, days=4, jobs_per_gpu_day=rate, node_mtbf_days=mtbf,
                                        reservations=(spec,)))
    assert len(s.reservations) == 1
    check_reservations_kept(s)


def test_a_reservation_job_that_outlasts_it_starts_and_is_killed_at_its_end():
    """As Slurm 22.05 (measured, docs/SIMULATOR.md): a job submitted into a reservation starts there whatever its
    time limit, and ends TIMEOUT at the reservation's end (ResvOverRun 0). Seed 7 of this small workload has one:
    the reservation's run, requeued after a node failure, restarts with a limit past the end."""
    spec = ReservationSpec("r", "llm-pretrain", "h100", 20, 3, 1.5, 0.9)
    s = build.generate(config.for_scale(0.1, seed=7, days=4, jobs_per_gpu_day=2.0, node_mtbf_days=3.0,
                                        reservations=(spec,)))
    inst, jobs, rv = s.inst, s.jobs, s.reservations[0]
    cut = np.flatnonzero((jobs.resv[inst.job] == 0) & (inst.state == scheduler.S_TIMEOUT))
    assert len(cut) == 1
    k = cut[0]
    assert rv.start <= inst.start[k] < rv.end and inst.end[k] == rv.end
    assert inst.start[k] + jobs.limit_s[inst.job[k]] > rv.end                  # it outlasted the reservation
    check_reservations_kept(s)


def test_the_written_inputs_report_what_the_scheduler_did(syn, con, tmp_path):
    """sacct's Reservation column and `scontrol show reservation -o` through the real ingestors: `report
    reservations` reads back each reservation's GPU-hours as the scheduler's placements give them, to the second."""
    inputs = build.write_inputs(syn, tmp_path / "in")
    assert [p.name for p in inputs.reservations] == ["scontrol-show-reservation-llm-pt-run.txt",
                                                     "scontrol-show-reservation-safety-evals.txt"]
    assert inputs.sacct[0].read_text().splitlines()[0].endswith("|JobName|Reservation")
    runs = build.load_inputs(con, syn, inputs)
    assert sum(r.get("rejected", 0) for r in runs) == 0
    with plausible.replaying("2000-01-01..2027-01-01"):
        refresh.run(con, tmp_path / "w.duckdb", full=True, publish=False)
    got = {r["name"]: r for r in reservations.report(con, dt.datetime(2026, 1, 1), dt.datetime(2026, 2, 1))
           .iter_rows(named=True)}
    gi, node, start, end = _placements(syn)
    resv_of = syn.jobs.resv[syn.inst.job[gi]]
    for r, rv in enumerate(syn.reservations):
        row = got[rv.name]
        overlap = np.clip(np.minimum(end, rv.end) - np.maximum(start, rv.start), 0, None) * np.isin(node, rv.nodes)
        used = overlap[resv_of == r].sum() / 3600
        other = overlap[resv_of != r].sum() / 3600
        assert row["team"] == syn.cfg.teams[rv.team].name and row["flags"] == "SPEC_NODES"
        assert row["reserved_gpu_h"] == pytest.approx(rv.gpus * (rv.end - rv.start) / 3600)
        assert (row["used_gpu_h"], row["other_jobs_gpu_h"]) == pytest.approx((used, other), abs=1e-6)
        assert row["reserved_idle_gpu_h"] == pytest.approx(row["reserved_gpu_h"] - used - other, abs=1e-6)
        assert used > 0


def test_a_reservation_that_would_end_after_the_export_is_not_planned():
    spec = replace(config.default_reservations()[0], before_end_days=2, days=5.0)
    assert build.generate(tiny(reservations=(spec,))).reservations == ()
