"""alibaba-openb: node lists and pod lists (fractional GPUs, GPU-type constraints, phases, relative times)."""
import datetime as dt

import pytest

from conftest import FIXTURES, shared_path
from ingest import traces
from ingest.errors import InputError

EXCERPT = FIXTURES / "traces" / "openb"


def test_excerpt_pods_map_to_jobs_exactly(con):
    out = traces.ingest(con, "alibaba-openb", EXCERPT / "openb_pod_list_gpuspec33.csv")
    nodes, pods = out
    assert nodes["read"] == 62 and nodes["loaded"] == 61 and nodes["rejected"] == 0
    assert pods["read"] == 301 and pods["loaded"] == 300 and pods["skipped"] == 1 and pods["rejected"] == 0
    # openb-pod-0001: 6000 milli-CPU, 12288 MiB, 1 GPU at 460 milli, LS, Running, created 427061 s, never deleted early
    row = con.sql("""SELECT cluster, ncpus, mem_bytes, ngpus, gpu_milli, qos, state, state_raw, submit, start, "end",
                            elapsed_s, nnodes FROM jobs WHERE job_id_raw = 'openb-pod-0001'""").fetchall()[0]
    t0 = dt.datetime(2023, 1, 2)
    assert row == ("openb-gpuspec33", 6, 12288 * 2**20, 0.46, 460, "LS", "CANCELLED", "Running",
                   t0 + dt.timedelta(seconds=427061), t0 + dt.timedelta(seconds=427061),
                   t0 + dt.timedelta(seconds=12902960), 12902960 - 427061, 1)
    spec = con.sql("SELECT cpu_milli, num_gpu, gpu_milli, gpu_spec FROM trace_pods WHERE pod = 'openb-pod-0001'").fetchall()
    assert spec == [(6000, 1, 460, None)]
    # a single-type constraint is the only type the pod can have run on; a multi-type one stays in extra
    single = con.sql("SELECT count(*) FROM jobs WHERE gpu_type = 'T4'").fetchall()[0][0]
    multi = con.sql("""SELECT count(*) FROM jobs WHERE gpu_type IS NULL
                       AND extra->>'gpu_spec' = 'V100M16|V100M32'""").fetchall()[0][0]
    assert single == 44 and multi == 14
    # pending pods never ran: no start, no GPUs held, ended (deleted) at deletion_time
    pend = con.sql("SELECT count(*), sum(ngpus), count(start) FROM jobs WHERE state_raw = 'Pending'").fetchall()[0]
    assert pend == (22, 0.0, 0)


def test_reingest_changes_nothing(con):
    traces.ingest(con, "alibaba-openb", EXCERPT / "openb_pod_list_gpuspec33.csv")
    again = traces.ingest(con, "alibaba-openb", EXCERPT / "openb_pod_list_gpuspec33.csv")
    assert [s["inserted"] for s in again] == [0, 0] and again[1]["unchanged"] == 300


def test_bad_rows_are_rejected_with_line_and_field(con, tmp_path):
    f = tmp_path / "openb_pod_list_bad.csv"
    f.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                 "scheduled_time\n"
                 "p1,1000,100,1,1000,,LS,Running,10,20,10\n"
                 "p2,1000,100,1,1500,,LS,Running,10,20,10\n"
                 "p3,1000,100,1,1000,,LS,Exploded,10,20,10\n"
                 "p4,1000,100,1,1000,,LS,Running,30,20,30\n")
    s = traces.ingest(con, "alibaba-openb", f)[0]
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (5, 1, 1, 3)
    rej = con.sql("SELECT line_no, field FROM rejects ORDER BY 1").fetchall()
    assert rej == [(3, "gpu_milli"), (4, "pod_phase"), (5, "deletion_time")]


def test_not_an_openb_file(con, tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="neither an openb node list"):
        traces.ingest(con, "alibaba-openb", f)


def test_real_files_match_the_readme_counts(con):
    d = shared_path("traces", "alibaba-gpu-v2023-openb")
    nodes, pods = traces.ingest(con, "alibaba-openb", d)
    # README: "1523 nodes of a heterogeneous GPU cluster"; "8152 tasks submitted to the GPU cluster"
    assert nodes["loaded"] == 1523 and pods["loaded"] == 8152 and nodes["rejected"] == pods["rejected"] == 0
    gpu_nodes, gpus = con.sql("SELECT count(*) FILTER (gpus > 0), sum(gpus) FROM nodes WHERE cluster = 'openb'").fetchall()[0]
    # openb_node_list_gpu_node.csv is "a subset excluding non-GPU nodes"
    assert gpu_nodes == sum(1 for _ in open(d / "openb_node_list_gpu_node.csv")) - 1 == 1213
    assert gpus == 6212
    shares = con.sql("SELECT count(*) FILTER (gpu_milli IS NOT NULL), count(*) FILTER (req_gpus = 0) FROM jobs").fetchall()[0]
    assert shares == (4166 - 1088, 1088)   # GPU-sharing pods (gpu_milli < 1000, one GPU); CPU-only pods
    other = traces.ingest(con, "alibaba-openb", d / "openb_pod_list_multigpu50.csv")
    assert other[1]["loaded"] == 9061 and other[1]["inserted"] == 9061
    assert con.sql("SELECT count(*) FROM jobs WHERE cluster = 'openb-multigpu50'").fetchall()[0][0] == 0


def test_cli_ingest_trace(run_cli, tmp_path):
    code, _, err = run_cli("ingest", "trace", "alibaba-openb", str(EXCERPT), "--no-refresh")
    assert code == 1 and "expected openb_node_list_all_node.csv and openb_pod_list_default.csv" in err
    code, _, err = run_cli("ingest", "trace", "alibaba-openb", str(EXCERPT / "openb_pod_list_gpuspec33.csv"),
                           "--start", "2024-03-04", "--no-refresh")
    assert code == 0 and "read 301 lines: loaded 300" in err
    code, _, err = run_cli("ingest", "trace", "alibaba-openb", str(tmp_path / "missing.csv"), "--no-refresh")
    assert code == 1 and "no such file" in err
    with pytest.raises(SystemExit) as exc:
        run_cli("ingest", "trace", "no-such-trace", str(EXCERPT))
    assert exc.value.code == 2
