"""dashboards/page_shell.py: Streamlit's index.html with the chart code preloaded, served from a directory of links
beside Streamlit's static directory. Hand-made static directories for the rules, Streamlit's own for the release
this project runs on (the browser test checks what a browser gets: tests/test_dashboard_browser.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit import file_util

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


def test_shell_adds_a_preload_for_each_chunk_not_already_listed_before_head_ends():
    html = page_shell.shell(INDEX, ["PlotlyChart.X9_y.js", "core.B2.js", "index.A1.js", "wrap.C3.js"])
    head = html[:html.index("</head>")]
    assert head.count('rel="modulepreload"') == 3           # core.B2 was listed; index.A1 is the entry script
    for name in ("PlotlyChart.X9_y.js", "wrap.C3.js"):
        assert head.count(f'<link rel="modulepreload" crossorigin href="./static/js/{name}">') == 1
    assert html.replace(head, "") == INDEX[INDEX.index("</head>"):]
    assert page_shell.shell("<html>no head</html>", ["a.js"]) == "<html>no head</html>"


def test_build_links_every_entry_but_the_index(tmp_path):
    static = _static(tmp_path, FILES)
    target = page_shell.build(tmp_path / "shell", static)
    assert sorted(os.listdir(target)) == ["favicon.png", "index.html", "static"]
    assert (target / "static").is_symlink() and (target / "favicon.png").resolve() == static / "favicon.png"
    assert not (target / "index.html").is_symlink()
    assert (target / "static" / "js" / "wrap.C3.js").read_text() == FILES["wrap.C3.js"]
    index = (target / "index.html").read_text()
    assert 'href="./static/js/PlotlyChart.X9_y.js"' in index and 'href="./static/js/Html.H-1.js"' in index
    assert "Metric" not in index                             # only the elements named in ELEMENTS
    assert (static / "index.html").read_text() == INDEX      # Streamlit's own is untouched


def test_this_streamlit_release_has_the_chunks_the_shell_preloads():
    """A release that renames either chunk fails here (the pages still draw; the shell then preloads less)."""
    static = page_shell.streamlit_static()
    names = page_shell.chunks(static)
    for element in page_shell.ELEMENTS:
        assert page_shell.chunk(element) in names
    shell = page_shell.shell((static / "index.html").read_text(), names)
    assert shell.count("modulepreload") > (static / "index.html").read_text().count("modulepreload")


def test_install_serves_the_shell_only_when_enabled_and_removes_it_at_exit(tmp_path):
    """In a process of its own, as the dashboard's server does it (dashboards/launch.py)."""
    probe = ("import sys; from dashboards import page_shell; from streamlit import file_util;"
             "d = page_shell.install(); print(d); print(file_util.get_static_dir())")
    root = Path(__file__).resolve().parent.parent
    run = lambda env: subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=root,
                                     env={k: v for k, v in dict(os.environ, **env).items() if v is not None},
                                     check=True).stdout.split()
    shell, served = run({page_shell.ENV: "1"})
    assert shell == served and Path(shell).name == "static" and "gpuledger-shell-" in shell
    assert not Path(shell).exists()                          # removed when the process ended
    assert run({page_shell.ENV: "0"}) == ["None", file_util.get_static_dir()]


@pytest.mark.parametrize("value", [None, "", "yes"])
def test_install_is_off_unless_the_variable_is_1(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(page_shell.ENV, raising=False)
    else:
        monkeypatch.setenv(page_shell.ENV, value)
    before = file_util.get_static_dir
    assert page_shell.install() is None and file_util.get_static_dir is before
