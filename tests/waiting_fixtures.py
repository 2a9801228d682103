"""The captured preemption / reservation / pending mix (tests/fixtures/slurm_waiting) loaded through the real
ingestors and refresh: shared by tests/test_squeue.py and tests/test_preemption.py (and the real-Slurm test's
governance)."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

WAITING = ROOT / "tests" / "fixtures" / "slurm_waiting"
GOVERNANCE = '''currency = "EUR"
[[cost_centers]]
id = "RES"
[[cost_centers]]
id = "OPS"
[[teams]]
name = "ml"
cost_center = "RES"
accounts = ["ml"]
[[teams]]
name = "vision"
cost_center = "RES"
accounts = ["vision"]
[[teams]]
name = "infra"
cost_center = "OPS"
accounts = ["infra"]
[[rates]]
gpu_type = "a100"
price_per_gpu_hour = "2.00"
from = 2026-01-01
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "3.60"
from = 2026-01-01
[idle]
policy = "proportional_usage"
'''


def captured_at(path: Path) -> str:
    """The UTC time a capture was taken, from its .cmd file."""
    return re.search(r"captured (\S+)Z", Path(f"{path}.cmd").read_text()).group(1)


def squeue_files() -> list[str]:
    """FILE@TIME arguments for every captured squeue snapshot."""
    return [f"{p}@{captured_at(p)}Z" for p in sorted(WAITING.glob("squeue-*.psv"))]


def build(db: Path) -> Path:
    """The fixture warehouse: sacct, nodes, governance, squeue snapshots, reservations, refreshed."""
    import gpuledger
    tmp = db.parent
    (tmp / "gov.toml").write_text(GOVERNANCE)
    steps = [["ingest", "sacct", "--no-refresh", str(WAITING / "sacct-allocations.psv")],
             ["ingest", "nodes", "--no-refresh", "--cluster", "glcluster", "--as-of", "2026-12-04T05:00:00Z",
              str(WAITING / "scontrol-show-node-o.txt")],
             ["ingest", "governance", "--no-refresh", str(tmp / "gov.toml")],
             ["ingest", "squeue", "--no-refresh", *squeue_files()],
             ["ingest", "reservations", "--no-refresh", str(WAITING / "scontrol-show-reservation-o.txt"),
              str(WAITING / "sacctmgr-reservation.psv")],
             ["refresh"]]
    for argv in steps:
        assert gpuledger.main(["--db", str(db), "-q", *argv]) == 0, argv
    return db


_BUILT: dict[str, Path] = {}


def shared_db(tmp_path_factory) -> Path:
    """:func:`build` once per test process (the tests only read it)."""
    if "db" not in _BUILT:
        _BUILT["db"] = build(tmp_path_factory.mktemp("waiting") / "w.duckdb")
    return _BUILT["db"]
