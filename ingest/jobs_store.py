"""Writing job rows into ``jobs`` and ``job_nodes``: shared by the sacct ingestor and the trace converters.

A staged table holds one candidate row per input line (the columns of :data:`JOB_COLUMNS` plus
``line_no``). :func:`merge_jobs` folds it into the warehouse so that ingestion order never matters:
for each key (cluster, job_id_raw, submit) the stored row is the *most progressed* version seen
(state rank PENDING < RUNNING < final, then elapsed time, then end time); versions that tie fill
each other's missing fields. Re-ingesting an input therefore changes nothing, and a later export
moves RUNNING/PENDING jobs to their final state.
"""
from __future__ import annotations

import pyarrow as pa

from ingest import hostlist, textsplit, warehouse
from ingest.slurm_sql import register as register_macros

#: Data columns of ``jobs`` that an ingestor stages (everything but keys and lineage).
JOB_COLUMNS = (
    "cluster", "job_id", "job_id_raw", "array_job_id", "array_task_id", "array_task_spec", "het_job_id",
    "het_offset", "user", "uid", '"group"', "gid", "account", "partition", "qos", "state", "state_raw",
    "cancelled_by_uid", "exit_code", "signal", "submit", "eligible", "start", '"end"', "elapsed_s",
    "timelimit_s", "timelimit_raw", "nnodes", "ncpus", "req_cpus", "ngpus", "gpu_milli", "req_gpus",
    "gpu_type", "mem_bytes", "req_mem_bytes", "billing", "alloc_tres", "req_tres", "nodelist", "job_name",
    "extra", "source",
)
KEY = ("cluster", "job_id_raw", "submit")


def _progress(alias: str) -> str:
    """A list that orders versions of one job by how far they got (lists compare lexicographically)."""
    return (f"[gl_state_rank({alias}.state), coalesce({alias}.elapsed_s, -1), "
            f"coalesce(epoch({alias}.\"end\")::BIGINT, -1), coalesce(epoch({alias}.start)::BIGINT, -1)]")


def stage_nodelists(con, table: str) -> dict[str, str]:
    """Expand every distinct nodelist of ``table`` into the temp table ``_nodelist_map``
    (nodelist, node, idx, n). Returns {nodelist: error} for the ones that are not valid hostlists."""
    distinct = [r[0] for r in con.sql(f"SELECT DISTINCT nodelist FROM {table} WHERE nodelist IS NOT NULL").fetchall()]
    keys, nodes, idxs, ns, bad = [], [], [], [], {}
    for expr in distinct:
        try:
            hosts = hostlist.expand(expr)
        except hostlist.HostlistError as exc:
            bad[expr] = str(exc)
            continue
        n = len(hosts)
        for i, h in enumerate(hosts):
            keys.append(expr)
            nodes.append(h)
            idxs.append(i)
            ns.append(n)
    tbl = pa.table({"nodelist": textsplit.str_array(keys), "node": textsplit.str_array(nodes),
                    "idx": textsplit.int_array(idxs, pa.int32()), "n": textsplit.int_array(ns, pa.int32())})
    con.register("_nodelist_in", tbl)
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _nodelist_map AS SELECT * FROM _nodelist_in")
    finally:
        con.unregister("_nodelist_in")
    return bad


def merge_jobs(con, run, table: str) -> None:
    """Fold staged rows of ``table`` into ``jobs``/``job_nodes`` for ingest ``run`` (an IngestRun).

    Call :func:`stage_nodelists` on the same table first. Sets run.inserted/updated/unchanged and
    records the state transitions of updated jobs in ``run.options['transitions']``.
    """
    register_macros(con)
    cols = ", ".join(JOB_COLUMNS)
    key = "cluster, job_id_raw, submit"
    # 1. one version per key: the most progressed (narrow work; the wide rows are only filtered)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _k AS
                    SELECT line_no, {key}, {_progress(table)} AS prog FROM {table}""")
    n_rows, n_keys = con.sql(f"SELECT count(*), count(DISTINCT ({key})) FROM _k").fetchall()[0]
    if n_keys < n_rows:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _k AS SELECT * FROM _k
                        QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY prog DESC, line_no DESC) = 1""")
        con.execute(f"CREATE OR REPLACE TEMP TABLE _in AS SELECT * FROM {table} WHERE line_no IN (SELECT line_no FROM _k)")
        table = "_in"
    # 2. which keys exist already (narrow join)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _match AS
                    SELECT k.line_no, j.job_uid, k.prog > {_progress('j')} AS newer
                    FROM _k k JOIN jobs j ON j.cluster = k.cluster AND j.job_id_raw = k.job_id_raw
                                         AND j.submit IS NOT DISTINCT FROM k.submit""")
    n_match = con.sql("SELECT count(*) FROM _match").fetchall()[0][0]
    run.inserted = n_keys - n_match
    run.updated, run.unchanged = 0, n_match
    run.options["transitions"] = {}
    # 3. new jobs: uids assigned on a narrow table, the wide rows written once, straight from the input
    con.execute("""CREATE OR REPLACE TEMP TABLE _new AS
                   SELECT line_no, nextval('seq_job_uid') AS job_uid FROM _k ANTI JOIN _match USING (line_no)""")
    con.execute(f"""INSERT INTO jobs (job_uid, team, ingest_run_id, updated_run_id, {cols})
                    SELECT n.job_uid, NULL, $run, NULL, {", ".join("s." + c for c in JOB_COLUMNS)}
                    FROM {table} s JOIN _new n USING (line_no)""", {"run": run.run_id})
    _place(con, f"(SELECT n.job_uid, s.cluster, s.job_id_raw, s.submit, s.ngpus, s.nodelist "
                f"FROM {table} s JOIN _new n USING (line_no))")
    # 4. jobs already stored: replace or fill in, where something changed
    if n_match:
        _merge_existing(con, run, table)
    since = con.sql("SELECT min(job_uid) FROM _new").fetchall()[0][0]
    if run.updated:
        since = min(u for u in (since, con.sql("SELECT min(job_uid) FROM _upd").fetchall()[0][0]) if u is not None)
    warehouse.note_changed(con, ("jobs", "job_nodes"), since)
    for t in ("_k", "_match", "_new", "_in", "_upd"):
        con.execute(f"DROP TABLE IF EXISTS {t}")


def _place(con, rows: str) -> None:
    """job_nodes for ``rows`` (job_uid, cluster, job_id_raw, submit, ngpus, nodelist).

    GPUs are spread evenly over the job's nodes; a remainder goes to the first nodes of the list."""
    con.execute(f"""
        INSERT INTO job_nodes
        SELECT w.job_uid, w.cluster, w.job_id_raw, w.submit, m.node,
               CASE WHEN w.ngpus = floor(w.ngpus)
                    THEN floor(w.ngpus / m.n) + CASE WHEN m.idx < w.ngpus - floor(w.ngpus / m.n) * m.n THEN 1 ELSE 0 END
                    ELSE w.ngpus / m.n END
        FROM {rows} w JOIN _nodelist_map m ON m.nodelist = w.nodelist""")


def _merge_existing(con, run, table: str) -> None:
    """Versions of jobs already stored: a more progressed version replaces the stored one (keeping what it
    lacks); an equal or older one only fills the stored row's gaps. Only rows that changed are rewritten."""
    cols = ", ".join(JOB_COLUMNS)
    take_new = ", ".join(f"coalesce(s.{c}, j.{c}) AS {c}" for c in JOB_COLUMNS)
    keep_old = ", ".join(f"coalesce(j.{c}, s.{c}) AS {c}" for c in JOB_COLUMNS)
    j_cols = ", ".join(f"j.{c}" for c in JOB_COLUMNS)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _upd AS
        SELECT j.job_uid, j.team, j.ingest_run_id, j.state AS old_state, hash({j_cols}) AS old_hash, {take_new}
        FROM {table} s JOIN _match m ON m.line_no = s.line_no AND m.newer JOIN jobs j ON j.job_uid = m.job_uid
        UNION ALL
        SELECT j.job_uid, j.team, j.ingest_run_id, j.state, hash({j_cols}), {keep_old}
        FROM {table} s JOIN _match m ON m.line_no = s.line_no AND NOT m.newer JOIN jobs j ON j.job_uid = m.job_uid""")
    con.execute(f"DELETE FROM _upd WHERE hash({cols}) = old_hash")
    run.updated = con.sql("SELECT count(*) FROM _upd").fetchall()[0][0]
    run.unchanged -= run.updated
    run.options["transitions"] = {
        f"{a}->{b}": n for a, b, n in con.sql(
            "SELECT old_state, state, count(*) FROM _upd WHERE old_state <> state GROUP BY ALL ORDER BY 3 DESC").fetchall()}
    con.execute("DELETE FROM jobs WHERE job_uid IN (SELECT job_uid FROM _upd)")
    con.execute("DELETE FROM job_nodes WHERE job_uid IN (SELECT job_uid FROM _upd)")
    con.execute(f"INSERT INTO jobs (job_uid, team, ingest_run_id, updated_run_id, {cols}) "
                f"SELECT job_uid, team, ingest_run_id, $run, {cols} FROM _upd", {"run": run.run_id})
    _place(con, "_upd")


def assign_teams(con, run_id: int | None = None) -> int:
    """Resolve ``jobs.team`` from ``team_map`` (lowest priority number wins; patterns are SQL LIKE with
    ``\\`` as escape character).

    Limited to jobs written by ``run_id`` when given, else every job. A job that no pattern matches (any
    more) has team NULL: reported as unmapped, never dropped. Returns the number of jobs whose team changed.
    """
    scope = "WHERE ingest_run_id = $run OR updated_run_id = $run" if run_id is not None else ""
    params = {"run": run_id} if run_id is not None else {}
    if run_id is not None and not con.sql("SELECT count(*) FROM team_map").fetchall()[0][0]:
        return 0
    if run_id is None:
        warehouse.note_changed(con, "jobs")      # every job may change team (a run's own jobs: merge_jobs notes)
    return con.execute(f"""
        WITH combos AS (SELECT DISTINCT cluster, account, "user" FROM jobs {scope}),
        resolved AS (
          SELECT c.cluster, c.account, c."user", arg_min(t.team, t.priority) AS team
          FROM combos c LEFT JOIN team_map t
            ON (t.cluster IS NULL OR t.cluster = c.cluster)
           AND (t.account_pattern IS NULL OR c.account LIKE t.account_pattern ESCAPE '\\')
           AND (t.user_pattern IS NULL OR c."user" LIKE t.user_pattern ESCAPE '\\')
          GROUP BY ALL)
        UPDATE jobs SET team = r.team FROM resolved r
        WHERE jobs.cluster = r.cluster AND jobs.account IS NOT DISTINCT FROM r.account
          AND jobs."user" IS NOT DISTINCT FROM r."user" AND jobs.team IS DISTINCT FROM r.team
          {"AND (jobs.ingest_run_id = $run OR jobs.updated_run_id = $run)" if run_id is not None else ""}""",
                       params).fetchall()[0][0]
