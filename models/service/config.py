"""The service's configuration (``gpuledger serve --config gpuledger.toml``; data/gpuledger.example.toml documents
every key). Errors are one line naming the file, the line (where it can be found) and the key.

Tables this module owns: ``[service]``, ``[health]``, ``[dashboard]``, ``[[clusters]]`` (with one sub-table per
source kind of :data:`models.service.sources.KINDS`) and the global kinds' tables (``[governance]``). Other
top-level tables (``[access]``, read by the dashboard) pass through untouched in :attr:`ServiceConfig.extra`.
Relative paths are relative to the config file's directory. Durations are seconds or ``90s``, ``5m``, ``2h``, ``1d``.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest import warehouse
from ingest.errors import InputError
from models.definitions.times import parse_duration
from models.service.sources import GLOBAL, KINDS, Key, Where

#: keys every source table accepts besides its kind's own
COMMON = {"enabled": Key("bool", True, "collect this source"),
          "interval": Key("duration", None, "seconds between collections (default per kind)")}
SECTIONS: dict[str, dict[str, Key]] = {
    "service": {"warehouse": Key("path", "", "the warehouse file (default $GPULEDGER_DB, else data/warehouse.duckdb)"),
                "cycle": Key("duration", 60, "how often the loop looks for due sources"),
                "backoff_initial": Key("duration", 30, "wait after a source's first failure; doubles per failure"),
                "backoff_max": Key("duration", 900, "the longest wait between retries of a failing source"),
                "lock_timeout": Key("duration", 60, "how long a cycle waits for a warehouse another process holds"),
                # the lake (models/pipeline/lake.py): exported after each refresh
                "lake": Key("path", "", "directory of the open Parquet lake written after refreshes (empty: none)"),
                "lake_interval": Key("duration", 3600, "the least time between two lake exports")},
    "health": {"listen": Key("str", "127.0.0.1:9464", "HOST:PORT of /healthz and /metrics; empty: off"),
               "max_cycle_age": Key("duration", 0, "/healthz fails when no cycle ended for this long "
                                                   "(0: 3 cycles + 60 s)")},
    "dashboard": {"enabled": Key("bool", True, "start the dashboard child (also --no-dashboard)"),
                  "host": Key("str", "127.0.0.1", "bind address"),
                  "port": Key("port", 8501, "TCP port")},
}
CLUSTER_KEYS = {"name": Key("str", None, "the cluster's name in Slurm and in the warehouse"),
                "slurm_conf": Key("path", "", "SLURM_CONF for this cluster's commands (default: the host's)")}


@dataclass(frozen=True)
class SourceConfig:
    kind: str
    where: Where
    interval_s: int
    opts: dict

    @property
    def key(self) -> tuple[str, str]:
        """(cluster, source): the row of ``source_status``."""
        return self.where.cluster, self.kind


@dataclass(frozen=True)
class ServiceConfig:
    path: Path
    warehouse: Path
    cycle_s: int
    backoff_initial_s: int
    backoff_max_s: int
    lock_timeout_s: int
    sources: tuple[SourceConfig, ...]
    clusters: tuple[str, ...]
    health_listen: tuple[str, int] | None
    max_cycle_age_s: int
    dashboard: bool
    dashboard_host: str
    dashboard_port: int
    extra: dict = field(default_factory=dict)
    lake: Path | None = None          # `gpuledger export lake` after refreshes (None: no lake) ...
    lake_interval_s: int = 3600       # ... at most this often


class _Where:
    """Finds the line of a key path such as ('clusters', 1, 'prometheus', 'step') in the TOML text."""

    def __init__(self, source: str, text: str):
        self.source, self.lines = source, text.split("\n")

    def fail(self, path: tuple, problem: str):
        name = "".join(f"[{p}]" if isinstance(p, int) else ("." if i else "") + str(p) for i, p in enumerate(path))
        raise InputError(self.source, f"key {name}: {problem}", line_no=self.line(path))

    def _header(self, pattern: str, start: int, stop: int, nth: int = 0) -> int | None:
        hits = [n for n in range(start, stop) if re.match(pattern, self.lines[n].strip())]
        return hits[nth] if nth < len(hits) else None

    def line(self, path: tuple) -> int | None:
        lo, hi, scope = 0, len(self.lines), []
        i = 0
        while i < len(path):
            part, nxt = path[i], path[i + 1] if i + 1 < len(path) else None
            name = re.escape(".".join(scope + [str(part)]))
            if isinstance(nxt, int):                      # the nxt-th [[part]]
                at = self._header(rf"\[\[\s*{name}\s*\]\]", lo, hi, nxt)
                if at is None:
                    return None
                end = self._header(rf"\[\[\s*{name}\s*\]\]", at + 1, hi)
                lo, hi, scope, i = at, end if end is not None else hi, scope + [str(part)], i + 2
                continue
            at = self._header(rf"\[\s*{name}\s*\]", lo, hi)
            if at is not None and nxt is not None:
                lo, scope, i = at, scope + [str(part)], i + 1
                continue
            for n in range(lo + (1 if scope else 0), hi):
                if n > lo and self.lines[n].lstrip().startswith("[") and scope:
                    break
                if re.match(rf"\s*{re.escape(str(part))}\s*=", self.lines[n]):
                    return n + 1
            return at + 1 if at is not None else lo + 1
        return lo + 1


def _value(chk: _Where, path: tuple, key: Key, value: Any, base: Path) -> Any:
    """``value`` checked against ``key``'s type (None: the default; a required key without one fails)."""
    if value is None:
        if key.default is None and key.type != "duration":
            chk.fail(path, "is required")
        return key.default
    t = key.type
    if t == "duration":
        if isinstance(value, bool):
            chk.fail(path, f"must be a duration (seconds, or e.g. 90s, 5m, 2h), got {value!r}")
        try:
            return parse_duration(value)
        except ValueError as exc:
            chk.fail(path, str(exc))
    if t == "bool" and not isinstance(value, bool):
        chk.fail(path, f"must be true or false, got {value!r}")
    if t == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        chk.fail(path, f"must be a whole number >= 0, got {value!r}")
    if t == "port" and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536):
        chk.fail(path, f"must be a TCP port 1-65535, got {value!r}")
    if t in ("str", "path") and not isinstance(value, str):
        chk.fail(path, f"must be a string, got {value!r}")
    if t == "strings" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        chk.fail(path, f"must be a list of strings, got {value!r}")
    if t == "path":
        return str(base / value) if value else ""
    return value


def _table(chk: _Where, path: tuple, doc: Any, keys: dict[str, Key], base: Path) -> dict:
    """A table's keys checked and defaulted; unknown keys fail (a typo must not pass as a default)."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        chk.fail(path, "must be a table")
    for k in doc:
        if k not in keys:
            chk.fail(path + (k,), f"unknown key (allowed: {', '.join(sorted(keys))})")
    return {k: _value(chk, path + (k,), spec, doc.get(k), base) for k, spec in keys.items()}


def _source(chk: _Where, path: tuple, kind: str, doc: Any, where: Where, base: Path) -> SourceConfig | None:
    spec = KINDS[kind]
    opts = _table(chk, path, doc, {**COMMON, **spec.keys}, base)
    if not opts.pop("enabled"):
        return None
    interval = opts.pop("interval") or parse_duration(spec.interval)
    return SourceConfig(kind, where, interval, opts)


def _clusters(chk: _Where, doc: Any, base: Path) -> list[SourceConfig]:
    if doc is None:
        return []
    if not isinstance(doc, list):
        chk.fail(("clusters",), "must be an array of tables: [[clusters]]")
    out, names = [], set()
    kinds = {k for k, s in KINDS.items() if s.scope == "cluster"}
    for i, c in enumerate(doc):
        if not isinstance(c, dict):
            chk.fail(("clusters", i), "must be a table")
        for k in c:
            if k not in CLUSTER_KEYS and k not in kinds:
                chk.fail(("clusters", i, k), f"unknown key (allowed: {', '.join(sorted({*CLUSTER_KEYS, *kinds}))})")
        own = _table(chk, ("clusters", i), {k: v for k, v in c.items() if k in CLUSTER_KEYS}, CLUSTER_KEYS, base)
        if own["name"] in names:
            chk.fail(("clusters", i, "name"), f"cluster {own['name']!r} is configured twice")
        names.add(own["name"])
        where = Where(own["name"], (("SLURM_CONF", own["slurm_conf"]),) if own["slurm_conf"] else ())
        for kind in (k for k in KINDS if k in kinds and k in c):     # in KINDS' order: accounting first
            src = _source(chk, ("clusters", i, kind), kind, c[kind], where, base)
            if src:
                out.append(src)
    return out


def parse(text: str, source: str) -> ServiceConfig:
    """Validate a service config; raises InputError (one line: file:line: key ...: problem)."""
    chk = _Where(source, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"at line (\d+)", str(exc))
        raise InputError(source, f"not valid TOML: {str(exc).split(' (at line')[0]}",
                         line_no=int(m.group(1)) if m else None) from None
    base = Path(source).resolve().parent
    sec = {name: _table(chk, (name,), doc.get(name), keys, base) for name, keys in SECTIONS.items()}
    sources = []
    for kind, spec in KINDS.items():      # governance first: the cycle's jobs map to the teams in force
        if spec.scope == "global" and kind in doc:
            src = _source(chk, (kind,), kind, doc[kind], Where(GLOBAL), base)
            sources += [src] if src else []
    sources += _clusters(chk, doc.get("clusters"), base)
    if not sources:
        chk.fail(("clusters",), "nothing to collect: add a [[clusters]] entry with a source table "
                                "(e.g. [clusters.sacct]) or a [governance] table")
    svc, health, dash = sec["service"], sec["health"], sec["dashboard"]
    listen = _listen(chk, health["listen"])
    known = {*SECTIONS, "clusters", *(k for k, s in KINDS.items() if s.scope == "global")}
    return ServiceConfig(
        path=Path(source), warehouse=Path(svc["warehouse"]) if svc["warehouse"] else warehouse.resolve_path(None),
        cycle_s=svc["cycle"], backoff_initial_s=svc["backoff_initial"], backoff_max_s=svc["backoff_max"],
        lock_timeout_s=svc["lock_timeout"], sources=tuple(sources),
        clusters=tuple(dict.fromkeys(s.where.cluster for s in sources if s.where.cluster != GLOBAL)),
        health_listen=listen, max_cycle_age_s=health["max_cycle_age"] or 3 * svc["cycle"] + 60,
        dashboard=dash["enabled"], dashboard_host=dash["host"], dashboard_port=dash["port"],
        extra={k: v for k, v in doc.items() if k not in known},
        lake=Path(svc["lake"]) if svc["lake"] else None, lake_interval_s=svc["lake_interval"])


def parse_listen(text: str, what: str = "listen") -> tuple[str, int] | None:
    """'HOST:PORT' -> (host, port); '' -> None (off); a ValueError naming ``what`` otherwise."""
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{what}: expected HOST:PORT (e.g. 127.0.0.1:9464), got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _listen(chk: _Where, text: str) -> tuple[str, int] | None:
    try:
        return parse_listen(text)
    except ValueError as exc:
        chk.fail(("health", "listen"), str(exc).removeprefix("listen: "))


def load(path: str | Path) -> ServiceConfig:
    """Read and validate the config file at ``path``."""
    p = Path(path)
    try:
        text = p.read_bytes().removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except OSError as exc:
        raise InputError(str(p), f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(p), f"not UTF-8 text (byte {exc.start})") from None
    return parse(text, str(p))
