"""Public GPU-cluster traces into the canonical tables: one module per trace kind (docs/TRACES.md).

``ingest(con, kind, path, **options)`` loads a trace file or directory and returns one run summary per input
file (the same dicts the other ingestors return).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from ingest.errors import InputError
from ingest.traces import acme, genai, openb, pai, philly, supercloud

KINDS = {
    openb.KIND: openb,            # alibaba-openb
    supercloud.KIND: supercloud,  # mit-supercloud
    pai.KIND: pai,                # alibaba-pai-2020
    genai.KIND: genai,            # alibaba-genai
    philly.KIND: philly,          # philly
    acme.KIND: acme,              # acme (AcmeTrace: Seren, Kalos)
}


def ingest(con, kind: str, path: str | Path, cluster: str | None = None, start: dt.datetime | None = None,
           tz: str | None = None, nodes: str | Path | None = None) -> list[dict]:
    mod = KINDS.get(kind)
    if mod is None:
        raise InputError(kind, f"unknown trace kind; known: {', '.join(KINDS)}")
    if not Path(path).exists():
        raise InputError(str(path), "no such file or directory")
    return mod.ingest_path(con, path, cluster=cluster, start=start, tz=tz, nodes=nodes)
