"""What-if scenarios, replay validation and the plan sweep on a real DuckDB warehouse."""
from __future__ import annotations

import io
import re
from dataclasses import replace
from datetime import timedelta
import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sim_fixtures import build_warehouse, synthetic_jobs  # noqa: E402

from models.simulation import workload as sw  # noqa: E402
from models.pipeline import refresh  # noqa: E402
from models.simulation import whatif  # noqa: E402
from models.simulation.simulate import Cluster, Policy, Workload, simulate  # noqa: E402

POLICY = Policy.parse("fifo-backfill", placement="first-fit")


@pytest.fixture
def warehouse(con):
    cl = Cluster.from_arrays([8] * 8 + [8] * 4, ["h100"] * 8 + ["a100"] * 4, ["gpu"] * 12)
    build_warehouse(con, synthetic_jobs(700, 7, n_pools=2, days=3), cl, POLICY)
    return con


def test_replay_of_a_known_schedule_reproduces_every_wait(warehouse):
    inp = whatif.load_inputs(warehouse)
    assert inp.cluster.size == 12 and inp.days == 3
    per_job, summary = whatif.validate_replay(inp, POLICY)
    assert per_job.height == 700
    assert summary.filter(pl.col("size_class") == "all")["median_abs_err_h"][0] == 0.0
    assert (per_job["abs_err_h"] < 1e-9).all()


# Two advance reservations on the h100 nodes h100's first two nodes (day 2, 09:17:30 for 10 h) and on one a100 node
# (day 3, 02:00 for 4 h 30 min); the h100 jobs submitted in the 6 h before the first and during it ask for it.
RESV = pl.DataFrame({"name": ["train", "evals"], "start_s": [86400 + 33450.0, 2 * 86400 + 7200.0],
                     "end_s": [86400 + 33450.0 + 36000, 2 * 86400 + 7200.0 + 16200],
                     "nodes": [["n00000", "n00001"], ["n00008"]]})


@pytest.fixture
def reserved(con):
    cols = synthetic_jobs(700, 7, n_pools=2, days=3)
    s, start, end = cols["submit_s"], RESV["start_s"][0], RESV["end_s"][0]
    cols["reservation"] = [("train" if p == "h100" and start - 6 * 3600 <= t < end - 3600 else None)
                           for t, p in zip(s, cols["pool"])]
    cl = Cluster.from_arrays([8] * 8 + [8] * 4, ["h100"] * 8 + ["a100"] * 4, ["gpu"] * 12)
    # the jobs the reservation's end leaves queued never run: the history holds the others (and they still wait)
    ran = simulate(cl, Workload.from_columns(cols), POLICY, reservations=RESV).jobs["start_s"].is_not_null().to_numpy()
    cols = {k: [v for v, r in zip(vals, ran) if r] for k, vals in cols.items()}
    res = build_warehouse(con, cols, cl, POLICY, reservations=RESV)
    return con, res


def test_replay_with_advance_reservations_reproduces_every_wait_and_without_them_does_not(reserved):
    con, observed = reserved
    inp = whatif.load_inputs(con)
    assert inp.reservations.select("name", "nodes").rows() == [("train", ["n00000", "n00001"]), ("evals", ["n00008"])]
    n = inp.counts()
    assert (n["reservations"], n["reservation_not_loaded"]) == (2, 0)
    assert observed.jobs["start_s"].is_not_null().all()
    assert n["in_reservations"] == observed.jobs["reservation"].is_not_null().sum() > 10
    per_job, _ = whatif.validate_replay(inp, POLICY)
    assert per_job.height == observed.jobs.height and (per_job["abs_err_h"] < 1e-9).all()
    # the same workload with the reservations ignored: their jobs start elsewhere, earlier, and others move
    _, out = whatif._run(inp, whatif.Scenario(policy=POLICY, replay_reservations=False), inp.jobs, POLICY.seed)
    moved = out.join(per_job.select("job_uid", "simulated_wait_h"), on="job_uid").filter(
        (pl.col("wait_s") / 3600 - pl.col("simulated_wait_h")).abs() > 1e-6)
    assert moved.filter(pl.col("reservation").is_not_null()).height > 5 and moved.height > 20


def test_counts_call_a_reservation_without_the_window_s_nodes_not_loaded(reserved):
    con, observed = reserved
    inp = whatif.load_inputs(con)
    elsewhere = pl.DataFrame({"name": ["train"], "start_s": [0.0], "end_s": [1.0], "nodes": [["other-node"]]})
    n = replace(inp, reservations=elsewhere).counts()
    inside = observed.jobs["reservation"].is_not_null().sum()
    assert (n["reservations"], n["in_reservations"], n["reservation_not_loaded"]) == (1, 0, inside)


def test_a_replication_keeps_the_reservation_jobs_on_their_dates(reserved):
    con, _ = reserved
    inp = whatif.load_inputs(con)
    inside = inp.jobs.filter(pl.col("reservation").is_not_null()).sort("submit_s")
    for seed in range(3):
        drawn = sw.resample_days(inp.jobs, inp.days, 1.5, seed, inp.whole_days)
        kept = drawn.filter(pl.col("reservation").is_not_null()).sort("submit_s")
        assert kept["submit_s"].to_list() == inside["submit_s"].to_list()   # once each, as observed
    # a what-if with more h100 nodes still honours them: the reservation's jobs never run outside their nodes
    sc = whatif.Scenario(policy=POLICY, add={"h100": 4})
    res, out = whatif._run(inp, sc, inp.jobs, 0)
    names = whatif.scenario_cluster(inp, sc).node_names
    rows = out.with_row_index("row").filter(pl.col("reservation") == "train")
    assert {names[res.alloc_node[res.alloc_ptr[r]]] for r in rows["row"].to_list()} <= {"n00000", "n00001"}


@pytest.mark.parametrize("start", ["2026-03-03T07:43:00", "2026-03-03T19:07:30"])
def test_replay_from_a_start_inside_the_schedule_reproduces_every_wait(warehouse, start):
    """The window starts with the cluster as it was: jobs running then hold their own nodes until they end, jobs
    queued then are first in the queue. Without them the window started from idle nodes and waits read short
    (from 19:07:30: mean absolute error 4.2 h, the mean wait 3.5 h against the observed 6.4 h)."""
    inp = whatif.load_inputs(warehouse, start, "2026-03-05T03:10:00")
    n = inp.counts()
    assert n["carried"] > 40 and n["jobs"] > 250 and n["queued_at_horizon"] == 0
    per_job, _ = whatif.validate_replay(inp, POLICY)
    assert per_job.height == n["jobs"] and (per_job["abs_err_h"] < 1e-9).all()


def test_the_replay_allocates_what_was_observed_from_a_start_inside_the_schedule(warehouse, db_path):
    """The replay's allocation ratio (hourly samples of the nodes up) against the observed one of the same span,
    `report utilization`'s allocated over available GPU-hours; from idle nodes the window's first hours read
    as unused capacity."""
    from models.metrics import utilization
    from models.pipeline import refresh
    refresh.run(warehouse, db_path, publish=False)
    inp = whatif.load_inputs(warehouse, "2026-03-03T07:43:00", "2026-03-05T03:10:00")
    seen = whatif.observed_allocation_ratio_pct(warehouse, inp)
    u = utilization.by_bucket(warehouse, inp.t0, inp.t0 + timedelta(seconds=inp.end_s), "month", by=())
    assert seen == pytest.approx(100 * u["allocated_gpu_h"].sum() / u["available_gpu_h"].sum())
    res, _ = whatif.replay(inp, POLICY)
    assert whatif.replay_utilization_pct(inp, res) == pytest.approx(seen, abs=1.0)
    idle = replace(inp, jobs=inp.jobs.filter(~pl.col("carried")))
    assert whatif.replay_utilization_pct(idle, whatif.replay(idle, POLICY)[0]) < seen - 5


def test_another_policy_gives_a_measurable_error(warehouse):
    inp = whatif.load_inputs(warehouse)
    _, summary = whatif.validate_replay(inp, Policy.parse("fifo", placement="first-fit"))
    allrow = summary.filter(pl.col("size_class") == "all").row(0, named=True)
    assert allrow["simulated_p95_h"] > allrow["observed_p95_h"]  # no backfill: longer waits


def test_more_capacity_shortens_waits_with_intervals(warehouse):
    inp = whatif.load_inputs(warehouse)
    base = whatif.run_whatif(inp, whatif.Scenario(policy=POLICY), replications=4)
    more = whatif.run_whatif(inp, whatif.Scenario(add={"h100": 8, "a100": 4}, policy=POLICY), replications=4)

    def p95(df):
        return df.filter((pl.col("metric") == "p95_wait_h") & (pl.col("scope") == "all")).row(0, named=True)
    b, m = p95(base), p95(more)
    assert m["mean"] < b["mean"] and b["ci_low"] <= b["mean"] <= b["ci_high"] and b["replications"] == 4
    scopes = set(base["scope"].to_list())
    assert {"team=nlp", "team=vision", "size_class=1", "pool=h100", "pool=a100"} <= scopes
    util = base.filter((pl.col("metric") == "utilization_pct") & (pl.col("scope") == "all"))["mean"][0]
    assert 0 < util <= 100


def test_compare_runs_the_baseline_beside_the_scenario_with_the_same_seeds(warehouse):
    inp = whatif.load_inputs(warehouse)
    sc = whatif.Scenario(add={"h100": 8, "a100": 4}, policy=POLICY)
    assert whatif.scenario_cluster(inp, sc).gpus_by_pool() == {"a100": 64.0, "h100": 128.0}   # (4 + 4), (8 + 8) x 8
    assert whatif.baseline(whatif.Scenario(add={"h100": 1}, demand_scale=2.0, policy=POLICY)) == \
        whatif.Scenario(policy=POLICY)
    both = whatif.compare(inp, sc, replications=3, seed=5, by=("size_class",))
    scen = whatif.run_whatif(inp, sc, 3, 5, ("size_class",))
    base = whatif.run_whatif(inp, whatif.Scenario(policy=POLICY), 3, 5, ("size_class",))
    key = ["metric", "scope"]
    got = both.join(scen, on=key, suffix="_s").join(base, on=key, suffix="_b")
    assert got.height == scen.height == both.height
    for r in got.iter_rows(named=True):
        assert r["mean"] == pytest.approx(r["mean_s"], nan_ok=True)
        assert r["baseline"] == pytest.approx(r["mean_b"], nan_ok=True)
        assert r["change"] == pytest.approx(r["mean_s"] - r["mean_b"], nan_ok=True)
    jobs = both.filter(pl.col("metric") == "jobs")       # same seeds, same demand: the same resampled jobs
    assert (jobs["change"] == 0).all() and (jobs["change_ci_low"] == 0).all() and (jobs["change_ci_high"] == 0).all()
    p95 = both.filter((pl.col("metric") == "p95_wait_h") & (pl.col("scope") == "all")).row(0, named=True)
    assert p95["change"] < 0 and p95["change_ci_low"] <= p95["change"] <= p95["change_ci_high"]


def test_groups_the_jobs_do_not_name_read_as_the_labels_not_none(warehouse):
    warehouse.execute("UPDATE jobs SET team = NULL, partition = NULL WHERE job_uid % 5 = 0")
    inp = whatif.load_inputs(warehouse)
    out = whatif.run_whatif(inp, whatif.Scenario(policy=POLICY), 1, 0, ("team", "partition"))
    scopes = set(out["scope"].to_list())
    assert {"team=(unmapped)", "partition=(none)", "team=nlp", "partition=gpu"} <= scopes
    assert not [s for s in scopes if s.endswith("=None")]


def test_rows_read_all_then_pools_then_size_classes_smallest_first_then_teams():
    scopes = ["team=nlp", "size_class=17-32", "pool=h100", "size_class=2-4", "all", "size_class=1", "team=cv"]
    df = pl.DataFrame({"metric": ["jobs"] * 7 + ["p95_wait_h"], "scope": scopes + ["all"]}).reverse()
    assert whatif._ordered(df)["scope"].to_list() == [
        "all", "pool=h100", "size_class=1", "size_class=2-4", "size_class=17-32", "team=cv", "team=nlp", "all"]


def test_demand_resampling_scales_jobs():
    jobs = pl.DataFrame({"job_uid": list(range(30)), "submit_s": [d * 86400.0 + 10 * i for d in range(3)
                                                                    for i in range(10)]})
    assert sw.resample_days(jobs, 3, 1.0, 0).height == 30
    assert sw.resample_days(jobs, 3, 2.0, 0).height == 60
    h = [sw.resample_days(jobs, 3, 1.5, s).height for s in range(40)]
    assert min(h) >= 30 and max(h) <= 60 and 40 <= sum(h) / len(h) <= 50


def test_plan_returns_the_smallest_capacity_meeting_the_target(warehouse):
    inp = whatif.load_inputs(warehouse)
    table, answer = whatif.plan_capacity(inp, "a100", 24.0, whatif.Scenario(add={"h100": 8}, policy=POLICY),
                                         grid=[2, 4, 8, 12], replications=2)
    assert table["nodes"].to_list() == [2, 4, 8, 12]
    meets = table["meets_target"].to_list()
    i = table["nodes"].to_list().index(answer["nodes"])
    assert all(meets[i:]) and (i == 0 or not meets[i - 1])
    assert answer["ci_low"] <= answer["p95_wait_h"] <= answer["ci_high"]


def test_plan_sizes_a_pool_by_its_own_jobs_waits_not_a_congested_other_pools(warehouse):
    """One a100 node left: a100 jobs wait days whatever the h100 pool's size; the h100 plan still has an answer,
    and its p95 is the simulator's p95 of the h100 jobs at that size."""
    inp = whatif.load_inputs(warehouse)
    starved = whatif.Scenario(remove={"a100": 3}, policy=POLICY)
    table, answer = whatif.plan_capacity(inp, "h100", 2.0, starved, grid=[4, 8, 16], replications=2)
    at = whatif.run_whatif(inp, replace(starved, add={"h100": 8}), 2, 0, ("pool",))
    p95 = {r["scope"]: r["mean"] for r in at.filter(pl.col("metric") == "p95_wait_h").iter_rows(named=True)}
    assert p95["all"] > 2.0 and p95["pool=a100"] > 2.0            # the overall p95 is out of reach
    assert table.filter(pl.col("nodes") == 16)["p95_wait_h"][0] == pytest.approx(p95["pool=h100"])
    assert answer is not None and answer["nodes"] <= 16 and answer["p95_wait_h"] <= 2.0
    only_h100 = replace(inp, jobs=inp.jobs.filter(pl.col("pool") == "h100"))
    with pytest.raises(ValueError, match="no a100 jobs in the window"):
        whatif.plan_capacity(only_h100, "a100", 2.0, whatif.Scenario(policy=POLICY), grid=[4], replications=1)


def test_the_replay_measures_from_where_the_accounting_begins(warehouse, tmp_path):
    """A window from 5.5 h before the first job: the observed allocation ratio counts no capacity before the
    accounting begins, nor does the replay (it read the idle hours as idle capacity); this history is the
    simulator's own schedule, so the two agree."""
    refresh.run(warehouse, tmp_path / "unused.duckdb", publish=False)
    inp = whatif.load_inputs(warehouse, "2026-03-01T18:30:00", "2026-03-05T00:00:00")
    assert inp.start_s == (inp.data_start - inp.t0).total_seconds() >= 5.5 * 3600
    res, _ = whatif.replay(inp, POLICY)
    seen = whatif.observed_allocation_ratio_pct(warehouse, inp)
    assert seen > 30 and abs(whatif.replay_utilization_pct(inp, res) - seen) < 0.5


def test_cli_simulate_and_plan(warehouse, db_path, run_cli):
    warehouse.close()
    code, out, err = run_cli("simulate", "--add", "h100=4", "--replications", "2", "--format", "csv")
    assert code == 0, err
    assert out.startswith("metric,scope,mean,ci_low,ci_high,replications,baseline,baseline_ci_low,"
                          "baseline_ci_high,change,change_ci_low,change_ci_high\n")
    # the header shows the scenario's inventory (12 + 4 nodes; h100 8 x 8 + 4 x 8 GPUs) beside the observed one
    assert "scenario 16 nodes (+4 h100), GPUs a100 32, h100 96; baseline 12 nodes, GPUs a100 32, h100 64" in err
    rows = {(r["metric"], r["scope"]): r for r in pl.read_csv(io.StringIO(out)).iter_rows(named=True)}
    p95 = rows["p95_wait_h", "all"]
    assert p95["change"] == pytest.approx(p95["mean"] - p95["baseline"]) and p95["change"] <= 0
    code, out, err = run_cli("simulate", "--validate", "--placement", "first-fit", "--format", "csv")
    assert code == 0 and "median_abs_err_h" in out
    assert "allocation ratio" not in err                   # no marts yet: nothing observed to compare with
    assert run_cli("refresh")[0] == 0
    code, out, err = run_cli("simulate", "--validate", "--placement", "first-fit", "--format", "csv")
    said = re.search(r"allocation ratio observed ([\d.]+) %, replayed ([\d.]+) %", err)
    assert code == 0 and said and abs(float(said[1]) - float(said[2])) < 1.0, err
    code, out, err = run_cli("plan", "--target-p95-wait", "30d", "--pool", "h100", "--grid", "4,8",
                             "--replications", "2")
    assert code == 0 and "smallest h100 capacity" in err
    assert "plan: 700 jobs in [2026-03-02 00:00:00, 2026-03-05 00:00:00)" in err   # the window, as simulate says
    code, _, err = run_cli("simulate", "--add", "h100")
    assert code == 2 and "POOL=N" in err
    code, _, err = run_cli("plan", "--target-p95-wait", "soon")
    assert code == 2


def test_cli_simulate_without_the_advance_reservations(reserved, db_path, run_cli):
    con, observed = reserved
    con.close()
    code, out, err = run_cli("simulate", "--no-reservations", "--replications", "2", "--by", "pool", "--format", "csv")
    assert code == 0, err
    inside = observed.jobs["reservation"].is_not_null().sum()
    assert f"2 advance reservation(s), {inside} jobs in them" in err
    assert "advance reservations ignored in the scenario" in err
    rows = {(r["metric"], r["scope"]): r for r in pl.read_csv(io.StringIO(out)).iter_rows(named=True)}
    # the reserved h100 nodes sat idle waiting for `train` and its jobs; without it they run other work
    util = rows["utilization_pct", "pool=h100"]
    assert util["change"] == pytest.approx(util["mean"] - util["baseline"]) and util["change"] != 0


REAL = Path(__file__).parent / "fixtures" / "slurm_real"


def test_replay_of_a_real_slurm_capture(con):
    """tests/fixtures/slurm_real: a real Slurm 22.05 run (3 nodes x 4 GPUs, 15 allocations) ingested by the real
    ingestors and replayed on its own capacity and outages. Slurm started jobs 0-7 s after they became
    eligible; the simulator has no scheduling latency and no node constraints (`-w`), so it starts them 0-4 s
    after eligibility. Every wait is reproduced within 6 s, half of them within 2 s."""
    from ingest import sacct, slurm_events, slurm_nodes
    sacct.ingest_path(con, str(REAL / "sacct-allocations.psv"), sacct.SacctOptions())
    slurm_nodes.ingest_path(con, str(REAL / "scontrol-show-node-o.txt"), as_of="2026-12-02T12:47:12")
    slurm_events.ingest_path(con, str(REAL / "sacctmgr-event.psv"))
    inp = whatif.load_inputs(con)
    assert inp.cluster.size == 3 and inp.cluster.gpus_by_pool() == {"a100": 8.0, "h100": 4.0}
    # gpu02 DOWN for 3 s and gpu03's DRAIN are replayed; the two allocations that never held a GPU are not
    assert len(inp.events) == 4 and inp.jobs.height == 13
    per_job, summary = whatif.validate_replay(inp, Policy.parse("fifo-backfill"))
    err_s = (per_job["abs_err_h"] * 3600).round(6)
    assert err_s.max() <= 6 and err_s.median() <= 2
    s = {r["size_class"]: r for r in summary.iter_rows(named=True)}
    assert s["all"]["jobs"] == 13 and s["1"]["jobs"] == 10 and s["2-4"]["jobs"] == 3
    # no latency in the model: it never waits longer than Slurm did at the 95th percentile
    assert s["all"]["simulated_p95_h"] <= s["all"]["observed_p95_h"]
    assert round(s["all"]["observed_p95_h"] * 3600, 6) == 6.0


def test_replay_of_the_demo_generators_schedule(tmp_path):
    """The demo generator (ingest/synthetic) schedules its workload with its own Slurm-like scheduler (per-pool
    FIFO, EASY backfill every 60 s, preemption) and writes real sacct/scontrol/sacctmgr files that the real
    ingestors load. Replaying that history through this simulator with FIFO + EASY backfill reproduces the
    waits (mean within 20 %, mean absolute error under 6 minutes); without backfill it cannot."""
    import duckdb

    from models.demo import build, config
    db = tmp_path / "demo.duckdb"
    build.build(db, config.for_scale(0.25, seed=7, days=14, telemetry_days=0, squeue_days=0))
    con = duckdb.connect(str(db), read_only=True)
    try:
        inp = whatif.load_inputs(con)
    finally:
        con.close()
    _, bf = whatif.validate_replay(inp, Policy.parse("fifo-backfill"))
    _, fifo = whatif.validate_replay(inp, Policy.parse("fifo"))
    a, b = bf.row(0, named=True), fifo.row(0, named=True)
    assert a["size_class"] == "all" and a["jobs"] > 1000
    assert abs(a["simulated_mean_h"] / a["observed_mean_h"] - 1) < 0.2
    assert a["mean_abs_err_h"] < 0.1
    assert b["mean_abs_err_h"] > 5 * a["mean_abs_err_h"]
