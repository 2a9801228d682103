"""What one cycle of `gpuledger serve` costs on a warehouse, beside the refresh and publish it runs.

Usage: ``python benchmarks/service_cycle.py [DEMO_DB]`` (default data/demo.duckdb; build it with
``gpuledger demo --no-serve --keep-inputs``). On a copy of the warehouse, with a config of the governance file the
demo kept (``data/demo/inputs/governance.toml``), it times, median of 3:

- the first cycle after a start: open, check the governance file (unchanged: nothing loaded), an incremental
  refresh with nothing new, publish, close;
- a steady cycle: the same check, publish only (no new ingest run), close;
- a cycle that loads: the governance file changed (a comment added), so it is loaded, every job re-mapped and the
  marts refreshed (team changes rebuild the rollups whole: the costliest kind of cycle).
"""
from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ingest import warehouse  # noqa: E402
from models.service import config, health, loop  # noqa: E402


def _cycle(cfg, first: bool) -> tuple[float, dict]:
    c = loop.Collector(cfg)
    c.need_refresh = first
    t0 = time.perf_counter()
    assert c.cycle(threading.Event()), c.cycle_error
    return time.perf_counter() - t0, c.snapshot()["timings"]


def main() -> None:
    demo = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "data" / "demo.duckdb")
    gov_src = demo.parent / demo.stem / "inputs" / "governance.toml"      # where --keep-inputs keeps them
    with tempfile.TemporaryDirectory() as d:
        db, gov = Path(d) / "wh.duckdb", Path(d) / "governance.toml"
        shutil.copy2(demo, db)
        shutil.copy2(gov_src, gov)
        cfg_path = Path(d) / "gpuledger.toml"
        cfg_path.write_text(f'[service]\nwarehouse = "{db}"\n[governance]\npath = "{gov}"\n', encoding="utf-8")
        cfg = config.load(cfg_path)
        con = warehouse.connect(db)
        jobs = con.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
        con.close()
        _cycle(cfg, True)                       # warm-up: migrate, load the governance file once
        rows = {"first cycle after a start": [], "steady cycle (publish only)": [], "cycle loading governance": []}
        for i in range(3):
            rows["first cycle after a start"].append(_cycle(cfg, True))
            rows["steady cycle (publish only)"].append(_cycle(cfg, False))
            gov.write_text(gov.read_text() + f"\n# edit {i}\n")
            rows["cycle loading governance"].append(_cycle(cfg, False))
        print(f"{demo.name}: {jobs:,} jobs, warehouse {health.warehouse_bytes(str(db)) / 1e6:.0f} MB")
        for name, runs in rows.items():
            total = statistics.median(r[0] for r in runs)
            ref = statistics.median(r[1]["refresh"] for r in runs)
            pub = statistics.median(r[1]["publish"] for r in runs)
            print(f"  {name:32s} {total:6.2f} s  (refresh {ref:5.2f} s, publish {pub:5.2f} s; runs "
                  + ", ".join(f"{r[0]:.2f}" for r in runs) + ")")


if __name__ == "__main__":
    main()
