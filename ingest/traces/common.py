"""What every trace converter shares: reading CSVs with line numbers, the ingest run, and writing the
canonical tables (jobs through jobs_store's order-independent merge, the node inventory, trace extras).

Converters turn a trace's rows into a Polars frame with the columns of ``jobs_store.JOB_COLUMNS`` (any
subset; the rest are NULL) plus ``line_no``; :func:`write_jobs` types it against the ``jobs`` schema and
merges it. Every input row is loaded, skipped with a reason, or rejected with a reason, as for sacct.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

import polars as pl

from ingest import jobs_store, plausible, warehouse
from ingest.errors import InputError
from ingest.inputs import read_file
from ingest.lines import text_lines


def read_bytes(path: str | Path) -> bytes:
    """A trace file's bytes, decompressed when compressed (gzip, bzip2, xz: ingest/inputs.py)."""
    return read_file(path, "a trace file")


def read_csv(path: str | Path, data: bytes, columns: list[str] | None = None,
             required: tuple[str, ...] = ()) -> pl.DataFrame:
    """All fields as text (typing is the converter's job, so bad values can be rejected per line), plus
    ``line_no`` (1-based line in the file). ``columns`` names the fields of a file without a header line."""
    try:
        df = pl.read_csv(io.BytesIO(data), infer_schema=False, has_header=columns is None,
                         new_columns=columns, truncate_ragged_lines=False)
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as exc:
        raise InputError(str(path), f"not a CSV file this converter can read: {str(exc).splitlines()[0]}") from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(str(path), f"missing column(s) {', '.join(missing)}; found {', '.join(df.columns)}")
    first = 2 if columns is None else 1
    return df.with_row_index("line_no", offset=first).with_columns(pl.col("line_no").cast(pl.Int64))


def raw_lines(data: bytes) -> list[str]:
    return text_lines(data)


def open_run(con, kind: str, path: str | Path, data: bytes, cluster: str, options: dict | None = None
             ) -> warehouse.IngestRun:
    return warehouse.IngestRun(con, f"trace:{kind}", str(path), sha256=hashlib.sha256(data).hexdigest(),
                               nbytes=len(data), cluster=cluster, options=options or {})


def ensure_cluster(con, cluster: str, description: str, tz: str = "UTC") -> None:
    con.execute("INSERT INTO clusters (cluster, tz, description) SELECT ?, ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM clusters WHERE cluster = ?)", [cluster, tz, description, cluster])


def reject(run: warehouse.IngestRun, rows: pl.DataFrame, lines: list[str]) -> None:
    """Quarantine rows of a frame with columns line_no, field, reason (raw text taken from ``lines``)."""
    run.mark_lines(lines, rejected=rows.select("line_no", "field", "reason").iter_rows())


def split_bad(df: pl.DataFrame, checks: list[tuple[str, pl.Expr, pl.Expr]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(good rows, bad rows with line_no/field/reason): ``checks`` are (field, bad-condition, reason text)."""
    field = pl.lit(None, pl.String)
    reason = pl.lit(None, pl.String)
    for name, bad, why in reversed(checks):
        field = pl.when(bad).then(pl.lit(name)).otherwise(field)
        reason = pl.when(bad).then(why).otherwise(reason)
    marked = df.with_columns(_field=field, _reason=reason)
    bad = marked.filter(pl.col("_field").is_not_null()).select("line_no", field="_field", reason="_reason")
    return marked.filter(pl.col("_field").is_null()).drop("_field", "_reason"), bad


def _jobs_types(con) -> dict[str, str]:
    return {r[0]: r[1] for r in con.sql("SELECT column_name, data_type FROM duckdb_columns() "
                                        "WHERE table_name = 'jobs' AND schema_name = 'main'").fetchall()}


def write_jobs(con, run: warehouse.IngestRun, staged: pl.DataFrame, lines: list[str] | None = None) -> int:
    """Type ``staged`` (JOB_COLUMNS subset + line_no) against ``jobs``, reject the input lines with a row that cannot
    be true (:func:`_reject_implausible`; ``lines`` gives their raw text), merge the rest and assign teams.
    Returns the number of input lines rejected (the caller's loaded count leaves them out)."""
    types = _jobs_types(con)
    staged = staged.with_columns(input_line=pl.col("line_no"))
    # jobs_store identifies staged rows by line_no; a record that yields several rows (Philly's attempts)
    # must not share one, so rows are numbered in input order (later rows still win ties)
    if staged["line_no"].n_unique() < staged.height:
        staged = staged.drop("line_no").with_row_index("line_no", offset=1).with_columns(pl.col("line_no").cast(pl.Int64))
    con.register("_trace_in", staged.to_arrow())
    try:
        cols = []
        for c in jobs_store.JOB_COLUMNS:
            name = c.strip('"')
            expr = f'CAST("{name}" AS {types[name]})' if name in staged.columns else f"NULL::{types[name]}"
            cols.append(f'{expr} AS "{name}"')
        con.execute(f"CREATE OR REPLACE TEMP TABLE _trace_stg AS SELECT line_no, input_line, {', '.join(cols)} "
                    "FROM _trace_in")
    finally:
        con.unregister("_trace_in")
    rejected = _reject_implausible(con, run, lines or [])
    bad = jobs_store.stage_nodelists(con, "_trace_stg")
    if bad:
        raise InputError(run.input_name, f"bad node list {next(iter(bad))!r}: {next(iter(bad.values()))}")
    jobs_store.merge_jobs(con, run, "_trace_stg")
    jobs_store.assign_teams(con, run.run_id)
    con.execute("DROP TABLE IF EXISTS _trace_stg")
    return rejected


def _reject_implausible(con, run: warehouse.IngestRun, lines: list[str]) -> int:
    """Reject every input line of ``_trace_stg`` with a row that cannot be true (ingest/plausible.py: times outside
    the window, End before Start, durations and counts out of range) and drop all its rows; returns how many."""
    window, top = plausible.window(), plausible.MAX_COUNTS
    checks = [(c, f'"{c}" NOT BETWEEN $win_lo AND $win_hi', plausible.sql_reason(f'strftime("{c}", \'%Y-%m-%dT%H:%M:%S\')'))
              for c in ("submit", "eligible", "start", "end")]
    checks += [("end", '"end" < start', "'End is before Start'")]
    checks += [(c, f"{c} NOT BETWEEN 0 AND $win_max_s", f"'duration out of the plausible range: ' || {c}")
               for c in ("elapsed_s", "timelimit_s")]
    checks += [(c, f"{c} NOT BETWEEN 0 AND {top[kind]} OR NOT isfinite({c}::DOUBLE)",
                f"'count out of the plausible range 0-{top[kind]}: ' || {c}")
               for c, kind in (("nnodes", "nodes"), ("ncpus", "cpus"), ("req_cpus", "cpus"), ("ngpus", "gpus"),
                               ("req_gpus", "gpus"))]
    verdict = "CASE " + " ".join(f"WHEN {cond} THEN '{c}' || chr(31) || {why}" for c, cond, why in checks) + " END"
    sql = f"""SELECT input_line AS line_no, split_part(min(v), chr(31), 1) AS field,
                     split_part(min(v), chr(31), 2) AS reason
              FROM (SELECT input_line, {verdict} AS v FROM _trace_stg) WHERE v IS NOT NULL GROUP BY 1 ORDER BY 1"""
    bad = pl.DataFrame(con.execute(sql, plausible.sql_params(window, sql)).fetchall(),
                       schema={"line_no": pl.Int64, "field": pl.String, "reason": pl.String}, orient="row")
    if bad.height:
        reject(run, bad, lines)
        con.execute("DELETE FROM _trace_stg WHERE list_contains(?, input_line)", [bad["line_no"].to_list()])
    return bad.height


def write_nodes(con, run: warehouse.IngestRun, nodes: pl.DataFrame) -> tuple[int, int]:
    """Put a trace's static node list in the inventory (valid since records began). A node already there
    with the same attributes is left alone; one whose attributes differ gets its row replaced.
    Returns (inserted, unchanged)."""
    cols = ("cluster", "node", "partitions", "gpu_type", "gpus", "cpus", "mem_bytes", "gres", "features")
    for c in cols:
        if c not in nodes.columns:
            nodes = nodes.with_columns(pl.lit(None).alias(c))
    con.register("_tn_in", nodes.select(cols).to_arrow())
    try:
        con.execute("""CREATE OR REPLACE TEMP TABLE _tn AS SELECT cluster, node, partitions, gpu_type,
                       gpus::INTEGER AS gpus, cpus::INTEGER AS cpus, mem_bytes::BIGINT AS mem_bytes, gres, features
                       FROM _tn_in""")
    finally:
        con.unregister("_tn_in")
    same = """n.cluster = t.cluster AND n.node = t.node AND n.valid_to IS NULL
              AND n.partitions IS NOT DISTINCT FROM t.partitions AND n.gpu_type IS NOT DISTINCT FROM t.gpu_type
              AND n.gpus = t.gpus AND n.cpus IS NOT DISTINCT FROM t.cpus AND n.mem_bytes IS NOT DISTINCT FROM t.mem_bytes"""
    unchanged = con.sql(f"SELECT count(*) FROM _tn t WHERE EXISTS (SELECT 1 FROM nodes n WHERE {same})").fetchall()[0][0]
    con.execute(f"""DELETE FROM nodes n WHERE EXISTS (SELECT 1 FROM _tn t WHERE n.cluster = t.cluster
                    AND n.node = t.node) AND NOT EXISTS (SELECT 1 FROM _tn t WHERE {same})""")
    inserted = con.execute(f"""INSERT INTO nodes (cluster, node, partitions, gpu_type, gpus, cpus, mem_bytes, gres,
                                                  features, valid_from, valid_to, ingest_run_id)
                               SELECT t.*, NULL, NULL, ? FROM _tn t
                               WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE {same})""",
                           [run.run_id]).fetchall()[0][0]
    con.execute("DROP TABLE IF EXISTS _tn")
    run.inserted += inserted
    run.unchanged += unchanged
    return inserted, unchanged


def upsert(con, table: str, key: tuple[str, ...], frame: pl.DataFrame,
           run: warehouse.IngestRun | None = None) -> tuple[int, int, int]:
    """Replace the rows of ``table`` whose key appears in ``frame``, then insert ``frame`` (by name). Returns
    (new, updated, unchanged): keys not there before, there with other values, there with the same values
    (``ingest_run_id`` aside); added to ``run``'s counts when given, so a re-ingest says "unchanged"."""
    con.register("_up_in", frame.to_arrow())
    try:
        cond = " AND ".join(f"t.{k} = u.{k}" for k in key)
        same = " AND ".join([cond] + [f"t.{c} IS NOT DISTINCT FROM u.{c}" for c in frame.columns
                                      if c not in key and c != "ingest_run_id"])
        existing, unchanged = con.sql(f"""
            SELECT count(*) FILTER (WHERE EXISTS (SELECT 1 FROM {table} t WHERE {cond})),
                   count(*) FILTER (WHERE EXISTS (SELECT 1 FROM {table} t WHERE {same}))
            FROM _up_in u""").fetchall()[0]
        con.execute(f"DELETE FROM {table} t WHERE EXISTS (SELECT 1 FROM _up_in u WHERE {cond})")
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _up_in")
    finally:
        con.unregister("_up_in")
    counts = (frame.height - existing, existing - unchanged, unchanged)
    if run is not None:
        run.inserted += counts[0]
        run.updated += counts[1]
        run.unchanged += counts[2]
    return counts
