"""Two real processes: the dashboard keeps serving while `gpuledger ingest` runs, and no ingest ever fails or
waits because a dashboard is open (the dashboard reads only the serving snapshot, which each ingest replaces).

The dashboard process runs the real app script (Streamlit's AppTest, in its own Python process) in a loop on
the Data health page and reports what it saw; the ingest process is the `gpuledger` CLI with no lock patience
(GPULEDGER_LOCK_TIMEOUT=0), so any lock the dashboard held would fail it at once.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_copy, lab_db  # noqa: F401 (fixtures)

READER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from streamlit.testing.v1 import AppTest
    from dashboards import queries
    stop = Path(sys.argv[1])
    at = AppTest.from_file(sys.argv[2], default_timeout=120)
    at.run()
    at.switch_page("views/data_health.py")
    while True:
        last = stop.exists()   # one more run after the stop: it starts after every ingest has published
        t0 = time.time()
        at.run()
        runs = [m.value for m in at.metric if m.label == "Runs"]
        print(json.dumps({"t0": t0, "t1": time.time(), "version": queries.current().version,
                          "runs": runs[0] if runs else None, "exceptions": [e.value for e in at.exception],
                          "errors": [e.value for e in at.error]}), flush=True)
        if last:
            break
""")


def _late_jobs(path: Path, first_id: int, n: int) -> Path:
    """A further sacct export: n more jobs pending at the export time (new job ids)."""
    header = (dfx.FIX / "sacct.psv").read_text().splitlines()[0]
    lines = [header] + [
        f"{i}|{i}|lab|gpu|normal|nlp|alice|PENDING|0:0|2026-10-20T11:5{k % 10}:00|2026-10-20T11:5{k % 10}:00|Unknown|"
        f"Unknown|00:00:00|04:00:00|1|8||billing=8,cpu=8,gres/gpu=2,mem=32G,node=1|None assigned|late-{i}"
        for k, i in enumerate(range(first_id, first_id + n))]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ingest_runs_while_the_dashboard_serves(lab_copy, tmp_path):
    stop = tmp_path / "stop"
    env = dict(os.environ, GPULEDGER_DB=str(lab_copy), GPULEDGER_LOCK_TIMEOUT="0")
    reader = subprocess.Popen([sys.executable, "-c", READER, str(stop), str(dfx.APP)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(reader.stdout.readline())            # the dashboard is up and has read the snapshot
        assert first["runs"] is not None and not first["exceptions"], first
        ingests = []
        for k in range(2):
            f = _late_jobs(tmp_path / f"late{k}.psv", 3000 + 10 * k, 5)
            t0 = time.time()
            done = subprocess.run([sys.executable, "-m", "gpuledger", "--db", str(lab_copy), "ingest", "sacct",
                                   str(f)], env=env, capture_output=True, text=True, timeout=300)
            ingests.append((t0, time.time()))
            assert done.returncode == 0, done.stderr        # never "warehouse is locked": the dashboard holds no lock
            assert "loaded 5" in done.stderr
        stop.write_text("stop")
        out, err = reader.communicate(timeout=300)
    finally:
        if reader.poll() is None:
            reader.kill()
    views = [first] + [json.loads(line) for line in out.splitlines() if line.strip()]
    assert reader.returncode == 0, err[-2000:]
    assert all(not v["exceptions"] and not v["errors"] for v in views), [v for v in views if v["exceptions"]]
    # the dashboard kept answering while an ingest was running ...
    during = [v for v in views for a, b in ingests if v["t0"] < b and v["t1"] > a]
    assert during, "no dashboard run overlapped an ingest"
    # ... and picked up each new snapshot: two more ingest runs, seen without a restart
    assert int(views[-1]["runs"]) == int(first["runs"]) + 2
    assert len({v["version"] for v in views}) >= 2


@pytest.mark.browser
def test_browser_session_sees_new_snapshot_after_ingest(lab_copy, tmp_path):
    """The real server and a real browser: an open dashboard page does not stop an ingest, and a reload shows it
    once the server has computed the new snapshot's views (seconds on the lab; meanwhile the page shows the
    previous snapshot and says a newer one is being prepared: dashboards/prewarm.py)."""
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("Debian's chromium (/usr/bin/chromium) is not installed")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (dev extra) is not installed")
    from dashboards.server import free_port, wait_ready
    port = free_port()
    env = dict(os.environ, GPULEDGER_LOCK_TIMEOUT="0")
    log = tmp_path / "dashboard.log"
    server = subprocess.Popen([sys.executable, "-m", "gpuledger", "--db", str(lab_copy), "dashboard", "--port",
                               str(port)], env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    url = f"http://127.0.0.1:{port}/data_health"
    try:
        try:
            wait_ready(f"http://127.0.0.1:{port}", server, timeout=120)
        except (RuntimeError, TimeoutError) as exc:
            raise AssertionError(f"{exc}; its stderr: {log.read_text()[-2000:]}") from exc
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})

            def runs_shown() -> int:
                page.goto(url)
                # the tile labelled exactly "Runs": has_text="Runs" also matches "Failed runs" (case-insensitive), which
                # a loaded clean-clone run read as 0 before the "Runs" tile was drawn
                tile = page.locator("[data-testid='stMetric']").filter(
                    has=page.locator("[data-testid='stMetricLabel']").get_by_text("Runs", exact=True)).first
                tile.wait_for(timeout=120_000)
                return int(tile.locator("[data-testid='stMetricValue']").inner_text().replace(",", ""))

            def preparing() -> bool:
                return page.get_by_text("A newer snapshot (published").count() > 0

            before = runs_shown()
            f = _late_jobs(tmp_path / "late.psv", 4000, 3)
            done = subprocess.run([sys.executable, "-m", "gpuledger", "--db", str(lab_copy), "ingest", "sacct",
                                   str(f)], env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            deadline = time.monotonic() + 120
            while (shown := runs_shown()) == before and time.monotonic() < deadline:
                assert preparing(), "the previous snapshot is shown without saying a newer one is being prepared"
                time.sleep(1)
            assert shown == before + 1 and not preparing()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
