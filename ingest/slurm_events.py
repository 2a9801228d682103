"""`gpuledger ingest events`: node outages from `sacctmgr -P show event All_Time` into ``node_events``.

sacctmgr prints a header (``Cluster|Cluster Nodes|Node Name|Time Start|Time End|State|Reason|User``, or the
titles of a ``format=`` list); both spellings are accepted. Cluster-level events (no node: TRES changes when
slurmctld registers) are skipped with that reason. A node list in NodeName is expanded to one event per node.
An event still open has End ``Unknown`` and is stored with ``end`` NULL; a later export that closes it
updates the same row (key: cluster, node, start).
"""
from __future__ import annotations

import hashlib
import re

import pyarrow as pa

from ingest import plausible, slurm_sql, warehouse
from ingest.hostlist import HostlistError, expand
from ingest.inputs import check_zone, read_input
from ingest.lines import aligned_table, first_text_line, other_output, text_lines
from ingest.slurm_nodes import normalise_state

#: header title (spaces removed, lower case) -> our field
HEADERS = {"cluster": "cluster", "clusternodes": "cluster_nodes", "nodename": "node", "node": "node",
           "timestart": "start", "start": "start", "timeend": "end", "end": "end", "state": "state",
           "stateraw": "state_raw_num", "reason": "reason", "user": "user", "event": "event",
           "eventraw": "event_raw", "duration": "duration", "tres": "tres"}


def ingest_path(con, path: str, cluster: str | None = None, tz: str | None = None) -> dict:
    data, name = read_input(path)
    return ingest_bytes(con, data, name, cluster=cluster, tz=tz)


def _rows(lines: list[str]):
    """Yield (line_no, kind, payload): kind is 'header', 'blank', or 'data' with a dict of fields."""
    cols = None
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            yield i, "blank", None
            continue
        parts = line.split("|")
        if parts and parts[-1] == "" and (cols is None or len(parts) == len(cols) + 1):
            parts = parts[:-1]
        keys = [re.sub(r"\s+", "", p).lower() for p in parts]
        if all(k in HEADERS for k in keys) and "start" in {HEADERS[k] for k in keys}:
            cols = [HEADERS[k] for k in keys]
            yield i, "header", None
            continue
        if cols is None:
            yield i, "reject", (None, "no header line before the data (run sacctmgr with -P and without -n)")
            continue
        if len(parts) != len(cols):
            yield i, "reject", (None, f"expected {len(cols)} fields, found {len(parts)}")
            continue
        yield i, "data", dict(zip(cols, (p.strip() for p in parts)))


def ingest_bytes(con, data: bytes, name: str, cluster: str | None = None, tz: str | None = None) -> dict:
    """Load one sacctmgr event listing in one transaction; returns the run summary."""
    aligned_table(data, name, "sacctmgr -P show event All_Time (docs/CLI.md, ingest events)")
    lines = text_lines(data)
    if (first := first_text_line(lines)) is not None:
        other_output(lines[first], name, first + 1, "events")
    default_cluster = cluster or warehouse.only_cluster(con) or "default"
    zone = tz or _cluster_tz(con, default_cluster) or "UTC"
    check_zone(con, zone)
    window = plausible.window()
    slurm_sql.register(con)
    recs, skipped, rejected = [], [], []
    for line_no, kind, payload in _rows(lines):
        if kind in ("blank", "header"):
            skipped.append((line_no, f"{kind} line"))
        elif kind == "reject":
            rejected.append((line_no, *payload))
        else:
            node_expr = payload.get("node", "")
            if not node_expr or payload.get("event", "").lower() == "cluster":
                skipped.append((line_no, "cluster-level event (no node)"))
                continue
            try:
                hosts = expand(node_expr)
            except HostlistError as exc:
                rejected.append((line_no, "NodeName", str(exc)))
                continue
            for h in hosts:
                recs.append((line_no, payload.get("cluster") or default_cluster, h, payload))
    # Times are read by the same SQL macro as sacct's, so local times, offsets and epochs behave alike.
    tbl = pa.table({
        "line_no": pa.array([r[0] for r in recs], pa.int64()), "cluster": [r[1] for r in recs],
        "node": [r[2] for r in recs], "start_raw": [r[3].get("start") for r in recs],
        "end_raw": [r[3].get("end") for r in recs], "state_raw": [r[3].get("state") or "" for r in recs],
        "reason": [r[3].get("reason") or None for r in recs], "user": [r[3].get("user") or None for r in recs]})
    run = warehouse.IngestRun(con, "events", name, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data),
                              cluster=default_cluster, options={"tz": zone, "time_window": window.describe()})
    with run:
        run.lines_read = len(lines)
        run.mark_lines(lines, skipped)
        con.register("_events_in", tbl)
        try:
            con.execute("""CREATE OR REPLACE TEMP TABLE _ev AS
                           SELECT *, gl_ts(start_raw, $tz) AS start, gl_ts(end_raw, $tz) AS "end" FROM _events_in""",
                        {"tz": zone})
        finally:
            con.unregister("_events_in")
        rejected += _implausible(con, window)
        bad_lines = {r[0] for r in rejected}
        run.mark_lines(lines, rejected=sorted(set(rejected)))
        states = {s: normalise_state(s) for (s,) in con.sql("SELECT DISTINCT state_raw FROM _ev").fetchall()}
        con.register("_states", pa.table({"state_raw": list(states), "state": list(states.values())}))
        try:
            _merge(con, run)
        finally:
            con.unregister("_states")
        run.loaded = len({r[0] for r in recs} - bad_lines)
        con.execute("DROP TABLE IF EXISTS _ev")
    summary = run.summary()
    summary["reject_examples"] = [f"{name}:{ln}: " + (f"field {f}: " if f else "") + r
                                  for ln, f, r in sorted(set(rejected))[:10]]
    return summary


def _implausible(con, window: plausible.Window) -> list[tuple[int, str, str]]:
    """Reject (and drop from ``_ev``) events whose times cannot be read or cannot be true: outside the plausible
    window (ingest/plausible.py), or ending before they start. Returns (line_no, field, reason) per bad line."""
    quoted = "chr(39) || {} || chr(39)"
    verdict = f"""CASE
        WHEN start IS NULL THEN 'Start' || chr(31) || 'cannot read time ' || {quoted.format('start_raw')}
        WHEN "end" IS NULL AND NOT gl_is_null_token(end_raw)
          THEN 'End' || chr(31) || 'cannot read time ' || {quoted.format('end_raw')}
        WHEN start NOT BETWEEN $win_lo AND $win_hi THEN 'Start' || chr(31) || {plausible.sql_reason('start_raw')}
        WHEN "end" NOT BETWEEN $win_lo AND $win_hi THEN 'End' || chr(31) || {plausible.sql_reason('end_raw')}
        WHEN "end" < start THEN 'End' || chr(31) || 'End ' || end_raw || ' is before Start ' || start_raw END"""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _ev AS SELECT *, {verdict} AS verdict FROM _ev",
                plausible.sql_params(window, verdict))
    bad = con.sql("""SELECT DISTINCT line_no, split_part(verdict, chr(31), 1), split_part(verdict, chr(31), 2)
                     FROM _ev WHERE verdict IS NOT NULL""").fetchall()
    con.execute("DELETE FROM _ev WHERE verdict IS NOT NULL")
    return bad


def _merge(con, run) -> None:
    """Insert new events; close open ones that this export shows closed (key: cluster, node, start)."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ev2 AS
        SELECT e.cluster, e.node, s.state, e.state_raw, e.start, e."end", e.reason, e."user",
               n.start IS NOT NULL AS existed, n."end" AS old_end
        FROM (SELECT * FROM _ev QUALIFY row_number() OVER (PARTITION BY cluster, node, start
                                                           ORDER BY "end" DESC NULLS LAST) = 1) e
        JOIN _states s USING (state_raw)
        LEFT JOIN node_events n ON n.cluster = e.cluster AND n.node = e.node AND n.start = e.start""")
    new, closed, same = con.sql("""SELECT count(*) FILTER (NOT existed),
                                          count(*) FILTER (existed AND old_end IS NULL AND "end" IS NOT NULL),
                                          count(*) FILTER (existed AND NOT (old_end IS NULL AND "end" IS NOT NULL))
                                   FROM _ev2""").fetchall()[0]
    run.inserted, run.updated, run.unchanged = new, closed, same
    con.execute("""UPDATE node_events SET "end" = e."end", ingest_run_id = $run FROM _ev2 e
                   WHERE e.existed AND node_events."end" IS NULL AND e."end" IS NOT NULL
                     AND node_events.cluster = e.cluster AND node_events.node = e.node
                     AND node_events.start = e.start""", {"run": run.run_id})
    con.execute("""INSERT INTO node_events SELECT cluster, node, state, state_raw, start, "end", reason, "user",
                          'sacctmgr', $run FROM _ev2 WHERE NOT existed""", {"run": run.run_id})
    con.execute("DROP TABLE IF EXISTS _ev2")



def _cluster_tz(con, cluster: str) -> str | None:
    rows = con.execute("SELECT tz FROM clusters WHERE cluster = ?", [cluster]).fetchall()
    return rows[0][0] if rows else None
