"""`gpuledger ingest job-gpus`: the GPU indices of jobs from a real `scontrol -d show job`, matched with their jobs,
every line accounted for, and the attribution they make exact."""
from __future__ import annotations

import pytest

from conftest import FIXTURES
from ingest import job_gpus, sacct, slurm_nodes
from telemetry_fixtures import add_jobs, busy, load_readings, readings
from test_sacct import line
from test_attribution import _eff

REAL = FIXTURES / "slurm_shards"     # README.md there: how the jobs ran and what scontrol printed
#: by hand from scontrol-show-job-d.txt: train2 on GPUs 0-1 of gpu01, ddp on 2-3 of gpu01 and 0-1 of gpu02, the
#: shard job on GPU 0 of gpu03 and eval on GPU 1 there (the shards had GPU 0); cpuonly and the pending job: none
HELD = [("1", "gpu01", "0"), ("1", "gpu01", "1"), ("2", "gpu01", "2"), ("2", "gpu01", "3"), ("2", "gpu02", "0"),
        ("2", "gpu02", "1"), ("3", "gpu03", "0"), ("4", "gpu03", "1")]


def _held(con):
    return con.sql("""SELECT j.job_id, g.node, g.gpu FROM job_gpu_indices g JOIN jobs j USING (job_uid)
                      ORDER BY ALL""").fetchall()


def _accounting(con):
    slurm_nodes.ingest_bytes(con, (REAL / "sinfo-gres.psv").read_bytes(), "sinfo.psv", cluster="glcluster")
    return sacct.ingest_bytes(con, (REAL / "sacct-allocations-gpu-map.psv").read_bytes(), "sacct.psv",
                              sacct.SacctOptions())


@pytest.mark.parametrize("name", ["scontrol-show-job-d.txt", "scontrol-show-job-d-o.txt"])
def test_real_scontrol_output_in_both_forms(con, name):
    _accounting(con)
    s = job_gpus.load(con, (REAL / name).read_bytes(), name)
    assert _held(con) == HELD
    assert (s["loaded"], s["rejected"], s["inserted"], s["read"]) == (4, 0, 4, s["loaded"] + s["skipped"])
    assert s["skip_reasons"]["no GPU indices (pending, no GPUs, or printed without -d)"] == (
        59 if name == "scontrol-show-job-d.txt" else 2)          # cpuonly and waits: every line of theirs
    again = job_gpus.load(con, (REAL / name).read_bytes(), name)
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 4) and _held(con) == HELD


def test_a_job_not_loaded_yet_is_rejected_by_name_then_loads_after_its_accounting(con):
    text = (REAL / "scontrol-show-job-d-o.txt").read_bytes()
    slurm_nodes.ingest_bytes(con, (REAL / "sinfo-gres.psv").read_bytes(), "sinfo.psv", cluster="glcluster")
    s = job_gpus.load(con, text, "jobs.txt")
    assert (s["loaded"], s["rejected"], s["skipped"]) == (0, 4, 2) and _held(con) == []
    assert s["reject_examples"][0] == ("jobs.txt:1: field JobId: job 1 submitted 2026-12-07 09:46:08 is not in the "
                                       "warehouse (cluster glcluster): load its accounting first (ingest sacct, or "
                                       "sacct --live)")
    _accounting(con)
    assert job_gpus.load(con, text, "jobs.txt")["inserted"] == 4 and _held(con) == HELD


def test_a_requeue_onto_other_gpus_replaces_the_indices_and_bad_lines_are_rejected(con):
    _accounting(con)
    job_gpus.load(con, (REAL / "scontrol-show-job-d-o.txt").read_bytes(), "a.txt")
    lines = (REAL / "scontrol-show-job-d-o.txt").read_text().splitlines()
    moved = lines[0].replace("GRES=gpu:a100:2(IDX:0-1)", "GRES=gpu:a100:2(IDX:2,3)")
    bad_idx = lines[3].replace("GRES=gpu:h100:1(IDX:1)", "GRES=gpu:h100:1(IDX:one)")
    no_submit = lines[2].replace("SubmitTime=2026-12-07T09:46:08", "SubmitTime=Unknown")
    s = job_gpus.load(con, "\n".join([moved, bad_idx, no_submit, "slurm_load_jobs error: x", ""]).encode(), "b.txt")
    assert (s["read"], s["loaded"], s["rejected"], s["skipped"]) == (4, 1, 3, 0)
    assert (s["inserted"], s["updated"], s["unchanged"]) == (0, 1, 0)
    assert [e.split(": ", 2)[1] for e in s["reject_examples"]] == ["field GRES", "field SubmitTime", "not part of a "
                                                                   "JobId= record of `scontrol -d show job`"]
    assert [h for h in _held(con) if h[0] == "1"] == [("1", "gpu01", "2"), ("1", "gpu01", "3")]
    assert [h for h in _held(con) if h[0] == "4"] == [("4", "gpu03", "1")]          # its bad line changed nothing


def test_the_indices_make_attribution_exact(con, tmp_path):
    """gpu01: GPU0 busy 100 %, GPU1 idle, GPU2 busy 50 %, GPU3 idle (unallocated), for 30 minutes. Job 100 holds
    GPUs 1-2 and job 101 GPU 0 (scontrol). Shared by node, job 100 would get 2/3 of the busiest three (GPU0, GPU2,
    GPU1) and look 50 % busy (30 of 60 GPU-minutes); by its indices it has 15 of 60 GPU-minutes active and 30
    idle (GPU1), and job 101 30 of 30."""
    add_jobs(con, tmp_path, [dict(id=100, start=0, end=30, gpus=2, nodes="gpu01"),
                             dict(id=101, start=0, end=30, gpus=1, nodes="gpu01")])
    load_readings(con, readings({("gpu01", 0): busy(range(30), 100), ("gpu01", 1): busy(range(30), 0),
                                 ("gpu01", 2): busy(range(30), 50), ("gpu01", 3): busy(range(30), 0)}))
    assert _eff(con)["100"][:3] == ("node-share", 60, pytest.approx(30))
    text = "".join(f"JobId={j} JobName=train\n   SubmitTime=2026-07-14T09:55:00 EligibleTime=2026-07-14T09:55:00\n"
                   f"   JOB_GRES=gpu:{n}\n     Nodes=gpu01 CPU_IDs=0-3 Mem=0 GRES=gpu:{n}(IDX:{idx})\n   \n\n"
                   for j, n, idx in ((100, 2, "1-2"), (101, 1, "0")))
    assert job_gpus.load(con, text.encode(), "jobs.txt", cluster="c1")["inserted"] == 2
    eff = _eff(con)
    assert eff["100"][:7] == ("gpu-index", 60, pytest.approx(15), pytest.approx(30), 0, 60, 0)
    assert eff["101"][:7] == ("gpu-index", 30, pytest.approx(30), 0, 0, 30, 0)


@pytest.mark.parametrize("spec, want", [("0-1", [0, 1]), ("0,2", [0, 2]), ("0-1,3", [0, 1, 3]), ("N/A", []),
                                        ("7", [7])])
def test_index_lists(spec, want):
    assert job_gpus.indices(spec) == want


def test_a_job_holding_part_of_a_gpu_by_index_is_covered_for_that_part(con, tmp_path):
    """A job on half a GPU (shards: 0.5 GPU, scontrol IDX:0) alone on GPU0 for 30 minutes, busy 100 %: 15 of the
    30 device-minutes are its (covered never exceeds allocated); two such jobs on one GPU split it."""
    add_jobs(con, tmp_path, [dict(id=300, start=0, end=30, gpus=0.5, nodes="gpu01"),
                             dict(id=301, start=0, end=30, gpus=0.5, nodes="gpu01"),
                             dict(id=302, start=0, end=30, gpus=0.25, nodes="gpu01")])
    load_readings(con, readings({("gpu01", 0): busy(range(30), 100), ("gpu01", 1): busy(range(30), 100)}))
    text = "".join(f"JobId={j} JobName=infer\n   SubmitTime=2026-07-14T09:55:00\n"
                   f"     Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=shard:{n}(IDX:{idx})\n\n"
                   for j, n, idx in ((300, 4, "0"), (301, 4, "1"), (302, 2, "1")))
    job_gpus.load(con, text.encode(), "jobs.txt", cluster="c1")
    eff = _eff(con)
    assert eff["300"][:7] == ("gpu-index", 15, pytest.approx(15), 0, 0, 15, 0)
    # GPU1: 301 (0.5) and 302 (0.25) hold 0.75 of it; each is covered for its part
    assert eff["301"][:2] == ("gpu-index", 15) and eff["302"][:2] == ("gpu-index", pytest.approx(7.5))


def test_a_live_collection_skips_a_job_not_loaded_yet_instead_of_quarantining_it(con):
    """Every 5 minutes the service reads every job slurmctld holds; one that started since the last sacct
    collection is skipped with its reason (and read again next time), not stored in `rejects` each time."""
    slurm_nodes.ingest_bytes(con, (REAL / "sinfo-gres.psv").read_bytes(), "sinfo.psv", cluster="glcluster")
    s = job_gpus.load(con, (REAL / "scontrol-show-job-d-o.txt").read_bytes(), "live", live=True)
    assert (s["loaded"], s["rejected"], s["skipped"]) == (0, 0, 6)
    assert s["skip_reasons"]["job not in the warehouse yet (its accounting comes later; read again at the next "
                             "collection)"] == 4
    assert con.sql("SELECT count(*) FROM rejects").fetchall()[0][0] == 0


def test_the_efficiency_report_says_how_attribution_becomes_exact(con, tmp_path, run_cli):
    """Readings attributed only by node share: `report efficiency` names what would make them exact; once the
    indices are loaded it does not."""
    add_jobs(con, tmp_path, [dict(id=100, start=0, end=30, gpus=2, nodes="gpu01"),
                             dict(id=101, start=0, end=30, gpus=1, nodes="gpu01")])
    load_readings(con, readings({("gpu01", g): busy(range(30), 50) for g in range(3)}))
    hint = "(exact needs the jobs' GPU indices: `ingest job-gpus --live`, or dcgm-exporter's HPC job mapping)"
    assert run_cli("refresh")[0] == 0
    code, _, err = run_cli("report", "efficiency")
    assert code == 0 and "exact by GPU index 0.0%, node share 100.0% " + hint in err
    text = "".join(f"JobId={j} JobName=t\n   SubmitTime=2026-07-14T09:55:00\n"
                   f"     Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=gpu:{n}(IDX:{idx})\n" for j, n, idx in ((100, 2, "0-1"),
                                                                                              (101, 1, "2")))
    (tmp_path / "jobs.txt").write_text(text)
    assert run_cli("ingest", "job-gpus", str(tmp_path / "jobs.txt"), "--cluster", "c1")[0] == 0
    code, _, err = run_cli("report", "efficiency")
    assert code == 0 and "exact by GPU index 100.0%, node share 0.0%" in err and hint not in err


def test_slurmrestd_job_list_gives_the_same_indices(con):
    """slurmrestd 25.11 `/slurm/v0.0.44/jobs` (Slurm-web's fixture, MIT): job 4716 holds h100 GPU 0 of gpu1
    (`gres_detail`, one entry per node of its allocation); the cluster is the answer's `meta`, times are UTC."""
    data = (FIXTURES / "sacct_json" / "slurmweb-25.11-v0.0.44-slurm-job-gpus-multi-types.json").read_bytes()
    s = job_gpus.load(con, data, "jobs.json")
    assert (s["read"], s["rejected"]) == (1, 1) and "job 4716 submitted 2025-11-10 14:06:53" in s["reject_examples"][0]
    sacct.ingest_bytes(con, line("4716", cluster="hpc", partition="normal", submit="2025-11-10T14:06:53",
                                 start="2025-11-10T14:06:54", end="Unknown", elapsed="00:10:00", state="RUNNING",
                                 alloctres="billing=1,cpu=1,gres/gpu:h100=1,gres/gpu=1,mem=512M,node=1",
                                 nodelist="gpu1").encode(), "j.psv", sacct.SacctOptions())
    s = job_gpus.load(con, data, "jobs.json")
    assert (s["read"], s["loaded"], s["inserted"]) == (1, 1, 1) and _held(con) == [("4716", "gpu1", "0")]
