"""ingest/sacct_live.py: the live sacct read keeps what accounting learns late.

Here, without Slurm: sdiag's queue line and the job ids of a read, on real outputs (tests/fixtures/slurm_real).
On the real Slurm of tests/slurm, in tests/test_service.py (its module's cluster; skipped, saying why, where it
cannot run): a job whose end reached accounting before the read's window is read by id; the watermark waits while
slurmctld holds records for slurmdbd (slurmdbd stopped while a job runs to its end, then started again); a catch-up
in windows loads what one read does; a span slurmdbd's MaxQueryTimeRange refuses is read in shorter windows."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ingest import sacct_live
from ingest.errors import InputError

REAL = Path(__file__).parent / "fixtures" / "slurm_real"


def test_dbd_queue_is_read_from_real_sdiag_outputs():
    assert sacct_live.dbd_queue(f"cat {REAL / 'sdiag.txt'}", None) == 0
    assert sacct_live.dbd_queue(f"cat {REAL / 'sdiag-slurmdbd-down.txt'}", None) == 5


def test_dbd_queue_unknown_is_an_error_naming_the_command():
    with pytest.raises(InputError, match=r"sacct-allocations.psv: no 'DBD Agent queue size' line in its output"):
        sacct_live.dbd_queue(f"cat {REAL / 'sacct-allocations.psv'}", None)
    with pytest.raises(InputError, match=r"^false: sdiag exited 1: no message$"):
        sacct_live.dbd_queue("false", None)
    with pytest.raises(InputError, match=r"sdiag not found on PATH"):
        sacct_live.dbd_queue("/nonexistent/sdiag", None)


def test_listed_ids_are_the_jobidraw_column_of_a_live_read():
    path = REAL / "sacct-allocations-xdmod-noheader.psv"
    with open(path, newline="") as f:
        want = {row[1] for row in csv.reader(f, delimiter="|")}
    assert len(want) > 10
    assert sacct_live._listed_ids(path.read_bytes()) == want
