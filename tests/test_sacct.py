"""`gpuledger ingest sacct`: real samples, every documented form, accounting that adds up, idempotency."""
from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES, shared_path
from ingest import jobs_store, sacct, warehouse
from ingest.errors import InputError

XDMOD_HEADERLESS = "|".join(sacct.XDMOD_FIELDS)


def ingest_text(con, text: str | bytes, **opts) -> dict:
    data = text.encode() if isinstance(text, str) else text
    return sacct.ingest_bytes(con, data, "test.psv", sacct.SacctOptions(**opts))


def line(jobid="100", raw=None, cluster="c1", partition="gpu", account="ml", user="alice", submit="2026-03-01T10:00:00",
         eligible=None, start="2026-03-01T10:05:00", end="2026-03-01T12:05:00", elapsed="02:00:00", exitcode="0:0",
         state="COMPLETED", nnodes="1", ncpus="8", reqmem="64G", reqtres="billing=8,cpu=8,gres/gpu=2,mem=64G,node=1",
         alloctres="billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1", timelimit="04:00:00",
         nodelist="gpu01", jobname="train") -> str:
    vals = [jobid, raw or jobid, cluster, partition, "normal", account, "grp", "1000", user, "1000", submit,
            eligible or submit, start, end, elapsed, exitcode, state, nnodes, ncpus, ncpus, reqmem, reqtres, alloctres,
            timelimit, nodelist, jobname]
    return "|".join(vals)


def job(con, job_id, cols="*"):
    return con.execute(f"SELECT {cols} FROM jobs WHERE job_id = ?", [job_id]).fetchall()


def counts_add_up(con):
    bad = con.sql("""SELECT run_id FROM ingest_runs WHERE status = 'ok'
                     AND lines_read <> loaded + skipped + rejected""").fetchall()
    skips = con.sql("""SELECT r.run_id FROM ingest_runs r LEFT JOIN (SELECT run_id, sum(lines) n FROM ingest_skips
                       GROUP BY 1) s USING (run_id) WHERE r.status = 'ok' AND coalesce(s.n, 0) <> r.skipped""").fetchall()
    rej = con.sql("""SELECT r.run_id FROM ingest_runs r LEFT JOIN (SELECT run_id, count(*) n FROM rejects
                     GROUP BY 1) s USING (run_id) WHERE r.status = 'ok' AND coalesce(s.n, 0) <> r.rejected""").fetchall()
    return not bad and not skips and not rej


# ---------------------------------------------------------------- real outputs

def test_real_slurm_allocations_with_header(con):
    s = sacct.ingest_bytes(con, (FIXTURES / "realbox" / "sacct-allocations.psv").read_bytes(), "realbox",
                           sacct.SacctOptions(cluster="realbox"))
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (16, 15, 1, 0)
    assert s["skip_reasons"] == {"header line": 1}
    # GPU-seconds per account, hand-computed from Elapsed x gres/gpu of each line
    got = dict(con.sql("SELECT account, sum(ngpus * elapsed_s) FROM jobs GROUP BY 1").fetchall())
    assert got == {"ml": 393, "infra": 71, "vision": 125}
    assert job(con, "7", "state, state_raw, cancelled_by_uid") == [("CANCELLED", "CANCELLED by 1003", 1003)]
    assert job(con, "6", "state") == [("NODE_FAIL",)]
    assert job(con, "4", "state, timelimit_s, elapsed_s") == [("TIMEOUT", 60, 63)]
    # the array's last task carries the parent's JobIDRaw
    assert job(con, "8_5", "job_id_raw, array_job_id, array_task_id") == [("8", 8, 5)]
    # a job rejected at submission: Partition_Limit, nothing allocated, the requested type still known
    assert job(con, "10", "state, timelimit_s, timelimit_raw, ngpus, req_gpus, gpu_type, nodelist") == [
        ("FAILED", None, "Partition_Limit", 0.0, 1.0, "a100", "None assigned")]
    assert con.sql("SELECT count(*) FROM job_nodes j JOIN jobs USING (job_uid) WHERE job_id = '10'").fetchall() == [(0,)]
    # a 2-node 16-GPU job is placed 8 + 8
    assert con.sql("""SELECT node, gpus_on_node FROM job_nodes JOIN jobs USING (job_uid) WHERE job_id = '1'
                      ORDER BY node""").fetchall() == [("gpu01", 8.0), ("gpu02", 8.0)]
    assert job(con, "3", "submit, start, \"end\", exit_code, signal") == [
        (dt.datetime(2026, 12, 2, 10, 37, 14), dt.datetime(2026, 12, 2, 10, 37, 34), dt.datetime(2026, 12, 2, 10, 37, 39), 3, 0)]
    assert counts_add_up(con)


def test_xdmod_logs_match_xdmods_own_expected_parse(con):
    log = shared_path("samples", "sacct_parsable", "xdmod-accounting-logs.log")
    expected = json.loads(shared_path("samples", "sacct_parsable", "xdmod-accounting-logs.expected.json").read_text())
    s = sacct.ingest_path(con, str(log), sacct.SacctOptions(tz="UTC"))
    assert s["loaded"] == 4 and s["rejected"] == 0
    for exp in expected:
        (submit, start, end, elapsed, timelimit, ncpus, nnodes, ngpus, state_raw, name), = job(
            con, exp["job_id"], 'submit, start, "end", elapsed_s, timelimit_s, ncpus, nnodes, ngpus, state_raw, job_name')
        assert int(submit.replace(tzinfo=dt.timezone.utc).timestamp()) == exp["submit_time"]
        assert int(start.replace(tzinfo=dt.timezone.utc).timestamp()) == exp["start_time"]
        assert int(end.replace(tzinfo=dt.timezone.utc).timestamp()) == exp["end_time"]
        assert (elapsed, timelimit, ncpus, nnodes, ngpus) == (
            exp["elapsed"], exp["timelimit"], int(exp["ncpus"]), int(exp["nnodes"]), exp["ngpus"])
        assert state_raw == exp["state"] and name == exp["job_name"]


def test_xdmod_state_and_encoding_edge_files(con):
    s = sacct.ingest_path(con, str(shared_path("samples", "sacct_parsable", "xdmod-non-ended-job-state.log")),
                          sacct.SacctOptions())
    assert s["loaded"] == 2
    assert job(con, "3483276", 'state, start, "end", elapsed_s') == [("PENDING", None, None, 0)]
    assert job(con, "3451067", 'state, "end"') == [("RUNNING", dt.datetime(2020, 6, 30, 19, 24, 8))]


def test_reportseff_caret_delimiter_and_steps(con, fixtures):
    s = sacct.ingest_path(con, str(fixtures / "sacct" / "reportseff-issue-16.caret-psv"), sacct.SacctOptions(
        fields="AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,NTasks,ReqMem,State,Timelimit,TotalCPU"))
    assert (s["read"], s["loaded"], s["rejected"]) == (40, 1, 0)
    assert s["skip_reasons"] == {"blank line": 1, "job step (.N)": 36, "job step (.batch)": 1, "job step (.extern)": 1}
    assert job(con, "65638294", "elapsed_s, timelimit_s, ncpus, req_mem_bytes") == [
        (7 * 3600 + 36 * 60 + 3, 6 * 86400 + 23 * 3600 + 59 * 60, 16, 32 * 1024 ** 3)]
    assert json.loads(job(con, "65638294", "extra")[0][0])["totalcpu"] == "4-23:56:21"


def test_parsable_trailing_delimiter(con, fixtures):
    s = sacct.ingest_path(con, str(fixtures / "sacct" / "datadog-slurm-sacct.txt"), sacct.SacctOptions(
        fields="JobID,JobName,Partition,Account,AllocCPUs,AllocTRES,Elapsed,CPUTimeRAW,MaxRSS,MaxVMSize,AveCPU,"
               "AveRSS,State,ExitCode,Start,End,NodeList"))
    assert (s["loaded"], s["skip_reasons"], s["rejected"]) == (1, {"job step (.batch)": 1}, 0)
    assert job(con, "56", "job_name, nodelist, elapsed_s, mem_bytes") == [("wrap", "c1", 754, 500 * 1048576)]


def test_parsable2_with_a_mostly_empty_last_column_is_not_taken_for_a_trailing_delimiter(con, fixtures):
    """The real capture's `--format ...,reservation,reason` without its last column: Reservation last, empty on 6
    of 7 jobs, so most lines end with the delimiter as `--parsable` lines do. The header ends without one, so this
    is --parsable2 (read as --parsable, every line whose reservation was empty lost a field and was rejected)."""
    text = (fixtures / "slurm_waiting" / "sacct-allocations.psv").read_text()
    lines = ["|".join(line.split("|")[:-1]) for line in text.splitlines()]
    assert sum(line.endswith("|") for line in lines[1:]) == 6
    s = sacct.ingest_bytes(con, ("\n".join(lines) + "\n").encode(), "resv-last.psv", sacct.SacctOptions(tz="UTC"))
    assert (s["loaded"], s["rejected"]) == (7, 0)
    got = con.sql("SELECT job_id, json_extract_string(extra, '$.reservation') FROM jobs ORDER BY job_id").fetchall()
    assert got[0] == ("1", "gl-resv") and all(r in (None, "") for _, r in got[1:])


def test_every_permissive_sacct_fixture_loads_without_error(con, fixtures):
    layouts = {"reportseff-conftest": "AdminComment,AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,ReqMem,State,Timelimit,TotalCPU"}
    for f in sorted((fixtures / "sacct").iterdir()):
        fields = next((v for k, v in layouts.items() if f.name.startswith(k)), None)
        s = sacct.ingest_path(con, str(f), sacct.SacctOptions(fields=fields))
        assert s["read"] == s["loaded"] + s["skipped"] + s["rejected"]
    assert counts_add_up(con)


# ---------------------------------------------------------------- forms

def test_job_id_forms(con):
    text = "\n".join([
        line("123_4", raw="130"), line("123_[5-9,12]", raw="123", state="PENDING", start="Unknown", end="Unknown",
                                       elapsed="00:00:00", alloctres="", nodelist="None assigned"),
        line("200+0", raw="200"), line("200+1", raw="201"),
        line("300.batch", raw="300.batch"), line("300.extern", raw="300.extern"), line("300.0", raw="300.0"),
        line("300.interactive", raw="300.interactive"),
    ])
    s = ingest_text(con, text)
    assert s["loaded"] == 4 and s["skip_reasons"] == {
        "job step (.batch)": 1, "job step (.extern)": 1, "job step (.N)": 1, "job step (.interactive)": 1}
    assert job(con, "123_4", "job_id_raw, array_job_id, array_task_id") == [("130", 123, 4)]
    assert job(con, "123_[5-9,12]", "array_job_id, array_task_spec, state, ngpus") == [(123, "5-9,12", "PENDING", 0.0)]
    assert job(con, "200+1", "het_job_id, het_offset") == [(200, 1)]


def test_times_in_zone_offset_and_epoch(con):
    text = "\n".join([line("1", submit="2026-07-01T12:00:00", start="2026-07-01T12:00:00", end="2026-07-01T13:00:00"),
                      line("2", submit="2026-07-01T12:00:00+0100", start="2026-07-01T12:00:00+0100",
                           end="2026-07-01T13:00:00+0100"),
                      line("3", submit="1782907200", start="1782907200", end="1782910800")])
    ingest_text(con, text, tz="Europe/Berlin")
    assert job(con, "1", "submit")[0][0] == dt.datetime(2026, 7, 1, 10, 0)   # CEST = UTC+2
    assert job(con, "2", "submit")[0][0] == dt.datetime(2026, 7, 1, 11, 0)
    assert job(con, "3", "submit")[0][0] == dt.datetime(2026, 7, 1, 12, 0)


@pytest.mark.parametrize("text, seconds", [("1-02:03:04", 93784), ("00:05:00", 300), ("59:30", 3570),
                                           ("00:11.830", 12), ("UNLIMITED", None), ("Partition_Limit", None)])
def test_durations(con, text, seconds):
    ingest_text(con, line("1", timelimit=text))
    assert job(con, "1", "timelimit_s, timelimit_raw") == [(seconds, text)]


def test_tres_counts_gpus_once_and_types_from_typed_entries(con):
    ingest_text(con, "\n".join([
        line("1", alloctres="billing=1,cpu=1,gres/gpu:p100=1,mem=125G,node=1"),
        line("2", alloctres="gres/gpu:volta=2,mem=125G,node=1"),
        line("3", alloctres="billing=10,cpu=10,gres/gpu=4,mem=374000M,node=2", nnodes="2", nodelist="gpu[01-02]"),
        line("4", alloctres="cpu=2,gres/gpu:a100=1,gres/gpu:h100=2,gres/gpu=3,gres/gpumem=30M,gres/gpuutil=40,mem=1T"),
        line("5", alloctres="billing=256,cpu=256,mem=3000M,node=32")]))
    got = {r[0]: r[1:] for r in con.sql("SELECT job_id, ngpus, gpu_type, mem_bytes, billing FROM jobs").fetchall()}
    assert got == {"1": (1.0, "p100", 125 * 1024 ** 3, 1.0), "2": (2.0, "volta", 125 * 1024 ** 3, 8.0),
                   "3": (4.0, None, 374000 * 1024 ** 2, 10.0), "4": (3.0, "a100+h100", 1024 ** 4, 8.0),
                   "5": (0.0, None, 3000 * 1024 ** 2, 256.0)}
    assert con.sql("SELECT node, gpus_on_node FROM job_nodes JOIN jobs USING (job_uid) WHERE job_id = '3' "
                   "ORDER BY node").fetchall() == [("gpu01", 2.0), ("gpu02", 2.0)]


@pytest.mark.parametrize("reqmem, total", [("3000Mc", 3000 * 1024 ** 2 * 8), ("48000Mn", 48000 * 1024 ** 2 * 2),
                                           ("32G", 32 * 1024 ** 3), ("0n", 0), ("512K", 512 * 1024)])
def test_reqmem_per_cpu_and_per_node(con, reqmem, total):
    ingest_text(con, line("1", reqmem=reqmem, nnodes="2", ncpus="8", nodelist="gpu[01-02]"))
    assert job(con, "1", "req_mem_bytes") == [(total,)]


def test_nodelists_with_several_bracket_groups_and_uneven_gpu_spread(con):
    ingest_text(con, line("1", nnodes="3", nodelist="r1n[01-02],r2n05",
                          alloctres="cpu=3,gres/gpu=7,mem=3G,node=3"))
    assert con.sql("SELECT node, gpus_on_node FROM job_nodes ORDER BY node").fetchall() == [
        ("r1n01", 3.0), ("r1n02", 2.0), ("r2n05", 2.0)]


def test_pipe_in_job_name_non_utf8_bytes_and_blank_lines(con):
    data = (line("1", jobname="a|b|c") + "\n\n" + line("2", jobname="caf\xe9").replace("caf\xe9", "") + "\n").encode()
    data = data.replace(b"|grp|", b"|grp|", 1) + line("3").encode().replace(b"train", b"x\xffy") + b"\n"
    s = ingest_text(con, data)
    assert (s["loaded"], s["skip_reasons"], s["rejected"]) == (3, {"blank line": 1}, 0)
    assert job(con, "1", "job_name") == [("a|b|c",)]
    assert job(con, "3", "job_name") == [("x\ufffdy",)]


def test_mid_file_header_starts_a_new_layout(con):
    text = line("1") + "\nJobID|State|Elapsed|AllocTRES\n2|FAILED|00:10:00|gres/gpu=1\n"
    s = ingest_text(con, text)
    assert (s["loaded"], s["skip_reasons"]) == (2, {"header line": 1})
    assert job(con, "2", "state, elapsed_s, ngpus") == [("FAILED", 600, 1.0)]


def test_a_header_naming_fields_we_do_not_know_is_still_a_header(con):
    """Slurm adds fields in releases (22.05's --format=ALL prints ResvCPU): a header with a name we do not know
    still lays out the lines under it, that column lands in jobs.extra and a note names it."""
    text = "JobID|State|Elapsed|AllocTRES|SegmentCount|\n2|FAILED|00:10:00|gres/gpu=1|3|\n"
    s = ingest_text(con, text)
    assert (s["loaded"], s["rejected"], s["skip_reasons"]) == (1, 0, {"header line": 1})
    assert s["notes"] == ["test.psv:1: header names fields gpuledger does not know (segmentcount): "
                          "their values are kept in jobs.extra"]
    assert job(con, "2", "state, elapsed_s, ngpus, extra->>'segmentcount'") == [("FAILED", 600, 1.0, "3")]
    # the run keeps it as its message: the Data health page and the service's log show it, not only the CLI
    assert con.sql("SELECT status, message FROM ingest_runs").fetchall() == [("ok", "note: " + s["notes"][0])]
    # fewer than half of the names known: not a header but a line of the default layout, rejected as such
    s = ingest_text(con, "JobID|Foo|Bar\n" + line("3") + "\n")
    assert (s["loaded"], s["rejected"], s["skip_reasons"], s["notes"]) == (1, 1, {}, [])
    assert s["reject_examples"] == ["test.psv:1: expected 26 fields (the Open XDMoD default list; give --fields "
                                    "for other layouts), found 3"]


def test_timelimitraw_without_a_limit_of_the_job(con):
    """TimelimitRaw is minutes, or Partition_Limit / UNLIMITED as Timelimit prints them: no limit of its own."""
    text = ("JobID|State|TimelimitRaw\n5|COMPLETED|Partition_Limit\n6|COMPLETED|UNLIMITED\n7|COMPLETED|90\n"
            "8|COMPLETED|ninety\n")
    s = ingest_text(con, text)
    assert (s["loaded"], s["rejected"]) == (3, 1)
    assert s["reject_examples"] == ["test.psv:5: field timelimitraw: not an integer: ninety"]
    got = con.sql("SELECT job_id, timelimit_s, timelimit_raw FROM jobs ORDER BY job_id").fetchall()
    assert got == [("5", None, "Partition_Limit"), ("6", None, "UNLIMITED"), ("7", 5400, "90")]


def test_bad_lines_are_rejected_with_line_field_and_reason(con):
    text = "\n".join([line("1"), line("2", submit="yesterday"), line("3", elapsed="ten minutes"),
                      "4|4|too|few", line("5", nodelist="gpu[01-"), line("6", exitcode="x"), line("7", nnodes="two"),
                      "not a job|" + line("8")[2:], line("9")])
    s = ingest_text(con, text)
    assert (s["read"], s["loaded"], s["rejected"]) == (9, 2, 7)
    rej = {r[0]: (r[1], r[2]) for r in con.sql("SELECT line_no, field, reason FROM rejects ORDER BY 1").fetchall()}
    hint = " (ISO 8601 or epoch seconds; sacct prints ISO 8601 with SLURM_TIME_FORMAT=standard)"
    assert rej[2] == ("submit", "cannot read time yesterday" + hint)
    assert rej[3] == ("elapsed", "cannot read duration ten minutes")
    assert rej[4][0] is None and rej[4][1].startswith("expected 26 fields") and rej[4][1].endswith("found 4")
    assert rej[5][0] == "nodelist" and "gpu[01-" in rej[5][1]
    assert rej[6][0] == "exitcode" and rej[7][0] == "nnodes" and rej[8][0] == "jobid"
    assert s["reject_examples"][0] == "test.psv:2: field submit: cannot read time yesterday" + hint
    assert con.sql("SELECT raw FROM rejects WHERE line_no = 4").fetchall() == [("4|4|too|few",)]
    assert counts_add_up(con)


def test_times_as_site_time_formats_print_them(con):
    """SLURM_TIME_FORMAT="%Y-%m-%d %H:%M:%S" (a space for the T) and "%s" (epoch seconds) are read; a day-first
    form is ambiguous and rejected with the way out in the reason."""
    text = ("JobID|State|Submit|Start|End|AllocTRES\n"
            "1|COMPLETED|2026-12-06 09:57:13|2026-12-06 09:57:15|2026-12-06 10:58:42|gres/gpu=2\n"
            "2|COMPLETED|1796551033|1796551035|1796554722|gres/gpu=2\n"
            "3|COMPLETED|2026-12-06 09:57:13+0100|2026-12-06 09:57:15+0100|2026-12-06 10:58:42+0100|gres/gpu=2\n"
            "4|COMPLETED|06/12/2026 09:57|06/12/2026 09:57|06/12/2026 10:58|gres/gpu=2\n")
    s = ingest_text(con, text, tz="Europe/Berlin")
    assert (s["loaded"], s["rejected"]) == (3, 1)
    assert s["reject_examples"] == ["test.psv:5: field submit: cannot read time 06/12/2026 09:57 (ISO 8601 or epoch "
                                    "seconds; sacct prints ISO 8601 with SLURM_TIME_FORMAT=standard)"]
    got = con.sql('SELECT job_id, submit, "end" FROM jobs ORDER BY job_id').fetchall()
    t = dt.datetime
    assert got == [("1", t(2026, 12, 6, 8, 57, 13), t(2026, 12, 6, 9, 58, 42)),     # Berlin is UTC+1 in December
                   ("2", t(2026, 12, 6, 9, 57, 13), t(2026, 12, 6, 10, 58, 42)),    # epoch seconds are UTC
                   ("3", t(2026, 12, 6, 8, 57, 13), t(2026, 12, 6, 9, 58, 42))]


def test_unknown_states_are_kept_raw(con):
    ingest_text(con, line("1", state="FOO") + "\n" + line("2", state="OUT_OF_MEMORY"))
    assert job(con, "1", "state, state_raw") == [("UNKNOWN", "FOO")]
    assert job(con, "2", "state") == [("OUT_OF_MEMORY",)]


# ---------------------------------------------------------------- merge semantics

def snapshot(con):
    cols = ", ".join(c for c in jobs_store.JOB_COLUMNS)
    return (sorted(con.sql(f"SELECT job_uid, {cols} FROM jobs").fetchall(), key=str),
            sorted(con.sql("SELECT * FROM job_nodes").fetchall(), key=str))


def test_reingest_changes_nothing(con, fixtures):
    data = (fixtures / "realbox" / "sacct-allocations.psv").read_bytes()
    sacct.ingest_bytes(con, data, "a", sacct.SacctOptions())
    before = snapshot(con)
    s = sacct.ingest_bytes(con, data, "a", sacct.SacctOptions())
    assert (s["inserted"], s["updated"], s["unchanged"]) == (0, 0, 15)
    assert snapshot(con) == before


def test_later_export_moves_running_job_to_final_state(con):
    running = line("1", state="RUNNING", end="Unknown", elapsed="00:30:00")
    done = line("1", state="COMPLETED")
    s1 = ingest_text(con, running)
    assert job(con, "1", 'state, "end", elapsed_s') == [("RUNNING", None, 1800)]
    s2 = ingest_text(con, done)
    assert (s2["updated"], s2["transitions"]) == (1, {"RUNNING->COMPLETED": 1})
    assert job(con, "1", 'state, "end", elapsed_s') == [("COMPLETED", dt.datetime(2026, 3, 1, 12, 5), 7200)]
    uid = job(con, "1", "job_uid")
    s3 = ingest_text(con, running)   # an older export arriving late never rolls a job back
    assert s3["unchanged"] == 1 and job(con, "1", "state, job_uid") == [("COMPLETED", uid[0][0])]
    assert s1["inserted"] == 1


def test_ingest_order_does_not_matter(tmp_path):
    a = line("1", state="PENDING", start="Unknown", end="Unknown", elapsed="00:00:00", alloctres="", nodelist="None assigned")
    b = line("1", state="RUNNING", end="Unknown", elapsed="00:10:00")
    c = line("1", state="TIMEOUT", elapsed="04:00:00", end="2026-03-01T14:05:00")
    results = []
    for order in ([a, b, c], [c, a, b], [b, c, a]):
        w = warehouse.connect(tmp_path / f"w{len(results)}.duckdb")
        for text in order:
            ingest_text(w, text)
        results.append(w.sql('SELECT state, start, "end", elapsed_s, nodelist FROM jobs').fetchall())
        w.close()
    assert results[0] == results[1] == results[2] == [
        ("TIMEOUT", dt.datetime(2026, 3, 1, 10, 5), dt.datetime(2026, 3, 1, 14, 5), 14400, "gpu01")]


def test_requeued_instances_are_separate_rows(con):
    first = line("1", state="REQUEUED", submit="2026-03-01T10:00:00", start="2026-03-01T10:05:00",
                 end="2026-03-01T11:00:00", elapsed="00:55:00")
    second = line("1", submit="2026-03-01T11:00:05", start="2026-03-01T11:10:00", end="2026-03-01T13:10:00")
    s = ingest_text(con, first + "\n" + second)
    assert s["inserted"] == 2
    assert con.sql("SELECT state FROM jobs ORDER BY submit").fetchall() == [("REQUEUED",), ("COMPLETED",)]


def test_a_crash_leaves_the_warehouse_as_it_was(con, monkeypatch):
    ingest_text(con, line("1"))
    before = snapshot(con)

    def boom(*args, **kwargs):
        con.execute("DELETE FROM jobs")   # partial damage inside the transaction...
        raise RuntimeError("disk full")
    monkeypatch.setattr(jobs_store, "assign_teams", boom)
    with pytest.raises(RuntimeError):
        ingest_text(con, line("2"))
    assert snapshot(con) == before     # ...rolled back
    assert con.sql("SELECT status, message FROM ingest_runs ORDER BY run_id DESC LIMIT 1").fetchall() == [
        ("failed", "RuntimeError: disk full")]


# ---------------------------------------------------------------- CLI

def test_cli_reads_stdin_and_strict_exit(run_cli, monkeypatch, tmp_path):
    import io
    import sys
    good = line("1") + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(good.encode())))
    code, _, err = run_cli("ingest", "sacct", "--no-refresh", "-")
    assert code == 0 and "read 1 lines: loaded 1" in err
    bad = tmp_path / "bad.psv"
    bad.write_text(line("2", submit="never") + "\n")
    code, _, err = run_cli("ingest", "sacct", "--no-refresh", "--strict", str(bad))
    assert code == 1 and "bad.psv:1: field submit: cannot read time never" in err


def test_cli_missing_file_is_one_line_error(run_cli):
    code, _, err = run_cli("ingest", "sacct", "/nonexistent/sacct.psv")
    assert code == 1 and err.strip() == "gpuledger: /nonexistent/sacct.psv: no such file"


def test_scontrol_output_is_named_with_the_command_that_reads_it(con, fixtures, tmp_path):
    """scontrol's key=value records given to `ingest sacct` were one reject per line ("expected 26 fields"): now
    one line naming what the input is, and nothing is written."""
    job = tmp_path / "job.txt"       # the shape of `scontrol show job` (Slurm 22.05), two of its lines
    job.write_text("JobId=42 JobName=train\n   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A\n")
    waiting = fixtures / "slurm_waiting"
    for path, what in ((job, r"`scontrol show job` output: the live state of jobs, not their accounting"),
                       (waiting / "scontrol-show-node-o.txt", r"`scontrol show node` output: load it with "
                                                              r"`gpuledger ingest nodes`"),
                       (waiting / "scontrol-show-reservation.txt", r"`scontrol show reservation` output: load it "
                                                                   r"with `gpuledger ingest reservations`")):
        with pytest.raises(InputError, match=f"^{re.escape(str(path))}: this is {what}"):
            sacct.ingest_path(con, str(path), sacct.SacctOptions())
    assert con.sql("SELECT count(*) FROM ingest_runs").fetchall() == [(0,)]


# ---------------------------------------------------------------- invariants

junk = st.text(alphabet=st.sampled_from(list("|0123456789_.[]-:TabcX ")), max_size=60)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.builds(line, jobid=st.integers(1, 50).map(str)), junk,
                          st.just(""), st.just("JobID|State")), max_size=25))
def test_every_line_is_loaded_skipped_or_rejected(con, lines):
    s = ingest_text(con, "\n".join(lines))
    assert s["read"] == s["loaded"] + s["skipped"] + s["rejected"]
    assert counts_add_up(con)


def test_the_run_records_the_inputs_sha256_also_when_it_fails(con, fixtures):
    """The digest is computed in a thread while the input is split; ok and failed runs both record it."""
    import hashlib
    from concurrent.futures import Future
    data = (fixtures / "sacct" / "datadog-slurm-sacct.txt").read_bytes()
    sacct.ingest_bytes(con, data, "ok.psv", sacct.SacctOptions(delimiter="|"))
    later = Future()
    later.set_result("ab" * 32)
    with pytest.raises(ZeroDivisionError):
        with warehouse.IngestRun(con, "sacct", "bad.psv", sha256=later):
            1 / 0
    got = dict(con.sql("SELECT input_name, sha256 FROM ingest_runs").fetchall())
    assert got == {"ok.psv": hashlib.sha256(data).hexdigest(), "bad.psv": "ab" * 32}


def test_long_non_ascii_first_fields_are_data_not_headers(con):
    """Header detection looks at each letter-initial line's first 41 bytes; a cut there must not split a
    character, and such a line is data."""
    name = "entraînement-" + "é" * 20                                       # 47 bytes, no delimiter in the first 41
    data = (f"JobName|JobID|State|Submit\n{name}|101|COMPLETED|2026-07-01T10:00:00\n"
            f"short|102|COMPLETED|2026-07-01T10:05:00\n").encode()
    s = ingest_text(con, data, fields="jobname,jobid,state,submit")
    assert (s["loaded"], s["rejected"]) == (2, 0) and s["skip_reasons"] == {"header line": 1}
    assert con.sql("SELECT job_name FROM jobs ORDER BY job_id").fetchall() == [(name,), ("short",)]
