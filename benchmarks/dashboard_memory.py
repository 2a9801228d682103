"""The dashboard server's memory under load: five people at once, each opening every page with a one-year window,
on the 5,000,000-job year. Target: the server's resident memory (its whole process tree) stays under the
configured budget ($GPULEDGER_DASHBOARD_MEMORY, default 2 GB; dashboards/budget.py says how it is shared).

One server (started as `gpuledger dashboard` starts it, warm-up included), one Chromium, five browser contexts
visiting the pages concurrently (each page ``?window=1y``, waiting until it is drawn, as
benchmarks/dashboard_browser_speed.py defines it), ``--rounds`` times over; the RSS of the server's process tree is
sampled every 0.2 s. ``--publish-after S`` (default 60 s; 0: none) publishes a new snapshot S seconds into the
load (a quiet 15-minute cycle, as the browser benchmark's ``snapshot`` case): the server then holds the previous
snapshot's database open while it warms the new one's views beside the visitors (dashboards/prewarm.py), the
most memory it needs at once. Prints the peak, the RSS after the load, the budget and its shares. Run it under the
heavy lock (`flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/dashboard_memory.py`).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.dashboard_browser_speed import (  # noqa: E402
    ARGS, CHROMIUM, PAGES, RECORDER, VIEWPORT, Server, page_url, publish, rss_tree_mb, shown_after)
from dashboards import server  # noqa: E402
from dashboards.budget import budget  # noqa: E402

USERS = 5


class Sampler(threading.Thread):
    """Samples the RSS (MB) of a process tree until stopped; ``peak`` is the largest sample."""

    def __init__(self, pid: int, every: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self.samples = pid, every, 0.0, 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_tree_mb(self.pid))
            self.samples += 1
            time.sleep(self.every)

    def stop(self) -> None:
        self._done.set()
        self.join()


async def _user(browser, base: str, who: int, pages: list[str], window: str, rounds: int) -> list[float]:
    took = []
    for r in range(rounds):
        ctx = await browser.new_context(viewport=VIEWPORT)
        page = await ctx.new_page()
        await page.add_init_script(RECORDER)
        order = pages[who % len(pages):] + pages[:who % len(pages)]    # the users start on different pages
        for p in order:
            t = time.perf_counter()
            await page.goto(page_url(base, p, window), wait_until="commit")
            await page.wait_for_function("() => window.__drawn && window.__drawn.settled", polling=200,
                                         timeout=600_000)
            took.append(time.perf_counter() - t)
        await ctx.close()
    return took


async def _load(base: str, pages: list[str], window: str, users: int, rounds: int) -> list[list[float]]:
    from playwright.async_api import async_playwright
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            return await asyncio.gather(*[_user(browser, base, u, pages, window, rounds) for u in range(users)])
        finally:
            await browser.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="a warehouse with marts (default: the cached synthetic year)")
    ap.add_argument("--users", type=int, default=USERS)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--window", default="1y")
    ap.add_argument("--pages", default=",".join(PAGES))
    ap.add_argument("--publish-after", type=float, default=60.0,
                    help="publish a new snapshot this many seconds into the load (0: none)")
    a = ap.parse_args(argv)
    pages = [p.strip() for p in a.pages.split(",") if p.strip()]
    from benchmarks.dashboard_speed import serving_copy
    if a.db:
        src = Path(a.db)
    else:
        from benchmarks._year import year_warehouse
        src = year_warehouse(marts=True)
    b = budget()
    with tempfile.TemporaryDirectory(prefix="gpuledger-memory-") as tmp:
        db, _ = serving_copy(src, Path(tmp), refresh=False)
        srv = Server(db, server.APP, Path(tmp) / "server.log")
        try:
            idle = rss_tree_mb(srv.proc.pid)
            sampler = Sampler(srv.proc.pid)
            sampler.start()
            t = time.perf_counter()
            published: dict[str, object] = {}

            def publish_later() -> None:
                time.sleep(a.publish_after)
                published["at"] = time.perf_counter() - t
                published["version"] = publish(db)[1]
            publisher = threading.Thread(target=publish_later, daemon=True)
            if a.publish_after > 0:
                publisher.start()
            took = asyncio.run(_load(srv.url, pages, a.window, a.users, a.rounds))
            wall = time.perf_counter() - t
            if publisher.is_alive():    # a publication still running at exit aborted the process (DuckDB's threads)
                publisher.join()
            if published.get("version"):
                published["shown"] = shown_after(Path(tmp) / "server.log", published["version"], timeout_s=5)
            time.sleep(2)
            after = rss_tree_mb(srv.proc.pid)
            sampler.stop()
        finally:
            srv.stop()
        lines = (Path(tmp) / "server.log").read_text().splitlines()
        first = next((i for i, ln in enumerate(lines) if " ERROR" in ln), None)
        errors = [] if first is None else lines[first:first + 40]
    mb = 1024 ** 2
    print(f"warehouse {src}; {a.users} users x {len(pages)} pages x {a.rounds} round(s), window {a.window}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"budget {b.total / mb:,.0f} MB: DuckDB {b.duckdb / mb:,.0f} MB, cached views {b.views / mb:,.0f} MB, "
          f"{b.statements} statements with job detail, TTL {b.ttl / 60:.0f} min")
    visits = sorted(x for u in took for x in u)
    print(f"page visits: {len(visits)} in {wall:.0f} s, median {visits[len(visits) // 2]:.1f} s, "
          f"slowest {visits[-1]:.1f} s")
    ok = sampler.peak * mb <= b.total
    print(f"server RSS: idle {idle:,.0f} MB, peak {sampler.peak:,.0f} MB ({sampler.samples} samples), after "
          f"{after:,.0f} MB -> {'within' if ok else 'OVER'} the budget")
    if "at" in published:
        print(f"a new snapshot was published {published['at']:.0f} s into the load; the server showed it "
              f"{published.get('shown', float('nan')):.0f} s after (nan: not before the load ended)")
    if errors:
        print("server log, from its first error:\n" + "\n".join(errors))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
