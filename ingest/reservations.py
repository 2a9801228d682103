"""`gpuledger ingest reservations`: advance reservations into ``reservations``.

Two inputs, recognised by their first data line:

- ``scontrol show reservation -o`` (or without ``-o``: indented lines continue the record above): name, start,
  end, nodes, TRES, users, accounts, flags. The only source of the owner (users, accounts); its EndTime is the
  planned end.
- ``sacctmgr -P show reservation [format=Cluster,Name,TRES,TimeStart,TimeEnd,NodeNames,Flags]``: slurmdbd's
  history, ended reservations included; no users or accounts (only association ids).
- slurmrestd's ``/slurm/v0.0.XX/reservations`` JSON, written as the scontrol lines (``reservations_json``).

Key: (cluster, name, start). A later observation of a key overwrites its end and fills the columns it prints
(so an scontrol snapshot gives the owner and sacctmgr, later, the end as it happened). GPUs: TRES's
``gres/gpu=N`` when printed; Slurm 22.05 prints only ``cpu=N`` for a whole-node reservation, and then the
reservation's GPUs are its nodes' GPUs in the inventory (models/metrics/reservations.py). Every line is loaded,
skipped (blank, header, continuation of a loaded record, "No reservations in the system") or rejected.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re

import pyarrow as pa

from ingest import plausible, reservations_json, warehouse
from ingest.errors import InputError
from ingest.hostlist import HostlistError, expand
from ingest.inputs import read_input, run_slurm, slurm_cluster_name
from ingest.lines import aligned_table, first_text_line, other_output, text_lines
from ingest.slurm_json import looks_like_json
from ingest.squeue import NULLS, gpu_count

#: sacctmgr title (lower case, spaces removed) -> our field
SACCTMGR = {"cluster": "cluster", "name": "name", "tres": "tres", "timestart": "start", "timeend": "end",
            "unusedwall": "_", "nodename": "nodelist", "nodenames": "nodelist", "nodes": "nodelist",
            "flags": "flags", "id": "_", "assocs": "_", "associations": "_"}
#: scontrol key -> our field
SCONTROL = {"ReservationName": "name", "StartTime": "start", "EndTime": "end", "Nodes": "nodelist", "TRES": "tres",
            "Users": "users", "Accounts": "accounts", "Flags": "flags", "ClusterName": "cluster"}
COLUMNS = ("cluster", "name", "start", "end", "nodelist", "nodes", "gpus", "tres", "users", "accounts", "flags",
           "source")


def _scontrol_records(lines: list[str]):
    """(first line, [line numbers], text) per record of scontrol output; other lines as (line, kind)."""
    rec = None
    for i, line in enumerate(lines, start=1):
        if line.startswith("ReservationName="):
            if rec:
                yield rec
            rec = (i, [i], line)
        elif line.strip() and line[:1].isspace() and rec:
            rec = (rec[0], rec[1] + [i], rec[2] + " " + line.strip())
        else:
            if rec:
                yield rec
                rec = None
            yield (i, "no reservations" if line.strip().startswith("No reservations") else
                   "blank" if not line.strip() else "stray")
    if rec:
        yield rec


def _kv(text: str) -> dict:
    out = {}
    for tok in text.split():
        k, eq, v = tok.partition("=")
        if eq and k in SCONTROL:
            out[SCONTROL[k]] = v
    return out


def _row(d: dict, source: str, tz: str | None, window: plausible.Window) -> dict:
    """Typed fields of one record; ValueError('field\\x1freason') when one cannot be read or cannot be true."""
    def fail(f, why):
        raise ValueError(f"{f}\x1f{why}")
    if not d.get("name"):
        fail("Name", "no reservation name")
    times = {}
    for f in ("start", "end"):
        raw = d.get(f)
        if raw in (None, *NULLS):
            fail(f, "no time")
        try:
            times[f] = warehouse.parse_time(raw, f, tz)
        except ValueError:
            fail(f, f"cannot read time {raw!r}")
        if not window.contains(times[f]):
            fail(f, window.reason(raw))
    if times["end"] < times["start"]:
        fail("end", f"end {d['end']} is before start {d['start']}")
    nodelist = None if d.get("nodelist") in (None, *NULLS) else d["nodelist"]
    try:
        nodes = ",".join(expand(nodelist)) if nodelist else None
    except HostlistError as exc:
        fail("Nodes", str(exc))
    val = lambda k: None if d.get(k) in (None, *NULLS) else d[k]
    return {"cluster": val("cluster"), "name": d["name"], **times, "nodelist": nodelist, "nodes": nodes,
            "gpus": gpu_count(d.get("tres")), "tres": val("tres"), "users": val("users"),
            "accounts": val("accounts"), "flags": val("flags"), "source": source}


def _parse(lines: list[str], tz: str | None, window: plausible.Window):
    """(rows, skips [(line, reason)], rejects [(line, field, reason)])."""
    first = next((ln for ln in lines if ln.strip()), "")
    rows, skips, rejects = [], [], []
    if first.startswith("ReservationName=") or first.startswith("No reservations"):
        for item in _scontrol_records(lines):
            if isinstance(item[1], str):
                if item[1] == "stray":
                    rejects.append((item[0], None, "not part of a ReservationName= record"))
                else:
                    skips.append((item[0], {"blank": "blank line"}.get(item[1], "no reservations line")))
                continue
            line_no, nos, text = item
            try:
                rows.append(_row(_kv(text), "scontrol", tz, window))
                skips += [(n, "continuation line") for n in nos[1:]]
            except ValueError as exc:
                f, _, why = str(exc).partition("\x1f")
                rejects += [(n, f, why) for n in nos]
        return rows, skips, rejects
    cols = None
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            skips.append((i, "blank line"))
            continue
        parts = line.split("|")
        if parts[-1] == "" and (cols is None or len(parts) == len(cols) + 1):
            parts = parts[:-1]
        keys = [re.sub(r"\s+", "", p).lower() for p in parts]
        if all(k in SACCTMGR for k in keys) and "timestart" in keys:
            cols = [SACCTMGR[k] for k in keys]
            skips.append((i, "header line"))
        elif cols is None:
            rejects.append((i, None, "neither `scontrol show reservation` nor `sacctmgr -P show reservation` output "
                                     "(sacctmgr needs -P and its header line)"))
        elif len(parts) != len(cols):
            rejects.append((i, None, f"expected {len(cols)} fields, found {len(parts)}"))
        else:
            try:
                rows.append(_row(dict(zip(cols, (p.strip() for p in parts))), "sacctmgr", tz, window))
            except ValueError as exc:
                f, _, why = str(exc).partition("\x1f")
                rejects.append((i, f, why))
    return rows, skips, rejects


def load(con, text: str | bytes, source_name: str, cluster: str | None = None, tz: str | None = None) -> dict:
    """Load one scontrol or sacctmgr reservation listing in one transaction; returns the run summary."""
    data = text.encode() if isinstance(text, str) else text
    json_cluster, is_json = None, looks_like_json(data)
    if is_json:                      # slurmrestd's /slurm/.../reservations: times in UTC
        lines, json_cluster = reservations_json.to_scontrol_lines(data, source_name)
        tz = "UTC"
    else:
        aligned_table(data, source_name, "sacctmgr -P show reservation, or scontrol show reservation -o "
                                         "(docs/CLI.md, ingest reservations)")
        lines = text_lines(data)
        if (first := first_text_line(lines)) is not None:
            other_output(lines[first], source_name, first + 1, "reservations")
    default = cluster or json_cluster or warehouse.only_cluster(con) or "default"
    rows, skips, rejects = _parse(lines, tz, plausible.window())
    schema = pa.schema([(c, pa.timestamp("us") if c in ("start", "end") else pa.float64() if c == "gpus"
                         else pa.string()) for c in COLUMNS])
    tbl = pa.table({c: [r[c] for r in rows] for c in COLUMNS}, schema=schema)
    run = warehouse.IngestRun(con, "reservations", source_name, sha256=hashlib.sha256(data).hexdigest(),
                              nbytes=len(data), cluster=default,
                              options={"tz": tz or "UTC", **({"format": "json", "read_as": "reservation records"}
                                                             if is_json else {})})
    with run:
        run.lines_read = len(lines)
        run.mark_lines(lines, skips, rejects)
        con.register("_rv_in", tbl)
        try:
            run.inserted, run.updated, run.unchanged = _merge(con, default, run.run_id)
        finally:
            con.unregister("_rv_in")
        run.loaded = len(lines) - run.skipped - run.rejected
    summary = run.summary()
    summary["reject_examples"] = [f"{source_name}:{ln}: " + (f"field {f}: " if f else "") + r
                                  for ln, f, r in rejects[:10]]
    return summary


def _merge(con, default: str, run_id: int) -> tuple[int, int, int]:
    """Upsert on (cluster, name, start): the newest observation's end and printed columns win."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _rv AS
                   SELECT * REPLACE (coalesce(cluster, $c) AS cluster) FROM _rv_in
                   QUALIFY row_number() OVER (PARTITION BY coalesce(cluster, $c), name, start ORDER BY "end" DESC) = 1""",
                {"c": default})
    new, changed, same = con.sql("""
        SELECT count(*) FILTER (r.name IS NULL),
               count(*) FILTER (r.name IS NOT NULL AND (r."end" <> n."end" OR n.users IS NOT NULL AND r.users IS NULL
                                OR n.accounts IS NOT NULL AND r.accounts IS NULL OR n.gpus IS NOT NULL AND r.gpus IS NULL
                                OR n.nodes IS NOT NULL AND r.nodes IS NULL OR coalesce(n.flags <> r.flags, false))),
               count(*) FILTER (r.name IS NOT NULL AND NOT (r."end" <> n."end" OR n.users IS NOT NULL AND r.users IS NULL
                                OR n.accounts IS NOT NULL AND r.accounts IS NULL OR n.gpus IS NOT NULL AND r.gpus IS NULL
                                OR n.nodes IS NOT NULL AND r.nodes IS NULL OR coalesce(n.flags <> r.flags, false)))
        FROM _rv n LEFT JOIN reservations r USING (cluster, name, start)""").fetchall()[0]
    con.execute("""UPDATE reservations r SET "end" = n."end", nodelist = coalesce(n.nodelist, r.nodelist),
                          nodes = coalesce(n.nodes, r.nodes), gpus = coalesce(n.gpus, r.gpus),
                          tres = coalesce(n.tres, r.tres), users = coalesce(n.users, r.users),
                          accounts = coalesce(n.accounts, r.accounts), flags = coalesce(n.flags, r.flags),
                          source = n.source, ingest_run_id = $run
                   FROM _rv n WHERE r.cluster = n.cluster AND r.name = n.name AND r.start = n.start""",
                {"run": run_id})
    con.execute("""INSERT INTO reservations SELECT n.cluster, n.name, n.start, n."end", n.nodelist, n.nodes, n.gpus,
                          n.tres, n.users, n.accounts, n.flags, n.source, $run
                   FROM _rv n ANTI JOIN reservations r USING (cluster, name, start)""", {"run": run_id})
    con.execute("DROP TABLE IF EXISTS _rv")
    return new, changed, same


def ingest_path(con, path: str, cluster: str | None = None, tz: str | None = None) -> dict:
    data, name = read_input(path)
    return load(con, data, name, cluster=cluster, tz=tz)


#: What ``--live`` runs (TZ=UTC): the current reservations with their owners, then slurmdbd's history.
LIVE_COMMANDS = (("scontrol", "show", "reservation", "-o"),
                 ("sacctmgr", "-P", "show", "reservation", "start=2000-01-01T00:00:00",
                  "format=Cluster,Name,TRES,TimeStart,TimeEnd,NodeNames,Flags"))


def ingest_live(con, cluster: str | None = None) -> list[dict]:
    """Both :data:`LIVE_COMMANDS`, each its own run (scontrol first, so sacctmgr's end wins for ended ones).
    scontrol's listing names no cluster: without ``cluster`` it is the controller's ClusterName (a warehouse that
    knows no cluster yet, as a service's first cycle, would otherwise file it under "default", apart from
    sacctmgr's row of the same reservation), else the warehouse's only cluster."""
    cluster = cluster or slurm_cluster_name() or warehouse.only_cluster(con)
    return [load(con, run_slurm(list(cmd), 120), " ".join(cmd), cluster=cluster, tz="UTC") for cmd in LIVE_COMMANDS]

