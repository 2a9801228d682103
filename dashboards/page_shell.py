"""The page shell the dashboard's server sends first: Streamlit's own ``index.html``, with the chart code preloaded.

Streamlit's frontend fetches an element's code (a content-hashed JavaScript chunk and the chunks it imports) only
when the first element of that kind arrives over the websocket, that is while the page's script runs in the
server, and those downloads then compete with the script for the server process (one interpreter lock): in the
browser benchmark a warm page's chunks took 0.2-0.4 s each instead of 0.01 s, and the chart code (plotly.js,
4.7 MB) arrived about 0.35 s after the framework floor's, whose script is done at once. The app asks for the
chart code first thing (dashboards/ui.py: load_chart_code, an HTML element), but that element's own code had to
be fetched first the same slow way. Listed in the shell as ``<link rel="modulepreload">`` (as Streamlit lists its
own core chunks there), both are fetched while the browser starts Streamlit's bundle, when the server is idle,
and parsed, not run: the chart code is evaluated as soon as the page's run has started, while its reads compute.
Warm pages drew 0.03-0.49 s sooner and first visits after a start 0.07-0.3 s sooner (docs/BENCHMARKS.md, 2026-12-06).

The shell is rewritten as it is served, in memory: a middleware innermost in Streamlit's list (inside its
compression) adds the links to every HTML page Streamlit's static route sends (``index.html``, which it also sends
for a page's own path), added as dashboards/streamlit_hooks.py adds the warm-up's (in a Streamlit without that
list, nothing happens). Installed in the server process before Streamlit starts (dashboards/launch.py), only for
the dashboard's own entry script (``$GPULEDGER_DASHBOARD_PRELOAD``, set by dashboards/server.py; the browser
benchmark's framework floor is Streamlit's shell as shipped).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import streamlit

from dashboards import streamlit_hooks

ENV = "GPULEDGER_DASHBOARD_PRELOAD"

#: The elements whose code the shell preloads, by the name of their chunk in Streamlit's frontend
#: (``<Name>.<hash>.js``): the chart code, and the HTML element through which the app has it evaluated
#: (dashboards/ui.py: load_chart_code).
#: Not the other elements' (widgets, metrics, tables): preloading those too delayed the websocket and made warm
#: pages 0.1-0.4 s slower; nor is the chart code evaluated from the shell, which made warm pages another 0.1 s
#: faster but first visits after a start 0.1-0.6 s slower, since the page's run then starts later
#: (docs/BENCHMARKS.md, 2026-12-06).
ELEMENTS = ("PlotlyChart", "Html")

_IMPORT = re.compile(r'(?:\bfrom|\bimport)\s*"\./([^"/]+\.js)"')


def streamlit_static() -> Path:
    """Streamlit's own static directory (``index.html``, ``static/js``, ``static/css``)."""
    return Path(streamlit.__file__).parent / "static"


def chunk(element: str, static: Path | None = None) -> str | None:
    """The file name under ``static/js`` of ``element``'s chunk (``PlotlyChart.D9Z0_fxz.js``), None if this
    release has none of that name."""
    js = (static or streamlit_static()) / "static" / "js"
    return next((p.name for p in sorted(js.glob(f"{element}.*.js"))), None)


def chunks(static: Path, elements: tuple[str, ...] = ELEMENTS) -> list[str]:
    """The chunks (file names under ``static/js``) of ``elements`` and every chunk they import statically, in a
    stable order; an element whose chunk a release renamed is left out (its code then loads as before)."""
    js = static / "static" / "js"
    todo = [n for n in (chunk(e, static) for e in elements) if n is not None]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or not (js / name).is_file():
            continue
        seen.add(name)
        todo += _IMPORT.findall((js / name).read_text(encoding="utf-8", errors="replace"))
    return sorted(seen)


class PreloadShell:
    """ASGI middleware: an HTML page answering a GET (``text/html``, not compressed) that has a ``</head>`` gets
    ``links`` before it, and its Content-Length follows; any other response passes through untouched, as it
    streams."""

    def __init__(self, app, links: str):
        self.app, self.links = app, links.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" or not self.links:
            return await self.app(scope, receive, send)
        held: dict = {}
        body: list[bytes] = []

        async def rewrite(message):
            if message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                if headers.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in headers:
                    held["start"] = message            # sent with the rewritten body
                    return
            elif message["type"] == "http.response.body" and "start" in held:
                body.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                page = b"".join(body)
                if b"</head>" in page and self.links not in page:
                    page = page.replace(b"</head>", self.links + b"</head>", 1)
                start = held.pop("start")
                start["headers"] = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                start["headers"].append((b"content-length", str(len(page)).encode()))
                await send(start)
                message = {"type": "http.response.body", "body": page, "more_body": False}
            await send(message)

        return await self.app(scope, receive, rewrite)


def links(index_html: str, names: list[str]) -> str:
    """The modulepreload links for the chunks in ``names`` that ``index_html`` does not already list."""
    return "".join(f'<link rel="modulepreload" crossorigin href="./static/js/{n}">\n'
                   for n in names if f"/{n}\"" not in index_html)


def install() -> bool:
    """Put :class:`PreloadShell` innermost in Streamlit's middleware list (dashboards/streamlit_hooks.py), if
    ``$GPULEDGER_DASHBOARD_PRELOAD`` is "1". False when not enabled, or when this Streamlit has no such list or no
    index.html where this release keeps it (the shell as shipped is served then). Idempotent."""
    index = streamlit_static() / "index.html"
    if os.environ.get(ENV) != "1" or not index.is_file():
        return False
    extra = links(index.read_text(encoding="utf-8"), chunks(streamlit_static()))
    return streamlit_hooks.add_middleware(PreloadShell, outermost=False, links=extra)
