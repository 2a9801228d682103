"""The CLI contract: every command of DESIGN.md exists, explains itself, and bad usage exits 2."""
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
