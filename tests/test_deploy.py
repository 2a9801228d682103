"""deploy/: the systemd units are valid unit files whose commands the CLI accepts; the container recipe runs as
an unprivileged user on Debian; the backup script makes a complete copy while another process holds the
warehouse, waiting for it. (The nginx sites run in real nginx in the browser tests.)"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

import gpuledger
from dashboard_fixtures import lab_db  # noqa: F401 (the shared lab warehouse)

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


BACKUP = DEPLOY / "backup" / "gpuledger-backup.py"
HOLD = """import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
con.close()
"""


def test_backup_waits_for_the_collector_and_copies_every_table(lab_db, tmp_path):
    """While another process holds the warehouse read-write (the collector in a cycle) the backup waits; once it
    is released, the copy has every table and row, the schema version included, and opens on its own."""
    src, dest = tmp_path / "w.duckdb", tmp_path / "backup" / "w-copy.duckdb"
    shutil.copy(lab_db, src)
    dest.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(src)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    busy = subprocess.run([sys.executable, str(BACKUP), str(src), str(dest), "--wait", "0.5"], capture_output=True,
                          text=True)
    assert busy.returncode == 1 and "lock" in busy.stderr and not dest.exists() and len(busy.stderr.splitlines()) == 1
    threading.Timer(1.0, lambda: holder.communicate("release\n")).start()
    done = subprocess.run([sys.executable, str(BACKUP), str(src), str(dest), "--wait", "60"], capture_output=True,
                          text=True)
    holder.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"gpuledger-backup: .* -> .*: \d+ tables, [\d.]+ MB, warehouse held [\d.]+ s\n", done.stdout)
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]          # no temporary file left behind
    counts = "SELECT table_name, estimated_size FROM duckdb_tables() ORDER BY table_name"
    a, b = duckdb.connect(str(src), read_only=True), duckdb.connect(str(dest), read_only=True)
    try:
        tables = [t for (t, _) in a.sql(counts).fetchall()]
        assert tables == [t for (t, _) in b.sql(counts).fetchall()] and "schema_migrations" in tables
        for t in tables:
            q = f'SELECT count(*) FROM "{t}"'
            assert a.sql(q).fetchall() == b.sql(q).fetchall(), t
        assert a.sql("SELECT sum(ngpus * elapsed_s) FROM jobs").fetchall() == \
            b.sql("SELECT sum(ngpus * elapsed_s) FROM jobs").fetchall()
    finally:
        a.close()
        b.close()
