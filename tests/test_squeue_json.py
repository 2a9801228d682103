"""`gpuledger ingest squeue` of JSON job lists: `squeue --json` (22.05) and slurmrestd's /slurm/v0.0.XX/jobs,
loaded as the `squeue --array --Format` snapshot of the same moment."""
import datetime as dt
import json

import pytest

from conftest import FIXTURES
from ingest import squeue, squeue_json, warehouse
from ingest.errors import InputError

REAL = FIXTURES / "slurm_real"
AT = dt.datetime(2026, 12, 6, 10, 19, 19)     # both captures' time (their .cmd files)


def _rows(con, where: str = "") -> list[tuple]:
    return con.execute(f"SELECT * EXCLUDE (ingest_run_id) FROM squeue_snapshots {where} ORDER BY ALL").fetchall()


def test_squeue_json_of_22_05_is_the_array_snapshot_of_the_same_second(con, tmp_path):
    """The JSON holds the pending rest of array 28 as one record (28_[2-5%2]) and the jobs slurmctld still
    remembers (COMPLETED); its queue rows equal the text snapshot's, one per task, field by field."""
    s = squeue.load(con, (REAL / "squeue-array.json").read_bytes(), AT, "q.json", cluster="glcluster")
    assert (s["read"], s["read_as"], s["loaded"], s["rejected"]) == (19, "jobs and tasks", 19, 0)
    text = warehouse.connect(tmp_path / "text.duckdb")
    squeue.load(text, (REAL / "squeue-array-jobarrayid.psv").read_bytes(), AT, "q.psv", cluster="glcluster")
    queue = "WHERE state IN ('PENDING', 'RUNNING')"
    assert _rows(con, queue) == _rows(text) and len(_rows(text)) == 11
    assert con.execute("SELECT count(*) FROM squeue_snapshots WHERE state = 'COMPLETED'").fetchall()[0][0] == 8
    got = con.execute("SELECT job_id, reason, gpus, \"user\", submit FROM squeue_snapshots WHERE job_id = '28_5'")
    assert got.fetchall() == [("28_5", "JobArrayTaskLimit", 2.0, "root", dt.datetime(2026, 12, 6, 10, 18, 49))]


def test_slurmrestd_job_of_25_11(con):
    """/slurm/v0.0.44/jobs: job_state a list, numbers as objects, GPUs per node by type."""
    data = (FIXTURES / "sacct_json" / "slurmweb-25.11-v0.0.44-slurm-job-gpus-multi-types.json").read_bytes()
    s = squeue.load(con, data, AT, "jobs.json")
    assert (s["loaded"], s["rejected"]) == (1, 0)
    assert json.loads(data)["jobs"][0]["tres_per_node"] == "gres/gpu:h100:1"      # x node_count 1
    got = con.execute("SELECT cluster, job_id, state, reason, gpus, nnodes, \"user\" FROM squeue_snapshots").fetchall()
    assert got == [("hpc", "4716", "RUNNING", "None", 1.0, 1, "acuevas")]


def test_array_specs_as_slurm_prints_them():
    assert squeue_json._tasks("2-5%2") == [2, 3, 4, 5]
    assert squeue_json._tasks("1,3,7-9") == [1, 3, 7, 8, 9] and squeue_json._tasks("0-20:5") == [0, 5, 10, 15, 20]
    assert squeue_json._tasks("x") is None and squeue_json._WIDTH == len(squeue.LIVE_FIELDS)
    job = {"job_id": 40, "array_job_id": 40, "array_task_id": {"set": False, "number": 0},
           "array_task_string": "3,5", "job_state": ["PENDING"], "state_reason": "Priority"}
    assert [line.split("|")[0] for line in squeue_json._lines(job)] == ["40_3", "40_5"]


def test_accounting_json_and_unreadable_records_are_named(con):
    acct = (FIXTURES / "sacct_json" / "slurmweb-24.05-v0.0.41-slurmdb-job-completed.json").read_bytes()
    with pytest.raises(InputError, match=r"this is accounting \(`sacct --json`.*load it with `gpuledger ingest sacct`"):
        squeue.load(con, acct, AT, "acct.json")
    data = json.dumps({"jobs": [{"job_id": 5, "job_state": "PENDING", "state_reason": "Priority"},
                                {"job_id": 6}]}).encode()
    s = squeue.load(con, data, AT, "q.json", cluster="c1")
    assert (s["loaded"], s["rejected"]) == (1, 1)
    assert s["reject_examples"] == ["q.json:2: field JOBID: not a job id: \"bad job record 2: KeyError 'job_state'\""]
