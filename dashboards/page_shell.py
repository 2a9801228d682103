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
Warm pages drew 0.05-0.3 s sooner and first visits after a start up to 0.3 s sooner (docs/BENCHMARKS.md, 2026-12-06).

The shell is a directory beside Streamlit's: a symbolic link to every entry of Streamlit's static directory
except ``index.html``, which is rewritten. ``install`` points Streamlit's static route at it; it is done in the
server process before Streamlit starts (dashboards/launch.py), only for the dashboard's own entry script
(``$GPULEDGER_DASHBOARD_PRELOAD``, set by dashboards/server.py; the browser benchmark's framework floor is
Streamlit's shell as shipped).
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

import streamlit
from streamlit import file_util

ENV = "GPULEDGER_DASHBOARD_PRELOAD"

#: The elements whose code the shell preloads, by the name of their chunk in Streamlit's frontend (``<Name>.<hash>.js``):
#: the chart code, and the HTML element through which the app has it evaluated (dashboards/ui.py: load_chart_code).
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


def shell(index_html: str, names: list[str]) -> str:
    """``index_html`` with a modulepreload link for every chunk in ``names`` it does not already list, before
    ``</head>`` (unchanged if it has none)."""
    links = "".join(f'\n    <link rel="modulepreload" crossorigin href="./static/js/{n}">'
                    for n in names if f"/{n}\"" not in index_html)
    return index_html.replace("</head>", links + "\n  </head>", 1) if "</head>" in index_html else index_html


def build(target: Path, static: Path | None = None) -> Path:
    """Write the shell directory at ``target`` (created): links to ``static``'s entries and the rewritten
    ``index.html``. Returns ``target``."""
    static = static or streamlit_static()
    target.mkdir(parents=True, exist_ok=True)
    for entry in static.iterdir():
        if entry.name != "index.html":
            os.symlink(entry, target / entry.name)
    index = (static / "index.html").read_text(encoding="utf-8")
    (target / "index.html").write_text(shell(index, chunks(static)), encoding="utf-8")
    return target


def install() -> Path | None:
    """Build the shell in a directory of this process's own (removed at exit) and make Streamlit serve it, if
    ``$GPULEDGER_DASHBOARD_PRELOAD`` is "1". Returns the directory, or None when not enabled or when Streamlit's
    static directory is not where this release keeps it (the shell as shipped is served then)."""
    if os.environ.get(ENV) != "1" or not (streamlit_static() / "index.html").is_file():
        return None
    target = Path(tempfile.mkdtemp(prefix="gpuledger-shell-"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    build(target / "static")
    file_util.get_static_dir = lambda: str(target / "static")
    return target / "static"
