"""The synthetic cluster's nodes: names, pools, partitions and when each node joined."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.demo.config import Config


@dataclass
class Layout:
    """Nodes are numbered pool by pool, so each pool is a contiguous range ``pool_range[p]``."""
    names: list[str]
    pool: np.ndarray            # pool index per node
    since: np.ndarray           # UTC epoch seconds the node joined (the period start, or the capacity addition)
    pool_range: list[tuple[int, int]]
    partitions: list[str]       # comma-joined partitions per node

    def __len__(self) -> int:
        return len(self.names)


def make_layout(cfg: Config, t0: int, t_add: int) -> Layout:
    names, pool, since, ranges, parts = [], [], [], [], []
    for pi, p in enumerate(cfg.pools):
        total = p.nodes + p.added
        width = max(3, len(str(total)))
        lo = len(names)
        member = [q.name for q in cfg.partitions if p.name in q.pools]
        for k in range(total):
            names.append(f"{p.prefix}-{k + 1:0{width}d}")
            pool.append(pi)
            since.append(t0 if k < p.nodes else t_add)
            parts.append(",".join(member))
        ranges.append((lo, len(names)))
    return Layout(names, np.array(pool, np.int16), np.array(since, np.int64), ranges, parts)
