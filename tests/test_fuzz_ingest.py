"""End-to-end fuzz: mutated inputs of every text ingestor through the real CLI, then refresh and every report on
whatever they loaded (tests/fuzz_inputs.py). More cases: benchmarks/fuzz_ingest.py."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

import fuzz_inputs
from conftest import FIXTURES
from ingest import governance, warehouse
from test_extreme_values import every_report

#: Cases per `make test` run (the benchmark script runs thousands).
CASES = int(os.environ.get("GPULEDGER_FUZZ_CASES", "100"))


def test_mutated_inputs_then_refresh_and_every_report(tmp_path):
    db = tmp_path / "fuzz.duckdb"
    con = warehouse.connect(db)
    governance.ingest_path(con, FIXTURES / "dashboard" / "governance.toml")
    outcomes = {0: 0, 1: 0}

    @settings(max_examples=CASES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=fuzz_inputs.cases)
    def one(case):
        ingestor, data = case
        outcomes[fuzz_inputs.check_case(con, ingestor, data, tmp_path / f"case-{ingestor}.txt")] += 1

    try:
        one()
        assert outcomes[0] and outcomes[1], outcomes    # the mutations reach both outcomes
        from models.pipeline import refresh
        refresh.run(con, db)
        assert every_report(con)
    finally:
        con.close()


#: Cases the exploring fuzz found (CI's run, benchmarks/fuzz_ingest.py), kept so they stay fixed.
FOUND = [("nodes", b"\n"),                                           # read 1 line, accounted for 0
         *[(ing, data) for ing in sorted(fuzz_inputs.BASE) for data in (b"", b"\n\n  \n", b"\r\n\x0c\n")],
         ("dcgm", fuzz_inputs.mutate("dcgm", fuzz_inputs.BASE["dcgm"],    # a value past INT64 taken for a DCGM
                                     [("field", 2, 2, "99999999999999999999999")]))]   # sentinel: refresh failed


def test_inputs_the_fuzz_once_broke(tmp_path):
    con = warehouse.connect(tmp_path / "found.duckdb")
    governance.ingest_path(con, FIXTURES / "dashboard" / "governance.toml")
    for i, (ingestor, data) in enumerate(FOUND):
        assert fuzz_inputs.check_case(con, ingestor, data, tmp_path / f"found-{i}.txt") in (0, 1), (ingestor, data)
    every_report(con)
