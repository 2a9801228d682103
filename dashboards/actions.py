"""The dashboard's one writing action: closing a chargeback period, for the roles that may (dashboards/access.py).

The role is checked here, in the action on the server, whatever the page showed. The close itself runs as
`gpuledger chargeback --period P --close` in a child process: exactly the CLI's close (freeze, refresh,
republish: models/pipeline/close.py), while the dashboard's own process keeps to reading the snapshot (the
layers contract: dashboards never run the pipeline). The warehouse may be held by the collector (`gpuledger
serve`) during a cycle: the close waits for it, up to ``wait`` seconds, and otherwise says so.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dashboards import access

#: how long a close from the dashboard waits for a collector's cycle to release the warehouse (seconds)
CLOSE_WAIT_S = 30.0
CLI = Path(__file__).resolve().parent.parent / "gpuledger.py"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str


def close_period(scope: access.Scope, db_path: str | os.PathLike, period: str,
                 wait: float = CLOSE_WAIT_S) -> Outcome:
    """Freeze ``period``'s statement, refresh and republish, as ``scope``.

    Raises access.Forbidden for a role that may not close. A refusal (period already closed or not yet covered,
    the warehouse held longer than ``wait``) is an Outcome with ok False and the CLI's one-line reason."""
    access.require(scope, "close")
    env = dict(os.environ, GPULEDGER_LOCK_TIMEOUT=str(wait))
    argv = [sys.executable, str(CLI), "--db", str(db_path), "chargeback", "--period", period, "--close"]
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=wait + 600)
    said = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    last = said[-1] if said else f"exit status {done.returncode}"
    if done.returncode != 0:
        return Outcome(False, last + (" (the collector may be in a long cycle; try again in a minute)"
                                      if "locked" in last else ""))
    closed = next((ln for ln in said if ln.startswith(f"closed {period} ")), None)
    if closed is None:                   # exit 0 without closing: it was closed already
        return Outcome(False, next((ln for ln in said if "already closed" in ln), last))
    return Outcome(True, f"{closed} (by {scope.user or scope.role})")
