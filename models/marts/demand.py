"""The daily demand marts (``demand_day``, ``demand_peak_day``, ``demand_scopes``), built by `gpuledger refresh`
with the kernel of models/kernels/demand_measures.py; models/metrics/demand.py reads them while current."""
from __future__ import annotations

import duckdb
import polars as pl

from ingest import warehouse
from models.definitions.marts import DEMAND as MART
from models.kernels.demand_measures import ALL_CLUSTERS, DIMENSIONS, load_jobs, measures


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/pipeline/refresh.py: the daily demand marts, recomputed whole (skipped when no ingest ran
    since the last build, unless ``full``).

    Per scope (each cluster alone, and with several clusters all of them together), exactly what
    :func:`demand_table` computes from the jobs for ``freq="day"`` and that cluster: ``demand_day`` holds the
    additive measures (GPU-hours, unrounded) per cluster, pool, partition and team and day; ``demand_peak_day``
    the peak GPUs per pool (per cluster and pool in a cluster's scope); ``demand_scopes`` the day range."""
    newest = warehouse.newest_run(con)
    if not full and warehouse.is_current(con, MART):
        return
    clusters = [r[0] for r in con.sql("""SELECT DISTINCT cluster FROM tl_clusters WHERE horizon IS NOT NULL
                                         ORDER BY cluster""").fetchall()]
    scopes = clusters + ([ALL_CLUSTERS] if len(clusters) > 1 else [])
    days, peaks, spans = [], [], []
    for scope in scopes:
        hz = load_jobs(con, None if scope == ALL_CLUSTERS else scope)
        if hz is None:
            continue
        start, end = con.sql("SELECT date_trunc('day', min(submit)), date_trunc('day', min(hz)) "
                             "FROM _demand_jobs").fetchall()[0]
        spans.append((scope, start, end))
        if end <= start:
            continue
        d = measures(con, "day", list(DIMENSIONS), start, end, peak=False, rounded=False)
        days.append(d.with_columns(pl.lit(scope).alias("scope")))
        keys = ["pool"] if scope == ALL_CLUSTERS else ["cluster", "pool"]
        p = measures(con, "day", keys, start, end, additive=False, served=False, rounded=False)
        if scope == ALL_CLUSTERS:
            p = p.with_columns(pl.lit(None, pl.String).alias("cluster"))
        peaks.append(p.with_columns(pl.lit(scope).alias("scope")))
    con.execute("DROP TABLE IF EXISTS _demand_jobs")
    day_df = pl.concat(days) if days else None
    peak_df = pl.concat(peaks, how="diagonal") if peaks else None
    span_df = pl.DataFrame(spans, schema={"scope": pl.String, "first_ts": pl.Datetime("us"),
                                          "end_ts": pl.Datetime("us")}, orient="row")
    with warehouse.transaction(con):
        for t in ("demand_day", "demand_peak_day", "demand_scopes"):
            con.execute(f"DELETE FROM {t}")
        if day_df is not None:
            con.execute("INSERT INTO demand_day BY NAME SELECT * FROM day_df ORDER BY scope, ts")
            con.execute("INSERT INTO demand_peak_day BY NAME SELECT * FROM peak_df ORDER BY scope, ts")
        con.execute("INSERT INTO demand_scopes BY NAME SELECT * FROM span_df")
        warehouse.record_mart(con, MART, newest)
