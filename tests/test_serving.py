"""The serving view published in O(change) (ingest/warehouse/serving.py) and read by dashboards/snapshot.py:
parts and manifest, the journal, version changes exactly with content, grace-period garbage collection, kill -9
mid-publish, and (hypothesis) after any sequence of ingests and refreshes the incremental view equals the
warehouse, table by table and row for row, and a full publish finds nothing to change."""
from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import fuzz_inputs
from conftest import FIXTURES, ROOT
from dashboards.snapshot import Snapshot
from ingest import governance, sacct, slurm_events, slurm_nodes, warehouse
from ingest.warehouse import serving
from models.pipeline import refresh

#: Narrow partitions, so a handful of jobs over a few days spreads over many parts.
SMALL_PARTS = {t: (col, {"month": "day", "value": "value"}.get(b, 2)) for t, (col, b) in serving.PARTITIONS.items()}
GOVERNANCE = FIXTURES / "dashboard" / "governance.toml"


SMALL_FINGERPRINTED = {t: (col, "day") for t, (col, _) in serving.FINGERPRINTED.items()}


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    monkeypatch.setattr(serving, "PARTITIONS", SMALL_PARTS)
    monkeypatch.setattr(serving, "FINGERPRINTED", SMALL_FINGERPRINTED)


def _view_equals_warehouse(con, db: Path) -> None:
    """Every published table reads, through a fresh Snapshot, exactly the warehouse's rows (as multisets)."""
    snap = Snapshot(db)
    published = snap.tables() - {"snapshot_info"}
    expected = set(warehouse.table_names(con)) - warehouse.SERVING_EXCLUDE
    assert published == expected
    cur = snap.cursor()
    types_sql = ("SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = {} "
                 "AND table_name IN (SELECT unnest($t)) ORDER BY table_name, column_index")
    try:
        assert (cur.execute(types_sql.format("'snapshot'"), {"t": sorted(published)}).fetchall()
                == con.execute(types_sql.format("current_database()"), {"t": sorted(published)}).fetchall())
        counts = dict(cur.execute(" UNION ALL ".join(f"SELECT '{t}', count(*) FROM \"{t}\"" for t in published)).fetchall())
        for t in sorted(published):
            _w = con.sql(f'SELECT * FROM "{t}"').to_arrow_table()  # noqa: F841 (read by name below)
            if _w.num_rows == 0:
                assert counts[t] == 0, t
                continue
            got = cur.sql(f"""SELECT (SELECT count(*) FROM "{t}"), (SELECT count(*) FROM _w),
                                     (SELECT count(*) FROM (SELECT * FROM "{t}" EXCEPT ALL SELECT * FROM _w)),
                                     (SELECT count(*) FROM (SELECT * FROM _w EXCEPT ALL SELECT * FROM "{t}"))""").fetchall()
            assert got[0][0] == got[0][1] and got[0][2:] == (0, 0), (t, got)
    finally:
        cur.close()
        snap.close()


def _files(db: Path) -> set[str]:
    d = warehouse.serving_dir(db)
    return {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()}


def _referenced(db: Path) -> set[str]:
    m = warehouse.read_manifest(db)
    return {p["file"] for e in m["tables"].values() for p in e["parts"].values()} | set(m["retired"])


# ---------------------------------------------------------------- a small warehouse with marts

def _sacct_line(k: int, day: int, state: str) -> str:
    """Job 500+k of the lab cluster, submitted on October ``day`` at k:07, in ``state``."""
    submit = dt.datetime(2026, 10, day, k % 24, 7)
    start = submit + dt.timedelta(minutes=13)
    end = start + dt.timedelta(hours=3, minutes=k)
    fmt = "%Y-%m-%dT%H:%M:%S"
    s_start = "Unknown" if state == "PENDING" else start.strftime(fmt)
    ended = state in ("COMPLETED", "FAILED")
    s_end = end.strftime(fmt) if ended else "Unknown"
    elapsed = "03:%02d:00" % k if ended else ("01:00:00" if state == "RUNNING" else "00:00:00")
    exit_code = "1:0" if state == "FAILED" else "0:0"
    node = ("h100-01", "a100-01", "a100-02")[k % 3]
    account = ("nlp", "vision", "infra")[k % 3]
    return (f"{500 + k}|{500 + k}|lab|gpu|normal|{account}|u{k}|{state}|{exit_code}|{submit.strftime(fmt)}|"
            f"{submit.strftime(fmt)}|{s_start}|{s_end}|{elapsed}|1-00:00:00|1|8|32G|"
            f"billing=8,cpu=8,gres/gpu=2,mem=32G,node=1|billing=8,cpu=8,gres/gpu=2,mem=32G,node=1|"
            f"{node if state != 'PENDING' else 'None assigned'}|j{k}")


def _ingest_sacct(con, tmp: Path, lines: list[str]) -> None:
    header = fuzz_inputs.SACCT.splitlines()[0]
    p = tmp / "cycle.psv"
    p.write_text("\n".join([header, *lines]) + "\n")
    assert sacct.ingest_path(con, str(p), sacct.SacctOptions())["error"] is None


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """Nodes, events, the fuzz corpus's jobs and the dashboard fixture's governance, refreshed and published."""
    tmp = tmp_path_factory.mktemp("serving")
    db = tmp / "w.duckdb"
    for kind in ("nodes", "events", "sacct"):
        (tmp / kind).write_bytes(fuzz_inputs.BASE[kind])
    con = warehouse.connect(db)
    slurm_nodes.ingest_path(con, str(tmp / "nodes"), cluster="lab", as_of="2026-10-08T00:00:00")
    slurm_events.ingest_path(con, str(tmp / "events"))
    sacct.ingest_path(con, str(tmp / "sacct"), sacct.SacctOptions())
    governance.ingest_path(con, GOVERNANCE)
    con.execute("CHECKPOINT")
    con.close()
    return db


def _copy(template: Path, tmp: Path) -> Path:
    db = tmp / "w.duckdb"
    shutil.copyfile(template, db)
    return db


# ---------------------------------------------------------------- the property

OPS = st.one_of(
    st.tuples(st.just("jobs"), st.lists(st.tuples(st.integers(0, 7), st.integers(1, 9),
                                                   st.sampled_from(["PENDING", "RUNNING", "COMPLETED", "FAILED"])),
                                        min_size=1, max_size=4)),
    st.tuples(st.just("governance"), st.none()),
    st.tuples(st.just("refresh"), st.booleans()),
    st.tuples(st.just("publish"), st.none()),
)


# An example costs a second or two (ingests, refreshes), so no shrinking: the failing sequence is printed as is.
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(ops=st.lists(OPS, min_size=2, max_size=4))
def test_incremental_view_equals_the_warehouse_and_a_full_publish_changes_nothing(ops, template, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prop")
    db = _copy(template, tmp)
    con = warehouse.connect(db)
    try:
        refresh.run(con, db)
        for op, arg in ops + [("refresh", False)]:
            if op == "jobs":      # the same job id on the same day is the same job: states progress or fill in
                _ingest_sacct(con, tmp, [_sacct_line(k, day, state) for k, day, state in arg])
            elif op == "governance":
                governance.ingest_path(con, GOVERNANCE)
            elif op == "refresh":
                refresh.run(con, db, full=arg)
            else:
                warehouse.publish_serving(con, db)
        # Checked once at the end: a change an earlier publish missed stays missing (nothing notes it again).
        _view_equals_warehouse(con, db)
        version = Snapshot(db).version
        files = _files(db)
        warehouse.publish_serving(con, db, full=True)   # compares every partition: the incremental view was right
        assert Snapshot(db).version == version and _files(db) == files
    finally:
        con.close()


# ---------------------------------------------------------------- units

def test_only_changed_partitions_are_written_and_version_follows_content(template, tmp_path):
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    snap = Snapshot(db)
    v1, m1 = snap.version, warehouse.read_manifest(db)
    jobs1 = m1["tables"]["jobs"]["parts"]
    assert len(jobs1) >= 2                      # job_uids 1..4 in parts of two
    warehouse.publish_serving(con, db)          # nothing changed: same version, same parts
    assert snap.version == v1 and warehouse.read_manifest(db)["tables"] == m1["tables"]
    files = _files(db)
    warehouse.publish_serving(con, db, full=True)   # compares every partition, finds nothing to write
    assert snap.version == v1 and _files(db) == files
    _ingest_sacct(con, tmp_path, [_sacct_line(1, 9, "COMPLETED")])   # one new job: a new uid at the end
    refresh.run(con, db)
    m2 = warehouse.read_manifest(db)
    assert snap.version != v1 and m2["seq"] == m1["seq"] + 1
    jobs2 = m2["tables"]["jobs"]["parts"]
    kept = {k for k in jobs1 if jobs1[k] == jobs2.get(k)}
    assert kept == set(jobs1) - {max(jobs1, key=int)}      # only the last uid range could change (it holds uid 5)
    assert m2["tables"]["teams"] == m1["tables"]["teams"]   # an unpartitioned table: fingerprint unchanged
    assert snap.frame("SELECT count(*) AS n FROM jobs")["n"][0] == 5
    _view_equals_warehouse(con, db)
    con.close()


def test_a_failed_job_republishes_only_the_newest_parts_of_the_loss_marts(template, tmp_path):
    """The loss marts grow with history: a cycle with one new failed job rewrites the job_uid part that holds it
    and node_job_days' day of its end, nothing older (they were fingerprinted and rewritten whole before)."""
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    m1 = warehouse.read_manifest(db)["tables"]
    _ingest_sacct(con, tmp_path, [_sacct_line(1, 9, "FAILED")])     # the newest uid, ends on October 9
    uid = con.sql("SELECT max(job_uid) FROM jobs").fetchall()[0][0]
    refresh.run(con, db, publish=False)
    assert con.sql("""SELECT table_name, since_int FROM serving_journal WHERE table_name LIKE 'loss_%'
                      ORDER BY ALL""").fetchall() == [("loss_days", uid), ("loss_jobs", uid)]
    warehouse.publish_serving(con, db)
    m2 = warehouse.read_manifest(db)["tables"]
    assert con.execute("SELECT count(*) FROM loss_jobs WHERE job_uid = ?", [uid]).fetchall() == [(1,)]
    for t, newest in (("loss_jobs", str(uid // 2)), ("loss_days", str(uid // 2)), ("node_job_days", "2026-10-09")):
        changed = {k for k in m2[t]["parts"] if m1[t]["parts"].get(k) != m2[t]["parts"][k]}
        assert changed == {newest}, (t, changed)
    _view_equals_warehouse(con, db)
    con.close()


def test_a_fingerprinted_table_rewrites_only_the_parts_whose_rows_changed(template, tmp_path):
    """demand_day is rebuilt by its mart and noted by no writer: a job on a later day changes some days' rows;
    exactly those days' parts are written again, the others stay as they were (the table was written whole)."""
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)

    def days():
        return {k: (n, fp) for k, n, fp in con.sql("""SELECT strftime(ts, '%Y-%m-%d'), count(*), sum(hash(d)::HUGEINT)
                                                      FROM demand_day d GROUP BY ALL""").fetchall()}
    m1, d1 = warehouse.read_manifest(db)["tables"]["demand_day"]["parts"], days()
    _ingest_sacct(con, tmp_path, [_sacct_line(1, 9, "COMPLETED")])
    refresh.run(con, db)
    m2, d2 = warehouse.read_manifest(db)["tables"]["demand_day"]["parts"], days()
    written = {k for k in m2 if m1.get(k) != m2[k]} | (set(m1) - set(m2))
    assert written == {k for k in d1.keys() | d2.keys() if d1.get(k) != d2.get(k)}
    assert written and set(m1) - written, (written, set(m1))
    _view_equals_warehouse(con, db)
    con.close()


def test_a_reader_on_an_old_manifest_keeps_working_until_the_grace_period_ends(template, tmp_path, monkeypatch):
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    old_reader = Snapshot(db)
    cur = old_reader.cursor()
    before = cur.sql("SELECT count(*) FROM jobs").fetchall()[0][0]
    con.execute("UPDATE jobs SET job_name = 'renamed'")     # every part of jobs changes
    warehouse.note_changed(con, "jobs")
    warehouse.publish_serving(con, db)
    assert _referenced(db) >= _files(db) - {"manifest.json"}
    m = warehouse.read_manifest(db)
    assert m["retired"]                                   # the old parts: retired, still on disk
    assert cur.sql("SELECT count(*), count(DISTINCT job_name) FROM jobs").fetchall() == [(before, before)]
    assert Snapshot(db).frame("SELECT DISTINCT job_name FROM jobs")["job_name"].to_list() == ["renamed"]
    removed = warehouse.collect_garbage(db, now=max(m["retired"].values()) + serving.grace_seconds() + 1)
    assert {p.relative_to(warehouse.serving_dir(db)).as_posix() for p in removed} == set(m["retired"])
    assert warehouse.read_manifest(db)["retired"] == {} and warehouse.read_manifest(db)["version"] == m["version"]
    with pytest.raises(Exception):                       # past the grace period the old parts are gone
        cur.sql("SELECT count(*) FROM jobs").fetchall()
    cur.close()
    assert Snapshot(db).frame("SELECT count(*) AS n FROM jobs")["n"][0] == before
    con.close()


def test_a_publish_deletes_expired_parts_and_a_failed_one_leaves_no_part_behind(template, tmp_path, monkeypatch):
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    monkeypatch.setenv(serving.ENV_GRACE, "0")
    con.execute("UPDATE jobs SET job_name = 'renamed'")
    warehouse.note_changed(con, "jobs")
    warehouse.publish_serving(con, db)          # the old jobs parts retire and, with no grace, go at once
    assert warehouse.read_manifest(db)["retired"] == {}
    assert _files(db) - {"manifest.json"} == _referenced(db)
    before, calls = _files(db), []

    def failing(*args):
        calls.append(args)
        if len(calls) == 2:
            raise OSError("disk full")
        return write(*args)
    write = serving._write_part
    monkeypatch.setattr(serving, "_write_part", failing)
    con.execute("UPDATE jobs SET job_name = 'again'")
    warehouse.note_changed(con, "jobs")
    with pytest.raises(OSError, match="disk full"):
        warehouse.publish_serving(con, db)
    assert _files(db) == before                 # the one part it wrote is gone, the view is the previous one
    con.close()


def test_an_unnoted_growth_is_caught_and_a_schema_change_republishes(template, tmp_path, capsys):
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    con.execute("INSERT INTO job_nodes SELECT job_uid + 1000, cluster, job_id_raw, submit, node, gpus_on_node "
                "FROM job_nodes")                   # a writer that forgot note_changed
    warehouse.publish_serving(con, db)
    assert "job_nodes grew without a serving_journal note" in capsys.readouterr().err
    con.execute("ALTER TABLE teams ADD COLUMN note VARCHAR DEFAULT 'x'")
    warehouse.publish_serving(con, db)
    _view_equals_warehouse(con, db)
    con.close()


def test_closed_statements_are_a_part_per_period(template, tmp_path):
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    cols = "(period, kind, job_uid, cluster, gpu_hours, direct_cost)"
    for period, uid in (("2026-09", 1), ("2026-10", 2), ("2026-10", 3)):
        con.execute(f"INSERT INTO statement_jobs {cols} VALUES (?, 'charge', ?, 'lab', 1.5, 3.25)", [period, uid])
    warehouse.note_changed(con, "statement_jobs", "2026-09")
    warehouse.publish_serving(con, db)
    first = warehouse.read_manifest(db)["tables"]["statement_jobs"]["parts"]
    assert {k: p["rows"] for k, p in first.items()} == {"2026-09": 1, "2026-10": 2}
    con.execute(f"INSERT INTO statement_jobs {cols} VALUES ('2026-11', 'charge', 4, 'lab', 2.0, 4.5)")
    warehouse.note_changed(con, "statement_jobs", "2026-11")     # closing November touches its part only
    warehouse.publish_serving(con, db)
    second = warehouse.read_manifest(db)["tables"]["statement_jobs"]["parts"]
    assert second["2026-09"] == first["2026-09"] and second["2026-10"] == first["2026-10"] and "2026-11" in second
    _view_equals_warehouse(con, db)
    con.close()


def test_a_swapped_in_warehouse_gets_a_full_publish_and_a_new_version(template, tmp_path):
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    v1 = Snapshot(db).version
    con.close()
    shutil.copyfile(template, db)            # e.g. `gpuledger demo` rebuilt it, or a backup was restored
    con = warehouse.connect(db)
    warehouse.publish_serving(con, db)
    assert Snapshot(db).version != v1
    _view_equals_warehouse(con, db)
    con.close()


KILL_IN_PUBLISH = """
import os, signal, sys
sys.path.insert(0, {root!r})
from ingest import warehouse
from ingest.warehouse import serving
serving.PARTITIONS = {parts!r}
original = serving._write_manifest
def armed(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
serving._write_manifest = armed
con = warehouse.connect({db!r})
con.execute("UPDATE jobs SET job_name = 'killed'")
warehouse.note_changed(con, "jobs")
warehouse.publish_serving(con, {db!r})
"""


def test_kill9_mid_publish_leaves_the_previous_view_and_no_debris(template, tmp_path):
    db = _copy(template, tmp_path)
    con = warehouse.connect(db)
    refresh.run(con, db)
    con.close()
    snap = Snapshot(db)
    v1, names = snap.version, snap.frame("SELECT job_name FROM jobs ORDER BY job_uid")
    done = subprocess.run([sys.executable, "-c", KILL_IN_PUBLISH.format(root=str(ROOT), parts=SMALL_PARTS, db=str(db))],
                          cwd=ROOT, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert snap.version == v1 and snap.frame("SELECT job_name FROM jobs ORDER BY job_uid").equals(names)
    debris = _files(db) - _referenced(db) - {"manifest.json"}
    assert debris                                  # the killed publish had written its parts
    con = warehouse.connect(db)                    # the writer's next connect removes them
    assert _files(db) - _referenced(db) == {"manifest.json"}
    warehouse.publish_serving(con, db)             # the killed run's committed change and note are still there
    assert snap.frame("SELECT DISTINCT job_name FROM jobs")["job_name"].to_list() == ["killed"]
    assert _files(db) - _referenced(db) == {"manifest.json"}
    con.close()
