"""kill -9 during an ingest and during a refresh: the warehouse keeps nothing partial, and after the same command
is run again it equals the warehouse of an uninterrupted run (orphaned snapshot files removed too).

The command runs in a child process that SIGKILLs itself at a chosen point (a wrapper around one function,
armed in the child only): deterministic, where a timer would hit a different point on every machine.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import fuzz_inputs
from conftest import FIXTURES, ROOT
from ingest import warehouse

#: point -> (module, attribute, kill before calling the original?)
POINTS = {
    "ingest: jobs merged, teams not yet": ("ingest.jobs_store", "assign_teams", False),
    "ingest: audit row written, not committed": ("ingest.warehouse", "IngestRun._write_run", False),
    "refresh: timeline mart built": ("models.marts.timeline", "build", False),
    "refresh: parts written, manifest not yet swapped": ("os", "replace", True),
}
CHILD = """
import importlib, os, signal, sys
sys.path.insert(0, {root!r})
module, attr, before = {point!r}
owner = importlib.import_module(module)
*path, name = attr.split(".")
for p in path:
    owner = getattr(owner, p)
original = getattr(owner, name)
def armed(*args, **kwargs):
    if not before:
        original(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
setattr(owner, name, armed)
import gpuledger
gpuledger.main({argv!r})
"""
VOLATILE = re.compile(r"(run_id|job_uid|_at|source_db)$")


def _inputs(tmp: Path) -> dict[str, Path]:
    files = {"nodes": tmp / "nodes.txt", "events": tmp / "events.psv", "sacct": tmp / "sacct.psv"}
    for kind, path in files.items():
        path.write_bytes(fuzz_inputs.BASE[kind])
    return files


def _cli(db: Path, *argv: str) -> None:
    import gpuledger
    assert gpuledger.main(["-q", "--db", str(db), *argv]) == 0


def _prepare(db: Path, files: dict[str, Path]) -> None:
    _cli(db, "ingest", "nodes", "--no-refresh", "--cluster", "lab", "--as-of", "2026-10-08T00:00:00", str(files["nodes"]))
    _cli(db, "ingest", "events", "--no-refresh", str(files["events"]))


SACCT = ["ingest", "sacct", "--no-refresh"]
GOVERNANCE = ["ingest", "governance", "--no-refresh", str(FIXTURES / "dashboard" / "governance.toml")]


def _content(db: Path) -> dict:
    """Every table's rows without the columns that differ between equal runs (ids, timestamps); the audit as the
    set of what each ok run read and did with it."""
    con = warehouse.connect(db, migrate_schema=False)
    try:
        out = {}
        for t in warehouse.table_names(con):
            cols = [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND "
                                              "schema_name = 'main' ORDER BY column_index", [t]).fetchall()
                    if not VOLATILE.search(c)]
            if t == "ingest_runs":
                rows = con.sql("""SELECT DISTINCT source, regexp_replace(input_name, '^.*/', ''), status, lines_read,
                                         loaded, skipped, rejected
                                  FROM ingest_runs""").fetchall()
            elif t in ("ingest_skips", "mart_state", "serving_journal", "serving_state"):
                continue          # per run id / refresh time only; the serving view's bookkeeping (random epoch)
            else:
                rows = con.sql(f"SELECT DISTINCT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM \"{t}\"").fetchall()
            out[t] = sorted(rows, key=repr)
        return out
    finally:
        con.close()


def _killed(db: Path, point: str, argv: list[str]) -> None:
    code = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), point=POINTS[point],
                                                              argv=["-q", "--db", str(db), *argv])],
                          cwd=ROOT, capture_output=True, timeout=300)
    assert code.returncode == -9, code.stderr.decode()[-2000:]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict:
    """The uninterrupted result: after the ingests, and after a refresh too."""
    tmp = tmp_path_factory.mktemp("baseline")
    files, db = _inputs(tmp), tmp / "w.duckdb"
    _prepare(db, files)
    _cli(db, *SACCT, str(files["sacct"]))
    _cli(db, *GOVERNANCE)
    ingested = _content(db)
    assert len(ingested["jobs"]) == 4 and len(ingested["node_events"]) == 3   # the comparisons below are not vacuous
    _cli(db, "refresh")
    return {"ingested": ingested, "refreshed": _content(db)}


@pytest.mark.parametrize("point", [p for p in POINTS if p.startswith("ingest")])
def test_kill9_inside_an_ingest_then_rerun(point, baseline, tmp_path):
    files, db = _inputs(tmp_path), tmp_path / "w.duckdb"
    _prepare(db, files)
    before = _content(db)
    _killed(db, point, [*SACCT, str(files["sacct"])])
    assert _content(db) == before                     # nothing partial, no audit row of the killed run
    _cli(db, *SACCT, str(files["sacct"]))
    _cli(db, *GOVERNANCE)
    assert _content(db) == baseline["ingested"]


@pytest.mark.parametrize("point", [p for p in POINTS if p.startswith("refresh")])
def test_kill9_inside_a_refresh_then_rerun(point, baseline, tmp_path):
    files, db = _inputs(tmp_path), tmp_path / "w.duckdb"
    _prepare(db, files)
    _cli(db, *SACCT, str(files["sacct"]))
    _cli(db, *GOVERNANCE)
    _killed(db, point, ["refresh"])
    serving = warehouse.serving_dir(db)
    orphans = [p.name for p in serving.rglob("*.parquet")] if serving.exists() else []
    assert bool(orphans) == point.startswith("refresh: parts written")
    assert not warehouse.serving_path(db).exists()      # nothing half-published: no manifest before the first
    _cli(db, "refresh")
    assert _content(db) == baseline["refreshed"]
    manifest = warehouse.read_manifest(db)
    named = {p["file"] for e in manifest["tables"].values() for p in e["parts"].values()} | set(manifest["retired"])
    on_disk = {p.relative_to(serving).as_posix() for p in serving.rglob("*") if p.is_file()}
    assert on_disk - named == {"manifest.json"}          # the killed publish's parts and temporaries are gone
    assert [p.name for p in tmp_path.rglob("*") if ".tmp" in p.name] == []
