"""mit-supercloud: slurmdbd job table (epoch times, TRES ids, Python-list nodelists, array ids, float ids)."""
import datetime as dt

from conftest import FIXTURES, shared_path
from ingest import traces

HANDMADE = FIXTURES / "traces" / "supercloud" / "slurm-log-handmade.csv"


def test_handmade_rows_map_like_slurm(con):
    s = traces.ingest(con, "mit-supercloud", HANDMADE)[0]
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (7, 5, 1, 1)
    assert con.sql("SELECT line_no, field FROM rejects").fetchall() == [(6, "time_start")]
    rows = {r[0]: r[1:] for r in con.sql("""
        SELECT job_id_raw, job_id, array_job_id, array_task_id, state, ngpus, gpu_type, nnodes, nodelist, start,
               "end", elapsed_s, timelimit_s, exit_code, signal, cancelled_by_uid, mem_bytes, "user"
        FROM jobs""").fetchall()}
    epoch = dt.datetime(1970, 1, 1)
    t = lambda s: epoch + dt.timedelta(seconds=s)  # noqa: E731
    assert rows["11111100000000"] == ("11111100000000", None, None, "COMPLETED", 1.0, "volta", 1, "r1-n1",
                                      t(1610000100), t(1610003700), 3600, 720 * 60, 0, 0, None, 170000 * 2**20,
                                      "33333300000000")
    # array task 2 of array 55555500000000, on two nodes, 4 GPUs, cancelled by its own user, no time limit
    r = rows["11111200000000"]
    assert r[:8] == ("55555500000000_2", 55555500000000, 2, "CANCELLED", 4.0, "volta", 2, "r2-n1,r3-n1")
    assert r[11] is None and r[14] == 33333300000000 and r[12:14] == (0, 15)
    # cancelled while pending: no start, no end, no GPUs
    assert rows["11111300000000"][3:5] == ("CANCELLED", 0.0) and rows["11111300000000"][8:10] == (None, None)
    assert rows["11111400000000"][3:6] == ("TIMEOUT", 2.0, "tesla")
    assert rows["11111600000000"][3:6] == ("FAILED", 2.0, "tesla+volta") and rows["11111600000000"][12] == 1
    assert con.sql("SELECT count(*), sum(gpus_on_node) FROM job_nodes").fetchall()[0] == (5, 1.0 + 4 + 2 + 2)


def test_real_sample_loads_completely(con):
    f = shared_path("traces", "mit-supercloud-sample", "slurm-log-queueing-clean.csv")
    s = traces.ingest(con, "mit-supercloud", f)[0]
    # The README's 460,497 jobs / 98,177 GPU jobs describe the whole dataset; this is a 9,628-row sample.
    assert s["loaded"] == 9628 and s["rejected"] == 0 and s["inserted"] == 9628
    gpu_jobs, types = con.sql("SELECT count(*) FILTER (ngpus > 0), list(DISTINCT gpu_type) FILTER (gpu_type IS NOT NULL) FROM jobs").fetchall()[0]
    assert gpu_jobs == 2401 and types == ["volta"]   # TRES 1002 = gpu:volta (tres-mapping.txt); 1001 never occurs
    states = dict(con.sql("SELECT state, count(*) FROM jobs GROUP BY ALL").fetchall())
    assert states == {"COMPLETED": 5784, "CANCELLED": 1893, "FAILED": 1077, "TIMEOUT": 841, "OUT_OF_MEMORY": 21,
                      "NODE_FAIL": 12}
    assert con.sql("SELECT count(*) FROM jobs WHERE array_task_id IS NOT NULL").fetchall()[0][0] == 9628 - 8427


def test_times_and_orders_that_cannot_be_true_are_rejected_per_line(con, tmp_path):
    """Trace rows pass the same plausibility window as sacct lines (ingest/plausible.py)."""
    rows = HANDMADE.read_text().splitlines()
    rows[1] = rows[1].replace(",1610003700,", ",99999999999,")        # ends in year 5138
    rows[2] = rows[2].replace(",1610000200,1610001200,", ",1610000200,1610000100,")   # ends before it starts
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    s = traces.ingest(con, "mit-supercloud", path)[0]
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (7, 3, 1, 3)
    got = con.sql("SELECT line_no, field, reason FROM rejects ORDER BY 1").fetchall()
    assert [(n, f) for n, f, _ in got] == [(2, "end"), (3, "end"), (6, "time_start")]
    assert "outside the plausible window" in got[0][2] and got[1][2] == "End is before Start"
    assert con.sql("SELECT count(*) FROM jobs WHERE job_id_raw IN ('11111100000000', '11111200000000')").fetchall() == [(0,)]
