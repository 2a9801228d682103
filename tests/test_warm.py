"""models/simulation/warm.py: the kernels it compiles are the ones real runs call, so they compile nothing more."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim_fixtures import build_warehouse, synthetic_jobs  # noqa: E402

from models.simulation import core, placement, warm, whatif  # noqa: E402
from models.simulation.simulate import Cluster, Policy  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "openb"


def _signatures() -> dict[str, int]:
    return {"simulate": len(core.simulate_kernel.signatures), "placement": len(placement.run_placement.signatures)}


def test_compiling_ahead_leaves_the_kernels_real_runs_use(con):
    took = warm.compile_kernels()
    assert set(took) == {"simulate", "placement"} and all(v >= 0 for v in took.values())
    compiled = _signatures()
    assert compiled == {"simulate": 1, "placement": 1}
    # a replay of a warehouse's jobs and the openb placement protocol on real rows: no new signature
    policy = Policy.parse("priority-backfill", placement="fgd")
    cluster = Cluster.from_arrays([8] * 4 + [4] * 2, ["h100"] * 4 + ["a100"] * 2, ["gpu"] * 6)
    build_warehouse(con, synthetic_jobs(80, 7, n_pools=2, days=1), cluster, policy)
    whatif.validate_replay(whatif.load_inputs(con), policy)
    nodes, pods = placement.load_trace(FIX / "pods_excerpt.csv", FIX / "nodes_excerpt.csv")
    placement.run_protocol(nodes, pods, seeds=[42])
    assert _signatures() == compiled
