"""The gl_* macros (ingest/slurm_sql.py): what they read, and their registration once per connection."""
from __future__ import annotations

import gc
import weakref

import duckdb

from ingest import slurm_sql


def _macros(con) -> int:
    return con.execute("SELECT count(*) FROM duckdb_functions() WHERE database_name = 'temp' "
                       "AND function_name LIKE 'gl\\_%' ESCAPE '\\'").fetchall()[0][0]


def test_macros_read_slurm_text():
    con = duckdb.connect()
    slurm_sql.register(con)
    assert con.execute("SELECT gl_tres_gpus('cpu=8,mem=64G,gres/gpu=4,node=1'), "
                       "gl_tres_gpu_type('cpu=2,gres/gpu:a100=2,gres/gpu=2'), gl_state('CANCELLED by 1000'), "
                       "gl_tres_num('billing=12', 'billing')").fetchall() == [(4.0, "a100", "CANCELLED", 12.0)]


def test_registered_once_per_connection_and_each_connection_has_its_own():
    a, b = duckdb.connect(), duckdb.connect()
    slurm_sql.register(a)
    n = _macros(a)
    assert n == len(slurm_sql.macros()) and _macros(b) == 0
    slurm_sql.register(a)                   # remembered: nothing created again
    assert a in slurm_sql._REGISTERED and b not in slurm_sql._REGISTERED
    slurm_sql.register(b)
    assert _macros(b) == n


def test_macros_created_in_a_rolled_back_transaction_are_created_again():
    con = duckdb.connect()
    con.execute("BEGIN")
    slurm_sql.register(con)
    assert con not in slurm_sql._REGISTERED      # a rollback may drop them: not remembered
    con.execute("ROLLBACK")
    assert _macros(con) == 0
    slurm_sql.register(con)
    assert con in slurm_sql._REGISTERED and con.execute("SELECT gl_tres_gpus('gres/gpu=2')").fetchall() == [(2.0,)]


def test_remembering_a_connection_does_not_keep_it_alive():
    con = duckdb.connect()
    slurm_sql.register(con)
    ref = weakref.ref(con)
    con.close()
    del con
    gc.collect()
    assert ref() is None
