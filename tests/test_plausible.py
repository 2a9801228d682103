"""ingest/plausible.py: the plausibility window, its configuration, and its edges as the ingestors apply them."""
from __future__ import annotations

import datetime as dt
import re

import pytest

from ingest import plausible, sacct, slurm_events
from ingest.errors import InputError

NOW = dt.datetime(2026, 12, 3, 8, 0, 0)


def test_default_window_is_2000_to_a_day_after_now(monkeypatch):
    monkeypatch.delenv(plausible.ENV_WINDOW, raising=False)
    w = plausible.window(NOW)
    assert (w.lo, w.hi) == (dt.datetime(2000, 1, 1), dt.datetime(2026, 12, 4, 8, 0, 0))
    assert w.max_duration_s == int((w.hi - w.lo).total_seconds())
    assert w.contains(w.lo) and w.contains(w.hi) and not w.contains(w.hi + dt.timedelta(seconds=1))


@pytest.mark.parametrize("spec, lo, hi", [
    ("1990-01-01..now+6h", dt.datetime(1990, 1, 1), dt.datetime(2026, 12, 3, 14, 0)),
    ("2026-01-01..2027-02-01", dt.datetime(2026, 1, 1), dt.datetime(2027, 2, 1)),
    (" now-1d .. now ", dt.datetime(2026, 12, 2, 8, 0), NOW),
    ("2026-01-01T00:00:00+02:00..now+30m", dt.datetime(2025, 12, 31, 22, 0), dt.datetime(2026, 12, 3, 8, 30)),
])
def test_window_from_the_environment(monkeypatch, spec, lo, hi):
    monkeypatch.setenv(plausible.ENV_WINDOW, spec)
    w = plausible.window(NOW)
    assert (w.lo, w.hi) == (lo, hi)


@pytest.mark.parametrize("spec, message", [
    ("2000-01-01", "expected LOWER..UPPER"), ("yesterday..now", "cannot read the lower bound 'yesterday'"),
    ("2000-01-01..now+3w", "cannot read the upper bound 'now+3w'"), ("2030-01-01..now", "is not before"),
])
def test_a_bad_window_is_a_one_line_error(monkeypatch, spec, message):
    monkeypatch.setenv(plausible.ENV_WINDOW, spec)
    with pytest.raises(InputError, match=re.escape(message)) as exc:
        plausible.window(NOW)
    assert str(exc.value).startswith("$GPULEDGER_TIME_WINDOW: ")


HDR = "JobID|Cluster|State|Submit|Start|End|Elapsed|Timelimit|AllocTRES"


def test_sacct_edges_of_a_configured_window(con, monkeypatch):
    """The bounds themselves are plausible, a second beyond is not; durations may span the window, not more."""
    monkeypatch.setenv(plausible.ENV_WINDOW, "2026-01-01..2026-02-01")
    rows = ["1|c|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-02-01T00:00:00|31-00:00:00|31-00:00:00|gres/gpu=1",
            "2|c|COMPLETED|2025-12-31T23:59:59|2026-01-01T00:00:00|2026-01-01T01:00:00|01:00:00|01:00:00|gres/gpu=1",
            "3|c|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-02-01T00:00:01|01:00:00|01:00:00|gres/gpu=1",
            "4|c|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|31-00:00:01|01:00:00|gres/gpu=1",
            "5|c|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|01:00:00|31-00:00:01|gres/gpu=1"]
    s = sacct.ingest_bytes(con, "\n".join([HDR, *rows]).encode(), "w.psv", sacct.SacctOptions())
    assert (s["loaded"], s["rejected"]) == (1, 4)
    got = con.sql("SELECT line_no, field FROM rejects ORDER BY 1").fetchall()
    assert got == [(3, "submit"), (4, "end"), (5, "elapsed"), (6, "timelimit")]
    assert con.sql("SELECT options FROM ingest_runs").fetchall()[0][0].count("2026-02-01 00:00:00") == 1


def test_events_edges_of_a_configured_window(con, monkeypatch):
    monkeypatch.setenv(plausible.ENV_WINDOW, "2026-01-01..2026-02-01")
    text = ("Cluster|Cluster Nodes|Node Name|Time Start|Time End|State|Reason|User\n"
            "c||n1|2026-01-01T00:00:00|2026-02-01T00:00:00|DOWN|x|root\n"
            "c||n2|2026-01-01T00:00:00|Unknown|DOWN|still open|root\n"
            "c||n3|2026-01-01T00:00:00|2026-02-01T00:00:01|DOWN|x|root\n"
            "c||n4|2026-01-05T00:00:00|2026-01-05T00:00:00|DOWN|zero length|root\n")
    s = slurm_events.ingest_bytes(con, text.encode(), "e.psv")
    assert (s["loaded"], s["rejected"]) == (3, 1)
    assert con.sql("SELECT line_no, field FROM rejects").fetchall() == [(4, "End")]


def test_a_program_replaying_future_data_sets_its_own_window(monkeypatch):
    monkeypatch.setenv(plausible.ENV_WINDOW, "2026-01-01..2026-02-01")
    with plausible.replaying("2026-01-05..2027-01-06"):
        assert plausible.window(NOW).hi == dt.datetime(2027, 1, 6)
    assert plausible.window(NOW).hi == dt.datetime(2026, 2, 1)
    with pytest.raises(InputError, match="cannot read the upper bound"):
        with plausible.replaying("2026-01-05..soon"):
            pass
