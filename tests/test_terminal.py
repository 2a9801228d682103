"""Tables on a terminal: a table wider than the terminal prints in blocks of columns that repeat the row keys,
losing nothing; a pipe or file gets every table whole (dashboards/terminal.py)."""
import datetime as dt
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboards.terminal import column_blocks, format_table

ROOT = Path(__file__).resolve().parent.parent


def wide_frame() -> pl.DataFrame:
    return pl.DataFrame({"bucket": ["2026-03-01 07:30:00", "2026-03-02 07:30:00"], "team": ["nlp", "vision"],
                         **{f"gpu_hours_{i:02d}": [1.25 * i, 1000.5 * i] for i in range(10)},
                         "jobs": [3, 12]})


def test_a_table_that_fits_prints_as_one_block():
    df = wide_frame().select("bucket", "team", "gpu_hours_01", "jobs")
    assert format_table(df, 80) == format_table(df) == format_table(df, None)
    assert format_table(df).splitlines()[0].split() == ["bucket", "team", "gpu_hours_01", "jobs"]


def test_a_wide_table_prints_in_blocks_that_fit_and_repeat_the_keys():
    df = wide_frame()
    text = format_table(df, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    blocks = text.split("\n\n")
    # 13 columns of 11-19 characters after the two keys (30 characters): three value columns a block
    assert [b.splitlines()[0] for b in blocks] == [
        "columns 3-5 of 13 (with bucket, team):", "columns 6-8 of 13 (with bucket, team):",
        "columns 9-11 of 13 (with bucket, team):", "columns 12-13 of 13 (with bucket, team):"]
    shown = []
    for b in blocks:
        header, rule, *rows = b.splitlines()[1:]
        assert header.split()[:2] == ["bucket", "team"] and len(rows) == 2
        assert rows[1].split()[:3] == ["2026-03-02", "07:30:00", "vision"]
        shown += header.split()[2:]
    assert shown == df.columns[2:]                       # every value column once, in order
    assert "8,004.00" in blocks[2] and blocks[3].splitlines()[-1].split()[-2:] == ["9,004.50", "12"]


def test_a_column_wider_than_the_terminal_gets_a_block_of_its_own():
    df = pl.DataFrame({"team": ["nlp"], "note": ["x" * 50], "gpu_h": [2.5]})
    text = format_table(df, 30)
    assert text.startswith("column 2 of 3 (with team):") and "x" * 50 in text
    assert text.split("\n\n")[1].splitlines()[0] == "column 3 of 3 (with team):"


def test_without_text_keys_blocks_repeat_nothing():
    df = pl.DataFrame({f"value_{i}": [float(i)] for i in range(8)})
    text = format_table(df, 30)
    assert text.splitlines()[0] == "columns 1-3 of 8:" and max(len(x) for x in text.splitlines()) <= 30


@settings(max_examples=200, deadline=None)
@given(widths=st.lists(st.integers(1, 40), min_size=1, max_size=30), keys=st.integers(0, 5),
       width=st.integers(20, 200))
def test_blocks_show_every_column_once_and_fit_unless_one_column_cannot(widths, keys, width):
    numeric = [j >= keys for j in range(len(widths))]
    groups = column_blocks(widths, numeric, width)
    repeated = [j for j in groups[0] if all(j in g for g in groups)] if len(groups) > 1 else []
    values = [j for g in groups for j in g if j not in repeated]
    assert sorted(values) == values and sorted(values + repeated) == list(range(len(widths)))
    assert repeated == list(range(len(repeated))) and len(repeated) <= keys
    for g in groups:
        line = sum(widths[j] for j in g) + 2 * (len(g) - 1)
        assert line <= width or len([j for j in g if j not in repeated]) == 1


def _on_a_terminal(argv: list[str], columns: int) -> str:
    """Run the CLI with its stdout on a real pseudo-terminal of ``columns`` columns; returns what it printed."""
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.Popen([sys.executable, "-m", "gpuledger", *argv], stdout=child, stderr=subprocess.DEVNULL,
                            cwd=ROOT, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:                  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(main)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_the_cli_fits_a_report_to_the_terminal_and_pipes_it_whole(tmp_path):
    from cost_helpers import Job, T, build
    from ingest import warehouse
    from test_chargeback import NODES, gov
    db = tmp_path / "w.duckdb"
    con = warehouse.connect(db)
    build(con, tmp_path, [Job(1, "cv", 2, T(1), T(3), node="h1"), Job(2, "nlp", 1, T(2), T(4), node="h2")],
          NODES, gov())
    con.close()
    argv = ["--db", str(db), "report", "utilization", "--by", "account"]
    piped = subprocess.run([sys.executable, "-m", "gpuledger", *argv], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "COLUMNS": "90"}, check=True).stdout
    assert max(len(x) for x in piped.splitlines()) > 90 and "columns" not in piped.splitlines()[0]
    shown = _on_a_terminal(argv, 90)
    lines = shown.splitlines()
    assert max(len(x) for x in lines) <= 90 and re.match(r"columns 3-\d+ of \d+ \(with bucket, account\):", lines[0])
    # the same cells, whatever the layout (the keys repeat in every block, the captions are not cells)
    cells = "\n".join(x for x in lines if not re.match(r"columns? \d", x))
    assert set(re.findall(r"[^\s-]+", piped)) == set(re.findall(r"[^\s-]+", cells))


def test_each_column_has_one_format_so_its_decimal_points_line_up():
    df = pl.DataFrame({
        "month": [dt.datetime(2026, 1, 1), dt.datetime(2026, 2, 1)],          # month buckets print as dates
        "ts": [dt.datetime(2026, 1, 1, 7, 30), dt.datetime(2026, 2, 1)],      # a time of day keeps its time
        "lost_gpu_h": [1036.3412, 0.7408],                                     # hours: 2 decimals at any size
        "share": [0.8776, 0.7],                                                # fractions: 4 decimals
        "beyond_capacity_gpu_h": [0.0, 0.0],                                   # zeros in hours: 0.00
        "ratio": [0.0, 0.0],                                                   # all-zero fractions: 0.00
        "wait_p50_h": [0.0036, 12.5],                                          # a tiny non-zero keeps 2 digits
        "jobs": [196.0, 218.0],                                                # counts as integers
        "largest_gang_gpus_min": [4392, 12],                                   # integer counts with separators
        "run_id": [12345, 7]})                                                 # numbers that name: none
    rows = [line.split() for line in format_table(df).splitlines()[2:]]
    assert rows == [["2026-01-01", "2026-01-01", "07:30:00", "1,036.34", "0.8776", "0.00", "0.00", "0.0036", "196",
                     "4,392", "12345"],
                    ["2026-02-01", "2026-02-01", "00:00:00", "0.74", "0.7000", "0.00", "0.00", "12.50", "218", "12",
                     "7"]]


def test_unknown_numbers_print_empty_as_csv_and_json_write_them():
    """NaN and infinity are unknown numbers: the table prints them as it prints a null (CSV writes an empty cell,
    JSON null), not "nan" or "inf"."""
    df = pl.DataFrame({"team": ["a", "b", "c"], "eff": [50.0, float("nan"), None], "gpu_h": [1.0, float("inf"), 2.0]})
    assert format_table(df).splitlines()[2:] == ["a     50.00   1.00", "b", "c             2.00"]
