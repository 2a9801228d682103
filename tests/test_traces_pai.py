"""alibaba-pai-2020: machine specs; job/task/instance tables (fractional GPUs in percent, shifted times)."""
import datetime as dt

from conftest import FIXTURES, shared_path
from ingest import traces

T = FIXTURES / "traces"


def test_machine_spec_excerpt(con):
    s = traces.ingest(con, "alibaba-pai-2020", T / "pai")[0]
    assert (s["read"], s["loaded"], s["rejected"]) == (120, 120, 0)
    row = con.sql("SELECT gpu_type, gpus, cpus, mem_bytes FROM nodes WHERE node = '7399a758eb02bae1a3621236'").fetchall()
    assert row == [(None, 0, 96, 512 * 2**30)]     # a CPU machine has no GPU type


def test_job_task_instance_tables(con):
    out = traces.ingest(con, "alibaba-pai-2020", T / "pai-tables")
    assert [s["loaded"] for s in out] == [6, 4]
    rows = {r[0]: r[1:] for r in con.sql("""SELECT job_id, state, ngpus, req_gpus, ncpus, gpu_type, nnodes, nodelist,
                                                   submit, start, "end", elapsed_s FROM jobs""").fetchall()}
    shift = con.execute("SELECT options FROM ingest_runs WHERE run_id = ?", [out[1]["run_id"]]).fetchall()[0][0]
    import json
    w = json.loads(shift)["week_shift_s"]
    assert w % (7 * 86400) == 0
    at = lambda s: dt.datetime(1970, 1, 1) + dt.timedelta(seconds=s + w)  # noqa: E731
    assert at(1000000).year == 2020 and at(1000000).month in (6, 7)
    # job_a1: ps (1 x 0% GPU, 6 CPUs) + 2 workers x 50% GPU, 4 CPUs -> 1 GPU, 14 CPUs, on two machines
    assert rows["job_a1"] == ("COMPLETED", 1.0, 1.0, 14, "V100", 2, "m[0001-0002]", at(1000000), at(1000060),
                              at(1003600), 3540)
    assert rows["job_b2"][:6] == ("FAILED", 1.0, 1.0, 8, "T4", 1)
    assert rows["job_c3"][:3] == ("RUNNING", 8.0, 8.0) and rows["job_c3"][9] is None
    assert rows["job_d4"][:2] == ("PENDING", 0.0) and rows["job_d4"][8] is None


def test_real_machine_spec_matches_the_readme(con):
    d = shared_path("traces", "alibaba-gpu-v2020-pai")
    s = traces.ingest(con, "alibaba-pai-2020", d)[0]
    # README: "over 6,500 GPUs (on ~1800 machines)"
    machines, gpu_machines, gpus = con.sql(
        "SELECT count(*), count(*) FILTER (gpus > 0), sum(gpus) FROM nodes WHERE cluster = 'pai'").fetchall()[0]
    assert s["rejected"] == 0 and machines == 1897 and gpu_machines == 1814 and gpus == 6742
    assert gpus > 6500 and abs(gpu_machines - 1800) < 100
