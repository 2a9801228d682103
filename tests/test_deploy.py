"""deploy/: the systemd units are valid unit files whose commands the CLI accepts; the container recipe runs as
an unprivileged user on Debian. (The nginx sites run in real nginx in the browser tests.)"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import gpuledger

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def _exec_start(unit: Path) -> list[str]:
    line = next(ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_command_is_one_the_cli_accepts(unit):
    argv = _exec_start(unit)
    assert argv[0] == "/opt/gpuledger/.venv/bin/gpuledger"
    commands = gpuledger.build_parser()._subparsers._group_actions[0].choices
    if argv[1] not in commands:
        pytest.skip(f"`gpuledger {argv[1]}` is not on this branch yet (issue 15 part 1)")
    args = gpuledger.build_parser().parse_args(argv[1:])
    assert args.config == "/etc/gpuledger/gpuledger.toml"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_is_hardened_and_verifies(unit):
    text = unit.read_text()
    for directive in ("User=gpuledger", "NoNewPrivileges=yes", "ProtectSystem=strict",
                      "ReadWritePaths=/var/lib/gpuledger", "CapabilityBoundingSet=", "PrivateTmp=yes",
                      "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "SystemCallFilter=@system-service"):
        assert re.search(rf"^{re.escape(directive)}$", text, re.M), f"{unit.name}: no {directive}"
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    # the only complaint allowed: the command is not installed on this machine
    problems = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()
                and "is not executable: No such file or directory" not in ln]
    assert not problems, problems


def test_container_runs_unprivileged_on_debian():
    text = (DEPLOY / "container" / "Containerfile").read_text()
    assert re.search(r"^FROM \S*python:3\.11-slim-bookworm$", text, re.M)
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] == "gpuledger"
    assert re.search(r'^CMD \["dashboard", "--config", "/etc/gpuledger/gpuledger.toml"\]$', text, re.M)
