"""The scheduler simulator: hand-worked schedules and invariants (hypothesis)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.simulation.simulate import Cluster, Policy, Workload, inject_failures, node_events, simulate


def _starts(res):
    return dict(zip(res.jobs["job_uid"].to_list(), res.jobs["start_s"].to_list()))


# Two 8-GPU nodes. A fills node 0 until 100; B (4 GPUs, limit 200) runs on node 1 from 1 to 51; C is a
# 2-node gang; D is short (limit 40); E is long (limit 300).
TWO_NODES = {
    "job_uid": [0, 1, 2, 3, 4], "submit_s": [0, 1, 2, 3, 4], "run_s": [100, 50, 10, 30, 150],
    "limit_s": [100, 200, 10, 40, 300], "gpus_per_node": [8, 4, 8, 4, 4], "nnodes": [1, 1, 2, 1, 1],
}


def test_fifo_blocks_behind_the_gang_job():
    res = simulate(Cluster.from_arrays([8, 8]), Workload.from_columns(TWO_NODES), Policy.parse("fifo"))
    # C needs both nodes: it starts when A ends (100) and holds both until 110; D and E wait behind it.
    assert _starts(res) == {0: 0, 1: 1, 2: 100, 3: 110, 4: 110}
    assert res.jobs["wait_s"].to_list() == [0, 0, 98, 107, 106]


def test_easy_backfill_starts_the_short_job_without_delaying_the_gang():
    res = simulate(Cluster.from_arrays([8, 8]), Workload.from_columns(TWO_NODES),
                   Policy.parse("fifo-backfill", bf_interval_s=0))
    # At t=3 C's shadow time is 201 (B's limit); D ends by 43 so it backfills on node 1. E (limit 300)
    # would still hold 4 GPUs at the shadow time on a reserved node, so it waits; C still starts at 100.
    assert _starts(res) == {0: 0, 1: 1, 2: 100, 3: 3, 4: 110}
    shadow = dict(zip(res.jobs["job_uid"].to_list(), res.jobs["head_shadow_s"].to_list()))
    assert shadow[2] == 100  # recomputed when B ended at 51: A's limit is then the binding release


def test_backfill_runs_every_bf_interval():
    # Slurm's bf_interval (30 s): C blocks at t=2 and a pass runs then; D arrives at 3 but waits for the next
    # pass at 32, then ends (limit 40) long before C's shadow (201) and starts; E still waits for C.
    res = simulate(Cluster.from_arrays([8, 8]), Workload.from_columns(TWO_NODES), Policy.parse("fifo-backfill"))
    assert res.policy.bf_interval_s == 30
    assert _starts(res) == {0: 0, 1: 1, 2: 100, 3: 32, 4: 110}


def test_a_blocked_pool_does_not_block_another():
    # Slurm's main scheduler skips a blocked partition and goes on with the others: the h100 gang cannot start,
    # the a100 job behind it starts at once (no backfill needed)
    cl = Cluster.from_arrays([8, 8], ["h100", "a100"])
    work = Workload.from_columns({"submit_s": [0, 1, 2], "run_s": [100, 10, 10], "gpus_per_node": [8, 8, 8],
                                  "nnodes": [1, 2, 1], "pool": ["h100", None, "a100"]})
    res = simulate(cl, work, Policy.parse("fifo"))
    # job 1 asks for 2 nodes of any pool: it waits for job 0 (until 100); job 2 (a100) does not wait for it
    assert _starts(res) == {0: 0, 1: 100, 2: 2}


def test_each_blocked_class_gets_its_own_reservation():
    # two pools, each with a blocked 8-GPU head: a long 4-GPU job may not take either pool's reserved node
    cl = Cluster.from_arrays([8, 8], ["h100", "a100"])
    work = Workload.from_columns({
        "submit_s": [0, 0, 1, 1, 2, 2], "run_s": [100, 100, 10, 10, 500, 500],
        "limit_s": [100, 100, 10, 10, 500, 500], "gpus_per_node": [4, 4, 8, 8, 4, 4],
        "pool": ["h100", "a100", "h100", "a100", "h100", "a100"]})
    res = simulate(cl, work, Policy.parse("fifo-backfill", bf_interval_s=0))
    st = _starts(res)
    assert st[2] == 100 and st[3] == 100           # the heads start when the 4-GPU jobs end, not later
    assert st[4] == 110 and st[5] == 110           # the long jobs waited behind them in both pools
    assert res.jobs["head_shadow_s"].to_list()[2:4] == [100.0, 100.0]


def test_gang_job_gets_distinct_nodes():
    res = simulate(Cluster.from_arrays([8, 8]), Workload.from_columns(TWO_NODES), Policy.parse("fifo-backfill"))
    a, b = res.alloc_ptr[2], res.alloc_ptr[3]
    assert sorted(res.alloc_node[a:b].tolist()) == [0, 1]


def test_a_job_pinned_to_its_nodes_runs_there_and_one_whose_node_is_gone_runs_anywhere_in_its_pool():
    """A job already running when the workload starts keeps its nodes: best-fit would put the 4-GPU job A on
    node 0 (the first of equals), but it holds node 2; B, 8 GPUs, then fits node 0 at once."""
    cl = Cluster.from_arrays([8, 8, 8], ["h100"] * 3, node_names=["a", "b", "c"])
    work = {"job_uid": [0, 1, 2], "submit_s": [-50, 0, 0], "run_s": [100, 10, 10], "gpus_per_node": [4, 8, 8],
            "nnodes": [1, 1, 2], "pool": ["h100"] * 3, "nodes": [["c"], None, ["a", "x"]]}
    res = simulate(cl, Workload.from_columns(work), Policy.parse("fifo", placement="best-fit"))
    assert res.jobs["first_node"].to_list()[:2] == [2, 0]
    # the 2-node job C names a node the cluster does not have (a what-if removed it): it takes any two h100 nodes
    # with 8 free GPUs, a and b, at once
    a, b = res.alloc_ptr[2], res.alloc_ptr[3]
    assert sorted(res.alloc_node[a:b].tolist()) == [0, 1] and res.jobs["start_s"][2] == 10


def test_a_job_queued_before_the_workload_starts_keeps_its_age_in_the_priority_queue():
    """Both arrive at 0 for the one node; B was queued 3.5 days before (queued_s): its age factor is 0.5 of
    w_age, so it starts first although A is first in submit order."""
    work = {"job_uid": [0, 1, 2], "submit_s": [0, 0, 0], "queued_s": [None, -3.5 * 86400, None],
            "run_s": [100, 100, 100], "gpus_per_node": [8, 8, 8], "account": ["x", "x", "x"]}
    pol = Policy.parse("priority", prio_calc_period_s=0.0)
    res = simulate(Cluster.from_arrays([8]), Workload.from_columns(work), pol)
    assert _starts(res) == {0: 100, 1: 0, 2: 200}
    fifo = simulate(Cluster.from_arrays([8]), Workload.from_columns(work), Policy.parse("fifo"))
    assert _starts(fifo) == {0: 0, 1: 100, 2: 200}      # FIFO orders by arrival: the age does not matter


def test_node_failure_kills_and_requeues_and_drain_only_stops_new_jobs():
    cl = Cluster.from_arrays([8, 8], node_names=["g1", "g2"])
    work = Workload.from_columns({"submit_s": [0, 0, 10], "run_s": [100, 100, 20], "gpus_per_node": [8, 8, 8],
                                  "limit_s": [200, 200, 200]})
    ev = node_events(cl, [(50, "g1", "down"), (60, "g1", "up"), (5, "g2", "drain"), (130, "g2", "up")])
    res = simulate(cl, work, Policy.parse("fifo-backfill", placement="first-fit"), ev)
    j = res.jobs.sort("job_uid")
    # job 0 on g1 is killed at 50 and restarts at 60 when g1 returns; job 1 on draining g2 keeps running.
    assert j["requeues"].to_list() == [1, 0, 0]
    assert j["start_s"].to_list()[:2] == [0, 0] and j["last_start_s"][0] == 60 and j["end_s"][0] == 160
    assert j["end_s"][1] == 100
    # job 2 (submitted during the drain) waits for g2 to return at 130; g1 is busy again from 60 to 160
    assert j["start_s"][2] == 130


def test_node_down_before_any_job_leaves_the_other_node():
    cl = Cluster.from_arrays([8, 8])
    ev = node_events(cl, [(0, 0, "down")])
    res = simulate(cl, Workload.from_columns({"submit_s": [1, 2], "run_s": [10, 10], "gpus_per_node": [8, 8]}),
                   Policy.parse("fifo"), ev)
    assert res.jobs["first_node"].to_list() == [1, 1]
    assert res.jobs["start_s"].to_list() == [1, 11]


@pytest.mark.parametrize("placement, mix, expected", [
    ("first-fit", None, 0),                      # lowest index that fits
    ("best-fit", None, 2),                       # least leftover: 2 - 2 = 0
    ("fgd", ([4.0], [1.0]), 2),                  # node 2 drops from 2 stranded GPUs to 0 (others: +2 or 0)
    ("fgd", ([8.0], [1.0]), 1),                  # 8-GPU jobs: nodes 1-3 each lose 2 stranded; first wins
])
def test_placement_policies_choose_the_expected_node(placement, mix, expected):
    cl = Cluster.from_arrays([8, 4, 2, 6])
    work = Workload.from_columns({"submit_s": [0], "run_s": [10], "gpus_per_node": [2]})
    res = simulate(cl, work, Policy.parse("fifo", placement=placement), mix=mix)
    assert res.jobs["first_node"][0] == expected


def test_random_placement_is_seeded_and_spreads():
    cl = Cluster.from_arrays([8] * 6)
    work = Workload.from_columns({"submit_s": np.arange(40.0), "run_s": [1000.0] * 40, "gpus_per_node": [1.0] * 40})
    a = simulate(cl, work, Policy.parse("fifo", placement="random", seed=3)).jobs["first_node"].to_list()
    b = simulate(cl, work, Policy.parse("fifo", placement="random", seed=3)).jobs["first_node"].to_list()
    c = simulate(cl, work, Policy.parse("fifo", placement="random", seed=4)).jobs["first_node"].to_list()
    assert a == b and a != c and len(set(a)) == 6


def test_fractional_gpus_share_a_node():
    cl = Cluster.from_arrays([1.0])
    work = Workload.from_columns({"submit_s": [0, 0, 0], "run_s": [10, 10, 10], "gpus_per_node": [0.5, 0.46, 0.5]})
    res = simulate(cl, work, Policy.parse("fifo"))
    assert res.jobs["start_s"].to_list() == [0, 0, 10]


def test_fair_share_lets_the_light_account_jump_ahead():
    cl = Cluster.from_arrays([8])
    work = Workload.from_columns({"submit_s": [0, 1, 2], "run_s": [1000, 10, 10], "gpus_per_node": [8, 8, 8],
                                  "account": ["heavy", "heavy", "light"]})
    fifo = _starts(simulate(cl, work, Policy.parse("fifo")))
    prio = _starts(simulate(cl, work, Policy.parse("priority")))
    assert fifo == {0: 0, 1: 1000, 2: 1010}
    # at 1000 'heavy' has used 8000 GPU-s: fair-share 2^(-1/0.5) = 0.25 against 'light''s 1.0
    assert prio == {0: 0, 1: 1010, 2: 1000}


def test_infeasible_jobs_never_start_and_do_not_block():
    cl = Cluster.from_arrays([8, 8], ["a100", "h100"])
    work = Workload.from_columns({"submit_s": [0, 1, 2], "run_s": [10, 10, 10], "gpus_per_node": [16, 8, 8],
                                  "pool": [None, "h100", "l40"]})
    res = simulate(cl, work, Policy.parse("fifo"))
    assert res.jobs["feasible"].to_list() == [False, True, False]
    assert res.jobs["start_s"].to_list() == [None, 1, None]
    assert res.jobs["first_node"][1] == 1  # the h100 node


def test_samples_measure_allocation_and_stranded_gpus():
    cl = Cluster.from_arrays([8, 8])
    work = Workload.from_columns({"submit_s": [0.0], "run_s": [7200.0], "gpus_per_node": [6.0]})
    res = simulate(cl, work, Policy.parse("fifo", sample_dt_s=3600), sample_window=(0, 7200), mix=([8.0], [1.0]))
    s = res.samples.sort("t_s")
    assert s["allocated_gpus"].to_list() == [6.0, 6.0]
    assert s["stranded_gpus"].to_list() == [2.0, 2.0]  # the 2 GPUs left on the busy node cannot take an 8-GPU job


def test_injected_failures_are_seeded():
    cl = Cluster.from_arrays([8] * 4)
    a = inject_failures(cl, 10 * 86400, 0.5, 3600, seed=1)
    b = inject_failures(cl, 10 * 86400, 0.5, 3600, seed=1)
    assert a.size > 0 and np.array_equal(a, b)


# ---------------------------------------------------------------- advance reservations

# Nodes a, b (8 GPUs). Reservation R holds b over [1000, 5000). Job 0 (limit 900) and job 1 (limit 3600) at 0;
# job 2 asks for R (submitted at 10, limit 700); job 3 (limit 200) at 20; job 4 (limit 200) at 1500.
RESV_R = pl.DataFrame({"name": ["R"], "start_s": [1000.0], "end_s": [5000.0], "nodes": [["b"]]})
RESV_JOBS = {"submit_s": [0, 0, 10, 20, 1500], "run_s": [500, 3000, 600, 100, 100],
             "limit_s": [900, 3600, 700, 200, 200], "gpus_per_node": [8] * 5,
             "reservation": [None, None, "R", None, None]}


def test_an_advance_reservation_keeps_its_nodes_for_its_jobs():
    cl = Cluster.from_arrays([8, 8], node_names=["a", "b"])
    res = simulate(cl, Workload.from_columns(RESV_JOBS), Policy.parse("fifo-backfill", bf_interval_s=0),
                   reservations=RESV_R)
    # 1 (limit 3600 from 0) would reach into R on b, so it waits for a (free at 500); 3 ends by 220 < 1000 and
    # backfills on b; 2 starts on b when R starts; 4 may not use b during R: it waits for a (3500)
    assert _starts(res) == {0: 0, 1: 500, 2: 1000, 3: 20, 4: 3500}
    nodes = dict(zip(res.jobs["job_uid"].to_list(), res.jobs["first_node"].to_list()))
    assert nodes[2] == 1 and nodes[3] == 1 and nodes[4] == 0
    assert res.jobs["reservation"].to_list() == [None, None, "R", None, None]
    # without the reservation: 1 takes b at 0, 2 runs as soon as a is free (500), and so on
    free = simulate(cl, Workload.from_columns(RESV_JOBS), Policy.parse("fifo-backfill", bf_interval_s=0))
    assert _starts(free) == {0: 0, 1: 0, 2: 500, 3: 1100, 4: 1500}


def test_a_reservation_on_one_node_leaves_the_others_to_every_job():
    # Q holds a (the first node) for [0, 10000); b has no reservation: ordinary jobs run on b at once, one after
    # the other, and never on a
    cl = Cluster.from_arrays([8, 8], node_names=["a", "b"])
    q = pl.DataFrame({"name": ["Q"], "start_s": [0.0], "end_s": [10000.0], "nodes": [["a"]]})
    work = Workload.from_columns({"submit_s": [0, 0], "run_s": [100, 100], "gpus_per_node": [8, 8]})
    res = simulate(cl, work, Policy.parse("fifo-backfill"), reservations=q)
    assert _starts(res) == {0: 0, 1: 100} and res.jobs["first_node"].to_list() == [1, 1]


def test_a_reservation_job_starts_whatever_its_limit_and_is_killed_at_the_end_without_blocking_others():
    # Slurm 22.05 (measured on tests/slurm/up.sh's cluster): a job with --time=60 submitted to a reservation of one
    # minute started at once, and was killed (TIMEOUT) when the reservation ended (ResvOverRun = 0). Job 0 asks for
    # R before it starts (run 8,000 s, limit 10,000 s); job 1 (ordinary, same pool) behind it in FIFO starts at
    # once on a: R's class blocks only R's jobs.
    cl = Cluster.from_arrays([8, 8], node_names=["a", "b"])
    work = Workload.from_columns({"submit_s": [0, 1], "run_s": [8000, 50], "limit_s": [10000, 60],
                                  "gpus_per_node": [8, 8], "reservation": ["R", None]})
    res = simulate(cl, work, Policy.parse("fifo"), reservations=RESV_R)
    assert _starts(res) == {0: 1000, 1: 1}
    assert res.jobs["end_s"].to_list() == [5000, 51]     # R ends at 5000
    late = simulate(cl, work, Policy.parse("fifo", resv_over_run_s=600), reservations=RESV_R)
    assert late.jobs["end_s"].to_list() == [5600, 51]


def test_a_job_naming_an_unknown_or_past_reservation_runs_as_an_ordinary_job():
    cl = Cluster.from_arrays([8, 8], node_names=["a", "b"])
    work = Workload.from_columns({"submit_s": [0, 6000], "run_s": [50, 50], "gpus_per_node": [8, 8],
                                  "reservation": ["other", "R"]})
    res = simulate(cl, work, Policy.parse("fifo"), reservations=RESV_R)
    assert _starts(res) == {0: 0, 1: 6000}      # R is over at 6000: its last window ended at 5000
    assert res.unmatched_reservation_jobs == 2


def test_a_reservation_without_nodes_of_the_cluster_binds_nobody():
    # a licenses-only reservation (no nodes), or one whose nodes a what-if removed: its job runs as an ordinary job
    cl = Cluster.from_arrays([8, 8], node_names=["a", "b"])
    lic = pl.DataFrame({"name": ["L", "R"], "start_s": [0.0, 0.0], "end_s": [9000.0, 9000.0],
                        "nodes": [[], ["gone"]]})
    work = Workload.from_columns({"submit_s": [0, 0], "run_s": [50, 50], "gpus_per_node": [8, 8],
                                  "reservation": ["L", "R"]})
    res = simulate(cl, work, Policy.parse("fifo"), reservations=lic)
    assert _starts(res) == {0: 0, 1: 0} and res.jobs["feasible"].all()
    assert res.unmatched_reservation_jobs == 2


def test_a_job_running_when_the_workload_starts_stays_on_its_reserved_node():
    # carried in: it arrives at its observed start (-100) pinned to b, whose reservation starts at 1000; its
    # limit reaches into R, but it is already running, as Slurm's IGNORE_JOBS reservations allow
    cl = Cluster.from_arrays([8, 8], node_names=["a", "b"])
    work = Workload.from_columns({"submit_s": [-100.0], "run_s": [2000.0], "limit_s": [3000.0], "gpus_per_node": [8],
                                  "nodes": [["b"]]})
    res = simulate(cl, work, Policy.parse("fifo"), reservations=RESV_R)
    assert _starts(res) == {0: -100} and res.jobs["first_node"].to_list() == [1]


def test_a_recurring_reservation_takes_each_job_to_the_first_window_not_over():
    # R twice on b: [100, 200) and [1000, 1100); a job submitted at 150 runs in the first, one at 300 in the second
    cl = Cluster.from_arrays([8, 8], node_names=["a", "b"])
    twice = pl.DataFrame({"name": ["R", "R"], "start_s": [1000.0, 100.0], "end_s": [1100.0, 200.0],
                          "nodes": [["b"], ["b"]]})
    work = Workload.from_columns({"submit_s": [150, 300], "run_s": [10, 10], "gpus_per_node": [8, 8],
                                  "reservation": ["R", "R"]})
    res = simulate(cl, work, Policy.parse("fifo-backfill"), reservations=twice)
    assert _starts(res) == {0: 150, 1: 1000}
    assert res.jobs["first_node"].to_list() == [1, 1]


# ---------------------------------------------------------------- invariants

jobs_strategy = st.lists(st.tuples(st.integers(0, 500), st.integers(1, 300), st.integers(0, 200),
                                   st.sampled_from([1.0, 2.0, 4.0, 8.0, 0.5]), st.integers(1, 2)),
                         min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, caps=st.lists(st.sampled_from([4.0, 8.0]), min_size=1, max_size=4),
       policy=st.sampled_from(["fifo", "fifo-backfill", "priority-backfill"]),
       placement=st.sampled_from(["first-fit", "best-fit", "random", "fgd"]))
def test_invariants(jobs, caps, policy, placement):
    cols = {"submit_s": [float(j[0]) for j in jobs], "run_s": [float(j[1]) for j in jobs],
            "limit_s": [float(j[1] + j[2]) for j in jobs], "gpus_per_node": [j[3] for j in jobs],
            "nnodes": [j[4] for j in jobs], "account": [f"a{i % 3}" for i in range(len(jobs))]}
    cl = Cluster.from_arrays(caps)
    res = simulate(cl, Workload.from_columns(cols), Policy.parse(policy, placement=placement))
    j = res.jobs
    ran = j.filter(j["start_s"].is_not_null())
    # every feasible job runs (the trace ends, so everything queued eventually starts)
    assert ran.height == j["feasible"].sum()
    # every job starts at or after its submit time, and ends run time later
    assert (ran["start_s"] >= ran["submit_s"]).all()
    assert ((ran["end_s"] - ran["last_start_s"] - ran["run_s"]).abs() < 1e-9).all()
    # no node ever holds more GPUs than it has: sweep the allocation intervals per node
    events = []
    for row in ran.iter_rows(named=True):
        i = j["job_uid"].to_list().index(row["job_uid"])
        nodes = res.alloc_node[res.alloc_ptr[i]:res.alloc_ptr[i + 1]]
        assert len(set(nodes.tolist())) == len(nodes)  # a gang's nodes are distinct
        for n in nodes:
            events.append((row["end_s"], 0, n, -row["gpus_per_node"]))
            events.append((row["last_start_s"], 1, n, row["gpus_per_node"]))
    used = np.zeros(len(caps))
    for _, _, n, g in sorted(events):
        used[n] += g
        assert used[n] <= caps[n] + 1e-9
    # with FIFO + EASY backfill, nothing delays the head job past the reservation it was given
    if policy == "fifo-backfill":
        h = ran.filter(ran["head_shadow_s"].is_not_null())
        assert (h["start_s"] <= h["head_shadow_s"] + 1e-9).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, caps=st.lists(st.sampled_from([4.0, 8.0]), min_size=2, max_size=4),
       windows=st.lists(st.tuples(st.integers(0, 600), st.integers(1, 400), st.integers(0, 3), st.integers(0, 1)),
                        min_size=1, max_size=3),
       asks=st.lists(st.integers(-2, 2), min_size=40, max_size=40),
       policy=st.sampled_from(["fifo", "fifo-backfill", "priority-backfill"]))
def test_invariants_with_advance_reservations(jobs, caps, windows, asks, policy):
    """No ordinary job holds a node into a window of it (its start + limit), a reservation's jobs run on its nodes
    and start inside it, no node is oversubscribed, every feasible ordinary job runs."""
    n_nodes = len(caps)
    names = [f"n{i}" for i in range(n_nodes)]
    resv = pl.DataFrame({"name": [f"R{i}" for i in range(len(windows))],
                         "start_s": [float(w[0]) for w in windows], "end_s": [float(w[0] + w[1]) for w in windows],
                         "nodes": [[names[w[2] % n_nodes]] + ([names[(w[2] + 1) % n_nodes]] if w[3] else [])
                                   for w in windows]})
    asked = [f"R{a}" if 0 <= a < len(windows) else None for a in asks[:len(jobs)]]
    cols = {"submit_s": [float(j[0]) for j in jobs], "run_s": [float(j[1]) for j in jobs],
            "limit_s": [float(j[1] + j[2]) for j in jobs], "gpus_per_node": [j[3] for j in jobs],
            "nnodes": [j[4] for j in jobs], "account": [f"a{i % 3}" for i in range(len(jobs))], "reservation": asked}
    res = simulate(Cluster.from_arrays(caps, node_names=names), Workload.from_columns(cols), Policy.parse(policy),
                   reservations=resv)
    j = res.jobs
    spans = {r["name"]: (r["start_s"], r["end_s"], {names.index(n) for n in r["nodes"]})
             for r in resv.iter_rows(named=True)}
    used: dict = {}
    for i, row in enumerate(j.iter_rows(named=True)):
        if row["start_s"] is None:
            assert row["reservation"] is not None or not row["feasible"]
            continue
        nodes = res.alloc_node[res.alloc_ptr[i]:res.alloc_ptr[i + 1]].tolist()
        t0, held_to = row["last_start_s"], row["last_start_s"] + row["limit_s"]
        if row["reservation"] is not None and row["submit_s"] < spans[row["reservation"]][1]:
            ws, we, mine = spans[row["reservation"]]
            assert ws <= t0 < we and set(nodes) <= mine
        else:
            for ws, we, on in spans.values():
                assert not (set(nodes) & on) or held_to <= ws or t0 >= we
        for n in nodes:
            used.setdefault(n, []).extend([(row["end_s"], -row["gpus_per_node"]), (t0, row["gpus_per_node"])])
    for n, ev in used.items():
        level = 0.0
        for _, g in sorted(ev):
            level += g
            assert level <= caps[n] + 1e-9
