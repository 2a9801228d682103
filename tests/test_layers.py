"""The import-layer contract (pyproject.toml [tool.importlinter]; docs/ARCHITECTURE.md "Layers"): layers import
only downward, ingest never imports the analytics, readers never import builders; and no import hides inside a
function to dodge a circle (there are no circles, deferred imports included)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ingest", "models", "dashboards")


def _modules() -> dict[str, Path]:
    out = {"gpuledger": ROOT / "gpuledger.py"}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(tree: ast.AST, name: str, is_pkg: bool, mods: dict) -> list[tuple[str, ast.AST]]:
    """(imported gpuledger module, node) for every import in ``tree``, relative ones resolved."""
    pkg = name if is_pkg else name.rpartition(".")[0]
    out = []
    for n in ast.walk(tree):
        targets = []
        if isinstance(n, ast.Import):
            targets = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in n.names] + [base]
        for t in targets:
            while t and t not in mods:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.append((t, n))
    return out


def test_import_contracts_hold():
    """lint-imports (import-linter) checks the contracts in pyproject.toml; its report names what broke."""
    run = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert "Contracts: 5 kept, 0 broken." in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0


def test_no_import_circles_even_deferred():
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {t for t, _ in _imports(tree, name, path.name == "__init__.py", mods)}
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def test_no_gpuledger_import_inside_a_function():
    """Modules of the packages import each other at the top; only the CLI front door defers its imports (so that
    `gpuledger --help` does not load DuckDB, Polars and numba), and nothing imports it."""
    mods = _modules()
    found = []
    for name, path in mods.items():
        if name == "gpuledger":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for target, node in _imports(tree, name, path.name == "__init__.py", mods):
            if id(node) not in top:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert found == []
