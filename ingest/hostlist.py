"""Slurm hostlist expressions: ``gpu[001-004,010]``, ``r[1-2]n[01-02]``, ``a1,b[3-4]``.

``expand`` follows Slurm's hostlist semantics: zero padding is kept from the range bounds, several
bracket groups form a cartesian product (left-most group varies slowest), and the placeholders sacct
prints when nothing was allocated (``None assigned``, ``(null)``, empty) expand to no hosts.
"""
from __future__ import annotations

import re
from functools import lru_cache

from ingest.plausible import MAX_COUNTS

EMPTY = frozenset({"", "None assigned", "(null)", "None", "N/A"})
#: More hosts than one job (or one inventory line) can plausibly name (ingest/plausible.py).
MAX_HOSTS = MAX_COUNTS["nodes"]


class HostlistError(ValueError):
    """A malformed hostlist expression."""


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    out, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {expr!r}")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unbalanced '[' in {expr!r}")
    out.append("".join(cur))
    return [s for s in (p.strip() for p in out) if s]


def _range(spec: str, expr: str) -> list[str]:
    vals: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise HostlistError(f"bad range {part!r} in {expr!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"descending range {part!r} in {expr!r}")
        if int(hi) - int(lo) >= MAX_HOSTS:
            raise HostlistError(f"range {part!r} in {expr!r} is implausibly large")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        vals.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
        if len(vals) > MAX_HOSTS:
            raise HostlistError(f"{expr!r} names more than {MAX_HOSTS} hosts")
    return vals


def _expand_one(item: str, expr: str, budget: int) -> list[str]:
    """The hosts of one comma-free item; more than ``budget`` hosts is an error (checked before building them:
    ``r[1-100000]n[1-100000]`` would be 10^10 strings)."""
    pieces = re.split(r"(\[[^\]]*\])", item)
    results = [""]
    for piece in pieces:
        if not piece:
            continue
        if piece.startswith("["):
            options = _range(piece[1:-1], expr)
            if len(results) * len(options) > budget:
                raise HostlistError(f"{expr!r} names more than {MAX_HOSTS} hosts")
            results = [r + o for r in results for o in options]
        else:
            if "[" in piece or "]" in piece:
                raise HostlistError(f"unbalanced brackets in {expr!r}")
            results = [r + piece for r in results]
    return results


@lru_cache(maxsize=65536)
def _expand_cached(expr: str) -> tuple[str, ...]:
    hosts: list[str] = []
    for item in _split_top(expr):
        hosts.extend(_expand_one(item, expr, MAX_HOSTS - len(hosts)))
    return tuple(hosts)


def expand(expr: str | None) -> list[str]:
    """``expand("gpu[01-03],cpu7")`` -> ``['gpu01', 'gpu02', 'gpu03', 'cpu7']``; raises HostlistError."""
    if expr is None:
        return []
    expr = expr.strip()
    if expr in EMPTY:
        return []
    return list(_expand_cached(expr))


def compress(hosts: list[str]) -> str:
    """The inverse of :func:`expand` for the common case of one numeric suffix per host.

    ``compress(['gpu01', 'gpu02', 'gpu04', 'login'])`` -> ``'gpu[01-02,04],login'``. Order of first
    appearance of each prefix is kept; numbers within a prefix are sorted.
    """
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for h in hosts:
        m = re.fullmatch(r"(.*?)(\d+)", h)
        if not m:
            order.append(h)
            continue
        key = (m.group(1), len(m.group(2)) if m.group(2).startswith("0") else 0)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    out = []
    for key in order:
        if isinstance(key, str):
            out.append(key)
            continue
        prefix, width = key
        nums = sorted(set(groups[key]))
        if len(nums) == 1:
            out.append(f"{prefix}{str(nums[0]).zfill(width)}")
            continue
        spans, lo, prev = [], nums[0], nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(str(lo).zfill(width) if lo == prev else f"{str(lo).zfill(width)}-{str(prev).zfill(width)}")
            if n is not None:
                lo = prev = n
        out.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(out)
