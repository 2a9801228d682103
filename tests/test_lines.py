"""ingest/lines.py: the one definition of a line, shared by every text ingestor (sacct's splitter included)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES
from ingest import lines, textsplit
from ingest.errors import InputError

REAL = FIXTURES / "slurm_real"


@pytest.mark.parametrize("data, expected", [
    (b"", []), (b"\n", [""]), (b"a", ["a"]), (b"a\n", ["a"]), (b"a\n\n\nb", ["a", "", "", "b"]),
    (b"a\r\nb\r\n", ["a", "b"]),                                   # CRLF tolerated
    (b"\xef\xbb\xbfa|b\nc", ["a|b", "c"]), (b"\xef\xbb\xbf", []), (b"\xef\xbb\xbf\n", [""]),   # BOM stripped
    (b"x\x0cy\n\xe2\x80\xa8z\nq\rr\n", ["x\x0cy", "\u2028z", "q\rr"]),   # form feed, U+2028, lone CR: inside a line
    (b"a\xc2\x85b\x0bc\x1cd\n", ["a\x85b\x0bc\x1cd"]),               # NEL, vertical tab, file separator too
    (b"a\r\r\nb\r", ["a\r", "b"]),                                   # only the CR of a CRLF goes
    (b"bad\xff\xfe\nok\n", ["bad\ufffd\ufffd", "ok"]),               # invalid UTF-8 shown as U+FFFD
])
def test_lines_by_hand(data, expected):
    assert lines.text_lines(data) == expected
    assert lines.count(data) == len(expected)
    assert lines.arrow_lines(data).to_pylist() == expected


def _reference_count(data: bytes) -> int:
    """wc -l, plus an unterminated last line; a leading BOM is not a line of its own."""
    body = data[3:] if data.startswith(lines.BOM) else data
    return body.count(b"\n") + (1 if body and not body.endswith(b"\n") else 0)


pieces = st.sampled_from([b"a", b"|", b"\n", b"\r", b"\r\n", b"\x0c", "\u2028".encode(), "\u0085".encode(), b"\xff",
                          b"\x00", lines.BOM, "é".encode(), b" "])


@settings(max_examples=150, deadline=None)
@given(st.lists(pieces, max_size=40).map(b"".join))
def test_every_splitter_counts_the_same_lines(data):
    n = _reference_count(data)
    assert lines.count(data) == len(lines.text_lines(data)) == n
    utf8, _ = textsplit.to_utf8(data)          # sacct re-encodes invalid UTF-8 first, then splits
    assert len(textsplit.split_lines(utf8)) == n
    assert all("\n" not in ln for ln in lines.text_lines(data))


def test_large_input_keeps_memory_shared_when_nothing_is_trimmed():
    data = b"x" * 10
    assert lines.arrow_lines(data).to_pylist() == ["x" * 10]


@pytest.mark.parametrize("fixture, argv, command", [
    ("sacct-plain.txt", ["ingest", "sacct"], "run sacct --parsable2 (or --json)"),
    ("sacctmgr-event-plain.txt", ["ingest", "events"], "run sacctmgr -P show event All_Time"),
    ("sacctmgr-reservation-plain.txt", ["ingest", "reservations"], "run sacctmgr -P show reservation"),
])
def test_a_space_aligned_table_is_refused_in_one_line(run_cli, fixture, argv, command):
    """Real Slurm 22.05 outputs run without -P: sacct prints `JobID ... ExitCode` over a rule of dashes and cuts
    values to the column width, sacctmgr too. One error naming the line and the command, no run, no rejects
    (the plain sacct listing used to give 115 rejects, `expected 26 fields`)."""
    path = REAL / fixture
    code, _, err = run_cli(*argv, "--cluster", "glcluster", "--no-refresh", str(path))
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"gpuledger: {path}: line 1 heads a space-aligned table (titles over a rule of dashes), "
                          f"whose values are cut to the column width; {command}")


def test_a_rule_needs_titles_above_it_without_the_delimiter():
    lines.aligned_table(b"JobID|State\n---|---\n1|COMPLETED\n", "x", "y")        # dashes as values: no table
    lines.aligned_table(b"\n-----\n", "x", "y")
    with pytest.raises(InputError, match="x: line 2 heads a space-aligned table"):
        lines.aligned_table(b"\n  Cluster   Name\n---------- -------\n c1 r1\n", "x", "y")


#: Real outputs of one of each command (Slurm 22.05, captured: tests/fixtures/*/PROVENANCE.md) and what loads them.
PRINTED = {"sacct": REAL / "sacct-allocations.psv", "squeue": REAL / "squeue-midrun.psv",
           "events": REAL / "sacctmgr-event-format.psv",
           "reservations": FIXTURES / "slurm_waiting" / "sacctmgr-reservation.psv"}
WHAT = {"sacct": "sacct output", "squeue": "squeue output", "events": "`sacctmgr show event` output",
        "reservations": "`sacctmgr show reservation` output"}


@pytest.mark.parametrize("reader", ["sacct", "squeue", "events", "reservations", "nodes"])
@pytest.mark.parametrize("printed", sorted(PRINTED))
def test_another_commands_output_is_named_with_its_reader(reader, printed, run_cli):
    """Each `ingest` reader given another command's '|'-separated output says in one line what it is and which
    reader loads it, and writes nothing: sacctmgr's events given to `ingest nodes` were loaded as two nodes
    without GPUs, and the others rejected every line ("no header line before the data")."""
    if reader == printed:
        return
    path = PRINTED[printed]
    extra = ("--captured-at", "2026-12-02T11:00") if reader == "squeue" else ()
    code, _, err = run_cli("ingest", reader, "--cluster", "c", "--no-refresh", *extra, str(path))
    assert (code, err) == (1, f"gpuledger: {path}: line 1 heads {WHAT[printed]}: load it with `gpuledger ingest "
                              f"{printed}`\n")


def test_a_header_names_its_command_only_by_titles_no_other_prints():
    lines.other_output("JobID|JobName|State", "x", 1, "nodes")            # neither sacct's nor squeue's alone
    lines.other_output("1|1|alice|ml|a100|normal|COMPLETED", "x", 1, "nodes")   # a data line
    lines.other_output("NodeList Partition State Gres", "x", 1, "sacct")  # not '|'-separated: the reader decides
    with pytest.raises(InputError, match=r"^x: line 3 heads sinfo output: load it with `gpuledger ingest nodes`$"):
        lines.other_output("NODELIST|PARTITION|STATE|GRES", "x", 3, "sacct")
