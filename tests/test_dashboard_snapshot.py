"""The dashboard's data door: a read-only snapshot that follows atomic replacement and never locks the warehouse."""
from __future__ import annotations

import threading
import time
import weakref

import duckdb
import pytest

from dashboards.snapshot import Snapshot, for_warehouse
from ingest import warehouse


def _publish(db, rows: int) -> None:
    con = warehouse.connect(db)
    con.execute("CREATE OR REPLACE TABLE t AS SELECT range AS i FROM range(?)", [rows])
    warehouse.publish_serving(con, db)
    con.close()


def test_missing_snapshot_is_reported_not_raised_on_state(tmp_path):
    snap = Snapshot(tmp_path / "w.duckdb")
    st = snap.state()
    assert not st.exists and st.version == ""
    with pytest.raises(FileNotFoundError):
        snap.cursor()


def test_follows_replacement_and_old_cursors_keep_their_snapshot(tmp_path):
    db = tmp_path / "w.duckdb"
    _publish(db, 3)
    snap = Snapshot(db)
    v1 = snap.version
    old = snap.cursor()
    assert old.sql("SELECT count(*) FROM t").fetchall() == [(3,)]
    _publish(db, 5)                      # a new snapshot renamed over the old one
    assert snap.version != v1
    assert snap.frame("SELECT count(*) AS n FROM t")["n"].to_list() == [5]
    # a query that started on the previous snapshot still reads it, whole
    assert old.sql("SELECT count(*) FROM t").fetchall() == [(3,)]


def test_snapshot_is_read_only_and_leaves_the_warehouse_free(tmp_path):
    db = tmp_path / "w.duckdb"
    _publish(db, 2)
    snap = Snapshot(db)
    cur = snap.cursor()
    with pytest.raises(duckdb.Error):
        cur.execute("INSERT INTO t VALUES (99)")
    # the live warehouse opens read-write at once while the dashboard holds its snapshot open
    con = warehouse.connect(db, lock_timeout=0)
    con.execute("INSERT INTO t VALUES (7)")
    warehouse.publish_serving(con, db)
    con.close()
    assert snap.frame("SELECT count(*) AS n FROM t")["n"].to_list() == [3]


def test_parameters_not_text(tmp_path):
    db = tmp_path / "w.duckdb"
    _publish(db, 4)
    evil = "0; DROP TABLE t; --"
    out = Snapshot(db).frame("SELECT count(*) AS n FROM t WHERE CAST(i AS VARCHAR) = ?", [evil])
    assert out["n"].to_list() == [0]
    assert Snapshot(db).frame("SELECT count(*) AS n FROM t")["n"].to_list() == [4]


def test_registry_shares_one_snapshot_per_warehouse(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULEDGER_DB", str(tmp_path / "x.duckdb"))
    assert for_warehouse(None) is for_warehouse(tmp_path / "x.duckdb")
    assert for_warehouse(None).path == tmp_path / "x.serving" / "manifest.json"


def test_a_held_version_stays_readable_after_newer_publishes(tmp_path):
    db = tmp_path / "w.duckdb"
    _publish(db, 3)
    snap = Snapshot(db)
    v1 = snap.version
    snap.hold({v1})
    assert snap.frame("SELECT count(*) AS n FROM t")["n"].to_list() == [3]
    _publish(db, 5)
    v2 = snap.version
    assert snap.frame("SELECT count(*) AS n FROM t")["n"].to_list() == [5]          # the current one
    assert snap.frame("SELECT count(*) AS n FROM t", version=v1)["n"].to_list() == [3]
    assert snap.frame("SELECT count(*) AS n FROM t", version=v2)["n"].to_list() == [5]
    assert snap.holds(v1) and snap.holds(v2)
    assert snap.published_at(v1) < snap.published_at(v2) == snap.published_at()
    assert {"t", "snapshot_info"} <= snap.tables(v1)
    snap.hold(set())                     # released: closed, and a cursor asked for it reads the current one
    assert not snap.holds(v1) and snap.published_at(v1) is None
    assert snap.frame("SELECT count(*) AS n FROM t", version=v1)["n"].to_list() == [5]


def test_an_unheld_version_closes_when_a_newer_one_opens(tmp_path):
    db = tmp_path / "w.duckdb"
    _publish(db, 3)
    snap = Snapshot(db)
    v1 = snap.version
    assert snap.frame("SELECT count(*) AS n FROM t", version=v1)["n"].to_list() == [3]
    _publish(db, 4)
    assert snap.holds(v1)                # still open: nothing has opened the new version yet
    assert snap.frame("SELECT count(*) AS n FROM t")["n"].to_list() == [4]
    assert not snap.holds(v1)
    assert snap.frame("SELECT count(*) AS n FROM t", version=v1)["n"].to_list() == [4]


def test_another_thread_interrupts_the_tracked_cursors_query(tmp_path):
    db = tmp_path / "w.duckdb"
    _publish(db, 3)
    snap = Snapshot(db)
    cursors, raised, opened = weakref.WeakSet(), [], threading.Event()

    def slow():
        snap.track(cursors)
        cur = snap.cursor()
        opened.set()
        try:   # minutes of work if nothing stops it
            cur.sql("SELECT count(*) FROM range(100000000000) WHERE hash(range) % 7 = 3").fetchall()
        except duckdb.InterruptException as exc:
            raised.append(exc)
        finally:
            snap.track(None)

    t = threading.Thread(target=slow, daemon=True)
    t.start()
    assert opened.wait(30) and len(cursors) == 1
    deadline = time.monotonic() + 30
    while t.is_alive() and time.monotonic() < deadline:   # an interrupt before the query starts is lost
        for cur in list(cursors):
            cur.interrupt()
        t.join(0.2)
    assert not t.is_alive() and len(raised) == 1
    assert snap.frame("SELECT count(*) AS n FROM t")["n"].to_list() == [3]   # other cursors are not tracked
    assert len(cursors) <= 1
