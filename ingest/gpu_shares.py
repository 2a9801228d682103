"""GPU shares: jobs that hold Slurm GPU shards (``gres/shard=N``) or CUDA MPS shares (``gres/mps=N``) and no whole
GPU, counted as the fraction of a GPU those shares are on the nodes they ran on.

Accounting gives a share job no GPU (sreport's gres/gpu counts it as 0), and how much of a GPU one share is
depends on the node: ``Gres=gpu:l4:4,shard:64`` makes 16 shards to a GPU, ``gpu:a100:4,mps:400`` 100 MPS units.
So a job's GPUs are its shares x the GPUs of its nodes / their shares (the node inventory valid when the job
started, else the node's first known inventory), and, when that is less than one GPU per node, it holds a
part of one GPU on each node, as GPU-sharing trace pods do (``gpu_milli``: the timeline, fragmentation and
cost already count those). In Slurm a GPU allocated as shards cannot be allocated as a whole GPU, which is what
a partly used GPU is in the fragmentation model.

A share job that has not started (pending, or cancelled while pending) has no node yet; what it asks for is
its shares x the GPUs / shares of its partition's nodes that offer that kind of share (the inventory valid at
submission: a node added later is not counted), when those nodes agree on the shares per GPU (Slurm may place
it on any of them; where they differ its request stays 0 GPUs and the run's note says so). That is its
``req_gpus``, what pending demand counts; it holds no GPU (``ngpus`` stays 0).

Resolved twice, so that the order of ingestion does not matter: on the staged rows of an ``ingest sacct`` (the
stored row is then final, and re-ingesting the file changes nothing), and on the stored jobs still at 0 GPUs
after an ``ingest nodes`` brings the inventory they lacked.
"""
from __future__ import annotations

from ingest import warehouse

#: The shares a TRES string allocates: the untyped entry (``gres/shard=4``), else the sum of typed ones
#: (``gres/shard:l4=4``). Slurm prints both forms with one value, so the untyped one is never added to them.
_TRES_SHARES = """coalesce(try_cast(regexp_extract({t}, '(?:^|,)gres/{k}=([0-9.]+)', 1) AS DOUBLE),
    list_sum(list_transform(regexp_extract_all({t}, '(?:^|,)gres/{k}:[^=,]+=([0-9.]+)', 1), lambda x: x::DOUBLE)), 0)"""
#: The shares a node's Gres string offers (``shard:64``, ``shard:l4:64(S:0)``, ``mps:400(S:0-1)``), summed.
_NODE_SHARES = """coalesce(list_sum(list_transform(
    regexp_extract_all({g}, '(?:^|,)(?i:{k})(?::[^,:()]+)*:([0-9]+)', 1), lambda x: x::BIGINT)), 0)"""

#: Cheap test for a node Gres string that may offer shares.
HAS_NODE_SHARES = "(strpos(lower(gres), 'shard') > 0 OR strpos(lower(gres), 'mps') > 0)"
#: Cheap test for a TRES string that may hold shares (the regular expressions run only on those rows).
HAS_SHARES = "(strpos({t}, 'gres/shard') > 0 OR strpos({t}, 'gres/mps') > 0)"


def _candidates_sql() -> str:
    """The condition on a job row (alias-free column names) for a started share job still to resolve."""
    return f"ngpus = 0 AND start IS NOT NULL AND alloc_tres IS NOT NULL AND {HAS_SHARES.format(t='alloc_tres')}"


def _requests_sql() -> str:
    """The condition on a job row for a share job that has not started and whose request is still 0 GPUs."""
    return ("ngpus = 0 AND start IS NULL AND coalesce(req_gpus, 0) = 0 AND req_tres IS NOT NULL AND "
            f"\"partition\" IS NOT NULL AND {HAS_SHARES.format(t='req_tres')}")


def _resolve_sql(want: str, place: str) -> str:
    """Rows (id, nn, ngpus, gpu_milli) of the share jobs in ``want`` (id, cluster, start, alloc_tres) placed on
    ``place`` (id, node) that every node of theirs can resolve (each known and offering the kind of share); ngpus
    in GPUs, gpu_milli the part of one GPU each node holds (NULL from one GPU a node up: whole GPUs, the rest kept
    as a fraction)."""
    shard, mps = (_TRES_SHARES.format(t="w.alloc_tres", k=k) for k in ("shard", "mps"))
    n_shard, n_mps = (_NODE_SHARES.format(g="n.gres", k=k) for k in ("shard", "mps"))
    return f"""
    WITH w AS (SELECT w.id, w.cluster, w.start, {shard} AS shard_n, {mps} AS mps_n FROM ({want}) w),
    inv AS (
      SELECT w.id, p.node, n.gpus, {n_shard} AS shards, {n_mps} AS mps
      FROM w JOIN ({place}) p ON p.id = w.id
      LEFT JOIN nodes n ON n.cluster = w.cluster AND n.node = p.node
      QUALIFY row_number() OVER (PARTITION BY w.id, p.node ORDER BY
        (n.valid_from IS NULL OR n.valid_from <= w.start) AND (n.valid_to IS NULL OR w.start < n.valid_to) DESC,
        n.valid_from NULLS FIRST) = 1),
    per AS (
      SELECT w.id, any_value(w.shard_n) AS shard_n, any_value(w.mps_n) AS mps_n, count(*) AS nn,
             count(inv.gpus) AS found, sum(inv.gpus) AS gpus, sum(inv.shards) AS shards, sum(inv.mps) AS mps,
             count(*) FILTER (inv.shards > 0) AS with_shards, count(*) FILTER (inv.mps > 0) AS with_mps
      FROM w JOIN inv ON inv.id = w.id GROUP BY w.id),
    g AS (
      SELECT id, nn, CASE WHEN shard_n > 0 THEN shard_n * gpus / shards ELSE 0 END
                     + CASE WHEN mps_n > 0 THEN mps_n * gpus / mps ELSE 0 END AS ngpus
      FROM per WHERE found = nn AND gpus > 0 AND shard_n + mps_n > 0
        AND (shard_n = 0 OR with_shards = nn) AND (mps_n = 0 OR with_mps = nn))
    SELECT id, nn, ngpus, CASE WHEN ngpus / nn < 1 THEN round(1000 * ngpus / nn)::INTEGER END AS gpu_milli
    FROM g WHERE ngpus > 0"""


def _request_sql(want: str) -> str:
    """Rows (id, req_gpus) of the not-started share jobs in ``want`` (id, cluster, submit, partition, req_tres):
    their shares x the GPUs / shares of the nodes of their partitions (comma-separated) offering that kind in the
    inventory valid at submission, where those nodes agree on it."""
    shard, mps = (_TRES_SHARES.format(t="w.req_tres", k=k) for k in ("shard", "mps"))
    n_shard, n_mps = (_NODE_SHARES.format(g="gres", k=k) for k in ("shard", "mps"))
    # nodes collapse to their distinct (partition, validity, shares per GPU): a site's shard nodes are a few rows
    return f"""
    WITH w AS (SELECT w.id, w.cluster, w.submit, w."partition", {shard} AS shard_n, {mps} AS mps_n
               FROM ({want}) w),
    wp AS (SELECT DISTINCT w.id, w.cluster, w.submit, trim(p.part) AS part
           FROM w, unnest(string_split(w."partition", ',')) AS p(part)),
    offer AS (
      SELECT DISTINCT cluster, trim(p.part) AS part, valid_from, valid_to,
             gpus::DOUBLE / nullif({n_shard}, 0) AS per_shard, gpus::DOUBLE / nullif({n_mps}, 0) AS per_mps
      FROM nodes, unnest(string_split(partitions, ',')) AS p(part)
      WHERE gpus > 0 AND gres IS NOT NULL AND {HAS_NODE_SHARES}),
    per AS (
      SELECT wp.id, count(DISTINCT o.per_shard) AS shard_k, min(o.per_shard) AS per_shard,
             count(DISTINCT o.per_mps) AS mps_k, min(o.per_mps) AS per_mps
      FROM wp JOIN offer o ON o.cluster = wp.cluster AND o.part = wp.part
        AND (o.valid_from IS NULL OR o.valid_from <= wp.submit) AND (o.valid_to IS NULL OR wp.submit < o.valid_to)
      GROUP BY wp.id)
    SELECT w.id, CASE WHEN w.shard_n > 0 THEN w.shard_n * p.per_shard ELSE 0 END
                 + CASE WHEN w.mps_n > 0 THEN w.mps_n * p.per_mps ELSE 0 END AS req_gpus
    FROM w JOIN per p ON p.id = w.id
    WHERE w.shard_n + w.mps_n > 0 AND (w.shard_n = 0 OR p.shard_k = 1) AND (w.mps_n = 0 OR p.mps_k = 1)"""


def resolve_staged(con, table: str) -> tuple[str, list[str]]:
    """``table`` (staged sacct rows; :func:`ingest.jobs_store.stage_nodelists` run on it) with the share jobs the
    stored inventory resolves given their GPUs (started: ``ngpus``, ``gpu_milli``; not started: ``req_gpus``),
    and the run's notes on its share jobs: the name of a temp view over it (``table`` itself when it holds no
    share job: the usual case costs one scan of its GPU-free rows)."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _share_ids AS SELECT line_no, start IS NOT NULL AS started
                    FROM {table} WHERE ({_candidates_sql()}) OR ({_requests_sql()})""")
    if not con.sql("SELECT count(*) FROM _share_ids").fetchall()[0][0]:
        con.execute("DROP TABLE _share_ids")
        return table, []
    ids = "line_no IN (SELECT line_no FROM _share_ids WHERE {}started)"
    want = f"SELECT line_no AS id, cluster, start, alloc_tres FROM {table} WHERE {ids.format('')}"
    place = (f"SELECT s.line_no AS id, m.node FROM {table} s JOIN _nodelist_map m ON m.nodelist = s.nodelist "
             f"WHERE s.{ids.format('')}")
    con.execute("CREATE OR REPLACE TEMP TABLE _shares AS " + _resolve_sql(want, place))
    asked = (f'SELECT line_no AS id, cluster, submit, "partition", req_tres FROM {table} '
             f"WHERE {ids.format('NOT ')}")
    con.execute("CREATE OR REPLACE TEMP TABLE _share_asks AS " + _request_sql(asked))
    con.execute(f"""CREATE OR REPLACE TEMP VIEW _stg_shares AS
                    SELECT s.* REPLACE (coalesce(r.ngpus, s.ngpus) AS ngpus, coalesce(r.gpu_milli, s.gpu_milli)
                                        AS gpu_milli, coalesce(q.req_gpus, s.req_gpus) AS req_gpus)
                    FROM {table} s LEFT JOIN _shares r ON r.id = s.line_no
                    LEFT JOIN _share_asks q ON q.id = s.line_no""")
    return "_stg_shares", _staged_notes(con, table)


def resolve_stored(con, run_id: int) -> int:
    """Give the stored share jobs still at 0 GPUs what their nodes' inventory now says (after ``ingest nodes``):
    started jobs their GPUs (jobs and job_nodes rewritten), jobs not started their request (``req_gpus``), marked
    as changed by ``run_id``. Returns how many jobs were resolved."""
    want = f"SELECT job_uid AS id, cluster, start, alloc_tres FROM jobs WHERE {_candidates_sql()}"
    asked = f'SELECT job_uid AS id, cluster, submit, "partition", req_tres FROM jobs WHERE {_requests_sql()}'
    if not con.sql(f"SELECT (SELECT count(*) FROM ({want})) + (SELECT count(*) FROM ({asked}))").fetchall()[0][0]:
        return 0
    con.execute("CREATE OR REPLACE TEMP TABLE _shares AS " + _resolve_sql(
        want, "SELECT job_uid AS id, node FROM job_nodes"))
    con.execute("CREATE OR REPLACE TEMP TABLE _share_asks AS " + _request_sql(asked))
    n, first = con.sql("""SELECT count(*), min(id) FROM (SELECT id FROM _shares UNION ALL
                          SELECT id FROM _share_asks)""").fetchall()[0]
    if n:
        con.execute("""UPDATE jobs SET ngpus = r.ngpus, gpu_milli = r.gpu_milli, updated_run_id = $run
                       FROM _shares r WHERE jobs.job_uid = r.id""", {"run": run_id})
        con.execute("""UPDATE job_nodes SET gpus_on_node = r.ngpus / r.nn
                       FROM _shares r WHERE job_nodes.job_uid = r.id""")
        con.execute("""UPDATE jobs SET req_gpus = q.req_gpus, updated_run_id = $run
                       FROM _share_asks q WHERE jobs.job_uid = q.id""", {"run": run_id})
        warehouse.note_changed(con, ("jobs", "job_nodes"), first)
    con.execute("DROP TABLE _shares")
    con.execute("DROP TABLE _share_asks")
    return n


def _staged_notes(con, table: str) -> list[str]:
    """What the run says of its share jobs (the rows of ``table`` in _share_ids, resolved in _shares or
    _share_asks): how many count the part of a GPU their shares are, and how many 0 until the inventory says."""
    (done, example, zero, first_zero, asks, ask_example, open_asks, first_open) = con.sql(f"""
        SELECT count(r.id), arg_min(s.job_id || ': ' || round(r.ngpus, 3) || ' GPU', s.line_no) FILTER (r.id IS NOT
               NULL), count(*) FILTER (i.started AND r.id IS NULL),
               arg_min(s.job_id, s.line_no) FILTER (i.started AND r.id IS NULL),
               count(q.id), arg_min(s.job_id || ': ' || round(q.req_gpus, 3) || ' GPU', s.line_no) FILTER (q.id IS
               NOT NULL), count(*) FILTER (NOT i.started AND q.id IS NULL),
               arg_min(s.job_id, s.line_no) FILTER (NOT i.started AND q.id IS NULL)
        FROM {table} s JOIN _share_ids i USING (line_no) LEFT JOIN _shares r ON r.id = s.line_no
        LEFT JOIN _share_asks q ON q.id = s.line_no""").fetchall()[0]
    out = []
    if done:
        out.append(f"{done:,} job{'s' if done > 1 else ''} on GPU shards or MPS shares (gres/shard, gres/mps) and no "
                   f"whole GPU counted as the part of a GPU their shares are on their nodes (first: {example}; "
                   "sreport's gres/gpu counts them as 0)")
    if zero:
        jobs, their = (f"{zero:,} jobs", "their") if zero > 1 else ("1 job", "its")
        out.append(f"{jobs} (first: {first_zero}) on GPU shards or MPS shares count 0 GPUs for now: {their} nodes' "
                   "shares per GPU are not in the inventory (load it with `gpuledger ingest nodes` and they are "
                   "resolved then)")
    if asks:
        out.append(f"{asks:,} job{'s' if asks > 1 else ''} never started on GPU shards or MPS shares counted as "
                   f"asking for the part of a GPU their shares are on their partition's nodes (first: {ask_example}"
                   f"; pending demand counts {'them' if asks > 1 else 'it'})")
    if open_asks:
        jobs, their = (f"{open_asks:,} jobs", "their") if open_asks > 1 else ("1 job", "its")
        out.append(f"{jobs} (first: {first_open}) never started on GPU shards or MPS shares "
                   f"ask{'' if open_asks > 1 else 's'} for 0 GPUs for now: "
                   f"{their} partition's nodes offering those shares are not in the inventory, or differ in shares "
                   "per GPU (load it with `gpuledger ingest nodes` and they are resolved then)")
    return out


def drop_staged(con) -> None:
    """Drop what :func:`resolve_staged` left for the merge (after it)."""
    for sql in ("DROP VIEW IF EXISTS _stg_shares", "DROP TABLE IF EXISTS _shares", "DROP TABLE IF EXISTS _share_asks",
                "DROP TABLE IF EXISTS _share_ids"):
        con.execute(sql)
