"""The dashboards in a real browser: `gpuledger dashboard` serving a demo warehouse, driven by Playwright through
Debian's chromium (no browser download). Every page loads with its charts and no exception; the statement CSV
downloaded from the Chargeback page is the finance export byte for byte, and a table's CSV carries the page's
labels; no page fetches anything from outside the server (every request is recorded); behind the shipped nginx site
(deploy/nginx/gpuledger.conf, a real nginx) the security headers are set and pages render with no CSP violation;
the server warms the new snapshot's views once; a screenshot of each page is kept under
tests/artifacts/dashboard/ (git-ignored) for people to look at.

The warehouse is the demo generator's (a small one: 28 days of a 13-node cluster) when it is available,
``$GPULEDGER_BROWSER_DB`` when set, else the lab fixture.
"""
from __future__ import annotations

import csv
import gzip
import io
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import duckdb
import pytest

import dashboard_fixtures as dfx
from dashboards import page_shell, ui
from dashboards.server import wait_ready
from dashboards.ui import FAILED_TEXT
from ingest import warehouse

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "dashboard"
# The overview is the default page: it lives at the root URL.
PAGES = [("", "Overview"), ("utilization", "Utilization"), ("efficiency", "Efficiency"),
         ("fragmentation", "Fragmentation"), ("fairness", "Fairness & queues"), ("waiting", "Why jobs wait"),
         ("chargeback", "Chargeback"),
         ("forecast", "Forecast & capacity"), ("data_health", "Data health")]

#: 1400 px wide (the width the pages are designed for), taller than the longest page.
VIEWPORT = {"width": 1400, "height": 3600}
pytestmark = [pytest.mark.browser]
if not CHROMIUM.exists():
    pytestmark.append(pytest.mark.skip(reason="Debian's chromium (/usr/bin/chromium) is not installed"))
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright (dev extra) is not installed")


@pytest.fixture(scope="module")
def warehouse_db(tmp_path_factory) -> Path:
    if os.environ.get("GPULEDGER_BROWSER_DB"):
        return Path(os.environ["GPULEDGER_BROWSER_DB"])
    try:
        from models.demo import build, config
    except ImportError:
        return dfx.build_lab(tmp_path_factory.mktemp("lab"))
    db = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    build.build(db, config.for_scale(0.2, days=28, squeue_days=2))   # the Waiting page has reasons
    return db


@pytest.fixture(scope="module")
def server_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("server") / "dashboard.log"


@pytest.fixture(scope="module")
def server(warehouse_db, server_log):
    from dashboards.server import free_port, wait_ready
    port = free_port()
    log = server_log.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "gpuledger", "--db", str(warehouse_db), "dashboard",
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            cwd=Path(__file__).resolve().parent.parent)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, timeout=120)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)          # gpuledger stops its Streamlit child on SIGTERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        assert proc.returncode is not None


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                    "--disable-background-networking", "--disable-component-update",
                                    "--disable-sync"])
        yield b
        b.close()


def _open(page, url: str, title: str) -> None:
    """Load a page and wait until it has rendered: its title, then its charts or its not-landed notice."""
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=120_000)
    done = (page.locator(".js-plotly-plot .main-svg").or_(page.get_by_text("is not available yet"))
            .or_(page.get_by_text(FAILED_TEXT)).or_(page.locator("[data-testid='stException']")))
    done.first.wait_for(timeout=180_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    failure = page.get_by_text(FAILED_TEXT).or_(page.locator("[data-testid='stException']"))
    assert failure.count() == 0, f"{title}: {failure.first.inner_text()}"


def _sidebar_choices(page, labels: tuple[str, ...], timeout_s: float = 60) -> dict[str, list[str]]:
    """The sidebar's multiselects as {label: chosen values}, once every one of ``labels`` is drawn: under load the
    sidebar can still be rendering after the page's body is done (seen in make test: no box yet, a KeyError)."""
    deadline = time.monotonic() + timeout_s
    while True:
        boxes = page.locator("[data-testid='stSidebar'] [data-testid='stMultiSelect']").all_inner_texts()
        chosen = {b.splitlines()[0]: b.splitlines()[1:] for b in boxes if b.strip()}   # label, then the values
        if all(label in chosen for label in labels) or time.monotonic() > deadline:
            return chosen
        page.wait_for_timeout(250)


def _screenshot(page, name: str) -> Path:
    """The whole page. The viewport is already taller than any page (Streamlit scrolls inside its main block, so
    a full-page capture of a short viewport would cut it); wait until nothing is stale or loading."""
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"], [data-testid=\"stSkeleton\"],"
                           " [data-testid=\"stStatusWidget\"]')", timeout=120_000)
    page.wait_for_timeout(1000)
    height = page.evaluate("() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"] > div')]"
                           ".map(e => e.scrollHeight), 900)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), clip={"x": 0, "y": 0, "width": VIEWPORT["width"],
                                          "height": min(int(height) + 60, VIEWPORT["height"])}, timeout=120_000)
    return path


@pytest.mark.parametrize("slug,title", PAGES, ids=[p or "overview" for p, _ in PAGES])
def test_every_page_renders_charts_without_exception(server, browser, warehouse_db, tmp_path, slug, title):
    page = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
    urls = _record_requests(page)
    try:
        _open(page, f"{server}/{slug}", title)
        n_charts = page.locator(".js-plotly-plot .main-svg").count()
        notices = page.get_by_text("is not available yet").count()
        assert n_charts or notices, f"{slug}: neither charts nor a not-landed notice"
        # data freshness is visible on every page
        assert page.get_by_text("Data freshness").count() == 1
        assert page.get_by_text("Page not found").count() == 0
        if slug == "chargeback":
            _statement_csv_is_the_finance_export(page, warehouse_db, tmp_path)
        if slug == "utilization":
            _table_csv_has_human_labels(page)
            _table_opens_and_stays_open(page)
        shot = _screenshot(page, slug or "overview")
        assert shot.stat().st_size > 10_000
        _no_tile_or_link_text_is_cut(page, slug or "overview")
        _fetched_only_from_the_server(page, urls, slug or "overview")
        _chart_code_loaded_by_the_app(page, server, urls)
    finally:
        page.close()


#: Text the viewer must read whole: KPI values and labels, page links, buttons, chart titles. Streamlit cuts them
#: with an ellipsis where they do not fit ("91,5…" for a cluster cost of 91,586 USD on a 1024-pixel screen, before
#: ui.STYLES); a word too long for its tile overflows it; a plotly title (one SVG line, class gtitle) is cut at the
#: chart's edge ("Free GPUs a request of eac" in a half-width chart at 1024 px, before ui.chart drew titles as HTML),
#: and so is a horizontal axis title ("Usage share / entitlement s", before charts.axis_title).
_CUT_TEXT_JS = """() => [...document.querySelectorAll(
    "[data-testid='stMain'] :is([data-testid='stMetricValue'] > div, [data-testid='stMetricLabel'] p, "
    + "[data-testid='stMetricDelta'] > div, [data-testid='stPageLink-NavLink'] p, button p, .gl-chart-title), "
    + ":is([data-testid='stMain'], [data-testid='stSidebar']) input:not([type='hidden'])")]
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
  .map(e => `${e.innerText || e.value} (${e.scrollWidth} px in ${e.clientWidth})`)
  .concat([...document.querySelectorAll("[data-testid='stMain'] .gtitle")].map(e => `plotly title ${e.textContent}`))
  .concat([...document.querySelectorAll("[data-testid='stMain'] .js-plotly-plot")].flatMap(p => {
    const box = p.querySelector("svg.main-svg").getBoundingClientRect();
    return [...p.querySelectorAll(".g-xtitle text")].filter(t => {
      const b = t.getBoundingClientRect(); return b.width && (b.left < box.left - 1 || b.right > box.right + 1); })
      .map(t => `axis title ${t.textContent} (${Math.round(t.getBoundingClientRect().right - box.left)} px in `
                + `${Math.round(box.width)})`); }))"""


def _no_tile_or_link_text_is_cut(page, name: str) -> None:
    """At the test's width and on a 1024-pixel laptop screen (sidebar open), no figure, link or input's value
    (a selectbox shows its choice in an input) is cut short."""
    for width in (VIEWPORT["width"], 1024):
        page.set_viewport_size({"width": width, "height": VIEWPORT["height"]})
        page.wait_for_timeout(300)   # a relayout, no rerun
        assert page.evaluate(_CUT_TEXT_JS) == [], f"{name} at {width} px"
    page.set_viewport_size(VIEWPORT)


def _statement_csv_is_the_finance_export(page, warehouse_db: Path, tmp_path: Path) -> None:
    """The statement CSV downloaded from the page is byte for byte `gpuledger chargeback --out X.csv`."""
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_role("button", name="Statement CSV").click()
    got = Path(dl.value.path()).read_bytes()
    named = re.fullmatch(r"chargeback-(\d{4}-\d{2})\.csv", dl.value.suggested_filename)
    assert named, dl.value.suggested_filename
    out = tmp_path / dl.value.suggested_filename
    done = subprocess.run([sys.executable, "-m", "gpuledger", "-q", "--db", str(warehouse_db), "chargeback",
                           "--period", named.group(1), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert got == out.read_bytes()


def _table_csv_has_human_labels(page) -> None:
    """A table's CSV has the labels shown on the page, never raw column names, and whole rows."""
    with page.expect_download(timeout=60_000) as dl:
        # the button of the table "By period and pool" (key dl_util), not whichever table's was mounted first
        page.locator(".st-key-dl_util").get_by_role("button", name="Download CSV").click()
    header, *rows = list(csv.reader(io.StringIO(Path(dl.value.path()).read_text())))
    assert header[:2] == ["Period (day, UTC)", "Pool (GPU type)"] and "Allocated (GPU-hours)" in header
    assert not any("_" in h for h in header)
    assert rows and all(len(r) == len(header) for r in rows)


def _table_opens_and_stays_open(page) -> None:
    """A page's tables are closed sections drawn once opened (dashboards/ui.py); an opened one stays open when
    the viewer changes a filter (the browser sends the section's state with every rerun; AppTest does not)."""
    grids = page.locator("[data-testid='stDataFrame']")
    assert grids.count() == 0
    page.locator("[data-testid='stExpander'] summary").first.click()
    grids.first.wait_for(timeout=60_000)
    page.locator("[data-testid='stSidebar']").get_by_text("7 days", exact=True).click()
    page.wait_for_url(re.compile(r"window=7d"), timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
    page.wait_for_timeout(500)
    assert grids.count() == 1


LOCAL_URL = re.compile(r"^(?:(?:https?|wss?)://(?:127\.0\.0\.1|localhost)(?::\d+)?(?:/|$)|data:|blob:|about:)")


def _chart_code_loaded_by_the_app(page, base: str, urls: list[str]) -> None:
    """The page shell lists Streamlit's chart code and the HTML element's code as module preloads
    (dashboards/page_shell.py) and the app's module script for the chart code (dashboards.ui.load_chart_code) names
    the very URL of the preload and of Streamlit's own import: the document fetched the chunk once."""
    chunk = f"{base}/static/js/{ui.CHART_CHUNK}"
    preloads = page.evaluate("() => [...document.querySelectorAll('link[rel=modulepreload]')].map(e => e.href)")
    assert chunk in preloads and f"{base}/static/js/{page_shell.chunk('Html')}" in preloads
    assert page.evaluate("() => [...document.querySelectorAll('script[type=module][src*=PlotlyChart]')]"
                         ".map(e => e.src)") == [chunk]
    assert {u for u in urls if "PlotlyChart" in u} == {chunk}
    assert page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)"
                         ".filter(n => n.includes('PlotlyChart'))") == [chunk]


def _record_requests(page) -> list[str]:
    """Every URL ``page`` requests from now on (websockets included)."""
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    page.on("websocket", lambda ws: urls.append(ws.url))
    return urls


def _fetched_only_from_the_server(page, urls: list[str], name: str) -> None:
    """Every request the page made while it loaded and rendered (documents, scripts, fonts, icons, the favicon,
    websockets, downloads) went to the dashboard server itself: nothing from a CDN or font host, so the
    dashboard works offline and tells no third party who looks at it. What the document points at (icons,
    stylesheets, scripts, images) counts too, fetched or not yet."""
    page.wait_for_timeout(500)       # late fetches (favicon, lazily loaded fonts)
    urls = urls + page.evaluate("() => [...document.querySelectorAll('link[href], script[src], img[src]')]"
                                ".map(e => e.href || e.src)")
    assert urls, name
    outside = sorted({u for u in urls if not LOCAL_URL.match(u)})
    assert not outside, f"{name} fetched from outside the server: {outside}"


NGINX = Path("/usr/sbin/nginx")
NGINX_SITE = Path(__file__).resolve().parent.parent / "deploy" / "nginx" / "gpuledger.conf"
SECURITY_HEADERS = {"x-frame-options": "DENY", "x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}


@pytest.fixture(scope="module")
def proxy(server, tmp_path_factory):
    """deploy/nginx/gpuledger.conf served by a real nginx (in the foreground, one process, a temporary prefix)
    on a free 127.0.0.1 port, in front of the dashboard server; yields the proxy's URL."""
    if not NGINX.exists():
        pytest.skip("Debian's nginx (/usr/sbin/nginx) is not installed")
    from dashboards.server import free_port
    prefix = tmp_path_factory.mktemp("nginx")
    port, upstream = free_port(), server.rsplit(":", 1)[1]
    site = NGINX_SITE.read_text()
    for default, ours in (("server 127.0.0.1:8501;", f"server 127.0.0.1:{upstream};"),
                          ("listen 80;", f"listen 127.0.0.1:{port};")):
        assert site.count(default) == 1, f"{NGINX_SITE} no longer has one {default!r}"
        site = site.replace(default, ours)
    (prefix / "gpuledger.conf").write_text(site)
    temp = " ".join(f"{d}_temp_path {prefix / d};" for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (prefix / "nginx.conf").write_text(
        f"daemon off; master_process off; worker_processes 1; pid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'} warn;\nevents {{ worker_connections 256; }}\n"
        f"http {{ include /etc/nginx/mime.types; access_log {prefix / 'access.log'}; {temp}\n"
        f"       include {prefix / 'gpuledger.conf'}; }}\n")
    proc = subprocess.Popen([str(NGINX), "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
                             "-e", str(prefix / "error.log")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, timeout=20)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _headers(url: str) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as exc:       # an error page must carry the headers too
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}


def test_behind_nginx_headers_are_set_and_pages_render_without_csp_violations(proxy, browser):
    """Through the shipped nginx site: the security headers on the page, its assets and an error response;
    the pages render (the websocket is upgraded through the proxy) with no Content-Security-Policy violation
    and no console error."""
    for path in ("/", "/_stcore/health", "/no-such-file.js"):
        status, headers = _headers(proxy + path)
        assert status in (200, 404), (path, status)
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (path, name, headers.get(name))
        csp = headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, (path, csp)
        assert "'unsafe-eval'" not in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
        assert "nginx/" not in headers.get("server", "")                  # no version advertised
    page = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
    errors: list[str] = []
    page.add_init_script("document.addEventListener('securitypolicyviolation', e => "
                         "console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))")
    page.on("console", lambda m: (errors if m.type == "error" else []).append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    urls = _record_requests(page)
    try:
        for slug, title in (("", "Overview"), ("utilization", "Utilization")):
            _open(page, f"{proxy}/{slug}", title)
            assert page.locator(".js-plotly-plot .main-svg").count(), f"{slug or 'overview'}: no chart via the proxy"
        _table_csv_has_human_labels(page)          # a download through the proxy (Streamlit's /media/ route)
        _fetched_only_from_the_server(page, urls, "via the proxy")
        _chart_code_loaded_by_the_app(page, proxy, urls)
        assert all(u.startswith((proxy, proxy.replace("http", "ws", 1), "data:", "blob:", "about:")) for u in urls)
    finally:
        page.close()
    violations = [e for e in errors if "Content Security Policy" in e or "CSP violation" in e]
    assert not violations, violations
    # Streamlit looks for its endpoints under a deep link's path first (/utilization/_stcore/health, a 404) and
    # then at the root: those probes are the only failed requests, and their console lines the only errors
    probes = [u for u in failed if re.fullmatch(r"404 http://127\.0\.0\.1:\d+/[a-z_]+/_stcore/(health|host-config)", u)]
    assert failed == probes, failed
    assert [e for e in errors if "status of 404" not in e] == [], errors
    assert len(errors) == len(probes), (errors, failed)


def test_server_warmed_the_default_views(server, server_log):
    """After the first visit the server computed every page's default views in the background, once."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and "warmed" not in server_log.read_text():
        time.sleep(1)
    lines = [ln for ln in server_log.read_text().splitlines() if "warmed" in ln]
    assert len(lines) == 1, server_log.read_text()[-2000:]
    assert re.match(r"gpuledger dashboard: warmed \d+ views of the new snapshot in [\d.]+ s$", lines[0]), lines[0]


def test_a_pasted_link_opens_the_same_view_and_the_url_follows_changes(server, browser, warehouse_db):
    """A manager's link (page, window, filters) opened in a fresh browser shows that view; changing the window
    in the sidebar rewrites the URL; the Overview's page links keep the view (dashboards/sidebar.py)."""
    con = duckdb.connect(str(warehouse_db), read_only=True)   # nobody holds it: the server reads the serving view
    team, pool = con.sql("SELECT team, gpu_type FROM jobs WHERE team IS NOT NULL AND gpu_type IS NOT NULL "
                         "GROUP BY ALL ORDER BY count(*) DESC LIMIT 1").fetchall()[0]
    con.close()
    link = f"{server}/utilization?window=7d&team={team}&pool={pool}"
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    try:
        _open(page, link, "Utilization")
        described = page.get_by_text(re.compile(rf"\(UTC\); pool: {re.escape(pool)}; team: {re.escape(team)}"))
        assert described.count() == 1, "the page does not describe the linked filters"
        chosen = _sidebar_choices(page, ("Team", "Pool (GPU type)"))
        assert team in chosen["Team"] and pool in chosen["Pool (GPU type)"], chosen
        assert "window=7d" in page.url and f"team={team}" in page.url
        page.locator("[data-testid='stSidebar'] button").filter(has_text="90 days").first.click()
        page.wait_for_url(re.compile(r"window=90d"), timeout=60_000)
        assert f"team={team}" in page.url and f"pool={pool}" in page.url
        # the Overview's links open each page with the view on screen
        _open(page, f"{server}/?window=90d&team={team}", "Overview")
        page.locator("[data-testid='stPageLink']").filter(has_text="Fragmentation").first.click()
        page.get_by_role("heading", name="Fragmentation", exact=True).first.wait_for(timeout=120_000)
        page.wait_for_url(re.compile(r"/fragmentation\?"), timeout=60_000)
        assert "window=90d" in page.url and f"team={team}" in page.url, page.url
        # the heading is drawn before the caption under it: wait for the caption (count() does not wait)
        linked = page.get_by_text(re.compile(rf"\(UTC\); team: {re.escape(team)}"))
        linked.first.wait_for(timeout=120_000)
        assert linked.count() == 1
    finally:
        ctx.close()


def test_a_link_to_one_persons_jobs_opens_them_and_the_user_filter_rewrites_the_url(server, browser, warehouse_db):
    """A team lead's link to one person's jobs (Efficiency, ``?user=NAME``) opens with that person chosen and
    described; choosing someone else in the User box rewrites the link, keeping the window."""
    con = duckdb.connect(str(warehouse_db), read_only=True)
    users = [u for (u,) in con.sql("SELECT \"user\" FROM jobs WHERE \"user\" IS NOT NULL AND ngpus > 0 "
                                    "AND start IS NOT NULL GROUP BY ALL ORDER BY count(*) DESC, 1 LIMIT 2").fetchall()]
    con.close()
    assert len(users) == 2, users
    who, other = users
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    try:
        _open(page, f"{server}/efficiency?window=all&user={who}", "Efficiency")
        box = page.get_by_role("combobox", name="User", exact=True)
        assert box.input_value() == who
        page.get_by_text(re.compile(rf"^{re.escape(who)}: [\d,.]+ allocated GPU-hours in [\d,]+ GPU jobs")) \
            .first.wait_for(timeout=60_000)
        assert "window=all" in page.url and f"user={who}" in page.url, page.url
        box.fill(other)
        page.get_by_role("option", name=other, exact=True).click()
        page.wait_for_url(re.compile(rf"user={re.escape(other)}(&|$)"), timeout=60_000)
        assert "window=all" in page.url, page.url
        page.get_by_text(re.compile(rf"^{re.escape(other)}: [\d,.]+ allocated GPU-hours")).first \
            .wait_for(timeout=60_000)
        assert page.get_by_text(re.compile(rf"^{re.escape(who)}: ")).count() == 0
    finally:
        ctx.close()


def test_behind_nginx_the_bundles_are_compressed(proxy):
    """Streamlit sends its JavaScript uncompressed; the shipped nginx site gzips it (what users behind it get)."""
    index = urllib.request.urlopen(proxy + "/", timeout=10).read().decode()
    script = re.search(r'<script[^>]+src="([^"]+\.js)"', index).group(1)
    url = proxy + "/" + script.lstrip("./")
    plain = urllib.request.urlopen(url, timeout=30).read()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept-Encoding": "gzip"}), timeout=30) as r:
        assert r.headers.get("Content-Encoding") == "gzip", dict(r.headers)
        packed = r.read()
    assert gzip.decompress(packed) == plain and len(packed) < len(plain) / 2
