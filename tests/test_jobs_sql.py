"""SQL definitions over the jobs table (models/definitions/jobs_sql.py), by hand."""
from __future__ import annotations

import duckdb
import pytest

from models.definitions.jobs_sql import array_tasks_sql


@pytest.mark.parametrize("spec, state, tasks", [
    ("5-9,12%4", "PENDING", 6),          # 5..9 and 12; %4 is a throttle, not a task
    ("1-3,7%2", "PENDING", 4),
    ("7", "PENDING", 1),
    ("1-9:2", "PENDING", 5),             # a step: 1, 3, 5, 7, 9
    (" 1-10:3 , 20", "PENDING", 5),      # 1, 4, 7, 10 and 20, spaces as some exports print them
    ("6,8-9,11,13,17-18,20,27,29-31,33-34,36", "PENDING", 15),
    ("0-99", "CANCELLED", 1),            # a record that no longer waits is one job
    (None, "PENDING", 1),
])
def test_a_pending_array_record_stands_for_every_task_it_lists(spec, state, tasks):
    con = duckdb.connect()
    got = con.execute(f"SELECT {array_tasks_sql()} FROM (SELECT $s AS array_task_spec, $st AS state) j",
                      {"s": spec, "st": state}).fetchall()[0][0]
    assert got == tasks
