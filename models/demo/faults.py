"""Node failures and drains of the synthetic cluster, sampled before the scheduler runs.

Hard failures (the node goes DOWN and its jobs end NODE_FAIL) follow a Poisson process per node, with a few
"lemon" nodes failing five times as often; repairs are a reboot (hours) or a part swap (days). Drains are
admin actions (firmware, cabling, health-check flags): the node takes no new jobs; an urgent drain also
requeues the jobs running on it. Reasons read like the ones operators type.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.demo.config import Config

DOWN, DRAIN = 0, 1
DOWN_REASONS = ("Not responding", "GPU Xid 79: fallen off the bus", "NHC: ECC uncorrectable errors on GPU",
                "Kernel panic", "NHC: InfiniBand port down", "GPU Xid 48: double bit ECC error",
                "NVLink error", "PSU failure")
DRAIN_REASONS = ("firmware upgrade", "NHC: GPU thermal slowdown", "replace IB cable", "driver update",
                 "NHC: low GPU clocks", "disk full on /tmp", "BIOS settings", "GPU row remap pending")
ADMINS = ("root", "slurm", "opsadmin")


@dataclass
class Outages:
    """Unavailability periods, sorted by start. Times are UTC epoch seconds."""
    node: np.ndarray
    kind: np.ndarray      # DOWN or DRAIN
    start: np.ndarray
    end: np.ndarray
    urgent: np.ndarray    # drains that requeue the running jobs
    reason: np.ndarray    # index into DOWN_REASONS / DRAIN_REASONS
    user: np.ndarray      # index into ADMINS (drains), -1 for failures (Slurm records them as root)


def sample_outages(cfg: Config, rng: np.random.Generator, node_since: np.ndarray, t0: int, t1: int) -> Outages:
    """Failures and drains for nodes that exist from ``node_since`` (epoch s) until ``t1``."""
    n = len(node_since)
    lemon = rng.random(n) < cfg.lemon_nodes
    rate_down = np.where(lemon, 5.0, 1.0) / (cfg.node_mtbf_days * 86400)
    rate_drain = cfg.drain_per_node_year / (365 * 86400)
    rows = []
    for kind, rate in ((DOWN, rate_down), (DRAIN, np.full(n, rate_drain))):
        span = (t1 - node_since).astype(float)
        counts = rng.poisson(rate * span)
        node = np.repeat(np.arange(n), counts)
        start = node_since[node] + (rng.random(len(node)) * span[node]).astype(np.int64)
        if kind == DOWN:
            swap = rng.random(len(node)) < 0.25
            dur = np.where(swap, np.exp(rng.normal(np.log(2.5 * 86400), 0.6, len(node))),
                           np.exp(rng.normal(np.log(2.5 * 3600), 0.8, len(node))))
            reason = rng.integers(0, len(DOWN_REASONS), len(node))
            urgent = np.zeros(len(node), bool)
            user = np.full(len(node), -1)
        else:
            dur = np.exp(rng.normal(np.log(10 * 3600), 0.9, len(node)))
            reason = rng.integers(0, len(DRAIN_REASONS), len(node))
            urgent = rng.random(len(node)) < 0.3
            user = rng.integers(0, len(ADMINS), len(node))
        rows.append((node, np.full(len(node), kind), start, start + np.maximum(dur, 600).astype(np.int64),
                     urgent, reason, user))
    cols = [np.concatenate(c) for c in zip(*rows)]
    out = Outages(*cols)
    order = np.lexsort((out.node, out.start))
    out = Outages(*(getattr(out, f)[order] for f in Outages.__dataclass_fields__))
    return _no_overlap(out)


def _no_overlap(o: Outages) -> Outages:
    """Drop periods that start while the same node is already out, so each node has one state at a time."""
    keep = np.ones(len(o.node), bool)
    busy_until: dict[int, int] = {}
    for i, (n, s, e) in enumerate(zip(o.node.tolist(), o.start.tolist(), o.end.tolist())):
        if busy_until.get(n, -1) > s:
            keep[i] = False
        else:
            busy_until[n] = e
    return Outages(*(getattr(o, f)[keep] for f in Outages.__dataclass_fields__))
