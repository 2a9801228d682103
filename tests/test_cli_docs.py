"""docs/CLI.md and README.md against the parser (as sqlite-utils checks its docs against its click tree), and
no option that does nothing.

- Every command has a `## <command>` section in docs/CLI.md, and every section named like a command is one.
- A command's section names each of its options, each choice and each default; a positional's name is in its
  usage. No `gpuledger ...` line names a command or an option that does not exist.
- Every `gpuledger ...` line of README.md's code blocks parses.
- Every option of a read command is read by the command when it runs (used, or checked against the others).
"""
from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

import gpuledger
from test_cli import commands, minimal_argv

ROOT = Path(__file__).resolve().parent.parent
CLI_MD = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
GLOBAL = {"-h", "--help", "--db", "-q", "--quiet"}
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-q)(?![\w-])")
COMMANDS = dict(commands())


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## +(.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


SECTIONS = sections(CLI_MD)


def options(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help != argparse.SUPPRESS and not set(a.option_strings) & GLOBAL
            and not isinstance(a, argparse._SubParsersAction)]


def flags_of(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings} | GLOBAL


def shown(default) -> str:
    return f"{default:g}" if isinstance(default, float) else str(default)


def test_every_command_has_a_section_and_every_command_section_is_a_command():
    for path in COMMANDS:
        assert " ".join(path) in SECTIONS, f"docs/CLI.md has no section '## {' '.join(path)}'"
    tops = {p[0] for p in COMMANDS} | {"ingest", "report"}
    for heading in SECTIONS:
        if heading.split()[0] in tops:
            assert tuple(heading.split()) in COMMANDS, f"docs/CLI.md: '## {heading}' is no command"


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_the_section_names_every_option_choice_and_default(path):
    text = SECTIONS.get(" ".join(path), "")
    for a in options(COMMANDS[path]):
        if a.option_strings:
            long = a.option_strings[-1]
            assert re.search(rf"(?<![\w-]){re.escape(long)}(?![\w-])", text), f"{' '.join(path)}: {long} undocumented"
        else:
            assert (a.metavar or a.dest) in text, f"{' '.join(path)}: positional {a.metavar or a.dest} undocumented"
        for choice in a.choices or ():
            assert str(choice) in text, f"{' '.join(path)}: {a.option_strings or a.dest} choice {choice!r} undocumented"
        if a.default not in (None, False, [], argparse.SUPPRESS) and a.option_strings:
            assert shown(a.default) in text, f"{' '.join(path)}: default {a.default!r} of {a.option_strings[-1]}"


def _code_lines(text: str) -> list[str]:
    """Lines of fenced code blocks (indented continuation lines joined to the line before) and inline spans."""
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if line[:1].isspace() and out:
                out[-1] += " " + line.strip()
            elif line.strip():
                out.append(line.strip())
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    out += [s.replace("\n", " ") for s in re.findall(r"`([^`]+)`", prose)]
    return out


def _command_of(line: str) -> tuple[tuple[str, ...], argparse.ArgumentParser]:
    """The command a `gpuledger ...` line names (every lowercase word a subcommand until a leaf)."""
    words, path, parser = line.split()[1:], (), gpuledger.build_parser()
    for w in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not re.fullmatch(r"[a-z][a-z-]*", w) or not subs:
            break
        if w not in subs[0].choices:
            if path in COMMANDS:                            # `simulate` takes no positional: a word is an error
                raise AssertionError(f"`{line}`: {w!r} is not a subcommand of {' '.join(path)}")
            raise AssertionError(f"`{line}`: no command {' '.join((*path, w))}")
        path, parser = (*path, w), subs[0].choices[w]
    assert path in COMMANDS or not re.match(r"gpuledger +[a-z]", line), f"`{line}` names no command"
    return path, parser                                    # () for the synopsis: gpuledger [--db PATH] ...


@pytest.mark.parametrize("name, text", [("docs/CLI.md", CLI_MD), ("README.md", README)])
def test_no_gpuledger_line_names_a_command_or_option_that_does_not_exist(name, text):
    for line in _code_lines(text):
        at = line.find("gpuledger ")
        if at < 0 or (at and line[at - 1] not in " /|"):
            continue
        line = line[at:].split("#")[0]
        path, parser = _command_of(line)
        unknown = set(FLAG.findall(line)) - flags_of(parser)
        assert not unknown, f"{name}: `{line}`: {' '.join(path)} has no {', '.join(sorted(unknown))}"


@pytest.mark.parametrize("heading", list(SECTIONS))
def test_options_named_in_a_section_exist(heading):
    """Option names in prose (a code span starting with -) belong to the section's command, or in a general
    section to some command; other programs' options are quoted with the program (`sacct --parsable`)."""
    path = tuple(heading.split())
    allowed = flags_of(COMMANDS[path]) if path in COMMANDS else set().union(*map(flags_of, COMMANDS.values()))
    spans = [s for s in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", SECTIONS[heading], flags=re.S))
             if s.startswith("-")]
    unknown = {f for s in spans for f in FLAG.findall(s)} - allowed
    assert not unknown, f"docs/CLI.md '## {heading}' names {', '.join(sorted(unknown))}, which it does not have"


def _readme_commands(section: str = "", until: str = "## Documentation") -> list[str]:
    """The `gpuledger ...` commands of README.md's code blocks from ``section`` to ``until``."""
    text = README.split(until)[0]
    text = text[text.index(section):] if section else text
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            m = re.search(r"(?:^|[\s/|])gpuledger (.*)", line.split("#")[0])
            if m:
                out.append(m.group(1).strip())
    return out


def test_the_readme_has_a_tour_on_the_demo():
    tour = _readme_commands("## A short tour")
    assert len(tour) >= 20 and "make demo" in README
    assert "data/demo.duckdb" in README and ".venv/bin/gpuledger" in README and "GPULEDGER_DB" in README


@pytest.mark.parametrize("argv", _readme_commands())
def test_every_readme_command_parses(argv, capsys):
    try:
        gpuledger.build_parser().parse_args(shlex.split(argv))
    except SystemExit:
        pytest.fail(f"README.md: `gpuledger {argv}` does not parse: {capsys.readouterr().err.strip()}")


# ---------------------------------------------------------------- no option does nothing

class Tracking(argparse.Namespace):
    """A namespace that records which attributes a command reads."""

    def __init__(self, **kw):
        super().__init__(**kw)
        object.__setattr__(self, "_read", set())

    def __getattribute__(self, name):
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


@pytest.fixture(scope="module")
def cluster_db(tmp_path_factory):
    """The chargeback tests' small cluster (two pools, three teams, governance), refreshed."""
    import test_chargeback as tc
    from cost_helpers import build
    from ingest import warehouse
    tmp = tmp_path_factory.mktemp("docs")
    con = warehouse.connect(tmp / "w.duckdb")
    build(con, tmp, tc.JOBS, tc.NODES, tc.gov("proportional_usage"))
    con.close()
    return tmp / "w.duckdb"


READS = [("report", "utilization"), ("report", "efficiency"), ("report", "fragmentation"), ("report", "fairness"),
         ("report", "queue"), ("chargeback",), ("forecast",), ("simulate",), ("plan",)]
ARGS = {("chargeback",): ["--period", "2026-03"], ("forecast",): ["--horizon", "7"],
        ("simulate",): ["--replications", "2"], ("plan",): ["--target-p95-wait", "30d", "--pool", "a100", "--grid",
                                                            "1,2", "--replications", "1"]}


@pytest.mark.parametrize("path", READS, ids=" ".join)
def test_every_option_of_a_read_command_is_read(path, cluster_db, capsys):
    args = gpuledger.build_parser().parse_args(["--db", str(cluster_db), *path, *ARGS.get(path, [])],
                                               namespace=Tracking())
    assert args.func(args) == 0, capsys.readouterr().err
    dests = {a.dest for a in options(COMMANDS[path])}
    unread = dests - object.__getattribute__(args, "_read")
    assert not unread, f"{' '.join(path)}: options never looked at: {', '.join(sorted(unread))}"


def test_minimal_argv_parses_for_every_command():
    for path, parser in COMMANDS.items():
        gpuledger.build_parser().parse_args([*path, *minimal_argv(parser)])


@pytest.mark.slow
def test_the_demo_tour_runs_as_printed(tmp_path, monkeypatch, capsys):
    """The README's tour, command by command, on a small demo (the same generator and ingest as `make demo`;
    100 days from 2026-01-05, so March is a whole month), from the directory `make demo` runs in."""
    monkeypatch.chdir(tmp_path)
    assert gpuledger.main(["demo", "--scale", "0.25", "--days", "100", "--no-serve"]) == 0
    assert (tmp_path / "data" / "demo.duckdb").exists()
    monkeypatch.setenv("GPULEDGER_DB", "data/demo.duckdb")
    tour = _readme_commands("## A short tour", until="## On your cluster")
    assert tour[-1] == "dashboard"                    # serves until stopped: not run here
    for cmd in tour[:-1]:
        code = gpuledger.main(shlex.split(cmd))
        err = capsys.readouterr().err
        answered = cmd.startswith("plan") and code == 1 and "no grid point" in err   # a smaller cluster's answer
        assert (code == 0 or answered) and "Traceback" not in err, f"gpuledger {cmd}: exit {code}: {err}"
    assert (tmp_path / "statements" / "chargeback-2026-03.xlsx").exists() and (tmp_path / "forecast.html").exists()
