"""`gpuledger ingest sacct`: Slurm accounting (``sacct --parsable2`` / ``--parsable``) into ``jobs``.

The input is split and typed inside DuckDB (see ingest/slurm_sql.py), so a million lines take seconds.
Every line ends up in exactly one place: loaded into ``jobs`` (job allocations, array tasks, het
components), skipped with a reason (blank lines, header lines, job steps), or rejected into ``rejects``
with its line number, the field at fault and why.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ingest import jobs_store, slurm_sql, warehouse
from ingest.errors import InputError

#: Open XDMoD's field list: the default column order of headerless input and what --live asks for.
XDMOD_FIELDS = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,"
                "elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,"
                "jobname").split(",")

#: Every field `sacct --helpformat` lists (Slurm 20.11-25.11), lower case: a line made only of these is a header.
SACCT_FIELDS = frozenset("""
account admincomment alloccpus allocgres allocnodes alloctres associd avecpu avecpufreq avediskread avediskwrite
avepages averss avevmsize blockid cluster comment constraints container consumedenergy consumedenergyraw cputime
cputimeraw dbindex derivedexitcode elapsed elapsedraw eligible end exitcode extra failednode flags gid group jobid
jobidraw jobname layout licenses maxdiskread maxdiskreadnode maxdiskreadtask maxdiskwrite maxdiskwritenode
maxdiskwritetask maxpages maxpagesnode maxpagestask maxrss maxrssnode maxrsstask maxvmsize maxvmsizenode
maxvmsizetask mcslabel mincpu mincpunode mincputask ncpus nnodes nodelist ntasks partition planned plannedcpu
plannedcpuraw priority qos qosraw reason reqcpufreq reqcpufreqgov reqcpufreqmax reqcpufreqmin reqcpus reqgres reqmem
reqnodes reqtres reservation reservationid reserved start state submit submitline suspended systemcomment systemcpu
timelimit timelimitraw totalcpu tresusageinave tresusageinmax tresusageinmaxnode tresusageinmaxtask tresusageinmin
tresusageinminnode tresusageinmintask tresusageintot tresusageoutave tresusageoutmax tresusageoutmaxnode
tresusageoutmaxtask tresusageoutmin tresusageoutminnode tresusageoutmintask tresusageouttot uid user usercpu wckey
wckeyid workdir stdout stderr stdin qosreq segmentsize
""".split())

#: Columns we model; anything else in a header is kept as JSON in jobs.extra.
MODELLED = frozenset({"jobid", "jobidraw", "cluster", "partition", "qos", "account", "group", "gid", "user", "uid",
                      "submit", "eligible", "start", "end", "elapsed", "elapsedraw", "exitcode", "state", "nnodes",
                      "ncpus", "alloccpus", "reqcpus", "reqmem", "reqtres", "alloctres", "timelimit",
                      "timelimitraw", "nodelist", "jobname"})
#: Free-text columns that may contain the delimiter; the first one present absorbs surplus fields.
FREE_TEXT = ("jobname", "admincomment", "comment", "workdir", "submitline", "constraints", "reason")


@dataclass
class SacctOptions:
    cluster: str | None = None
    tz: str | None = None
    fields: str | None = None
    delimiter: str | None = None
    strict: bool = False


# ---------------------------------------------------------------- reading

def read_input(path: str) -> tuple[bytes, str]:
    """(bytes, display name) of a file or of stdin for '-'."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    p = Path(path)
    try:
        return p.read_bytes(), str(p)
    except FileNotFoundError as exc:
        raise InputError(str(p), "no such file") from exc
    except IsADirectoryError as exc:
        raise InputError(str(p), "is a directory, expected a sacct output file") from exc
    except PermissionError as exc:
        raise InputError(str(p), "permission denied") from exc


def _lines(data: bytes) -> tuple[pa.Array, int]:
    """Split into lines (\\n or \\r\\n); bytes that are not UTF-8 become U+FFFD. Returns (lines, n_bad_utf8)."""
    try:
        text = data.decode("utf-8")
        bad = 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        bad = text.count("\ufffd")
    if text.endswith("\n"):
        text = text[:-1]
    if not text:
        return pa.array([], pa.large_string()), bad
    arr = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    if "\r" in text:
        arr = pc.utf8_rtrim(arr, "\r")
    return arr, bad


def _normalise_field(name: str) -> str:
    return re.sub(r"%-?\d+$", "", name.strip()).lower()


def parse_fields(spec: str) -> list[str]:
    fields = [_normalise_field(f) for f in spec.split(",")]
    for f in fields:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", f):
            raise InputError("--fields", f"{f!r} is not a sacct field name")
    return fields


def _header_fields(line: str, delim: str) -> list[str] | None:
    """The columns a header line names, or None when the line is not a header.

    A header without JobID/JobIDRaw is still a header: the lines under it are rejected with that reason.
    """
    tokens = line.split(delim)
    if tokens and tokens[-1] == "":
        tokens = tokens[:-1]
    names = [_normalise_field(t) for t in tokens]
    return names if names and all(n in SACCT_FIELDS for n in names) else None


# ---------------------------------------------------------------- staging

def _field_expr(i: int, jobname_at: int | None, ncols: int) -> str:
    """The SQL for column i (1-based) when surplus fields were merged into the free-text column."""
    if jobname_at is None or i < jobname_at:
        return f"f[{i}]"
    if i == jobname_at:
        return f"array_to_string(f[{i}:{i} + extra], $delim)"
    return f"f[{i} + extra]"


def _segment_sql(cols: list[str]) -> str:
    """SQL that turns raw lines of one header segment into typed staged rows (+ reject reason)."""
    ncols = len(cols)
    free = next((f for f in FREE_TEXT if f in cols), None)
    free_at = cols.index(free) + 1 if free else None
    raw = {c: _field_expr(i + 1, free_at, ncols) for i, c in enumerate(cols)}
    def col(name, default="NULL"):
        return raw.get(name, default)
    jid = f"nullif(trim({col('jobid', 'NULL')}), '')"
    jidraw = f"nullif(trim({col('jobidraw', 'NULL')}), '')"
    extra_cols = [c for c in cols if c not in MODELLED]
    extra_json = ("to_json(map([" + ", ".join(f"'{c}'" for c in extra_cols) + "], [" +
                  ", ".join(raw[c] for c in extra_cols) + "]))::VARCHAR") if extra_cols else "NULL"
    elapsed = (f"gl_dur({col('elapsed')})" if "elapsed" in cols else
               f"try_cast({col('elapsedraw')} AS BIGINT)" if "elapsedraw" in cols else "NULL")
    timelimit = (f"gl_dur({col('timelimit')})" if "timelimit" in cols else
                 f"try_cast({col('timelimitraw')} AS BIGINT) * 60" if "timelimitraw" in cols else "NULL")
    timelimit_raw = col("timelimit") if "timelimit" in cols else col("timelimitraw")
    ncpus = col("ncpus") if "ncpus" in cols else col("alloccpus")
    # A field's text is "bad" when it is neither a null token nor parseable: the line is rejected naming it.
    checks = []
    for name in ("submit", "eligible", "start", "end"):
        if name in cols:
            checks.append((name, f"NOT gl_is_null_token({raw[name]}) AND {raw[name]} <> '0' AND gl_ts({raw[name]}, $tz) IS NULL",
                           f"'cannot read time ' || {raw[name]}"))
    for name in ("elapsed", "timelimit"):
        if name in cols:
            checks.append((name, f"NOT gl_dur_ok({raw[name]})", f"'cannot read duration ' || {raw[name]}"))
    for name in ("nnodes", "ncpus", "alloccpus", "reqcpus", "uid", "gid", "elapsedraw", "timelimitraw"):
        if name in cols:
            checks.append((name, f"NOT gl_is_null_token({raw[name]}) AND try_cast({raw[name]} AS BIGINT) IS NULL",
                           f"'not an integer: ' || {raw[name]}"))
    if "exitcode" in cols:
        checks.append(("exitcode", f"NOT gl_is_null_token({raw['exitcode']}) AND NOT regexp_full_match({raw['exitcode']}, '[0-9]+(:[0-9]+)?')",
                       f"'not an exit code N:S: ' || {raw['exitcode']}"))
    if "reqmem" in cols:
        checks.append(("reqmem", f"NOT gl_is_null_token({raw['reqmem']}) AND gl_reqmem({raw['reqmem']}, 1, 1) IS NULL",
                       f"'cannot read memory ' || {raw['reqmem']}"))
    reason = "CASE " + " ".join(
        f"WHEN {cond} THEN {msg}" for _, cond, msg in checks) + " ELSE NULL END" if checks else "NULL"
    field = "CASE " + " ".join(
        f"WHEN {cond} THEN '{name}'" for name, cond, _ in checks) + " ELSE NULL END" if checks else "NULL"
    shape_ok = f"extra = 0 OR (extra > 0 AND {'true' if free_at else 'false'})"
    return f"""
    WITH split AS (
      SELECT line_no, line, CASE WHEN len(f0) > {ncols} AND f0[-1] = '' THEN f0[1:-2] ELSE f0 END AS f
      FROM (SELECT line_no, line, string_split(line, $delim) AS f0 FROM _lines WHERE seg = $seg AND kind = 'data')
    ), shaped AS (
      SELECT *, len(f) - {ncols} AS extra FROM split
    ), fields AS (
      SELECT line_no, line, extra, ({shape_ok}) AS shape_ok,
        {jid} AS jid, {jidraw} AS jidraw,
        {col('cluster')} AS c_cluster, {col('partition')} AS c_partition, {col('qos')} AS c_qos,
        {col('account')} AS c_account, {col('group')} AS c_group, {col('gid')} AS c_gid,
        {col('user')} AS c_user, {col('uid')} AS c_uid, {col('submit')} AS c_submit,
        {col('eligible')} AS c_eligible, {col('start')} AS c_start, {col('end')} AS c_end,
        {elapsed} AS c_elapsed, {col('exitcode')} AS c_exitcode, {col('state')} AS c_state,
        {col('nnodes')} AS c_nnodes, {ncpus} AS c_ncpus, {col('reqcpus')} AS c_reqcpus,
        {col('reqmem')} AS c_reqmem, {col('reqtres')} AS c_reqtres, {col('alloctres')} AS c_alloctres,
        {timelimit} AS c_timelimit, {timelimit_raw} AS c_timelimit_raw, {col('nodelist')} AS c_nodelist,
        {col('jobname')} AS c_jobname, {extra_json} AS c_extra,
        CASE WHEN extra >= 0 AND ({shape_ok}) THEN {reason} END AS bad_reason,
        CASE WHEN extra >= 0 AND ({shape_ok}) THEN {field} END AS bad_field
      FROM shaped
    )
    SELECT * FROM fields"""


STEP_RE = r"^(.*)\.(batch|extern|interactive|[0-9]+)$"


def _stage(con, seg: int, cols: list[str], opts: SacctOptions, default_cluster: str) -> None:
    """Parse segment ``seg`` into temp tables _stg (good rows) and _bad (rejects) and _steps (skips)."""
    params = {"delim": opts.delimiter, "seg": seg, "tz": opts.tz or "UTC"}
    ncols = len(cols)
    sql = _segment_sql(cols)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _f AS {sql}", {k: v for k, v in params.items() if f"${k}" in sql})
    no_id = "jobid" not in cols and "jobidraw" not in cols
    hint = ("columns of the header line" if seg > 0 else
            "Open XDMoD default list; give --fields for other layouts" if not opts.fields else "--fields")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _cls AS
        SELECT *,
          coalesce(jid, jidraw) AS anyid,
          CASE
            WHEN {'true' if no_id else 'false'} THEN 'reject:no JobID or JobIDRaw column in this input'
            WHEN extra < 0 THEN 'reject:expected {ncols} fields ({hint}), found ' || ({ncols} + extra)
            WHEN NOT shape_ok THEN 'reject:expected {ncols} fields ({hint}), found ' || ({ncols} + extra)
                                   || ' and no free-text column to hold the surplus'
            WHEN coalesce(jid, jidraw) IS NULL THEN 'reject:empty job id'
            WHEN regexp_matches(coalesce(jid, jidraw), '{STEP_RE}')
              THEN 'skip:job step (.' || CASE WHEN regexp_extract(coalesce(jid, jidraw), '{STEP_RE}', 2) SIMILAR TO '[0-9]+'
                                                  THEN 'N' ELSE regexp_extract(coalesce(jid, jidraw), '{STEP_RE}', 2) END || ')'
            WHEN NOT regexp_full_match(coalesce(jid, jidraw), '[0-9]+(_[0-9]+|_\\[[0-9,%\\-]+\\]|\\+[0-9]+)?')
              THEN 'reject:not a Slurm job id: ' || coalesce(jid, jidraw)
            WHEN jidraw IS NOT NULL AND NOT regexp_full_match(jidraw, '[0-9]+') AND jidraw <> jid
              THEN 'reject:JobIDRaw is not a number: ' || jidraw
            WHEN bad_reason IS NOT NULL THEN 'reject:' || bad_reason
            ELSE 'ok'
          END AS verdict
        FROM _f""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _stg AS
        SELECT line_no, line,
          coalesce(nullif(trim(c_cluster), ''), $cluster) AS cluster,
          anyid AS job_id,
          coalesce(jidraw, anyid) AS job_id_raw,
          try_cast(coalesce(nullif(regexp_extract(anyid, '^([0-9]+)_', 1), ''),
                            nullif(regexp_extract(anyid, '^([0-9]+)\\+', 1), '')) AS BIGINT) AS _base,
          try_cast(nullif(regexp_extract(anyid, '^[0-9]+_([0-9]+)$', 1), '') AS BIGINT) AS array_task_id,
          nullif(regexp_extract(anyid, '^[0-9]+_\\[(.*)\\]$', 1), '') AS array_task_spec,
          try_cast(nullif(regexp_extract(anyid, '^[0-9]+\\+([0-9]+)$', 1), '') AS INTEGER) AS het_offset,
          nullif(trim(c_user), '') AS "user", try_cast(c_uid AS BIGINT) AS uid,
          nullif(trim(c_group), '') AS "group", try_cast(c_gid AS BIGINT) AS gid,
          nullif(trim(c_account), '') AS account, nullif(trim(c_partition), '') AS partition,
          nullif(trim(c_qos), '') AS qos,
          gl_state(c_state) AS state, c_state AS state_raw,
          try_cast(nullif(regexp_extract(c_state, 'by ([0-9]+)', 1), '') AS BIGINT) AS cancelled_by_uid,
          try_cast(nullif(split_part(c_exitcode, ':', 1), '') AS INTEGER) AS exit_code,
          try_cast(nullif(split_part(c_exitcode, ':', 2), '') AS INTEGER) AS signal,
          gl_ts(c_submit, $tz) AS submit, gl_ts(c_eligible, $tz) AS eligible,
          gl_ts(c_start, $tz) AS start, gl_ts(c_end, $tz) AS _end_raw,
          c_elapsed AS _elapsed, c_timelimit AS timelimit_s, nullif(c_timelimit_raw, '') AS timelimit_raw,
          try_cast(c_nnodes AS INTEGER) AS nnodes, try_cast(c_ncpus AS INTEGER) AS ncpus,
          try_cast(c_reqcpus AS INTEGER) AS req_cpus,
          nullif(c_alloctres, '') AS alloc_tres, nullif(c_reqtres, '') AS req_tres,
          nullif(trim(c_nodelist), '') AS nodelist, c_jobname AS job_name, c_extra AS extra,
          c_reqmem AS _reqmem
        FROM _cls WHERE verdict = 'ok'""", {"cluster": default_cluster, "tz": opts.tz or "UTC"})
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _stg2 AS
        SELECT line_no, line, cluster, job_id, job_id_raw,
          CASE WHEN array_task_id IS NOT NULL OR array_task_spec IS NOT NULL THEN _base END AS array_job_id,
          array_task_id, array_task_spec,
          CASE WHEN het_offset IS NOT NULL THEN _base END AS het_job_id, het_offset,
          "user", uid, "group", gid, account, partition, qos, state, state_raw, cancelled_by_uid, exit_code, signal,
          submit, eligible, start,
          CASE WHEN gl_state_rank(state) = 0 OR start IS NULL THEN NULL ELSE _end_raw END AS "end",
          CASE WHEN _elapsed IS NOT NULL THEN _elapsed
               WHEN start IS NOT NULL AND _end_raw IS NOT NULL AND gl_state_rank(state) > 0
                 THEN greatest(0, epoch(_end_raw) - epoch(start))::BIGINT END AS elapsed_s,
          timelimit_s, timelimit_raw, nnodes, ncpus, req_cpus,
          coalesce(gl_tres_gpus(alloc_tres), 0) AS ngpus, NULL::INTEGER AS gpu_milli,
          gl_tres_gpus(req_tres) AS req_gpus,
          coalesce(gl_tres_gpu_type(alloc_tres), gl_tres_gpu_type(req_tres)) AS gpu_type,
          gl_tres_mem(alloc_tres) AS mem_bytes,
          coalesce(gl_reqmem(_reqmem, coalesce(req_cpus, ncpus), nnodes), gl_tres_mem(req_tres)) AS req_mem_bytes,
          coalesce(gl_tres_num(alloc_tres, 'billing'), gl_tres_num(req_tres, 'billing')) AS billing,
          alloc_tres, req_tres, nodelist, job_name, extra, 'sacct' AS source
        FROM _stg""")


def _segments(con, delim: str, default_cols: list[str]) -> dict[int, list[str]]:
    """Classify lines as blank / header / data into temp table _lines (line_no, line, kind, seg);
    return the column list of each segment (segment 0 = before any header)."""
    first_tokens = sorted(SACCT_FIELDS)
    cand = con.execute("""
        SELECT line_no, line FROM _raw
        WHERE trim(line) <> '' AND list_contains($names, regexp_replace(lower(trim(split_part(line, $delim, 1))), '%-?[0-9]+$', ''))
        ORDER BY line_no""", {"names": first_tokens, "delim": delim}).fetchall()
    headers = {}
    for line_no, line in cand:
        names = _header_fields(line, delim)
        if names:
            headers[line_no] = names
    _from_arrow(con, "_hdr", pa.table({"line_no": pa.array(list(headers), pa.int64())}))
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _lines AS
        SELECT r.line_no, r.line,
               CASE WHEN h.line_no IS NOT NULL THEN 'header' WHEN trim(r.line) = '' THEN 'blank' ELSE 'data' END AS kind,
               count(h.line_no) OVER (ORDER BY r.line_no ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS seg
        FROM _raw r LEFT JOIN _hdr h ON h.line_no = r.line_no""")
    cols = {0: default_cols}
    for i, line_no in enumerate(sorted(headers), start=1):
        cols[i] = headers[line_no]
    return cols


def _from_arrow(con, name: str, table: pa.Table) -> None:
    """Materialise an Arrow table as a temp table (explicit registration, no replacement scans)."""
    con.register("_arrow_in", table)
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM _arrow_in")
    finally:
        con.unregister("_arrow_in")


def _detect_delimiter(lines: pa.Array) -> str:
    for i in range(min(len(lines), 50)):
        s = lines[i].as_py()
        if s and s.strip():
            return "^|^" if "^|^" in s else "|"
    return "|"


def default_cluster(con, opts: SacctOptions) -> str:
    if opts.cluster:
        return opts.cluster
    known = [r[0] for r in con.sql("SELECT cluster FROM clusters").fetchall()]
    return known[0] if len(known) == 1 else "default"


def _cluster_tz(con, cluster: str) -> str | None:
    rows = con.execute("SELECT tz FROM clusters WHERE cluster = ?", [cluster]).fetchall()
    return rows[0][0] if rows else None


def ingest_bytes(con: duckdb.DuckDBPyConnection, data: bytes, input_name: str, opts: SacctOptions,
                 source: str = "sacct") -> dict:
    """Load one sacct output (as bytes) in one transaction; returns the run summary."""
    opts = SacctOptions(**vars(opts))
    lines, bad_utf8 = _lines(data)
    opts.delimiter = opts.delimiter or _detect_delimiter(lines)
    cluster = default_cluster(con, opts)
    opts.tz = opts.tz or _cluster_tz(con, cluster) or "UTC"
    _check_tz(con, opts.tz)
    default_cols = parse_fields(opts.fields) if opts.fields else list(XDMOD_FIELDS)
    slurm_sql.register(con)
    raw = pa.table({"line_no": pa.array(range(1, len(lines) + 1), pa.int64()), "line": lines})
    options = {"delimiter": opts.delimiter, "tz": opts.tz, "fields": opts.fields, "cluster": cluster,
               "non_utf8_bytes": bad_utf8}
    run = warehouse.IngestRun(con, source, input_name, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data),
                              cluster=cluster, options=options)
    with run:
        run.lines_read = len(lines)
        _from_arrow(con, "_raw", raw)
        seg_cols = _segments(con, opts.delimiter, default_cols)
        counts = dict(con.sql("SELECT kind, count(*) FROM _lines WHERE kind <> 'data' GROUP BY kind").fetchall())
        first = dict(con.sql("SELECT kind, min(line_no) FROM _lines WHERE kind <> 'data' GROUP BY kind").fetchall())
        run.skip("blank line", counts.get("blank", 0), first.get("blank"))
        run.skip("header line", counts.get("header", 0), first.get("header"))
        con.execute("CREATE OR REPLACE TEMP TABLE _all_stg AS SELECT * FROM (SELECT NULL) WHERE false")
        stg_parts, examples = [], []
        for seg, cols in seg_cols.items():
            if not con.execute("SELECT count(*) FROM _lines WHERE seg = ? AND kind = 'data'", [seg]).fetchall()[0][0]:
                continue
            _stage(con, seg, cols, opts, cluster)
            for reason, n, first_no in con.sql(
                    "SELECT substr(verdict, 6), count(*), min(line_no) FROM _cls WHERE verdict LIKE 'skip:%' GROUP BY 1").fetchall():
                run.skip(reason, n, first_no)
            con.execute("""INSERT INTO rejects SELECT ?, line_no, coalesce(bad_field, CASE WHEN verdict LIKE '%job id%'
                                   OR verdict LIKE '%JobID%' THEN 'jobid' END), substr(verdict, 8), line
                           FROM _cls WHERE verdict LIKE 'reject:%'""", [run.run_id])
            run.rejected += con.sql("SELECT count(*) FROM _cls WHERE verdict LIKE 'reject:%'").fetchall()[0][0]
            tbl = f"_stg_seg{seg}"
            con.execute(f"CREATE OR REPLACE TEMP TABLE {tbl} AS SELECT * FROM _stg2")
            stg_parts.append(tbl)
        if stg_parts:
            con.execute("CREATE OR REPLACE TEMP TABLE stg_jobs AS " + " UNION ALL BY NAME ".join(
                f"SELECT * FROM {t}" for t in stg_parts))
            bad = jobs_store.stage_nodelists(con, "stg_jobs")
            if bad:
                _from_arrow(con, "badtbl", pa.table({"nodelist": list(bad), "err": list(bad.values())}))
                con.execute("""INSERT INTO rejects SELECT ?, s.line_no, 'nodelist', 'bad nodelist: ' || b.err, s.line
                               FROM stg_jobs s JOIN badtbl b ON b.nodelist = s.nodelist""", [run.run_id])
                n_bad = con.sql("SELECT count(*) FROM stg_jobs s JOIN badtbl b ON b.nodelist = s.nodelist").fetchall()[0][0]
                run.rejected += n_bad
                con.execute("DELETE FROM stg_jobs WHERE nodelist IN (SELECT nodelist FROM badtbl)")
            run.loaded = con.sql("SELECT count(*) FROM stg_jobs").fetchall()[0][0]
            jobs_store.merge_jobs(con, run, "stg_jobs")
            jobs_store.assign_teams(con, run.run_id)
        examples = [f"{input_name}:{ln}: " + (f"field {fld}: " if fld else "") + reason
                    for ln, fld, reason in con.execute(
                        "SELECT line_no, field, reason FROM rejects WHERE run_id = ? ORDER BY line_no LIMIT 10",
                        [run.run_id]).fetchall()]
        for t in stg_parts + ["_raw", "_hdr", "badtbl", "_lines", "_f", "_cls", "_stg", "_stg2", "_all_stg"]:
            con.execute(f"DROP TABLE IF EXISTS {t}")
    summary = run.summary()
    summary["reject_examples"] = examples
    summary["transitions"] = run.options.get("transitions", {})
    return summary


def _check_tz(con, tz: str) -> None:
    try:
        con.execute("SELECT timezone(?, TIMESTAMP '2000-01-01')", [tz]).fetchall()
    except duckdb.Error as exc:
        raise InputError("--tz", f"unknown time zone {tz!r}") from exc


def ingest_path(con, path: str, opts: SacctOptions) -> dict:
    data, name = read_input(path)
    return ingest_bytes(con, data, name, opts)


# ---------------------------------------------------------------- live

#: Re-read this much before the watermark: slurmdbd commits records late.
LIVE_OVERLAP_S = 600


def ingest_live(con, opts: SacctOptions, since: str | None = None, sacct_cmd: str = "sacct",
                timeout_s: int = 900) -> dict:
    """Run ``sacct`` (TZ=UTC, XDMoD's fields) from the watermark (or ``since``) to now, and load it."""
    cluster = default_cluster(con, opts)
    now = warehouse.utcnow().replace(microsecond=0)
    if since is None:
        mark = warehouse.get_watermark(con, "sacct-live", cluster)
        since = (mark - __import__("datetime").timedelta(seconds=LIVE_OVERLAP_S)).strftime("%Y-%m-%dT%H:%M:%S") \
            if mark else "1970-01-01T00:00:00"
    cmd = [*sacct_cmd.split(), "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader",
           "--format", ",".join(XDMOD_FIELDS), "--starttime", since, "--endtime", now.strftime("%Y-%m-%dT%H:%M:%S")]
    if opts.cluster:
        cmd += ["--clusters", opts.cluster]
    env = dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="standard")
    try:
        proc = subprocess.run(cmd, capture_output=True, env=env, timeout=timeout_s)
    except FileNotFoundError as exc:
        raise InputError(cmd[0], "sacct not found on PATH (is slurm-client installed?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise InputError(" ".join(cmd[:1]), f"sacct did not answer within {timeout_s} s") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InputError(cmd[0], f"sacct exited {proc.returncode}: {err[0] if err else 'no message'}")
    live_opts = SacctOptions(cluster=opts.cluster, tz="UTC", fields=",".join(XDMOD_FIELDS), delimiter="|",
                             strict=opts.strict)
    summary = ingest_bytes(con, proc.stdout, " ".join(cmd), live_opts, source="sacct-live")
    warehouse.set_watermark(con, "sacct-live", cluster, now)
    summary["since"] = since
    return summary
