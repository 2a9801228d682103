"""The bad-input corpus (tests/fixtures/bad_inputs/<ingestor>/): every case through the real CLI, checked against
its hand-written outcome (exit code, counts, rejects with line, field and reason, the one-line error), plus the
invariants every case must keep: the counts add up, lines read equal the file's line count, and nothing outside
the plausible window is stored."""
from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

import gpuledger
from conftest import FIXTURES
from ingest import inputs, lines, plausible, warehouse

CORPUS = FIXTURES / "bad_inputs"
COMMAND = {"nvidia_smi": "nvidia-smi"}
#: (table, time columns) of what the ingestors store
TIMES = {"jobs": ("submit", "eligible", "start", '"end"'), "node_events": ("start", '"end"'), "gpu_samples": ("ts",),
         "nodes": ("valid_from", "valid_to")}


def _cases():
    for manifest in sorted(CORPUS.glob("*/cases.toml")):
        spec = tomllib.loads(manifest.read_text(encoding="utf-8"))
        for i, case in enumerate(spec["case"]):
            case.setdefault("args", spec.get("args", []))
            yield pytest.param(manifest.parent.name, case, id=f"{manifest.parent.name}/{case['file']}#{i}")


@pytest.fixture(scope="module")
def empty_warehouse(tmp_path_factory) -> Path:
    """A migrated empty warehouse, copied for each case (migrating costs more than most cases)."""
    path = tmp_path_factory.mktemp("empty") / "w.duckdb"
    warehouse.connect(path).close()
    return path


def _stored_times_inside_window(con) -> None:
    w = plausible.window()
    for table, cols in TIMES.items():
        for c in cols:
            lo, hi = con.sql(f"SELECT min({c}), max({c}) FROM {table}").fetchall()[0]
            assert lo is None or w.lo <= lo and hi <= w.hi, f"{table}.{c} holds {lo}..{hi}, outside {w.describe()}"


@pytest.mark.parametrize("ingestor, case", list(_cases()))
def test_bad_input_case(ingestor, case, tmp_path, capsys, empty_warehouse):
    path = CORPUS / ingestor / case["file"]
    db = tmp_path / "w.duckdb"
    shutil.copy(empty_warehouse, db)
    code = gpuledger.main(["--db", str(db), "ingest", COMMAND.get(ingestor, ingestor), str(path), *case["args"]])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == case["exit"], err
    if case.get("error"):
        errors = [ln for ln in err.splitlines() if ln.startswith("gpuledger: ")]
        assert len(errors) == 1 and case["error"] in errors[0], err
    con = warehouse.connect(db)
    try:
        runs = con.sql("SELECT run_id, lines_read, loaded, skipped, rejected FROM ingest_runs WHERE status = 'ok'").fetchall()
        if "counts" not in case:
            assert runs == []
            return
        assert len(runs) == 1 and list(runs[0][1:]) == case["counts"]
        run_id, read, _, skipped, rejected = runs[0]
        if ingestor != "governance":   # governance counts records, not lines
            assert read == lines.count(inputs.read_file(path))    # the text read: UTF-16 decoded
        assert con.execute("SELECT coalesce(sum(lines), 0) FROM ingest_skips WHERE run_id = ?", [run_id]).fetchall() == [(skipped,)]
        got = con.execute("SELECT line_no, coalesce(field, '-'), reason FROM rejects WHERE run_id = ? ORDER BY line_no",
                          [run_id]).fetchall()
        assert len(got) == rejected
        for want, (line_no, fld, reason) in zip(case.get("rejects", []), got):
            n, f, text = want.split(" ", 2)
            assert (int(n), f) == (line_no, fld) and text in reason, (want, line_no, fld, reason)
        _stored_times_inside_window(con)
    finally:
        con.close()


def test_every_corpus_file_has_a_case():
    named = {(m.parent.name, c["file"]) for m in CORPUS.glob("*/cases.toml")
             for c in tomllib.loads(m.read_text(encoding="utf-8"))["case"]}
    files = {(p.parent.name, p.name) for p in CORPUS.glob("*/*") if p.name != "cases.toml"}
    assert files == named
