"""models/metrics/freshness.py: what a report says about the data behind it. Here: a window the accounting does not
reach is said to be one (its figures are empty or zero for want of data), on every report that takes --from/--to
and on a chargeback month, and nothing is said of a window the accounting reaches, even in part."""
from __future__ import annotations

import datetime as dt

import pytest

import gpuledger
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from ingest import warehouse
from models.metrics import freshness

T = dt.datetime


@pytest.fixture(scope="module")
def span(lab_db):
    con = warehouse.connect(str(lab_db), read_only=True)
    lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
    yield con, lo, hi
    con.close()


def test_a_window_wholly_outside_the_accounting_is_named_with_the_span(span):
    con, lo, hi = span
    assert lo < T(2026, 9, 22) and T(2026, 10, 19) < hi < T(2026, 10, 21)       # the lab's 2026-09-21 .. 10-20
    after = freshness.window_note(con, hi + dt.timedelta(minutes=7), None)
    assert after == (f"note: the window ({hi + dt.timedelta(minutes=7):%Y-%m-%d %H:%M} to open) lies outside what "
                     f"the accounting covers ({lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} UTC): its figures are "
                     "empty or zero for want of data, not a quiet period")
    assert freshness.window_note(con, T(2026, 3, 1, 10, 17), lo) is not None        # ends where the data starts
    assert freshness.window_note(con, hi, T(2027, 1, 1)) is not None                # starts at the horizon


@pytest.mark.parametrize("start, end", [(None, None), (None, T(2026, 9, 30, 5, 11)), (T(2026, 10, 3, 7, 45), None),
                                        (T(2026, 1, 1), T(2027, 1, 1))])
def test_a_window_the_accounting_reaches_even_in_part_says_nothing(span, start, end):
    con, lo, hi = span
    assert freshness.window_note(con, start, end) is None
    assert freshness.window_note(con, lo - dt.timedelta(minutes=1), lo + dt.timedelta(minutes=1)) is None
    assert freshness.window_note(con, hi - dt.timedelta(seconds=1), hi + dt.timedelta(days=30)) is None


@pytest.mark.parametrize("report", [["utilization"], ["fragmentation"], ["efficiency"], ["fairness"], ["queue"],
                                    ["losses"], ["preemption"], ["pending"], ["reliability", "--view", "nodes"]])
def test_every_windowed_report_says_once_that_its_window_is_outside_the_data(lab_db, capsys, report):
    argv = ["--db", str(lab_db), "report", *report]
    assert gpuledger.main([*argv, "--from", "2027-02-01T06:30", "--to", "2027-03-01"]) == 0
    err = capsys.readouterr().err
    assert err.count("lies outside what the accounting covers") == 1, err
    assert "no accounting in the warehouse yet" not in err          # it has accounting, not in this window
    assert gpuledger.main([*argv, "--from", "2026-10-01T06:30", "--to", "2026-10-08"]) == 0
    assert "lies outside" not in capsys.readouterr().err


def test_a_chargeback_month_without_accounting_says_why_its_amounts_are_zero(lab_db, capsys):
    assert gpuledger.main(["--db", str(lab_db), "chargeback", "--period", "2027-02", "--view", "summary"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("note: the period 2027-02 (") and "its figures are empty or zero for want of data" in err
    assert gpuledger.main(["--db", str(lab_db), "chargeback", "--period", "2026-10", "--view", "summary"]) == 0
    assert "lies outside" not in capsys.readouterr().err
