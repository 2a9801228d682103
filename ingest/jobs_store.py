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

from ingest import hostlist
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
    tbl = pa.table({"nodelist": pa.array(keys, pa.string()), "node": pa.array(nodes, pa.string()),
                    "idx": pa.array(idxs, pa.int32()), "n": pa.array(ns, pa.int32())})
    con.register("_nodelist_in", tbl)
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _nodelist_map AS SELECT * FROM _nodelist_in")
    finally:
        con.unregister("_nodelist_in")
    return bad


def merge_jobs(con, run, table: str) -> None:
    """Fold staged rows of ``table`` into ``jobs``/``job_nodes`` for ingest ``run`` (an IngestRun).

    Call :func:`stage_nodelists` on the same table first. Sets run.inserted/updated/unchanged and
    returns the state transitions of updated jobs in ``run.options['transitions']``.
    """
    register_macros(con)
    cols = ", ".join(JOB_COLUMNS)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _in AS
        SELECT {cols} FROM (
          SELECT *, row_number() OVER (PARTITION BY cluster, job_id_raw, submit
                                       ORDER BY {_progress(table)} DESC, line_no DESC) AS _rn
          FROM {table}) AS {table}
        WHERE _rn = 1""")
    newer = f"{_progress('i')} > {_progress('j')}"
    merged = ", ".join(
        f"CASE WHEN j.job_uid IS NULL OR {newer} THEN coalesce(i.{c}, j.{c}) ELSE coalesce(j.{c}, i.{c}) END AS {c}"
        for c in JOB_COLUMNS)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _m AS
        SELECT j.job_uid AS old_uid, j.team AS old_team, j.ingest_run_id AS old_run, j.state AS old_state, {merged}
        FROM _in i LEFT JOIN jobs j
          ON j.cluster = i.cluster AND j.job_id_raw = i.job_id_raw AND j.submit IS NOT DISTINCT FROM i.submit""")
    changed = " OR ".join(f"m.{c} IS DISTINCT FROM j.{c}" for c in JOB_COLUMNS)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _w AS
        SELECT coalesce(m.old_uid, nextval('seq_job_uid')) AS job_uid, m.*,
               m.old_uid IS NULL AS is_new
        FROM _m m LEFT JOIN jobs j ON j.job_uid = m.old_uid
        WHERE m.old_uid IS NULL OR ({changed})""")
    total = con.sql("SELECT count(*) FROM _in").fetchall()[0][0]
    new, upd = con.sql("SELECT count(*) FILTER (is_new), count(*) FILTER (NOT is_new) FROM _w").fetchall()[0]
    run.inserted, run.updated, run.unchanged = new, upd, total - new - upd
    run.options["transitions"] = {
        f"{a}->{b}": n for a, b, n in con.sql(
            "SELECT old_state, state, count(*) FROM _w WHERE NOT is_new AND old_state <> state "
            "GROUP BY ALL ORDER BY 3 DESC").fetchall()}
    if new + upd == 0:
        return
    con.execute("DELETE FROM jobs WHERE job_uid IN (SELECT job_uid FROM _w WHERE NOT is_new)")
    con.execute("DELETE FROM job_nodes WHERE job_uid IN (SELECT job_uid FROM _w WHERE NOT is_new)")
    con.execute(f"""
        INSERT INTO jobs (job_uid, team, ingest_run_id, updated_run_id, {cols})
        SELECT job_uid, old_team, coalesce(old_run, ?), CASE WHEN is_new THEN NULL ELSE ? END, {cols} FROM _w""",
                [run.run_id, run.run_id])
    # GPUs are spread evenly over the job's nodes; a remainder goes to the first nodes of the list.
    con.execute("""
        INSERT INTO job_nodes
        SELECT w.job_uid, w.cluster, w.job_id_raw, w.submit, m.node,
               CASE WHEN w.ngpus = floor(w.ngpus)
                    THEN floor(w.ngpus / m.n) + CASE WHEN m.idx < w.ngpus - floor(w.ngpus / m.n) * m.n THEN 1 ELSE 0 END
                    ELSE w.ngpus / m.n END
        FROM _w w JOIN _nodelist_map m ON m.nodelist = w.nodelist""")


def assign_teams(con, run_id: int | None = None) -> int:
    """Resolve ``jobs.team`` from ``team_map`` (lowest priority number wins; patterns are SQL LIKE).

    Limited to jobs written by ``run_id`` when given, else every job. Returns rows updated.
    Jobs no pattern matches keep team NULL and are reported as unmapped, never dropped.
    """
    if not con.sql("SELECT count(*) FROM team_map").fetchall()[0][0]:
        return 0
    scope = "WHERE ingest_run_id = $run OR updated_run_id = $run" if run_id is not None else ""
    params = {"run": run_id} if run_id is not None else {}
    return con.execute(f"""
        WITH combos AS (SELECT DISTINCT cluster, account, "user" FROM jobs {scope}),
        resolved AS (
          SELECT c.cluster, c.account, c."user", arg_min(t.team, t.priority) AS team
          FROM combos c JOIN team_map t
            ON (t.cluster IS NULL OR t.cluster = c.cluster)
           AND (t.account_pattern IS NULL OR c.account LIKE t.account_pattern)
           AND (t.user_pattern IS NULL OR c."user" LIKE t.user_pattern)
          GROUP BY ALL)
        UPDATE jobs SET team = r.team FROM resolved r
        WHERE jobs.cluster = r.cluster AND jobs.account IS NOT DISTINCT FROM r.account
          AND jobs."user" IS NOT DISTINCT FROM r."user" AND jobs.team IS DISTINCT FROM r.team
          {"AND (jobs.ingest_run_id = $run OR jobs.updated_run_id = $run)" if run_id is not None else ""}""",
                       params).fetchall()[0][0]
