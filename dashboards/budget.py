"""The dashboard server's memory budget and how it is shared (caches, DuckDB, working memory).

No Streamlit here: dashboards/server.py derives the server's command line and environment from it, and
dashboards/queries.py and model_reads.py their caches' sizes and lifetimes. docs/ARCHITECTURE.md ("Memory")
explains the split; benchmarks/dashboard_memory.py checks it under load.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: The dashboard server's memory budget (resident memory of the whole process), e.g. "2GB", "1536MB".
ENV_BUDGET = "GPULEDGER_DASHBOARD_MEMORY"
DEFAULT_BUDGET = 2 * 1024 ** 3
_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}


def parse_bytes(text: str) -> int:
    """'2GB', '1536 MB', '2.5gb', '1073741824' -> bytes (units are powers of 1024, like DuckDB's)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?B?)\s*", text.upper())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"${ENV_BUDGET}: {text!r} is not a size like 2GB or 1536MB")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


@dataclass(frozen=True)
class Budget:
    """How the server's memory budget is shared (bytes), so five people opening every page with a one-year
    window stay inside it (benchmarks/dashboard_memory.py):

    - ``base``: the interpreter, Streamlit and the imported libraries (~0.45 GB measured, idle after imports);
    - ``duckdb``: DuckDB's buffer pool and query memory for the snapshot (its ``memory_limit``; DuckDB caches
      pages it read up to this limit, 80 % of the machine's memory by default);
    - ``views``: every ``st.cache_data`` entry together (``server.maxCacheDataSize``: Streamlit evicts the least
      recently used entries beyond it; the views are small tables, a year's view is at most a few MB);
    - ``statements``: how many chargeback statements with their job-level detail stay cached (a month of the
      5M-job year carries ~0.4M jobs, ~0.12 GB as Polars frames);
    - the rest: the pages' working memory while they run (frames being filtered, figures being built).
    Lifetime: entries of a snapshot nobody reads any more are dropped after ``ttl`` seconds (they would be
    evicted by newer ones anyway; the TTL frees the memory of a quiet server), shorter for smaller budgets."""
    total: int

    BASE = 450 * 1024 ** 2
    STATEMENT = 128 * 1024 ** 2

    @property
    def spare(self) -> int:
        return max(self.total - self.BASE, 256 * 1024 ** 2)

    @property
    def duckdb(self) -> int:
        return int(self.spare * 0.35)

    @property
    def views(self) -> int:
        return int(self.spare * 0.15)

    @property
    def statements(self) -> int:
        return max(2, int(self.spare * 0.25) // self.STATEMENT)

    @property
    def ttl(self) -> int:
        return int(min(6 * 3600, max(600, 3600 * self.total / DEFAULT_BUDGET)))

    @property
    def max_entries(self) -> int:
        """Entries per cached function (a bound on keys; ``views`` bounds their bytes)."""
        return int(min(256, max(32, self.views // (4 * 1024 ** 2))))


def budget() -> Budget:
    """The budget ``$GPULEDGER_DASHBOARD_MEMORY`` sets (default 2 GB)."""
    text = os.environ.get(ENV_BUDGET)
    return Budget(parse_bytes(text) if text else DEFAULT_BUDGET)



#: The budget of this process.
BUDGET = budget()
