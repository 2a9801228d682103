"""Serving the dashboards: `streamlit run dashboards/app.py` on 127.0.0.1, pointed at one warehouse.

The server process reads only the serving view ``X.serving/`` (see dashboards.snapshot); it is told which warehouse
through ``$GPULEDGER_DB``. ``serve`` blocks (the CLI and the demo call it); ``start`` returns the process
(tests, benchmarks).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from dashboards import access, theme
from dashboards.budget import BUDGET
from ingest import warehouse

APP = Path(__file__).resolve().parent / "app.py"


class PortInUse(Exception):
    """The chosen port is taken; the message names it."""


def command(port: int, host: str = "127.0.0.1", app: str | os.PathLike = APP) -> list[str]:
    """The `streamlit run` command line: headless, no telemetry, no file watcher, our theme.

    Safe behind a proxy: uncaught exceptions show viewers a generic message only (``showErrorDetails none``:
    no type, message or traceback; "false" would still show the traceback), XSRF protection on, and CORS
    protection on (``enableCORS true``: no ``Access-Control-Allow-Origin: *``, websockets from this origin
    only), the experimental agent API off. Streamlit sets no other security headers; deploy/nginx/gpuledger.conf
    adds them. ``app``: another entry script served the same way (the browser benchmark's framework floor).
    ``dashboards.launch`` is Streamlit's command line after importing what the pages need and starting the
    warm-up (see there).

    Static assets: Streamlit 1.67 serves its JavaScript bundles uncompressed by design (starlette_gzip_middleware:
    compressing per request at the origin costs CPU on every hit); the nginx site compresses them
    (deploy/nginx/gpuledger.conf), which is what users behind it get."""
    argv = [sys.executable, "-m", "dashboards.launch", "run", str(app),
            "--server.headless", "true", "--server.address", host, "--server.port", str(port),
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--server.runOnSave", "false", "--client.toolbarMode", "viewer", "--client.showErrorDetails", "none",
            "--server.enableXsrfProtection", "true", "--server.enableCORS", "true",
            "--server.enableAgentApi", "false",
            # every cached view together stays inside the memory budget's share (dashboards/budget.py)
            "--server.maxCacheDataSize", f"{BUDGET.views // 1024 ** 2}mb",
            "--logger.level", "warning"]
    for k, v in theme.STREAMLIT_THEME.items():
        argv += [f"--{k}", v]
    return argv


def check_port(port: int, host: str = "127.0.0.1") -> None:
    """Raise PortInUse if a server is listening on ``host``:``port``.

    With SO_REUSEADDR, as Streamlit binds its own socket: a socket of a server just stopped lingers in TIME_WAIT
    for about a minute, and without the option the probe would refuse the port that whole time, so a supervised
    restart on the same port would fail. A port some process still listens on is refused either way."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise PortInUse(f"port {port} on {host} is in use ({exc.strerror}); choose another with --port") from exc


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def environment(db_path: str | os.PathLike, config: str | os.PathLike | None = None,
                app: str | os.PathLike = APP) -> dict[str, str]:
    """The server process's environment: this one's, plus the warehouse, the access configuration, DuckDB's
    memory limit, and whether to warm up the dashboard's views and preload its chart code in the page shell
    (dashboards/page_shell.py), only for the dashboard's own entry script: another one, the browser benchmark's
    floor, has no use for the views, which would take a core while its pages draw, and is Streamlit as shipped."""
    ours = "1" if Path(app).resolve() == APP else "0"
    env = dict(os.environ, GPULEDGER_DB=str(Path(db_path).resolve()),
               GPULEDGER_DASHBOARD_PREWARM=ours, GPULEDGER_DASHBOARD_PRELOAD=ours,
               # the app must see the connection's own peer (the proxy), never an address from X-Forwarded-For:
               # uvicorn would otherwise take the client address from that header for connections from loopback
               FORWARDED_ALLOW_IPS="")
    if config is not None:
        env[access.CONFIG_ENV] = str(Path(config).resolve())
    # DuckDB's share of the memory budget, unless the administrator set a limit for every connection
    env.setdefault(warehouse.ENV_MEMORY_LIMIT, f"{BUDGET.duckdb // 1024 ** 2}MB")
    return env


def start(db_path: str | os.PathLike, port: int, host: str = "127.0.0.1", quiet: bool = False,
          config: str | os.PathLike | None = None, app: str | os.PathLike = APP, stdout=None) -> subprocess.Popen:
    """Start the server in a child process serving ``db_path``'s snapshot; returns at once.

    ``config``: the service configuration file whose ``[access]`` table says whom to serve (dashboards/access.py),
    passed to the app as ``$GPULEDGER_CONFIG``; without one the app serves the local machine only. ``stdout``:
    where its output goes (a file for benchmarks; default inherited, or nowhere if ``quiet``)."""
    check_port(port, host)
    env = environment(db_path, config, app)
    out = subprocess.DEVNULL if quiet else stdout
    return subprocess.Popen(command(port, host, app), env=env, stdout=out,
                            stderr=subprocess.STDOUT if out is not None else None)


def wait_ready(url: str, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    """Wait until Streamlit answers its health check, or raise (naming the URL) if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the dashboard server exited with status {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def serve(db_path: str | os.PathLike, port: int = 8501, host: str = "127.0.0.1",
          config: str | os.PathLike | None = None) -> int:
    """Serve the dashboards for ``db_path`` until interrupted; prints the address. Returns the exit status."""
    proc = start(db_path, port, host, config=config)
    # A SIGTERM (service manager, test harness) must stop the Streamlit child too, not orphan it.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    url = f"http://{host}:{port}"
    try:
        wait_ready(url, proc)
        print(f"gpuledger dashboard: {url}  (reading {warehouse.serving_path(db_path)}; Ctrl-C to stop)",
              file=sys.stderr, flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
