"""ingest/sacct_json.py: `sacct --json` and slurmrestd's slurmdbd job lists load as the same jobs as sacct text."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from conftest import FIXTURES
from ingest import sacct, sacct_json
from ingest.errors import InputError

J = FIXTURES / "sacct_json"
T0 = 1767225600          # 2026-01-01 00:00:00 UTC


def _job(job_id, state, **kw):
    """A job record in the shape of Slurm 22.05's `sacct --json` (data parser v0.0.38: plain integers, a state
    string), with the keys later parsers add where ``kw`` gives them."""
    job = {"job_id": job_id, "name": "train", "cluster": "lab", "partition": "gpu", "qos": "normal",
           "account": "nlp", "group": "ml", "user": "alice", "state": {"current": state, "reason": "None"},
           "time": {"submission": T0, "eligible": T0 + 60, "start": T0 + 120, "end": T0 + 3720, "elapsed": 3600,
                    "limit": 120},
           "exit_code": {"status": "SUCCESS", "return_code": 0}, "allocation_nodes": 1, "nodes": "gpu01",
           "required": {"CPUs": 8},
           "tres": {"requested": [{"type": "cpu", "name": None, "id": 1, "count": 8},
                                  {"type": "gres", "name": "gpu", "id": 1001, "count": 2}],
                    "allocated": [{"type": "cpu", "name": None, "id": 1, "count": 8},
                                  {"type": "mem", "name": None, "id": 2, "count": 65536},
                                  {"type": "energy", "name": None, "id": 3, "count": -2},
                                  {"type": "node", "name": None, "id": 4, "count": 1},
                                  {"type": "gres", "name": "gpu", "id": 1001, "count": 2},
                                  {"type": "gres", "name": "gpu:a100", "id": 1002, "count": 2}]},
           "array": {"job_id": 0, "task_id": None}, "het": {"job_id": 0, "job_offset": None},
           "reservation": {"id": 0, "name": ""}, "steps": [{"step": {"id": f"{job_id}.batch"}}]}
    job.update(kw)
    return job


def _doc(*jobs) -> bytes:
    return json.dumps({"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}, "errors": [], "jobs": list(jobs)}).encode()


def test_a_2205_document_loads_each_job_as_sacct_would_print_it(con):
    late = dict(_job(11, "RUNNING"), time={"submission": T0, "eligible": T0, "start": T0 + 30, "end": 0,
                                           "elapsed": 0, "limit": {"set": False, "infinite": True, "number": 0}})
    doc = _doc(_job(10, "COMPLETED", name="a|b"),
               _job(12, "FAILED", array={"job_id": 9, "task_id": 3}, exit_code={"status": "FAILED",
                                                                              "return_code": 3}),
               _job(13, "CANCELLED", kill_request_user="1001", tres={"requested": [], "allocated": []},
                    nodes="None assigned", time={"submission": T0, "eligible": T0, "start": 0, "end": T0 + 600,
                                                 "elapsed": 0, "limit": 120}),
               late, _job(14, "COMPLETED", het={"job_id": 14, "job_offset": 0}),
               _job(15, "FAILED", reservation={"id": 3, "name": "maint"}))
    s = sacct.ingest_bytes(con, doc, "jobs.json", sacct.SacctOptions())
    assert (s["read"], s["read_as"], s["loaded"], s["skipped"], s["rejected"]) == (6, "job records", 6, 0, 0)
    # 22.05 prints SUCCESS/0 for a FAILED job (sacct: 3:0): unknown, not a false 0; a named reservation is kept
    assert con.sql("SELECT exit_code, extra->>'reservation' FROM jobs WHERE job_id = '15'").fetchall() == \
        [(None, "maint")]
    assert con.sql("SELECT count(*) FROM jobs WHERE nullif(extra->>'reservation', '') IS NOT NULL").fetchall() == [(1,)]
    rows = con.sql("""SELECT job_id, job_id_raw, state, submit, eligible, start, "end", elapsed_s, timelimit_s,
                             ngpus, req_gpus, gpu_type, mem_bytes // 2^30, ncpus, nodelist, exit_code,
                             array_job_id, array_task_id, het_job_id, cancelled_by_uid, job_name
                      FROM jobs WHERE job_id <> '15' ORDER BY job_id_raw""").fetchall()
    t = dt.datetime(2026, 1, 1)
    m = dt.timedelta(minutes=1)
    assert rows == [
        ("10", "10", "COMPLETED", t, t + m, t + 2 * m, t + 62 * m, 3600, 7200, 2.0, 2.0, "a100", 64, 8, "gpu01", 0,
         None, None, None, None, "a/b"),
        ("11", "11", "RUNNING", t, t, t + dt.timedelta(seconds=30), None, 0, None, 2.0, 2.0, "a100", 64, 8, "gpu01",
         0, None, None, None, None, "train"),
        ("9_3", "12", "FAILED", t, t + m, t + 2 * m, t + 62 * m, 3600, 7200, 2.0, 2.0, "a100", 64, 8, "gpu01", 3,
         9, 3, None, None, "train"),
        ("13", "13", "CANCELLED", t, t, None, t + 10 * m, 0, 7200, 0.0, None, None, None, 8, "None assigned", 0,
         None, None, None, 1001, "train"),
        ("14+0", "14", "COMPLETED", t, t + m, t + 2 * m, t + 62 * m, 3600, 7200, 2.0, 2.0, "a100", 64, 8, "gpu01",
         0, None, None, 14, None, "train")]
    # re-ingesting the same document changes nothing
    again = sacct.ingest_bytes(con, doc, "jobs.json", sacct.SacctOptions())
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 6)


def test_slurmrestd_v0041_and_v0044_records(con):
    """Slurm-web's captures of slurmrestd 24.05 and 25.11 (numbers as {set, infinite, number}, states as lists)."""
    for f in ("slurmweb-24.05-v0.0.41-slurmdb-job-completed.json",
              "slurmweb-25.11-v0.0.44-slurmdb-job-gpus-pending.json"):
        s = sacct.ingest_path(con, str(J / f), sacct.SacctOptions())
        assert (s["read"], s["loaded"], s["rejected"]) == (1, 1, 0), f
    rows = con.sql("""SELECT cluster, job_id, state, submit, start, "end", elapsed_s, timelimit_s, nodelist, account,
                             "user", ncpus, req_mem_bytes // 2^20 FROM jobs ORDER BY job_id""").fetchall()
    assert rows == [
        ("hpc", "4965", "PENDING", dt.datetime(2025, 11, 10, 14, 8, 11), None, None, 0, 60, "None assigned", "admin",
         "jwilson", 1, 512),                                            # never ran: its requested CPUs, as sacct
        ("hpc", "649718", "COMPLETED", dt.datetime(2025, 5, 20, 15, 21, 8), dt.datetime(2025, 5, 20, 15, 21, 9),
         dt.datetime(2025, 5, 20, 15, 21, 10), 1, 60, "cn001", "acoustic", "tpearson", 1, 512)]


def test_a_record_that_cannot_be_read_is_rejected_in_its_place(con):
    doc = _doc(_job(10, "COMPLETED"), {"name": "no id"}, _job(12, "COMPLETED"))
    s = sacct.ingest_bytes(con, doc, "jobs.json", sacct.SacctOptions())
    assert (s["read"], s["loaded"], s["rejected"]) == (3, 2, 1)
    assert s["reject_examples"] == ["jobs.json:2: expected 25 fields (a job record of the JSON), found 1"]
    assert con.sql("SELECT raw FROM rejects").fetchall() == [("bad job record 2: KeyError 'job_id'",)]


def test_other_json_is_named(con):
    with pytest.raises(InputError, match="slurmctld's live job list"):
        sacct.ingest_path(con, str(J / "slurmweb-25.11-v0.0.44-slurm-job-gpus-multi-types.json"), sacct.SacctOptions())
    with pytest.raises(InputError, match=r"this is a node list .*: load it with `gpuledger ingest nodes`"):
        sacct.ingest_bytes(con, b'{"nodes": []}', "nodes.json", sacct.SacctOptions())
    with pytest.raises(InputError, match="JSON without a `jobs` list"):
        sacct.ingest_bytes(con, b'{"meta": {}}', "other.json", sacct.SacctOptions())
    with pytest.raises(InputError, match="not JSON"):
        sacct.ingest_bytes(con, b'{"jobs": [', "cut.json", sacct.SacctOptions())
    with pytest.raises(InputError, match="is JSON, whose records name their fields: drop --fields"):
        sacct.ingest_bytes(con, _doc(_job(1, "COMPLETED")), "j.json", sacct.SacctOptions(fields="jobid,state"))


def test_cli_reads_json_from_stdin_and_counts_records(run_cli, monkeypatch):
    import io
    import sys
    doc = _doc(_job(10, "COMPLETED"), _job(11, "COMPLETED"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(doc)))
    code, _, err = run_cli("ingest", "sacct", "-", "--no-refresh")
    assert code == 0 and "read 2 job records: loaded 2 (new 2, updated 0, unchanged 0)" in err


def test_records_are_read_one_at_a_time_wherever_the_jobs_array_sits():
    job = _job(7, "COMPLETED")
    doc = json.dumps({"meta": {"note": "jobs", "jobs": 3}, "errors": [], "jobs": [job, job], "warnings": []})
    assert list(sacct_json._iter_jobs(doc)) == [job, job]                 # a "jobs" key inside meta is not it
    assert list(sacct_json._iter_jobs(' { "jobs" : [ ] } ')) == []
    for bad, why in (('{"jobs": null}', "JSON without a `jobs` list"), ('[{"job_id": 1}]', "not JSON"),
                     ('{"jobs": [{"job_id": 1} {"job_id": 2}]}', "not JSON")):
        with pytest.raises(InputError, match=why):
            sacct_json.to_sacct_text(bad.encode(), "x.json")
