"""Reads never write: every report, chargeback without --close, forecast and simulate works on a read-only
warehouse file and leaves it byte-identical; a report on a missing file names the path and creates nothing."""
from __future__ import annotations

import hashlib
import os
import stat

import pytest

import gpuledger
import test_chargeback as tc
from cost_helpers import build
from ingest import warehouse

READS = [
    ["report", "utilization", "--by", "team"],
    ["report", "utilization", "--from", "2026-03-01T10:30", "--to", "2026-03-20T07:15", "--bucket", "hour"],
    ["report", "efficiency"],
    ["report", "fragmentation"],
    ["report", "fragmentation", "--view", "blocked"],
    ["report", "fragmentation", "--view", "jobs"],
    ["report", "fairness"],
    ["report", "queue"],
    ["report", "losses", "--by", "team,cause"],
    ["report", "losses", "--view", "jobs"],
    ["report", "reliability", "--view", "offenders"],
    ["report", "reliability", "--view", "slow-nodes"],
    ["report", "preemption"],
    ["report", "reservations"],
    ["report", "pending"],
    ["report", "budgets", "--period", "2026-03"],
    ["report", "alerts", "--view", "deliveries"],
    ["chargeback", "--period", "2026-03"],
    ["chargeback", "--period", "2026-03", "--view", "jobs", "--format", "csv"],
    ["forecast", "--horizon", "7"],
]


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """The chargeback tests' small cluster with governance, refreshed, then made read-only on disk."""
    tmp = tmp_path_factory.mktemp("ro")
    db = tmp / "warehouse.duckdb"
    con = warehouse.connect(db)
    build(con, tmp, tc.JOBS, tc.NODES, tc.gov("proportional_usage"))
    con.execute("CHECKPOINT")
    con.close()
    os.chmod(db, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    yield db
    os.chmod(db, stat.S_IRUSR | stat.S_IWUSR)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("argv", READS, ids=[" ".join(a[:3]) for a in READS])
def test_a_read_leaves_the_warehouse_byte_identical(frozen, argv, capsys):
    before, mtime = _sha(frozen), frozen.stat().st_mtime_ns
    assert gpuledger.main(["--db", str(frozen), *argv]) == 0, capsys.readouterr().err
    assert _sha(frozen) == before and frozen.stat().st_mtime_ns == mtime
    assert not frozen.with_name(frozen.name + ".wal").exists()


def test_a_report_on_a_missing_file_names_it_and_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "w.duckdb"
    assert gpuledger.main(["--db", str(missing), "report", "utilization"]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err and "no warehouse here" in err
    assert not missing.exists() and not missing.parent.exists()


def test_stale_marts_are_said_not_rebuilt(tmp_path, capsys):
    """An ingest with --no-refresh leaves the marts behind: reports say by how much and leave the file as is."""
    db = tmp_path / "w.duckdb"
    con = warehouse.connect(db)
    build(con, tmp_path, tc.JOBS, tc.NODES, tc.gov())
    con.close()
    late = tmp_path / "late.psv"
    from cost_helpers import SACCT_HEADER, Job, T, sacct_line
    late.write_text(SACCT_HEADER + "\n" + sacct_line(Job(77, "nlp", 1, T(20), T(22), node="h2")) + "\n")
    assert gpuledger.main(["--db", str(db), "ingest", "sacct", str(late), "--no-refresh"]) == 0
    capsys.readouterr()
    before = _sha(db)
    assert gpuledger.main(["--db", str(db), "report", "utilization"]) == 0
    err = capsys.readouterr().err
    assert "the marts are older than the accounting: 1 ingest run(s) since the last refresh" in err
    assert "run `gpuledger refresh`" in err and _sha(db) == before
    assert gpuledger.main(["--db", str(db), "refresh"]) == 0
    capsys.readouterr()
    assert gpuledger.main(["--db", str(db), "report", "utilization"]) == 0
    assert "older than the accounting" not in capsys.readouterr().err
