"""The synthetic year the model benchmarks run on: 2,000 nodes x 8 GPUs, ~5,000,000 jobs, built once and cached.

Usage from a benchmark::

    from benchmarks._year import year_warehouse
    db = year_warehouse()                 # canonical tables only (jobs, job_nodes, nodes, node_events, teams, ...)
    db = year_warehouse(marts=True)       # plus the marts `gpuledger refresh` builds (cached separately)
    con = duckdb.connect(str(db), read_only=True)

The warehouse is built through the real ingest path (governance.toml, ``scontrol show node -o`` snapshots,
twelve monthly ``sacct -P --allocations`` exports, ``sacctmgr show event``) by models/demo/build.py, like
``gpuledger demo --scale 33.33``, without telemetry (a site this size keeps it in Prometheus).

Cache: ``$GPULEDGER_BENCH_CACHE`` (default /tmp/gpuledger-bench), one file per (seed, scale, generator version,
warehouse schema version); with ``marts=True`` also keyed by a hash of models/**/*.py. Ingestor fixes that change
neither the generator nor the schema keep the cache; ``GPULEDGER_BENCH_REBUILD=1`` forces a rebuild. A build
takes several minutes and >4 GB: run benchmarks under ``flock /tmp/gpuledger-heavy.lock``. Concurrent callers
wait for one build (a lock file per cache key). Open the cached files read-only, or copy them (``work_copy``).

``python benchmarks/_year.py [--seed N] [--scale X] [--marts]`` builds (if needed) and prints what is inside.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ingest import warehouse  # noqa: E402
from models.demo import build, config  # noqa: E402

CACHE = Path(os.environ.get("GPULEDGER_BENCH_CACHE", "/tmp/gpuledger-bench"))
YEAR_SCALE = config.YEAR_SCALE          # 2,000 nodes
YEAR_JOBS = config.YEAR_JOBS


def year_config(seed: int = 1, scale: float = YEAR_SCALE) -> config.Config:
    """The benchmark year: ``config.for_scale(scale)``, i.e. `gpuledger demo --scale 33.33` (5,000,000 jobs at
    2,000 nodes; from scale 2 up the job rate per GPU is the year's)."""
    return config.for_scale(scale, seed=seed)


def _schema_version() -> int:
    return max(v for v, _, _ in warehouse.migration_files())


def _models_hash() -> str:
    h = hashlib.sha256()
    for p in sorted((ROOT / "models").rglob("*.py")):
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def cache_key(seed: int, scale: float) -> str:
    return f"year-seed{seed}-scale{scale:.4g}-gen{config.GENERATOR_VERSION}-schema{_schema_version()}"


def _log(msg: str) -> None:
    print(f"[_year {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def year_warehouse(seed: int = 1, scale: float = YEAR_SCALE, marts: bool = False) -> Path:
    """Path of the cached synthetic-year warehouse, building it first if needed."""
    CACHE.mkdir(parents=True, exist_ok=True)
    key = cache_key(seed, scale)
    base = CACHE / f"{key}.duckdb"
    target = CACHE / f"{key}-marts{_models_hash()}.duckdb" if marts else base
    rebuild = os.environ.get("GPULEDGER_BENCH_REBUILD") == "1"
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        older = None if rebuild or base.exists() else _older_schema(seed, scale)
        if older is not None:
            _log(f"migrating {older.name} to schema {_schema_version()} (as `gpuledger` upgrades a site's warehouse)")
            _migrate_copy(older, base)
        if rebuild or not base.exists():
            _log(f"building {base} (several minutes; seed {seed}, scale {scale:.4g})")
            t = time.perf_counter()
            info = build.build(base, year_config(seed, scale), progress=_log, refresh=False)
            _log(f"built {info['jobs']:,} jobs on {info['nodes']:,} nodes in {time.perf_counter() - t:.0f} s")
        if marts and (rebuild or not target.exists()):
            _log(f"refreshing marts into {target}")
            tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
            shutil.copyfile(base, tmp)
            from models.pipeline import refresh
            con = warehouse.connect(tmp)
            try:
                for name, secs in refresh.run(con, tmp, full=True, publish=False):
                    _log(f"  {name}: {secs:.1f} s")
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.replace(tmp, target)
    return target


def _older_schema(seed: int, scale: float) -> Path | None:
    """The newest cached base of the same (seed, scale, generator) at an older schema, if any: migrations only
    add tables and columns the synthetic year leaves empty, so migrating it equals rebuilding it."""
    prefix = cache_key(seed, scale).rsplit("-schema", 1)[0] + "-schema"
    found = []
    for p in CACHE.glob(f"{prefix}*.duckdb"):
        tail = p.stem[len(prefix):]
        if tail.isdigit() and int(tail) < _schema_version():
            found.append((int(tail), p))
    return max(found)[1] if found else None


def _migrate_copy(src: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    shutil.copyfile(src, tmp)
    con = warehouse.connect(tmp)           # a read-write open applies the pending migrations
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.replace(tmp, dest)


def work_copy(src: Path, dest_dir: Path) -> Path:
    """A private writable copy of a cached warehouse (for benchmarks that write marts)."""
    dest = Path(dest_dir) / Path(src).name
    shutil.copyfile(src, dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=YEAR_SCALE)
    ap.add_argument("--marts", action="store_true")
    a = ap.parse_args(argv)
    db = year_warehouse(a.seed, a.scale, a.marts)
    import duckdb
    con = duckdb.connect(str(db), read_only=True)
    print(db)
    for q in ("SELECT count(*) AS jobs, count(DISTINCT job_id_raw) AS job_ids, min(submit), max(submit) FROM jobs",
              "SELECT count(DISTINCT node) AS nodes, sum(gpus) FILTER (WHERE valid_to IS NULL) AS gpus FROM nodes",
              "SELECT state, count(*) FROM jobs GROUP BY ALL ORDER BY 2 DESC",
              "SELECT count(*) AS node_events FROM node_events"):
        print(con.sql(q))
    return 0


if __name__ == "__main__":
    sys.exit(main())
