"""Shared fixtures: a fresh warehouse per test, paths to fixtures and to ../shared (optional)."""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import settings
from xdist.scheduler import LoadFileScheduling

# `make test` is a regression check: the same examples on every run, so a green run here is a green CI run.
# Exploring new examples is the benchmarks' job (benchmarks/fuzz_ingest.py) or HYPOTHESIS_PROFILE=explore.
# No deadline: a property's examples are checked for what they compute, not how fast, and a loaded CI machine
# (an example of test_budgets took 303 ms against the default 200 ms) must not fail the suite.
settings.register_profile("suite", derandomize=True, database=None, deadline=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = Path(os.environ.get("GPULEDGER_SHARED", ROOT.parent / "shared"))


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "warehouse.duckdb"


@pytest.fixture(scope="session")
def empty_warehouse(tmp_path_factory) -> Path:
    """A warehouse file with every migration applied and nothing else, made once per test process."""
    from ingest import warehouse
    path = tmp_path_factory.mktemp("empty-warehouse") / "warehouse.duckdb"
    warehouse.connect(path).close()
    return path


@pytest.fixture
def con(db_path, empty_warehouse):
    """A fresh warehouse: a copy of the migrated empty one (0.03 s, where migrating a new file takes 0.15 s and
    hundreds of tests start from one; tests/test_warehouse.py migrates new files itself)."""
    from ingest import warehouse
    shutil.copyfile(empty_warehouse, db_path)
    c = warehouse.connect(db_path)
    yield c
    c.close()


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test saying why (GPL/LGPL samples are not copied here)."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent: this sample is GPL/LGPL-licensed or too large, so it stays in ../shared")
    return p


@pytest.fixture
def run_cli(db_path, capsys):
    """Run the gpuledger CLI in-process against the test's warehouse; returns (exit status, stdout, stderr)."""
    import gpuledger

    def run(*argv: str):
        code = gpuledger.main(["--db", str(db_path), *argv])
        out = capsys.readouterr()
        return code, out.out, out.err
    return run


#: Modules that mostly wait (on a real Slurm's job mix, a browser, a server) run first: under `make test`'s
#: workers (pytest-xdist, one module per worker at a time) their waiting overlaps the CPU-bound modules.
#: test_service.py takes the real Slurm after test_slurm_integration.py releases it: early, but not so early that
#: its worker waits for the lock (left to the alphabet it started last and set the suite's tail).
#: Under `make test` xdist's loadscope reorder (modules with the most tests first) overrides this order except
#: among modules of equal size; keeping it whole measured slower (docs/BENCHMARKS.md, the test suite's time).
WAITING_FIRST = ("test_slurm_integration.py", "test_dashboard_browser.py", "test_dashboard_access_browser.py",
                 "test_dashboard_concurrency.py", "test_prometheus.py", "test_service.py",
                 "test_traces_genai.py", "test_cli_docs.py")


#: The modules that take turns on the one real Slurm (tests/slurm/up.sh; test_slurm_integration's lock). Run by
#: different workers, one waited for the lock while the other waited on Slurm's jobs: two of the three workers idle
#: at once, a core unused. As one work unit they run in turn on one worker while the other two use both cores.
REAL_SLURM = ("test_slurm_integration.py", "test_service.py")


class _RealSlurmTogether(LoadFileScheduling):
    """`--dist loadfile`, except that the real-Slurm modules are one work unit (one worker, in turn)."""

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)
        return "real-slurm" if Path(scope).name in REAL_SLURM else scope


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return _RealSlurmTogether(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        name = item.path.name
        return WAITING_FIRST.index(name) if name in WAITING_FIRST else len(WAITING_FIRST)
    items.sort(key=rank)   # stable: within a module, and among the rest, the collection order stays


@pytest.fixture(autouse=True)
def _thread_priority_kept():
    """Restore the test thread's CPU priority: product code may lower its own thread's (dashboards/prewarm.py's
    warm-up, called here in the main thread), and every later module on that xdist worker then ran at nice 10,
    behind the other worker and everything else on the machine. (Raising it back needs root, as in CI; elsewhere
    the thread stays lowered.)"""
    tid = threading.get_native_id()
    before = os.getpriority(os.PRIO_PROCESS, tid)
    yield
    if os.getpriority(os.PRIO_PROCESS, tid) != before:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, before)
