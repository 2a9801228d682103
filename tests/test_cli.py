"""The CLI contract: every command of DESIGN.md exists, explains itself, and bad usage exits 2."""
import json
import subprocess
import sys

import pytest

import gpuledger

CONTRACT = [
    ["ingest", "sacct"], ["ingest", "nodes"], ["ingest", "events"], ["ingest", "prometheus"], ["ingest", "dcgm"],
    ["ingest", "nvidia-smi"], ["ingest", "trace"], ["ingest", "governance"], ["refresh"],
    ["report", "utilization"], ["report", "efficiency"], ["report", "fragmentation"], ["report", "fairness"],
    ["report", "queue"], ["chargeback"], ["forecast"], ["simulate"], ["simulate", "placement"], ["plan"],
    ["dashboard"], ["demo"],
]


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        gpuledger.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ["ingest", "refresh", "report", "chargeback", "forecast", "simulate", "plan", "dashboard", "demo"]:
        assert cmd in out


@pytest.mark.parametrize("argv", CONTRACT, ids=lambda a: " ".join(a))
def test_every_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        gpuledger.main([*argv, "--help"])
    assert exc.value.code == 0
    assert "usage: gpuledger" in capsys.readouterr().out


def test_unknown_command_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        gpuledger.main(["frobnicate"])
    assert exc.value.code == 2


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "gpuledger", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "ingest" in out.stdout


# ---------------------------------------------------------------- --db and -q before or after the command

def commands(parser=None, path=()):
    """(path, parser) of every command gpuledger runs (leaves, and `simulate` which has a subcommand too)."""
    import argparse
    parser = parser or gpuledger.build_parser()
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from commands(sub, (*path, name))
    if path and parser.get_default("func"):
        yield path, parser


def minimal_argv(parser) -> list[str]:
    """The required arguments of a command, with placeholder values argparse accepts."""
    argv = []
    for a in parser._actions:
        value = a.choices and next(iter(a.choices)) if not hasattr(a, "_name_parser_map") else None
        if not a.option_strings and a.dest != "help" and a.nargs not in ("*", "?") and value is not None:
            argv.append(str(value))
        elif not a.option_strings and a.nargs in (None, "+") and not hasattr(a, "_name_parser_map"):
            argv.append("x")
        elif a.required and a.option_strings:
            argv += [a.option_strings[-1], str(value) if value else "1"]
    return argv


@pytest.mark.parametrize("path", [p for p, _ in commands()], ids=" ".join)
def test_db_and_quiet_are_accepted_after_every_command(path):
    sub = dict(commands())[path]
    args = gpuledger.build_parser().parse_args([*path, *minimal_argv(sub), "--db", "after.duckdb", "-q"])
    assert args.db == "after.duckdb" and args.quiet is True
    args = gpuledger.build_parser().parse_args(["--db", "before.duckdb", *path, *minimal_argv(sub)])
    assert args.db == "before.duckdb" and args.quiet is False
    args = gpuledger.build_parser().parse_args(["--db", "before.duckdb", *path, *minimal_argv(sub), "--db", "b"])
    assert args.db == "b"                                       # the one nearer the command's options wins


def test_demo_takes_db_after_the_subcommand(tmp_path, capsys):
    db = tmp_path / "demo.duckdb"
    assert gpuledger.main(["demo", "--db", str(db), "--scale", "-1", "--no-serve"]) == 2
    assert "demo:" in capsys.readouterr().err and not db.exists()
    assert gpuledger.build_parser().parse_args(["demo", "--no-serve", "--db", str(db)]).db == str(db)


READS = [["report", "utilization"], ["report", "efficiency"], ["report", "fragmentation"], ["report", "fairness"],
         ["report", "queue"], ["chargeback", "--period", "2026-03"], ["forecast"], ["simulate"],
         ["plan", "--target-p95-wait", "2h"]]


@pytest.mark.parametrize("argv", READS, ids=lambda a: " ".join(a[:2]))
def test_a_read_of_a_missing_warehouse_names_the_path_wherever_db_is_given(argv, tmp_path, capsys):
    missing = tmp_path / "nowhere" / "w.duckdb"
    assert gpuledger.main([*argv, "--db", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err and "Traceback" not in err
    assert not missing.parent.exists()


# ---------------------------------------------------------------- flags that would do nothing

@pytest.mark.parametrize("argv", [["report", "fairness", "--by", "team"], ["report", "fairness", "--bucket", "day"],
                                  ["report", "queue", "--bucket", "week"]], ids=" ".join)
def test_report_flags_that_did_nothing_are_gone(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        gpuledger.main(argv)
    assert exc.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["report", "efficiency", "--worst", "5", "--by", "team"], "--by cannot be used with --worst"),
    (["report", "efficiency", "--by", "job", "--bucket", "hour"], "--bucket cannot be used with --by job"),
    (["report", "efficiency", "--total", "--bucket", "hour"], "--bucket cannot be used with --total"),
    (["report", "fragmentation", "--view", "blocked", "--bucket", "hour"], "--bucket cannot be used with --view blocked"),
    (["report", "fragmentation", "--view", "jobs", "--by", "team"], "--by cannot be used with --view jobs"),
    (["report", "fairness", "--as-of", "2026-03-01"], "--as-of cannot be used without --view sshare"),
    (["report", "fairness", "--from", "2026-03-01", "--windows", "7"], "--windows cannot be used with --from/--to"),
    (["report", "queue", "--view", "starvation", "--by", "qos"], "--by cannot be used with --view starvation"),
    (["chargeback", "--period", "2026-03", "--out", "x.csv", "--view", "jobs"], "--view cannot be used with an export"),
    (["forecast", "--unit", "gpu-hours"], "--unit cannot be used without --series"),
    (["forecast", "--series", "s.csv", "--measure", "peak"], "--measure cannot be used with --series"),
    (["simulate", "--validate", "--add", "h100=1"], "--add cannot be used (it replays the observed capacity and"),
    (["simulate", "--validate", "--no-reservations"], "--no-reservations cannot be used (it replays the observed"),
    (["ingest", "sacct", "f.psv", "--since", "2026-01-01"], "--since only with --live"),
])
def test_a_flag_that_would_do_nothing_is_bad_usage(argv, words, tmp_path, capsys):
    db = tmp_path / "w.duckdb"
    code = gpuledger.main(["--db", str(db), *argv])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert not db.exists()                            # checked before the warehouse is opened


@pytest.mark.parametrize("argv, opt", [
    (["report", "utilization", "--from", "yesterday"], "--from"),
    (["report", "queue", "--to", "2026-13-01"], "--to"),
    (["ingest", "nodes", "n.txt", "--as-of", "noon"], "--as-of"),
    (["ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "x", "--end", "2026-01-02"], "--start"),
    (["ingest", "trace", "alibaba-openb", "p.csv", "--start", "Monday"], "--start"),
    (["simulate", "--from", "soon"], "--from"),
    (["plan", "--target-p95-wait", "soon"], "--target-p95-wait"),
])
def test_an_unreadable_time_or_duration_is_bad_usage_naming_the_option(argv, opt, tmp_path, capsys):
    db = tmp_path / "w.duckdb"
    assert gpuledger.main(["--db", str(db), *argv]) == 2
    err = capsys.readouterr().err
    assert opt in err and err.count("\n") == 1 and not db.exists()


def test_times_are_iso_dates_times_or_epoch_seconds(tmp_path, capsys):
    """One parser: a report window in epoch seconds is the same window as in ISO form."""
    from ingest.warehouse import parse_time
    assert parse_time("1772323200") == parse_time("2026-03-01") == parse_time("2026-03-01T01:00+01:00")
    a = gpuledger.build_parser().parse_args(["report", "utilization", "--from", "1772323200"])
    assert gpuledger._window(a, "report utilization")[0].isoformat() == "2026-03-01T00:00:00"


# ---------------------------------------------------------------- text from data reaches the terminal as text

def test_control_characters_in_names_and_file_names_print_escaped(tmp_path, capsys):
    from cost_helpers import SACCT_HEADER, Job, T, build, sacct_line
    from ingest import warehouse
    from test_chargeback import NODES, gov
    db = tmp_path / "w.duckdb"
    con = warehouse.connect(db)
    build(con, tmp_path, [Job(1, "\x1b[2Jevil", 2, T(1), T(3), node="h1"), Job(2, "nlp", 1, T(2), T(4), node="h2")],
          NODES, gov())
    con.close()
    code, out, err = _run(capsys, db, "report", "utilization", "--by", "account")
    assert code == 0 and "\x1b" not in out and "\\x1b[2Jevil" in out
    code, out, err = _run(capsys, db, "report", "fairness")
    assert code == 0 and "\x1b" not in out + err and "c1/\\x1b[2Jevil" in err    # the unmapped-accounts note
    bad = tmp_path / "late\x1b[31m.psv"
    bad.write_text(SACCT_HEADER + "\n" + sacct_line(Job(3, "nlp", 1, T(5), T(6), node="h2")).replace(
        "2026-03-05T00:00:00", "\x07soon", 1) + "\n")
    code, out, err = _run(capsys, db, "ingest", "sacct", str(bad), "--no-refresh")
    # the one line was rejected, so nothing was loaded: exit 1, the reason named, escaped like the file name
    assert code == 1 and "rejected 1" in err and "late\\x1b[31m.psv" in err and "nothing loaded" in err
    assert "\x1b" not in err and "\x07" not in err


def _run(capsys, db, *argv):
    code = gpuledger.main(["--db", str(db), *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_output_is_strict_json_with_unknown_numbers_as_null(run_cli, tmp_path):
    """A one-day history has no interval (NaN bounds in the frame): JSON has no NaN, so they are null, which a
    browser's JSON.parse accepts (it refused the bare NaN that was written before)."""
    series = tmp_path / "one.csv"
    series.write_text("ts,value\n2026-01-01,5\n")

    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    code, out, err = run_cli("forecast", "--series", str(series), "--horizon", "2", "--format", "json")
    assert code == 0, err
    rows = json.loads(out, parse_constant=refuse)
    assert [(r["forecast"], r["lo80"], r["hi95"]) for r in rows] == [(5.0, None, None)] * 2
    code, out, err = run_cli("forecast", "--series", str(series), "--horizon", "2", "--format", "csv")
    assert code == 0 and "NaN" not in out, out                  # a spreadsheet would read "NaN" as text
    assert out.splitlines()[1].split(",")[1:6] == ["5.0", "", "", "", ""]
    # the finance exports' and the dashboards' CSV (exports.csv_bytes): times without the ISO "T" and microseconds
    assert out.splitlines()[1].split(",")[0] == "2026-01-02 00:00:00"


@pytest.mark.parametrize("report", ["queue"])
def test_governance_windows_say_what_is_wrong_with_them_as_every_report_does(report, run_cli, con):
    """The same words as the other reports for a window that ends before it starts (it was 'give --from before
    --to (or before the data horizon)' for every case), and what is missing otherwise. `report fairness` reads
    its windows the same way (gpuledger.py _governance_windows), once a governance file is loaded."""
    code, _, err = run_cli("report", report, "--from", "2026-05-01", "--to", "2026-04-01")
    assert (code, err) == (2, f"gpuledger: report {report}: empty window: --from 2026-05-01 00:00:00 is not before "
                              "--to 2026-04-01 00:00:00\n")
    code, _, err = run_cli("report", report, "--to", "2026-04-01")
    assert (code, err) == (2, f"gpuledger: report {report}: give --from with --to (a window needs its start)\n")
    code, _, err = run_cli("report", report, "--from", "2026-04-01")      # an empty warehouse: no horizon
    assert (code, err) == (2, f"gpuledger: report {report}: no accounting loaded: --from has no data horizon to "
                              "end at\n")
