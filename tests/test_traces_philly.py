"""philly: node occupancy series, VC sizes, machine list, and the full job log (attempts as instances)."""
import datetime as dt

import pytest

from conftest import FIXTURES, shared_path
from ingest import traces
from ingest.errors import InputError

T = FIXTURES / "traces" / "philly"


def test_job_log_attempts_become_requeued_instances(con):
    out = traces.ingest(con, "philly", T)
    log = next(s for s in out if s["input"].endswith("cluster_job_log.json"))
    assert (log["read"], log["loaded"], log["rejected"]) == (5, 4, 1)
    # four jobs, five attempts (job 14199 ran twice): the counts say what they count
    assert (log["inserted"], log["stored_as"]) == (5, "job attempts")
    assert con.sql("SELECT field, reason FROM rejects").fetchall() == [("status", "job 5: unknown status 'Sideways'")]
    rows = con.sql("""SELECT state, submit, start, "end", ngpus, nodelist, account FROM jobs
                      WHERE job_id = 'application_1506638472019_14199' ORDER BY submit""").fetchall()
    pdt = lambda s: dt.datetime.fromisoformat(s) + dt.timedelta(hours=7)  # noqa: E731  (October: PDT = UTC-7)
    assert rows == [("REQUEUED", pdt("2017-10-07 01:11:39"), pdt("2017-10-07 01:12:09"), pdt("2017-10-07 01:13:23"),
                     8.0, "m47", "ee9e8c"),
                    ("COMPLETED", pdt("2017-10-07 01:13:23"), pdt("2017-10-07 01:13:30"), pdt("2017-10-09 06:53:12"),
                     8.0, "m412", "ee9e8c")]
    never = con.sql("SELECT state, start, ngpus FROM jobs WHERE job_id LIKE '%_20000'").fetchall()
    assert never == [("CANCELLED", None, 0.0)]
    two = con.sql("SELECT state, nnodes, ngpus, nodelist FROM jobs WHERE job_id LIKE '%_20001'").fetchall()
    assert two == [("FAILED", 2, 4.0, "m[10-11]")]
    assert con.sql("SELECT state, \"end\" FROM jobs WHERE job_id LIKE '%_20002'").fetchall() == [("RUNNING", None)]
    nodes = con.sql("SELECT node, gpus, gpu_type FROM nodes ORDER BY node").fetchall()
    assert nodes[0] == ("m10", 2, "gpu-12gb") and len(nodes) == 4


def test_runtime_only_file_is_refused(con, tmp_path):
    f = tmp_path / "philly_runtime_from_alibaba.csv"
    f.write_text("runtime\n1.0\n")
    with pytest.raises(InputError, match="runtimes only"):
        traces.ingest(con, "philly", f)


def test_real_series_and_vcs(con):
    d = shared_path("traces", "philly")
    out = traces.ingest(con, "philly", d)
    assert all(s["rejected"] == 0 for s in out)
    n, lo, hi, top = con.sql("SELECT count(*), min(ts), max(ts), max(total_nodes) FROM trace_node_occupancy").fetchall()[0]
    assert n == 105644 and top == 552
    # README: "Jobs submitted between 2017-08-07 - 2017-12-22": the series lies inside that period
    assert dt.datetime(2017, 8, 7) <= lo and hi <= dt.datetime(2017, 12, 23)
    vcs = con.sql("SELECT count(*), sum(nodes) FROM trace_virtual_clusters").fetchall()[0]
    assert vcs == (11, 352)


def test_reingest_counts_add_up_new_updated_unchanged(con, tmp_path):
    # every loaded line is new, updated or unchanged: the occupancy series and the VC quotas said "loaded 105644
    # (new 0, updated 0, unchanged 0)" before their merge counted
    seq = tmp_path / "philly_node_sequence_minutely.csv"
    seq.write_text("time,active,total\n2017-10-03 00:00:00,312,420\n2017-10-03 00:01:00,309,420\n"
                   "2017-10-03 00:02:00,309,420\n")
    vcs = tmp_path / "philly_vc_nodes.csv"
    vcs.write_text("vc,node num\n6214e9,64\n7f04ca,32\n")

    def counts():
        return [(s["loaded"], s["inserted"], s["updated"], s["unchanged"])
                for s in traces.ingest(con, "philly", tmp_path)]
    assert counts() == [(3, 3, 0, 0), (2, 2, 0, 0)]                  # files in name order: sequence, then VCs
    assert counts() == [(3, 0, 0, 3), (2, 0, 0, 2)]
    seq.write_text(seq.read_text().replace("00:01:00,309", "00:01:00,310") + "2017-10-03 00:03:00,305,420\n")
    assert counts() == [(4, 1, 1, 2), (2, 0, 0, 2)]
    assert con.sql("SELECT active_nodes FROM trace_node_occupancy ORDER BY ts").fetchall() == [(312,), (310,), (309,),
                                                                                             (305,)]


def test_a_job_log_time_that_is_not_one_is_rejected_naming_its_field(con, tmp_path):
    """A record whose time cannot be read is quarantined with the field's name and the value, not as a
    "malformed record" quoting strptime; the other records load."""
    log = tmp_path / "cluster_job_log.json"
    log.write_text('[{"jobid": "a_1", "status": "Pass", "user": "u", "vc": "v", "submitted_time": "2017-10-07 01:11:39",'
                   ' "attempts": [{"start_time": "07/10/2017 01:12", "end_time": "2017-10-07 01:13:23", "detail": []}]},'
                   ' {"jobid": "a_2", "status": "Pass", "user": "u", "vc": "v", "submitted_time": "2017-10-07 01:11:39",'
                   ' "attempts": []}]')
    out = traces.ingest(con, "philly", log)
    assert [(s["read"], s["loaded"], s["rejected"]) for s in out] == [(2, 1, 1)]
    assert con.sql("SELECT line_no, field, reason FROM rejects").fetchall() == [
        (1, "start_time", "job 1: cannot read time '07/10/2017 01:12' (expected YYYY-MM-DD HH:MM:SS)")]
