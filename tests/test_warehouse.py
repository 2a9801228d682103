"""The warehouse: path resolution, migrations, locking between real processes, the serving snapshot."""
import os
import subprocess
import sys
import time

import duckdb
import pytest

from dashboards.snapshot import Snapshot
from ingest import warehouse


def test_path_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("GPULEDGER_DB", raising=False)
    assert str(warehouse.resolve_path(None)) == "data/warehouse.duckdb"
    monkeypatch.setenv("GPULEDGER_DB", str(tmp_path / "env.duckdb"))
    assert warehouse.resolve_path(None) == tmp_path / "env.duckdb"
    assert warehouse.resolve_path(tmp_path / "x.duckdb") == tmp_path / "x.duckdb"
    assert warehouse.serving_path("data/warehouse.duckdb").as_posix() == "data/warehouse.serving/manifest.json"


def test_migrations_apply_once_and_in_order(db_path):
    con = warehouse.connect(db_path)
    versions = [v for v, _, _ in warehouse.migration_files()]
    assert versions == sorted(versions) and versions[0] == 1
    assert con.sql("SELECT version FROM schema_migrations ORDER BY 1").fetchall() == [(v,) for v in versions]
    assert warehouse.migrate(con) == []
    con.close()
    ro = warehouse.connect(db_path, read_only=True)
    assert warehouse.schema_version(ro) == versions[-1]


def test_read_only_open_of_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(warehouse.WarehouseError, match="no warehouse here"):
        warehouse.connect(tmp_path / "nope.duckdb", read_only=True)


def test_a_locked_warehouse_is_waited_for_then_opened(db_path):
    warehouse.connect(db_path).close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('locked', flush=True); time.sleep(2)"),
        str(db_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    con = warehouse.connect(db_path, lock_timeout=30)
    assert time.monotonic() - t0 > 0.5      # it waited for the other process...
    con.close()
    holder.wait()


def test_a_lock_that_never_clears_fails_with_one_line(db_path):
    warehouse.connect(db_path).close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('locked', flush=True); time.sleep(20)"),
        str(db_path)], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        with pytest.raises(warehouse.WarehouseError, match=f"locked by process {holder.pid}"):
            warehouse.connect(db_path, lock_timeout=0.5)
    finally:
        holder.kill()


def test_serving_view_is_swapped_while_a_reader_keeps_the_old_one(con, db_path):
    con.execute("INSERT INTO teams VALUES ('ml', 'CC-1', 'ML')")
    target = warehouse.publish_serving(con, db_path)
    assert target == warehouse.serving_path(db_path) == db_path.parent / "warehouse.serving" / "manifest.json"
    reader = Snapshot(db_path)
    old = reader.cursor()
    assert old.sql("SELECT team FROM teams").fetchall() == [("ml",)]
    con.execute("INSERT INTO teams VALUES ('vision', 'CC-2', 'Vision')")
    warehouse.publish_serving(con, db_path)
    assert old.sql("SELECT count(*) FROM teams").fetchall() == [(1,)]   # still the old manifest's parts
    assert reader.frame("SELECT count(*) AS n FROM teams")["n"].to_list() == [2]
    assert not {"gpu_samples", "gpu_samples_5m", "serving_journal", "serving_state"} & reader.tables()
    assert not [p for p in db_path.parent.rglob("*") if ".tmp" in p.name]


def test_accounting_that_does_not_add_up_is_never_committed(con):
    with pytest.raises(warehouse.IngestAccountingError):
        with warehouse.IngestRun(con, "test", "x") as run:
            run.lines_read = 3
            run.loaded = 1
            con.execute("INSERT INTO teams VALUES ('t', NULL, NULL)")
    assert con.sql("SELECT count(*) FROM teams").fetchall() == [(0,)]
    assert con.sql("SELECT status FROM ingest_runs").fetchall() == [("failed",)]


def test_a_parsers_verdicts_are_counted_and_rejects_keep_their_line(con):
    """mark_lines: skips count one line each under their reason, rejects are quarantined with the line's text (a
    line number past the input, as a record's closing line can be, keeps no text), and the run adds up."""
    lines = ["header", "gpu01 ok", "gpu02 Gres=gpu:a100:x", "gpu03 ok", "gpu04 State=???"]
    with warehouse.IngestRun(con, "test", "nodes.txt") as run:
        run.lines_read, run.loaded = 6, 2
        run.mark_lines(lines, [(1, "header line")],
                       [(3, "Gres", "cannot read GPU count"), (5, "State", "unknown state"), (6, None, "cut short")])
    assert run.skipped == 1 and run.rejected == 3
    assert con.sql("SELECT line_no, field, reason, raw FROM rejects ORDER BY line_no").fetchall() == [
        (3, "Gres", "cannot read GPU count", "gpu02 Gres=gpu:a100:x"), (5, "State", "unknown state", "gpu04 State=???"),
        (6, None, "cut short", None)]
    assert con.sql("SELECT status, rejected FROM ingest_runs").fetchall() == [("ok", 3)]


def test_memory_limit_is_bounded_inside_a_block_and_the_environment_wins(tmp_path, monkeypatch):
    from ingest import warehouse

    def limit(c):
        return c.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
    con = warehouse.connect(tmp_path / "m.duckdb")
    default = limit(con)
    with warehouse.bounded_memory(con, "1GB"):
        assert limit(con) in ("953.6 MiB", "1.0 GiB", "1000.0 MiB")
    assert limit(con) == default
    con.close()
    monkeypatch.setenv(warehouse.ENV_MEMORY_LIMIT, "3GB")
    con = warehouse.connect(tmp_path / "m.duckdb")
    set_by_env = limit(con)
    assert set_by_env != default
    with warehouse.bounded_memory(con, "1GB"):
        assert limit(con) == set_by_env
    con.close()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_orphaned_snapshot_files_of_dead_processes_go_on_connect_and_publish(db_path):
    """Older versions' publish killed mid-way left X.serving.duckdb.tmpPID (+.wal); only dead PIDs' files go."""
    d, dead, alive = db_path.parent, _dead_pid(), os.getppid()
    names = [f"warehouse.serving.duckdb.tmp{pid}{ext}" for pid in (dead, alive) for ext in ("", ".wal")]
    for name in names + ["other.serving.duckdb.tmp1"]:
        (d / name).write_bytes(b"x" * 10)
    con = warehouse.connect(db_path)
    left = sorted(p.name for p in d.iterdir() if ".tmp" in p.name)
    assert left == sorted(["other.serving.duckdb.tmp1", *names[2:]])
    again = _dead_pid()
    (d / f"warehouse.serving.duckdb.tmp{again}.wal").write_bytes(b"x")
    warehouse.publish_serving(con, db_path)
    assert not (d / f"warehouse.serving.duckdb.tmp{again}.wal").exists()
    assert warehouse.serving_path(db_path).exists() and (d / names[2]).exists()
    con.close()


def _run(con, lines_read, loaded=0, skips=(), rejects=()):
    with warehouse.IngestRun(con, "test", "in.txt") as run:
        run.lines_read, run.loaded = lines_read, loaded
        for reason, n in skips:
            run.skip(reason, n, 1)
        for i, (field, reason, raw) in enumerate(rejects, start=1):
            run.reject(i, reason, raw, field)
    return run.summary()


@pytest.mark.parametrize("kwargs, error", [
    ({"lines_read": 0}, None),                                                       # empty input
    ({"lines_read": 3, "skips": [("header line", 1), ("blank line", 2)]}, None),       # an empty export
    ({"lines_read": 2, "loaded": 1, "rejects": [("jobid", "bad", "x")]}, None),        # something loaded
    ({"lines_read": 2, "skips": [("header line", 1)], "rejects": [("jobid", "not a job id: x", "x|y")]},
     "in.txt: nothing loaded from 2 lines: 1 rejected; first: line 1: field jobid: not a job id: x"),
    ({"lines_read": 4, "skips": [("job step (.extern)", 2), ("job step (.batch)", 2)]},
     "in.txt: nothing loaded from 4 lines: 2 skipped (job step (.batch)), 2 skipped (job step (.extern))"),
    ({"lines_read": 1, "rejects": [(None, "expected 26 fields", "J\x00o\x00b\x00I\x00D\x00")]},
     "in.txt: nothing loaded from 1 lines: 1 rejected; first: line 1: expected 26 fields (the input looks like "
     "UTF-16 text: convert it, e.g. iconv -f UTF-16 -t UTF-8)"),
    ({"lines_read": 1, "rejects": [(None, "expected 26 fields", "\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00")]},
     "in.txt: nothing loaded from 1 lines: 1 rejected; first: line 1: expected 26 fields (the input looks binary, "
     "not text: is it the right file?)"),
])
def test_a_run_that_loads_nothing_from_data_says_why(con, kwargs, error):
    assert _run(con, **kwargs)["error"] == error


def test_the_only_cluster_is_found_in_configuration_jobs_or_inventory(con, tmp_path):
    """A node inventory alone names a cluster: a second snapshot without --cluster lands in it (it was refused,
    "the warehouse knows none yet"); a second cluster anywhere makes the choice ambiguous."""
    from ingest import slurm_nodes
    assert (warehouse.known_clusters(con), warehouse.only_cluster(con)) == ([], None)
    text = "NODELIST|PARTITION|STATE|GRES\ngpu01|a100|idle|gpu:a100:8\n"
    slurm_nodes.ingest_bytes(con, text.encode(), "first.psv", cluster="lab", as_of="2026-12-01T10:00:00")
    assert (warehouse.known_clusters(con), warehouse.only_cluster(con)) == (["lab"], "lab")
    slurm_nodes.ingest_bytes(con, text.replace("gpu01", "gpu02").encode(), "second.psv", as_of="2026-12-01T11:00:00")
    assert con.sql("SELECT cluster, node FROM nodes WHERE valid_to IS NULL ORDER BY node").fetchall() == [
        ("lab", "gpu01"), ("lab", "gpu02")]
    con.execute("INSERT INTO clusters (cluster, tz, description) VALUES ('other', 'UTC', 'a second cluster')")
    assert (warehouse.known_clusters(con), warehouse.only_cluster(con)) == (["lab", "other"], None)
