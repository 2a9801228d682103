"""ingest/squeue.py and models/metrics/pending.py on the captured real mix (tests/fixtures/slurm_waiting) and on
hand-made snapshots: parsing, accounting of every line, and waiting GPU-seconds per reason, hand-computed.

The mix's waits (snapshots at 05:37:38, :41, :43, :45, ... every 2 s; jobs submitted 05:37:39-43):
  waitres (vision, 2 GPUs) submit/eligible :40, start :53 - [:40,:41) no snapshot (sacct Reason None: unknown),
          [:41,:45) None, [:45,:53) Resources          -> unknown 2, not yet evaluated 8, resources 16 GPU-s
  dep     (ml, 1 GPU) submit :40, eligible :53 (afterok big), start :53: all before eligible -
          [:40,:41) sacct's last reason Dependency, [:41,:53) Dependency from squeue      -> 1 + 12 GPU-s
  victim  (ml, 4 GPUs) requeued at :43, eligible :53: [:43,:45) snapshot :43 shows it RUNNING (the preempted
          instance) -> sacct's last reason BeginTime, [:45,:53) BeginTime               -> 8 + 32 GPU-s
          its first instance, inresv and big waited [:39,:40)                            -> unknown 4 + 1 + 4
"""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from ingest import squeue, warehouse
from ingest.errors import InputError
from models.metrics import pending
from waiting_fixtures import WAITING, shared_db, squeue_files

AT = dt.datetime(2026, 12, 4, 5, 37, 45)
LO, HI = dt.datetime(2026, 12, 4, 5, 37), dt.datetime(2026, 12, 4, 5, 39)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return shared_db(tmp_path_factory)


@pytest.fixture(scope="module")
def ro(db):
    c = warehouse.connect(db, read_only=True)
    yield c
    c.close()


def test_gpu_counts_from_every_tres_form():
    assert squeue.gpu_count("cpu=2,mem=2000M,node=1,billing=33,gres/gpu=4,gres/gpu:a100=4") == 4
    assert squeue.gpu_count("gres:gpu:a100:2") == 2 and squeue.gpu_count("gres:gpu:3") == 3
    assert squeue.gpu_count("gres/gpu:a100=2,gres/gpu:h100=1") == 3
    assert squeue.gpu_count("N/A") is None and squeue.gpu_count("cpu=4") is None


def test_every_line_is_loaded_skipped_or_rejected(con):
    text = ("JOBID|ST|NODELIST(REASON)|TRES_PER_NODE|NODES|ACCOUNT|USER|SUBMIT_TIME|EXTRA\n"
            "7|PD|(QOSMaxGRESPerUser)|gres:gpu:2|2|ml|alice|2026-12-04T05:00:00|x\n"
            "8|R|gpu01|gres:gpu:1|1|ml|alice|2026-12-04T05:00:00|x\n\n"
            "9x|PD|(Priority)|gres:gpu:1|1|ml|alice|2026-12-04T05:00:00|x\n"
            "10|PD|(Priority)|gres:gpu:1|1|ml|alice|1970-01-01T00:00:00|x\n"
            "11|PD|(Priority)|gres:gpu:1|1|ml\n")
    s = squeue.load(con, text, AT, "snap.psv", cluster="c1")
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (7, 2, 2, 3)
    assert [e.split(": field ")[-1][:11] for e in s["reject_examples"][:2]] == ["JOBID: not ", "SUBMIT_TIME"]
    rows = con.sql("SELECT job_id, state, reason, gpus FROM squeue_snapshots ORDER BY job_id").fetchall()
    assert rows == [("7", "PENDING", "QOSMaxGRESPerUser", 4.0), ("8", "RUNNING", None, 1.0)]
    # the same snapshot again replaces it
    s = squeue.load(con, text, AT, "snap.psv", cluster="c1")
    assert (s["inserted"], s["updated"]) == (0, 2) and con.sql("SELECT count(*) FROM squeue_snapshots").fetchall() == [(2,)]
    with pytest.raises(Exception, match="captured-at"):
        squeue.load(con, text, dt.datetime(1999, 1, 1), "old.psv")


def test_scontrol_show_job_output_is_named_not_rejected_line_by_line(con):
    text = ("JobId=1432 JobName=train UserId=alice(1000) GroupId=ml(1000)\n"
            "   JobState=PENDING Reason=Priority Dependency=(null)\n")
    with pytest.raises(InputError, match=r"jobs.txt: this is `scontrol show job` output; `ingest squeue` reads"):
        squeue.load(con, text, AT, "jobs.txt", cluster="c1")
    assert con.sql("SELECT count(*) FROM rejects").fetchall() == [(0,)]


REAL = WAITING.parent / "slurm_real"
ARRAY_AT = dt.datetime(2026, 12, 6, 10, 19, 19)     # the capture of squeue-array-*.psv (their .cmd files)


def test_array_tasks_keep_their_ids_and_a_repeated_id_is_rejected(con):
    """Real Slurm 22.05, array 28 (0-5%2: two running as jobs 30, 31; four pending): JobArrayID, which --live
    prints, names each task; JobID prints 28 on every pending task's line, and those repeats are rejected (their
    reasons and GPUs would count four times) with the way out in the reason."""
    s = squeue.load(con, (REAL / "squeue-array-jobarrayid.psv").read_bytes(), ARRAY_AT, "arrayid", cluster="glcluster")
    assert (s["loaded"], s["rejected"]) == (11, 0)
    got = con.sql("SELECT job_id, reason, gpus FROM squeue_snapshots WHERE job_id LIKE '28%' ORDER BY 1").fetchall()
    assert got == [("28_0", "None", 2.0), ("28_1", "None", 2.0)] + [
        (f"28_{t}", "JobArrayTaskLimit", 2.0) for t in range(2, 6)]
    s = squeue.load(con, (REAL / "squeue-array-jobid.psv").read_bytes(), ARRAY_AT, "jobid", cluster="glcluster")
    assert (s["loaded"], s["rejected"]) == (8, 3)
    assert s["reject_examples"][0] == ("jobid:3: field JOBID: job 28 is on line 2 of this snapshot already "
                                       "(squeue's JobID prints an array's id on each task's line: use JobArrayID)")
    assert squeue.LIVE_FIELDS[0] == "JobArrayID"


def test_a_squeue_iterate_log_loads_each_snapshot_at_its_time_line(con):
    """Real Slurm 22.05, `squeue --iterate 2` (TZ=UTC) stopped after three snapshots: each block under squeue's time
    line is a snapshot at that time (7, 7 and 4 jobs; 5, 5 and 2 pending), the time lines, headers and blank lines
    are skipped with their reasons, 27 = 18 + 9 lines; loading the log again replaces its snapshots."""
    log = (REAL / "squeue-iterate.psv").read_bytes()
    s = squeue.load(con, log, None, "iterate.psv", cluster="glcluster")
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (27, 18, 9, 0)
    assert s["skip_reasons"] == {squeue.TIME_LINE_SKIP: 3, "header line": 3, "blank line": 3}
    got = con.sql("""SELECT captured_at, count(*), count(*) FILTER (WHERE state = 'PENDING'),
                            sum(gpus) FILTER (WHERE state = 'PENDING')
                     FROM squeue_snapshots GROUP BY 1 ORDER BY 1""").fetchall()
    at = dt.datetime(2026, 12, 7, 21, 10, 45)
    assert got == [(at, 7, 5, 12.0), (at + dt.timedelta(seconds=2), 7, 5, 12.0),
                   (at + dt.timedelta(seconds=4), 4, 2, 6.0)]
    options = con.sql("SELECT options FROM ingest_runs WHERE run_id = ?", params=[s["run_id"]]).fetchall()[0][0]
    assert '"captured_at": "2026-12-07T21:10:45..2026-12-07T21:10:49", "snapshots": 3' in options
    again = squeue.load(con, log, None, "iterate.psv", cluster="glcluster")
    assert (again["loaded"], again["updated"], again["inserted"]) == (18, 18, 0)
    # squeue printed its times in its own zone: --tz says which (Los Angeles is 8 hours behind UTC in December)
    la = squeue.load(con, log, None, "iterate-la.psv", tz="America/Los_Angeles")
    assert con.sql("SELECT min(captured_at) FROM squeue_snapshots WHERE ingest_run_id = ?",
                   params=[la["run_id"]]).fetchall() == [(at + dt.timedelta(hours=8),)]


def test_an_iterate_log_rejects_what_has_no_time_of_its_own(con):
    """Lines above the first time line, a block whose time line is out of range and a second block at the same
    time are rejected with their reasons; a time given for a log, or none for a plain snapshot, is refused."""
    head = "|".join(squeue.LIVE_TITLES) + "|"
    line = "7|glcluster|PENDING|Priority|N/A|gres:gpu:1|N/A|1|a100|ml|ada|normal|2026-12-07T10:00:00|(null)|x|"
    text = "\n".join([head, line, "", "Mon Dec 07 11:00:00 2026", head, line, "", "Sat Jan 01 00:00:00 1972", head,
                      line, "", "Mon Dec 07 11:00:00 2026", head, line, ""]) + "\n"
    s = squeue.load(con, text, None, "log.psv", cluster="glcluster")
    # lines 1-15: the data lines 2, 10 and 14 and the time line 8 rejected; headers, blanks, time lines skipped
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (15, 1, 10, 4)
    ex = s["reject_examples"]
    assert ex[0] == "log.psv:2: before the first `squeue --iterate` time line: no capture time"
    assert ex[1].startswith("log.psv:8: field time line: ") and "1972" in ex[1]
    assert ex[2:] == ["log.psv:10: in the snapshot of line 8, whose time is rejected",
                      "log.psv:14: a second snapshot at 2026-12-07 11:00:00 (the first under line 4)"]
    assert con.sql("SELECT captured_at FROM squeue_snapshots").fetchall() == [(dt.datetime(2026, 12, 7, 11),)]
    with pytest.raises(InputError, match=r"line 4 is a `squeue --iterate` time line: the log carries each "
                                         r"snapshot's time; give the file without @TIME and --captured-at"):
        squeue.load(con, text, AT, "log.psv")
    with pytest.raises(InputError, match=r"when was it taken\? give FILE@TIME or --captured-at"):
        squeue.load(con, head + "\n" + line + "\n", None, "one.psv")


def test_the_cli_loads_an_iterate_log_without_a_time(run_cli):
    code, out, err = run_cli("ingest", "squeue", str(REAL / "squeue-iterate.psv"), "--cluster", "glcluster")
    assert code == 0 and "loaded 18" in err + out, err
    code, _, err = run_cli("report", "pending", "--from", "2026-12-07", "--to", "2026-12-08")
    assert code == 0 and ("note: 3 squeue snapshots from 2026-12-07 21:10:45 to 2026-12-07 21:10:49 UTC; a wait "
                          "outside them takes sacct's last reason, else 'unknown'") in err, err
    code, _, err = run_cli("ingest", "squeue", str(REAL / "squeue-array-jobarrayid.psv"))
    assert code == 1 and "squeue-array-jobarrayid.psv: when was it taken? give FILE@TIME or --captured-at" in err


def test_the_cluster_banner_of_squeue_clusters_is_skipped(con):
    """`squeue --clusters C` (what --live runs for a named cluster; real 22.05) prints `CLUSTER: C` above the
    header: skipped with its reason, not rejected every collection cycle."""
    at = dt.datetime(2026, 12, 6, 10, 22, 37)
    s = squeue.load(con, (REAL / "squeue-clusters.psv").read_bytes(), at, "clusters.psv")
    assert (s["read"], s["loaded"], s["rejected"]) == (12, 10, 0)
    assert s["skip_reasons"] == {"cluster banner line": 1, "header line": 1}
    assert con.sql("SELECT DISTINCT cluster FROM squeue_snapshots").fetchall() == [("glcluster",)]


def test_the_space_aligned_table_is_refused_in_one_line(con):
    """Plain `squeue` (real 22.05 output): names may hold spaces and no GPUs are printed, so it is not guessed at."""
    with pytest.raises(InputError, match=r"line 1 heads squeue's space-aligned table, whose job names may hold "
                                         r"spaces and which prints no GPUs; run squeue with '\|' separators: "
                                         r"squeue --all --array --Format 'JobArrayID:\|,"):
        squeue.load(con, (REAL / "squeue-default.txt").read_bytes(), AT, "squeue.txt", cluster="glcluster")
    assert con.sql("SELECT count(*) FROM rejects").fetchall() == [(0,)]


def test_captured_snapshots_load_completely(ro):
    runs = ro.sql("SELECT lines_read, loaded, skipped, rejected FROM ingest_runs WHERE source = 'squeue'").fetchall()
    assert len(runs) == len(squeue_files()) and all(r == l + s and j == 0 for r, l, s, j in runs)
    assert ro.sql("SELECT DISTINCT reason FROM squeue_snapshots WHERE state = 'PENDING' ORDER BY 1").fetchall() == [
        ("BeginTime",), ("Dependency",), ("None",), ("Resources",)]


def _gpu_s(df: pl.DataFrame, **where) -> float:
    f = df
    for k, v in where.items():
        f = f.filter(pl.col(k) == v)
    return round(f["wait_gpu_h"].sum() * 3600, 6)


def test_waiting_gpu_seconds_per_team_reason_and_source(ro):
    r = pending.by_reason(ro, LO, HI)
    assert _gpu_s(r, team="vision", reason="Resources", source="squeue") == 16
    assert _gpu_s(r, team="vision", reason="None", source="squeue") == 8
    assert _gpu_s(r, team="vision", **{"class": "not yet evaluated"}) == 8     # no scheduling pass had seen it
    assert _gpu_s(r, **{"class": "other"}) == 0
    assert _gpu_s(r, team="vision", **{"class": "unknown"}) == 2 + 1
    assert _gpu_s(r, team="ml", reason="Dependency", source="squeue") == 12
    assert _gpu_s(r, team="ml", reason="Dependency", source="sacct (last reason)") == 1
    assert _gpu_s(r, team="ml", reason="BeginTime", source="squeue") == 32
    assert _gpu_s(r, team="ml", reason="BeginTime", source="sacct (last reason)") == 8
    assert _gpu_s(r, team="ml", **{"class": "unknown"}) == 4 + 4
    dep = r.filter((pl.col("team") == "ml") & (pl.col("class") == "dependency"))
    assert dep["eligible_gpu_h"].sum() == 0          # all of it before the job became eligible
    c = pending.by_class(ro, LO, HI).to_dicts()
    ml = next(x for x in c if x["team"] == "ml")
    assert round(ml["wait_gpu_h"] * 3600, 6) == 13 + 40 + 8
    assert round(ml["from_snapshots_share"], 6) == round(44 / 61, 6)
    vision = next(x for x in c if x["team"] == "vision")
    assert round(vision["not_yet_evaluated_gpu_h"] * 3600, 6) == 8 and vision["other_gpu_h"] == 0
    assert "blocked_by_fragmentation_gpu_h" in ml


def test_a_snapshot_holds_at_most_max_gap(ro):
    # with a 1-second hold, each 2-second gap leaves 1 s unknown: Resources covers 4 x 1 s x 2 GPUs
    r = pending.by_reason(ro, LO, HI, max_gap=1)
    assert _gpu_s(r, team="vision", reason="Resources") == 8


def test_cli_says_when_reasons_come_only_from_sacct(run_cli, tmp_path):
    code, _, err = run_cli("ingest", "sacct", "-q", str(WAITING / "sacct-allocations.psv"))
    assert code == 0, err
    code, out, err = run_cli("report", "pending", "--from", "2026-12-04T05:37:00Z", "--to", "2026-12-04T05:39:00Z",
                             "--format", "csv")
    assert code == 0 and "no squeue snapshots" in err
    df = pl.read_csv(out.encode())
    assert set(df.columns) >= {"team", "wait_gpu_h", "dependency_gpu_h", "begin_time_gpu_h", "unknown_gpu_h"}


def test_a_job_name_holding_the_delimiter_stays_whole(con):
    """Name is the last field of the --live format (and of JSON lines): a '|' inside it is kept in it, with or
    without the trailing '|' squeue prints after the last column."""
    head = "JOBID|STATE|REASON|TRES_PER_NODE|NODES|NAME"
    text = (f"{head}|\n41|PENDING|Priority|gres:gpu:1|1|a|b|\n42|PENDING|Priority|gres:gpu:1|1|plain|\n"
            f"{head}\n43|PENDING|Resources|gres:gpu:2|1|x|y|z\n")
    s = squeue.load(con, text, AT, "names.psv", cluster="c1")
    assert (s["loaded"], s["rejected"]) == (3, 0)
    got = con.sql("SELECT job_id, reason, gpus, job_name FROM squeue_snapshots ORDER BY job_id").fetchall()
    assert got == [("41", "Priority", 1.0, "a|b"), ("42", "Priority", 1.0, "plain"), ("43", "Resources", 2.0, "x|y|z")]
