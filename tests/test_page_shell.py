"""dashboards/page_shell.py: Streamlit's index.html with the chart code preloaded, added by a middleware as the
page is served. Hand-made static directories and ASGI apps for the rules, Streamlit's own for the release this
project runs on (the browser test checks what a browser gets: tests/test_dashboard_browser.py)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards import page_shell

INDEX = """<!doctype html>
<html lang="en">
  <head>
    <script type="module" crossorigin src="./static/js/index.A1.js"></script>
    <link rel="modulepreload" crossorigin href="./static/js/core.B2.js">
  </head>
  <body></body>
</html>
"""


def _static(tmp_path: Path, files: dict[str, str]) -> Path:
    """A static directory like Streamlit's: index.html, favicon.png, static/js/<files>."""
    static = tmp_path / "st"
    (static / "static" / "js").mkdir(parents=True)
    (static / "index.html").write_text(INDEX)
    (static / "favicon.png").write_bytes(b"\x89PNG")
    for name, text in files.items():
        (static / "static" / "js" / name).write_text(text)
    return static


FILES = {
    "index.A1.js": 'import{a}from"./core.B2.js";',
    "core.B2.js": "export const a=1;",
    # minified chunks: imports with and without spaces, a bare import, a dynamic import (not followed)
    "PlotlyChart.X9_y.js": 'import{a as b}from"./core.B2.js";import {c} from "./wrap.C3.js";'
                           'import"./side.D4.js";const l=()=>import("./lazy.E5.js");',
    "wrap.C3.js": 'import{a}from"./index.A1.js";export const c=a;',
    "side.D4.js": "window.x=1;",
    "lazy.E5.js": "export default 1;",
    "Html.H-1.js": 'import{c}from"./wrap.C3.js";',
    "Metric.M1.js": "export default 2;",
}


def test_chunk_names_an_elements_file_of_this_build(tmp_path):
    static = _static(tmp_path, FILES)
    assert page_shell.chunk("PlotlyChart", static) == "PlotlyChart.X9_y.js"
    assert page_shell.chunk("Html", static) == "Html.H-1.js"
    assert page_shell.chunk("Vega", static) is None


def test_chunks_follow_static_imports_only(tmp_path):
    static = _static(tmp_path, FILES)
    assert page_shell.chunks(static, ("PlotlyChart",)) == ["PlotlyChart.X9_y.js", "core.B2.js", "index.A1.js",
                                                           "side.D4.js", "wrap.C3.js"]
    # an element this build does not have is left out; the others are still found
    assert page_shell.chunks(static, ("Vega", "Html")) == ["Html.H-1.js", "core.B2.js", "index.A1.js", "wrap.C3.js"]


def test_links_name_each_chunk_not_already_listed():
    got = page_shell.links(INDEX, ["PlotlyChart.X9_y.js", "core.B2.js", "index.A1.js", "wrap.C3.js"])
    assert got == ('<link rel="modulepreload" crossorigin href="./static/js/PlotlyChart.X9_y.js">\n'
                   '<link rel="modulepreload" crossorigin href="./static/js/wrap.C3.js">\n')
    assert page_shell.links(INDEX, ["core.B2.js"]) == ""


def _serve(app, method: str = "GET") -> tuple[dict, bytes, int]:
    """One request through ``app`` (ASGI): the response's headers, its body, the number of body messages."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app({"type": "http", "method": method, "path": "/"}, receive, send))
    start = [m for m in sent if m["type"] == "http.response.start"]
    assert len(start) == 1 and sent[0] is start[0]
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    return dict(start[0]["headers"]), b"".join(m.get("body", b"") for m in bodies), len(bodies)


def _app(content_type: bytes, parts: list[bytes], extra: list | None = None):
    """An ASGI app answering with ``parts`` as a streamed body."""
    async def app(scope, receive, send):
        headers = [(b"content-type", content_type), (b"content-length", str(sum(map(len, parts))).encode()),
                   *(extra or [])]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i, part in enumerate(parts):
            await send({"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1})
    return app


LINK = '<link rel="modulepreload" crossorigin href="./static/js/PlotlyChart.X9_y.js">\n'


def test_the_middleware_adds_the_links_to_an_html_page_sent_in_parts():
    page = INDEX.encode()
    headers, body, n = _serve(page_shell.PreloadShell(_app(b"text/html; charset=utf-8", [page[:50], page[50:]]),
                                                      LINK))
    assert body == page.replace(b"</head>", LINK.encode() + b"</head>") and n == 1
    assert headers[b"content-length"] == str(len(body)).encode()


@pytest.mark.parametrize("content_type,extra,method", [
    (b"application/javascript", [], "GET"),                         # a chunk streams as it is
    (b"text/html", [(b"content-encoding", b"gzip")], "GET"),         # compressed: not ours to rewrite
    (b"text/html", [], "HEAD"),
])
def test_the_middleware_leaves_other_responses_alone(content_type, extra, method):
    parts = [INDEX.encode()[:50], INDEX.encode()[50:]]
    headers, body, n = _serve(page_shell.PreloadShell(_app(content_type, parts, extra), LINK), method)
    assert body == b"".join(parts) and n == 2 and headers[b"content-length"] == str(len(body)).encode()


def test_the_middleware_adds_nothing_twice_nor_to_a_page_without_a_head():
    once = INDEX.replace("</head>", LINK + "</head>").encode()
    assert _serve(page_shell.PreloadShell(_app(b"text/html", [once]), LINK))[1] == once
    assert _serve(page_shell.PreloadShell(_app(b"text/html", [b"<p>no head</p>"]), LINK))[1] == b"<p>no head</p>"


def test_this_streamlit_release_has_the_chunks_the_shell_preloads():
    """A release that renames either chunk fails here (the pages still draw; the shell then preloads less)."""
    static = page_shell.streamlit_static()
    names = page_shell.chunks(static)
    for element in page_shell.ELEMENTS:
        assert page_shell.chunk(element) in names
    assert "PlotlyChart" in page_shell.links((static / "index.html").read_text(), names)


def test_install_puts_the_middleware_innermost_only_when_enabled():
    """In a process of its own, as the dashboard's server does it (dashboards/launch.py), after the warm-up's."""
    probe = ("from dashboards import page_shell, prewarm; from streamlit.web.server.starlette import starlette_app;"
             "prewarm.note_requests(); print(page_shell.install(), page_shell.install());"
             "ms = starlette_app.create_streamlit_middleware(); print(ms[0].cls.__name__, ms[-1].cls.__name__);"
             "print(sum(m.cls is page_shell.PreloadShell for m in ms), 'PlotlyChart' in str(ms[-1].kwargs))")
    root = Path(__file__).resolve().parent.parent

    def run(value: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=root, check=True,
                              env=dict(os.environ, **{page_shell.ENV: value})).stdout.split()

    assert run("1") == ["True", "True", "_NoteRequests", "PreloadShell", "1", "True"]
    assert run("0")[:2] == ["False", "False"] and "PreloadShell" not in run("0")
