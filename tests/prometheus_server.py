"""A real Prometheus (Debian's package) for tests: backfilled from an OpenMetrics file, on 127.0.0.1.

What bites (../shared/realbox/PROMETHEUS_GOTCHAS.txt): OpenMetrics timestamps are SECONDS, the file must end
with ``# EOF``, a series' samples must be in time order, blocks must be written before the server starts, and
retention counts back from the newest block (hence ``--storage.tsdb.retention.time=100y``).
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest


def binaries() -> tuple[str, str]:
    """Paths of prometheus and promtool, or skip the test saying why."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom or not tool:
        pytest.skip("the prometheus package (prometheus + promtool) is not installed; .ci/run installs it")
    return prom, tool


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openmetrics(families: dict[str, list[tuple[str, list[tuple[int, float]]]]]) -> str:
    """OpenMetrics text: ``{metric: [(label_text, [(epoch_seconds, value), ...]), ...]}``, gauges, ``# EOF``."""
    out = []
    for name, series in families.items():
        out.append(f"# TYPE {name} gauge\n")
        for labels, points in series:
            out.extend(f"{name}{{{labels}}} {v} {t}\n" for t, v in sorted(points))
    out.append("# EOF\n")
    return "".join(out)


@dataclass
class PromServer:
    url: str
    proc: subprocess.Popen
    log: Path

    def restart(self, ready_timeout_s: float = 60.0) -> None:
        """Start the stopped server again: same data, same port, same configuration."""
        self.stop()
        with open(self.log, "ab") as lf:
            self.proc = subprocess.Popen(self.proc.args, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_ready(self, ready_timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start(om: str | Path, workdir: Path, ready_timeout_s: float = 60.0, scrape: tuple[str, ...] = (),
          scrape_interval: str = "1m", backfill: bool = True) -> PromServer:
    """Backfill ``om`` (OpenMetrics text, or the Path of such a file) with promtool, then start prometheus on
    a free port; returns when /-/ready. ``scrape``: HOST:PORT targets whose /metrics it scrapes (job "scrape")
    every ``scrape_interval``. ``backfill=False`` serves ``workdir``'s data as an earlier start left it (a
    benchmark's cached store; ``om`` is not read)."""
    prom, tool = binaries()
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    if backfill:
        if not isinstance(om, Path):
            (workdir / "backfill.om").write_text(om, encoding="utf-8")
            om = workdir / "backfill.om"
        done = subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                              capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"promtool failed: {done.stderr.strip() or done.stdout.strip()}")
    conf = workdir / "prometheus.yml"
    jobs = ("\n  - job_name: scrape\n    static_configs:\n      - targets: [" + ", ".join(f'"{t}"' for t in scrape)
            + "]\n") if scrape else " []\n"
    conf.write_text(f"global:\n  scrape_interval: {scrape_interval}\nscrape_configs:{jobs}", encoding="utf-8")
    port = free_port()
    log = workdir / "prometheus.log"
    with open(log, "wb") as lf:
        proc = subprocess.Popen([prom, f"--config.file={conf}", f"--storage.tsdb.path={data}",
                                 "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
                                 "--log.level=warn"], stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = PromServer(f"http://127.0.0.1:{port}", proc, log)
    _wait_ready(server, ready_timeout_s)
    return server


def _wait_ready(server: PromServer, ready_timeout_s: float) -> None:
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited ({server.proc.returncode}): {server.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(server.url + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"prometheus not ready after {ready_timeout_s} s: {server.log.read_text()[-2000:]}")
