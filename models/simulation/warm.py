"""Compile the simulator's numba kernels ahead of their first use (`make install` runs this).

The event loop (`core.simulate_kernel`) and the placement replay (`placement.run_placement`) are compiled by
numba on first call and cached beside their sources (``cache=True``). Compiling takes about 30 s of one core
(2026-12-06, 2 cores: simulate 33 s, placement 6 s), which the first `gpuledger simulate` or `plan` after an
install would otherwise wait for, and which a test run paid once per worker that reached a simulation before
the cache was written. A tiny cluster and workload of the same dtypes as real ones compile every kernel the
real runs call, so the cache they leave is the one real runs load.

Run: python -m models.simulation.warm
"""
from __future__ import annotations

import time

import numpy as np

from models.simulation import placement
from models.simulation.simulate import Cluster, Policy, Workload, simulate


def _simulate_once() -> None:
    cluster = Cluster.from_arrays([8, 8, 4], ["a", "a", "b"])
    work = Workload.from_columns({"submit_s": [0.0, 10.0, 20.0, 30.0], "run_s": [100.0, 50.0, 30.0, 10.0],
                                  "gpus_per_node": [4.0, 8.0, 2.0, 4.0], "limit_s": [200.0, 100.0, 60.0, 20.0],
                                  "nnodes": [1, 1, 1, 2]})
    simulate(cluster, work, Policy())


def _place_once() -> None:
    nodes = {"name": ["n0", "n1"], "cpu": np.array([64000, 64000]), "mem": np.array([262144, 262144]),
             "gpus": np.array([8, 8]), "model": np.array([0, 0]), "models": ["A"]}
    pods = {"name": ["p0", "p1", "p2"], "cpu": np.array([4000, 8000, 0]), "cpu_nz": np.array([4000, 8000, 100]),
            "mem": np.array([1024, 2048, 512]), "num": np.array([1, 2, 0]), "milli": np.array([500, 1000, 0]),
            "mask": np.array([0, 0, 0]), "spec": ["", "", ""]}
    pods["spec_id"] = placement.spec_ids(pods)
    placement.run_protocol(nodes, pods, seeds=[42])


def compile_kernels() -> dict[str, float]:
    """Run each kernel once on a tiny input; returns the seconds each took (the compile time when the cache was
    cold, about a second when it was warm)."""
    took = {}
    for name, run in (("simulate", _simulate_once), ("placement", _place_once)):
        t0 = time.perf_counter()
        run()
        took[name] = time.perf_counter() - t0
    return took


def main() -> None:
    took = compile_kernels()
    print("simulator kernels ready: " + ", ".join(f"{k} {v:.1f} s" for k, v in took.items()))


if __name__ == "__main__":
    main()
