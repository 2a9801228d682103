"""What a manager waits for in a real browser: every dashboard page on the 5,000,000-job year, against Streamlit's
own floor (a page with a title and one small chart, served the same way, in the same run).

Chromium (Debian's, through Playwright), a fresh browser context for every visit (no HTTP cache, no code cache,
no session), 1400 x 900 viewport. A visit's time is from navigation start to the page **drawn**: every chart it
draws is drawn (``.js-plotly-plot`` with its ``.main-svg``, not stale) and Streamlit's running indicator
(``stStatusWidget``) is gone, the later of the two. The page counts as settled after 1.5 s with neither a new
chart nor the indicator; the time reported is when that state began, read from the page's own clock
(``performance.now()``, recorded every animation frame by an init script), not from Playwright's polling.

Cases, per page (each page gets its own server start and its own publication, so every "first" is a first):

- ``cold``: the first visit after the server process started (``/_stcore/health`` answers);
- ``warm``: a visit to a warm server: one whose warm-up (dashboards/prewarm.py) has computed the views of its
  three windows, as its log says (the report prints how long after the start that was). Until 2026-12-05 this
  was the second visit, seconds after the start, while the warm-up still computed the longer windows on the
  cores the browser drew with: a server still warming up, between the two cases;
- ``90d``, ``1y``: then the first visit with the window of the last 90 days / the last year (``?window=90d``, the
  link the sidebar's preset writes into the URL);
- ``snapshot``: the first visit after the warehouse published a new serving snapshot: an ingest run that found
  no new line, the marts' refresh and ``publish_serving`` (a quiet 15-minute cycle of the collector), which gives
  a new version (checked). The pages show the previous snapshot until the new one's default views are computed
  (dashboards/prewarm.py): the report says which the visit showed, and how long after the publication the server
  showed the new one.

The floor's cases: cold (first visit after its server started, at the start of each run) and warm (the median of
one visit before each page's cases, the floor's server staying up through the run, so that the floor is measured
under the same changing load as the pages); a page's ``cold`` is compared with the floor's cold, every other case
with the floor's warm. Targets: every page <= 1.5x the floor in every case, the
first visit after a server start <= 2x. Also printed per page (medians): when the plotly bundle finished
downloading, the first chart, and the server's RSS. Run under the heavy lock; other jobs share the 2 cores:

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/dashboard_browser_speed.py [--runs 1]
        [--pages overview,utilization] [--proxy]   # --proxy: through deploy/nginx/gpuledger.conf in a real nginx
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dashboards import server  # noqa: E402

PAGES = ["overview", "utilization", "efficiency", "fragmentation", "fairness", "chargeback", "forecast",
         "data_health"]
CASES = ["cold", "warm", "90d", "1y", "snapshot"]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}
QUIET_MS = 1500
TARGET, TARGET_COLD = 1.5, 2.0

FLOOR_APP = '''import plotly.graph_objects as go
import streamlit as st
st.title("Floor")
st.plotly_chart(go.Figure(go.Scatter(x=[1, 2, 3, 4], y=[3, 1, 4, 1])), key="floor")
'''

#: Records, every animation frame, how many charts are drawn and whether the script is running; the visit is
#: settled once neither changed for QUIET_MS. window.__drawn = {t, charts, first, settled}.
RECORDER = """
(() => {
  const s = {charts: 0, t: 0, first: null, changed: 0, running: false, settled: false};
  window.__drawn = s;
  const tick = () => {
    const plots = [...document.querySelectorAll('.js-plotly-plot')]
      .filter(p => p.querySelector('.main-svg') && !p.closest('[data-stale="true"]')).length;
    const running = !!document.querySelector('[data-testid="stStatusWidget"]');
    const now = performance.now();
    if (plots !== s.charts || running !== s.running) {
      if (plots > s.charts && s.first === null) s.first = now;
      s.charts = plots; s.running = running; s.changed = now;
      if (!running) s.t = now;
    }
    const started = document.querySelector('[data-testid="stMain"] h1');
    s.settled = !!started && !running && (plots > 0 || now > 20000) && now - s.changed > %d;
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})();
""" % QUIET_MS


def rss_tree_mb(pid: int) -> float:
    """Resident memory of a process and its descendants (MB)."""
    try:
        out = subprocess.run(["ps", "-o", "pid=,ppid=,rss=", "-e"], capture_output=True, text=True).stdout
    except OSError:
        return float("nan")
    rows = [tuple(int(x) for x in ln.split()) for ln in out.splitlines() if ln.strip()]
    kids: dict[int, list[int]] = {}
    rss = {}
    for p, pp, r in rows:
        kids.setdefault(pp, []).append(p)
        rss[p] = r
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += kids.get(p, [])
    return total / 1024


class Server:
    """One dashboard (or floor) server process on a free port, with its log."""

    def __init__(self, db: Path, app: Path, log: Path):
        self.port = server.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("a")
        t = time.perf_counter()
        self.proc = server.start(db, self.port, app=app, stdout=self.log)
        server.wait_ready(self.url, self.proc, timeout=120)
        self.ready_s = time.perf_counter() - t      # process start to the health check answering

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def visit(browser, url: str, timeout_s: float = 240) -> dict:
    """One visit in a fresh context: {t: seconds to drawn, charts, first: first chart, bundle: plotly bundle
    downloaded} (seconds from navigation start)."""
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        page = ctx.new_page()
        page.add_init_script(RECORDER)
        page.goto(url, wait_until="commit")
        page.wait_for_function("() => window.__drawn && window.__drawn.settled", polling=200,
                               timeout=timeout_s * 1000)
        d = page.evaluate("() => window.__drawn")
        bundle = page.evaluate("() => Math.max(0, ...performance.getEntriesByType('resource')"
                               ".filter(e => /PlotlyChart/.test(e.name)).map(e => e.responseEnd))")
        failed = page.locator("[data-testid='stException']").count() + page.get_by_text("could not be computed").count()
        # the sidebar's note while the pages show the previous snapshot (dashboards/prewarm.py)
        previous = page.get_by_text("A newer snapshot (published").count() > 0
        return {"t": d["t"] / 1000, "charts": d["charts"], "first": (d["first"] or 0) / 1000, "bundle": bundle / 1000,
                "failed": failed, "previous": previous}
    finally:
        ctx.close()


def page_url(base: str, page: str, window: str | None = None) -> str:
    path = "" if page == "overview" else page
    return f"{base}/{path}" + (f"?window={window}" if window else "")


def publish(db: Path) -> tuple[float, str]:
    """(seconds, new version) to publish a new snapshot as the collector's quiet 15-minute cycle does
    (models/service/loop.py): an ingest run that found no new line (its ``ingest_runs`` row is new content), the
    marts' incremental refresh that any new run triggers, then the publish. A publish without a change keeps the
    version, and the visit after it would be a warm one (before 2026-12-04 19:50 the ``snapshot`` case measured
    that). Before 2026-12-05 the refresh was left out: every page measured after the first ran on marts one run
    behind, which the models do not trust, so their reads fell back to the jobs (the forecast page's history
    8 s, its peaks 10 s), a state the service never publishes."""
    from ingest import warehouse
    from models.pipeline import refresh
    t = time.perf_counter()
    con = warehouse.connect(db)
    try:
        before = warehouse.read_manifest(db)["version"]
        with warehouse.IngestRun(con, "sacct", "benchmark: a cycle with no new line", cluster="orion"):
            pass
        refresh.run(con, db)                # and its publish
        after = warehouse.read_manifest(db)["version"]
        if after == before:
            raise SystemExit(f"{db}: the publish kept version {before}: the 'snapshot' case would not be one")
    finally:
        con.close()
    return time.perf_counter() - t, after


def shown_after(log: Path, version: str, timeout_s: float = 300) -> float:
    """Seconds from the publication of ``version`` until the pages showed it (its default views computed,
    dashboards/prewarm.py), as the server's log says; waits up to ``timeout_s`` for that line (NaN without)."""
    line = re.compile(rf"showing snapshot {re.escape(version)}, ([\d.]+) s after its publication")
    deadline = time.perf_counter() + timeout_s
    while True:
        m = line.search(log.read_text())
        if m or time.perf_counter() > deadline:
            return float(m.group(1)) if m else float("nan")
        time.sleep(0.5)


def warmed_after(log: Path, offset: int, t0: float, timeout_s: float = 600) -> float:
    """Seconds from ``t0`` (perf_counter) until the server whose log starts at ``offset`` said its warm-up
    finished (dashboards/prewarm.py: "warmed N views"); waits up to ``timeout_s`` (NaN without)."""
    deadline = time.perf_counter() + timeout_s
    while "gpuledger dashboard: warmed " not in log.read_text()[offset:]:
        if time.perf_counter() > deadline:
            return float("nan")
        time.sleep(0.25)
    return time.perf_counter() - t0


def run_page(browser, db: Path, page: str, log: Path, proxy_for=None) -> dict[str, dict]:
    """Every case of one page on one fresh server (see the module docstring)."""
    offset = len(log.read_text()) if log.exists() else 0
    srv = Server(db, server.APP, log)
    t_ready = time.perf_counter()
    out = {}
    try:
        base = proxy_for(srv.url) if proxy_for else srv.url
        out["ready"] = {"t": srv.ready_s}
        out["cold"] = visit(browser, page_url(base, page))
        out["warmed_s"] = {"t": warmed_after(log, offset, t_ready)}
        out["warm"] = visit(browser, page_url(base, page))
        out["90d"] = visit(browser, page_url(base, page, "90d"))
        out["1y"] = visit(browser, page_url(base, page, "1y"))
        publish_s, version = publish(db)
        out["publish_s"] = {"t": publish_s}
        out["snapshot"] = visit(browser, page_url(base, page))
        out["shown_s"] = {"t": shown_after(log, version)}
        out["rss"] = {"t": rss_tree_mb(srv.proc.pid)}
    finally:
        srv.stop()
        if proxy_for:
            proxy_for(None)
    return out


class Floor:
    """The floor's server for one run: its cold visit at the start, then a warm visit before each page's cases,
    so the floor is measured across the run's changing load as the pages are (until 2026-12-05 21:45: one warm
    visit at the run's start, whose noise moved every ratio of the run)."""

    def __init__(self, browser, db: Path, app: Path, log: Path, proxy_for=None):
        self.browser, self.proxy_for = browser, proxy_for
        self.srv = Server(db, app, log)
        self.base = proxy_for(self.srv.url) if proxy_for else self.srv.url
        self.ready = {"t": self.srv.ready_s}
        self.cold = visit(browser, f"{self.base}/")
        self.warm: list[dict] = []

    def visit_warm(self) -> dict:
        self.warm.append(visit(self.browser, f"{self.base}/"))
        return self.warm[-1]

    def stop(self) -> dict[str, dict]:
        """Stop the server; the run's floor: ready, cold, and warm as the median of its warm visits."""
        self.srv.stop()
        if self.proxy_for:
            self.proxy_for(None)
        ts = [v["t"] for v in self.warm]
        warm = {"t": statistics.median(ts), "bundle": statistics.median(v["bundle"] for v in self.warm),
                "min": min(ts), "max": max(ts), "n": len(ts)}
        return {"ready": self.ready, "cold": self.cold, "warm": warm}


def _nginx(prefix: Path):
    """A function upstream URL -> the URL of deploy/nginx/gpuledger.conf in a real nginx in front of it
    (None stops it)."""
    state = {}

    def proxy_for(upstream: str | None):
        if state.get("proc"):
            state["proc"].terminate()
            state["proc"].wait(timeout=10)
            state.clear()
        if upstream is None:
            return None
        port = server.free_port()
        site = (ROOT / "deploy" / "nginx" / "gpuledger.conf").read_text()
        site = site.replace("server 127.0.0.1:8501;", f"server 127.0.0.1:{upstream.rsplit(':', 1)[1]};")
        site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
        (prefix / "gpuledger.conf").write_text(site)
        temp = " ".join(f"{d}_temp_path {prefix / d};" for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (prefix / "nginx.conf").write_text(
            f"daemon off; master_process off; worker_processes 1; pid {prefix / 'nginx.pid'};\n"
            f"error_log {prefix / 'error.log'} warn;\nevents {{ worker_connections 256; }}\n"
            f"http {{ include /etc/nginx/mime.types; access_log off; {temp}\n"
            f"       include {prefix / 'gpuledger.conf'}; }}\n")
        state["proc"] = subprocess.Popen(["/usr/sbin/nginx", "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
                                          "-e", str(prefix / "error.log")], stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(url, state["proc"], timeout=20)
        return url
    return proxy_for


def med(runs: list[dict], page: str, case: str, field: str = "t") -> float:
    vals = [r[page][case][field] for r in runs if case in r.get(page, {})]
    return statistics.median(vals) if vals else float("nan")


def report(runs: list[dict], pages: list[str]) -> bool:
    fc, fw = med(runs, "floor", "cold"), med(runs, "floor", "warm")
    lo, hi = min(r["floor"]["warm"]["min"] for r in runs), max(r["floor"]["warm"]["max"] for r in runs)
    print(f"\nfloor (title + one small chart): cold {fc:.2f} s, warm {fw:.2f} s (its visits {lo:.2f}-{hi:.2f} s; "
          f"plotly bundle downloaded at {med(runs, 'floor', 'warm', 'bundle'):.2f} s)")
    print(f"{'page':<14}" + "".join(f"{c:>17}" for c in CASES) + f"{'charts':>8}{'1st chart':>10}{'RSS MB':>8}")
    ok = True
    for p in pages:
        cells = []
        for c in CASES:
            t = med(runs, p, c)
            ratio = t / (fc if c == "cold" else fw)
            good = ratio <= (TARGET_COLD if c == "cold" else TARGET)
            ok &= good
            cells.append(f"{t:6.2f} s {ratio:4.2f}x{'' if good else '!'}")
        charts = sorted({r[p]["warm"]["charts"] for r in runs if p in r})
        print(f"{p:<14}" + "".join(f"{c:>17}" for c in cells)
              + f"{'/'.join(map(str, charts)):>8}{med(runs, p, 'warm', 'first'):>9.2f}s{med(runs, p, 'rss'):>8.0f}")
    failed = sorted({(p, c) for r in runs for p in pages for c in CASES if r.get(p, {}).get(c, {}).get("failed")})
    if failed:
        print(f"pages that showed an error: {failed}")
    print(f"targets: <= {TARGET}x the floor's warm, first visit after a server start <= {TARGET_COLD}x the floor's "
          f"cold ('!' marks a miss); medians of {len(runs)} runs; the quiet cycle (refresh, publish) "
          f"{med(runs, pages[0], 'publish_s'):.1f} s")
    for p in pages:
        prev = sum(bool(r[p]["snapshot"].get("previous")) for r in runs if p in r)
        print(f"{p}: the visit after a new snapshot showed the previous one in {prev} of {len(runs)} runs; the new "
              f"one was shown {med(runs, p, 'shown_s'):.1f} s after its publication (median)")
    warmed = [r[p]["warmed_s"]["t"] for r in runs for p in pages if p in r]
    print(f"the warm-up of the three windows finished {min(warmed):.1f}-{max(warmed):.1f} s after the server was "
          f"ready (the warm, 90d and 1y visits come after it)")
    ready = statistics.median(r[p]["ready"]["t"] for r in runs for p in pages if p in r)
    print(f"server start to ready (health check answers): floor {med(runs, 'floor', 'ready'):.1f} s, dashboard "
          f"{ready:.1f} s (it imports its libraries and draws one figure of each kind before it listens)")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="a warehouse with marts (default: the cached synthetic year)")
    # one run of the 8 pages takes ~15 min on the loaded 2-core machine (a server start, 5 visits and a publish
    # per page): the default fits the integrator's unattended 15 minutes; --runs 3 for medians
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--pages", default=",".join(PAGES))
    ap.add_argument("--proxy", action="store_true", help="through deploy/nginx/gpuledger.conf in a real nginx")
    a = ap.parse_args(argv)
    pages = [p.strip() for p in a.pages.split(",") if p.strip()]
    from playwright.sync_api import sync_playwright
    from benchmarks.dashboard_speed import serving_copy
    if a.db:
        src = Path(a.db)
    else:
        from benchmarks._year import year_warehouse
        src = year_warehouse(marts=True)
    with tempfile.TemporaryDirectory(prefix="gpuledger-browser-") as tmp:
        tmp = Path(tmp)
        db, publish_s = serving_copy(src, tmp, refresh=False)
        app = tmp / "floor.py"
        app.write_text(FLOOR_APP)
        log = tmp / "server.log"
        proxy_for = floor_proxy = None
        if a.proxy:          # one nginx for the page's server, one for the floor's (both are up at once)
            (tmp / "nginx").mkdir()
            (tmp / "nginx-floor").mkdir()
            proxy_for, floor_proxy = _nginx(tmp / "nginx"), _nginx(tmp / "nginx-floor")
        print(f"warehouse {src}; snapshot published in {publish_s:.1f} s; load average {os.getloadavg()[0]:.2f}",
              flush=True)
        runs = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            for i in range(a.runs):
                run, fl = {}, Floor(browser, db, app, log, floor_proxy)
                try:
                    for p in pages:
                        fw = fl.visit_warm()['t']
                        run[p] = run_page(browser, db, p, log, proxy_for)
                        print(f"run {i + 1}: {p:<14}" + "  ".join(f"{c} {run[p][c]['t']:.2f}" for c in CASES)
                              + f"  (floor warm before it {fw:.2f}; charts {run[p]['warm']['charts']}, load "
                              f"{os.getloadavg()[0]:.2f}; warm {run[p]['warmed_s']['t']:.1f} s after the start; "
                              f"after the publish the visit showed the "
                              f"{'previous' if run[p]['snapshot']['previous'] else 'new'} snapshot, the new one "
                              f"shown at {run[p]['shown_s']['t']:.1f} s)", flush=True)
                finally:
                    run["floor"] = fl.stop()
                f = run["floor"]
                print(f"run {i + 1}: floor cold {f['cold']['t']:.2f} s, warm {f['warm']['t']:.2f} s (median of "
                      f"{f['warm']['n']} visits, one before each page: "
                      f"{f['warm']['min']:.2f}-{f['warm']['max']:.2f} s)", flush=True)
                runs.append(run)
            browser.close()
        ok = report(runs, pages)
        errors = [ln for ln in log.read_text().splitlines() if "Traceback" in ln or " ERROR" in ln]
        if errors:
            print(f"server log: {len(errors)} error lines, first: {errors[0][:200]}")
            # the exceptions themselves (a traceback's last line), so a failed tile says why without the log
            raised = sorted({ln[:300] for ln in log.read_text().splitlines()
                             if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b", ln)})
            for ln in raised:
                print(f"  raised: {ln}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
