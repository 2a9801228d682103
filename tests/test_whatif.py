"""What-if scenarios, replay validation and the plan sweep on a real DuckDB warehouse."""
from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sim_fixtures import build_warehouse, synthetic_jobs  # noqa: E402

from models import sim_workload as sw  # noqa: E402
from models import whatif  # noqa: E402
from models.simulate import Cluster, Policy  # noqa: E402

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
    if answer is not None:
        i = table["nodes"].to_list().index(answer["nodes"])
        assert all(meets[i:]) and (i == 0 or not meets[i - 1])
        assert answer["ci_low"] <= answer["p95_wait_h"] <= answer["ci_high"]


def test_cli_simulate_and_plan(warehouse, db_path, run_cli):
    warehouse.close()
    code, out, err = run_cli("simulate", "--add", "h100=4", "--replications", "2", "--format", "csv")
    assert code == 0, err
    assert out.startswith("metric,scope,mean,ci_low,ci_high,replications")
    code, out, err = run_cli("simulate", "--validate", "--placement", "first-fit", "--format", "csv")
    assert code == 0 and "median_abs_err_h" in out
    code, out, err = run_cli("plan", "--target-p95-wait", "30d", "--pool", "h100", "--grid", "4,8",
                             "--replications", "2")
    assert code == 0 and "smallest h100 capacity" in err
    code, _, err = run_cli("simulate", "--add", "h100")
    assert code == 2 and "POOL=N" in err
    code, _, err = run_cli("plan", "--target-p95-wait", "soon")
    assert code == 2
