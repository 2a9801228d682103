"""The expected run time of a job not finished (models/definitions/expected_run_sql.py), by hand."""
from __future__ import annotations

import duckdb
import pytest

from models.definitions.expected_run_sql import expected_run_ctes

RUNS = """SELECT * FROM (VALUES ('c', 'p', 600.0), ('c', 'p', 3000.0), ('c', 'p', 3030.0), ('c', 'p', 9000.0),
                                ('c', 'q', 100.0)) r(cluster, partition, elapsed_s)"""
TODO = """SELECT * FROM (VALUES
    (1, 'c', 'p', 0.0, 86400.0),      -- pending: the mean of all of p's runs, (600 + 3000 + 3030 + 9000) / 4
    (2, 'c', 'p', 3010.0, 86400.0),   -- has run 3,010 s: 3000 is shorter (same minute), 3030 and 9000 are not
    (3, 'c', 'p', 3010.0, 4000.0),    -- the same, capped by its 4,000 s limit
    (4, 'c', 'p', 9500.0, 20000.0),   -- longer than every finished run of p and of c: its limit
    (5, 'c', 'q,p', 500.0, NULL),     -- lists two partitions: its first, q, has no run as long; c's are
    (6, 'c', 'p', 9500.0, NULL),      -- nothing as long and no limit: unknown
    (7, 'd', '', 0.0, NULL)           -- a cluster with no finished runs and no limit: unknown
  ) t(job_uid, cluster, partition, ran_s, timelimit_s)"""


def test_the_mean_of_the_finished_runs_that_lasted_as_long_else_the_limit_never_above_it():
    con = duckdb.connect()
    got = dict(con.sql(f"WITH {expected_run_ctes(RUNS, TODO)} SELECT job_uid, est_s FROM expected").fetchall())
    assert got[1] == pytest.approx((600 + 3000 + 3030 + 9000) / 4)
    assert got[2] == pytest.approx((3030 + 9000) / 2)
    assert got[3] == 4000.0
    assert got[4] == 20000.0
    assert got[5] == pytest.approx((600 + 3000 + 3030 + 9000) / 4)   # c's runs of >= 500 s: all but q's 100
    assert got[6] is None and got[7] is None
