"""`gpuledger ingest sacct`: Slurm accounting (``sacct --parsable2`` / ``--parsable``) into ``jobs``.

The input is split into columns by numpy without copying (ingest/textsplit.py) and typed and validated in
DuckDB SQL (macros in ingest/slurm_sql.py), so a million lines take seconds.
Every line ends up in exactly one place: loaded into ``jobs`` (job allocations, array tasks, het
components), skipped with a reason (blank lines, header lines, job steps), or rejected into ``rejects``
with its line number, the field at fault and why.
"""
from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from ingest import gpu_shares, jobs_store, plausible, sacct_json, slurm_sql, textsplit, warehouse
from ingest.lines import aligned_table, first_text_line, other_output, text_lines
from ingest.slurm_json import looks_like_json
from ingest.errors import InputError
from ingest.inputs import check_zone, needs_decoding, read_input

#: Open XDMoD's field list: the default column order of headerless input and what --live asks for.
XDMOD_FIELDS = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,"
                "elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,"
                "jobname").split(",")


#: Every field `sacct --helpformat` lists (Slurm 20.11-25.11), lower case: a line made of these is a header.
SACCT_FIELDS = frozenset("""
account admincomment alloccpus allocgres allocnodes alloctres associd avecpu avecpufreq avediskread avediskwrite
avepages averss avevmsize blockid cluster comment constraints container consumedenergy consumedenergyraw cputime
cputimeraw dbindex derivedexitcode elapsed elapsedraw eligible end exitcode extra failednode flags gid group
jobid jobidraw jobname layout licenses maxdiskread maxdiskreadnode maxdiskreadtask maxdiskwrite maxdiskwritenode
maxdiskwritetask maxpages maxpagesnode maxpagestask maxrss maxrssnode maxrsstask maxvmsize maxvmsizenode
maxvmsizetask mcslabel mincpu mincpunode mincputask ncpus nnodes nodelist ntasks partition planned plannedcpu
plannedcpuraw priority qos qosraw reason reqcpufreq reqcpufreqgov reqcpufreqmax reqcpufreqmin reqcpus reqgres
reqmem reqnodes reqtres reservation reservationid reserved resvcpu resvcpuraw start state submit submitline
suspended systemcomment systemcpu timelimit timelimitraw totalcpu tresusageinave tresusageinmax
tresusageinmaxnode tresusageinmaxtask tresusageinmin tresusageinminnode tresusageinmintask tresusageintot
tresusageoutave tresusageoutmax tresusageoutmaxnode tresusageoutmaxtask tresusageoutmin tresusageoutminnode
tresusageoutmintask tresusageouttot uid user usercpu wckey wckeyid workdir stdout stderr stdin qosreq
segmentsize
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


def _normalise_field(name: str) -> str:
    return re.sub(r"%-?\d+$", "", name.strip()).lower()


FIELD_NAME = re.compile(r"[a-z][a-z0-9_]*")


def parse_fields(spec: str) -> list[str]:
    fields = [_normalise_field(f) for f in spec.split(",")]
    for f in fields:
        if not FIELD_NAME.fullmatch(f):
            raise InputError("--fields", f"{f!r} is not a sacct field name")
    return fields


def _header_fields(line: str, delim: str) -> list[str] | None:
    """The columns a header line names, or None when the line is not a header.

    Every field must be a name (a letter, then letters, digits or _) and at least half of them sacct fields we
    know: each Slurm release adds a few (22.05's ``--format=ALL`` prints ResvCPU and ResvCPURAW beside 107 others),
    and one name we do not know must not turn the header into a data line and every line under it into a
    reject. A header without JobID/JobIDRaw is still a header: the lines under it are rejected with that reason.
    """
    tokens = line.split(delim)
    if tokens and tokens[-1] == "":
        tokens = tokens[:-1]
    names = [_normalise_field(t) for t in tokens]
    if not names or not all(FIELD_NAME.fullmatch(n) for n in names):
        return None
    return names if 2 * sum(n in SACCT_FIELDS for n in names) >= len(names) else None


def unknown_fields(headers: dict[int, list[str]], input_name: str) -> list[str]:
    """A note per header line that names fields we do not know (their values are kept in jobs.extra)."""
    out = []
    for i, names in sorted(headers.items()):
        unknown = [n for n in names if n not in SACCT_FIELDS]
        if unknown:
            out.append(f"{input_name}:{i + 1}: header names fields gpuledger does not know "
                       f"({', '.join(unknown)}): their values are kept in jobs.extra")
    return out


# ---------------------------------------------------------------- staging

STEP_RE = r"^(.*)\.(batch|extern|interactive|[0-9]+)$"
JOBID_RE = r"[0-9]+(_[0-9]+|_\[[0-9,%\-]+\]|\+[0-9]+)?"
SEP = "\x1f"  # separates kind, field and reason inside the one verdict string


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _checks(cols: list[str]) -> list[tuple[str, str, str]]:
    """(field, bad-condition, reason SQL) for every typed field: text that is neither a null token nor readable."""
    out = []
    for name in ("submit", "eligible", "start", "end"):
        if name in cols:
            out.append((name, f"t_{name} IS NULL AND NOT gl_is_null_token(c_{name}) AND c_{name} <> '0'",
                        f"'cannot read time ' || c_{name} || ' (ISO 8601 or epoch seconds; sacct prints ISO 8601 "
                        "with SLURM_TIME_FORMAT=standard)'"))
    for name in ("elapsed", "timelimit"):
        if name in cols:
            out.append((name, f"t_{name} IS NULL AND NOT gl_dur_is_none(c_{name})", f"'cannot read duration ' || c_{name}"))
    for name in ("nnodes", "ncpus", "alloccpus", "reqcpus", "uid", "gid", "elapsedraw", "timelimitraw"):
        # TimelimitRaw is minutes or, like Timelimit, Partition_Limit or UNLIMITED (no limit of the job's own)
        none = "gl_dur_is_none" if name == "timelimitraw" else "gl_is_null_token"
        if name in cols:
            out.append((name, f"try_cast(c_{name} AS BIGINT) IS NULL AND NOT {none}(c_{name})",
                        f"'not an integer: ' || c_{name}"))
    if "exitcode" in cols:
        out.append(("exitcode", "NOT gl_is_null_token(c_exitcode) AND NOT regexp_full_match(c_exitcode, '[0-9]+(:[0-9]+)?')",
                    "'not an exit code N:S: ' || c_exitcode"))
    if "reqmem" in cols:
        out.append(("reqmem", "req_mem_bytes IS NULL AND NOT gl_is_null_token(c_reqmem)",
                    "'cannot read memory ' || c_reqmem"))
    for name, raw in (("alloctres", "a_gpu"), ("reqtres", "q_gpu")):
        if name in cols:
            out.append((name, f"{raw} IS NOT NULL AND try_cast({raw} AS DOUBLE) IS NULL",
                        f"'cannot read GPU count gres/gpu=' || {raw}"))
    return out + _implausible(cols)


def _implausible(cols: list[str]) -> list[tuple[str, str, str]]:
    """(field, condition, reason SQL) for readable values that cannot be true (ingest/plausible.py): times outside
    the window, End before Start, negative or overlong durations, negative or non-finite counts. Never stored."""
    out = []
    for name in ("submit", "eligible", "start", "end"):
        if name in cols:
            out.append((name, f"t_{name} NOT BETWEEN $win_lo AND $win_hi", plausible.sql_reason(f"c_{name}")))
    if "start" in cols and "end" in cols:
        out.append(("end", "t_end < t_start", "'End ' || c_end || ' is before Start ' || c_start"))
    for name, typed in (("elapsed", "t_elapsed"), ("elapsedraw", "t_elapsed"), ("timelimit", "t_timelimit"),
                        ("timelimitraw", "t_timelimit")):
        if name in cols:
            out.append((name, f"{typed} < 0", f"'negative duration: ' || c_{name}"))
            out.append((name, f"{typed} > $win_max_s",
                        f"'duration ' || c_{name} || ' is longer than the plausible window (${plausible.ENV_WINDOW})'"))
    for name, typed, kind in (("nnodes", "t_nnodes", "nodes"), ("ncpus", "t_ncpus", "cpus"),
                              ("alloccpus", "t_ncpus", "cpus"), ("reqcpus", "t_reqcpus", "cpus")):
        if name in cols:
            if name == "alloccpus" and "ncpus" in cols:   # t_ncpus is NCPUS then
                typed = "try_cast(c_alloccpus AS INTEGER)"
            # the typed value is NULL beyond INTEGER: only then is the text parsed again (AND short-circuits)
            out.append((name, f"{typed} NOT BETWEEN 0 AND {plausible.MAX_COUNTS[kind]} OR "
                              f"({typed} IS NULL AND try_cast(c_{name} AS BIGINT) IS NOT NULL)",
                        f"'count out of the plausible range 0-{plausible.MAX_COUNTS[kind]}: ' || c_{name}"))
    top = plausible.MAX_COUNTS["gpus"]
    for name, checks in (("alloctres", (("ngpus", top), ("mem_bytes", None), ("billing", None))),
                         ("reqtres", (("req_gpus", top),)), ("reqmem", (("req_mem_bytes", None),))):
        if name in cols:
            for col, hi in checks:
                what = {"ngpus": "GPU count", "req_gpus": "GPU count", "billing": "billing"}.get(col, "memory")
                out.append((name, f"{col} < 0 OR NOT isfinite({col})" + (f" OR {col} > {hi}" if hi else ""),
                            f"'{what} out of the plausible range ' || '{f'0-{hi}' if hi else '>= 0, finite'}: ' || {col}"))
    return out


#: Every column the staging SQL may read; those absent from the input are NULL.
STAGED_INPUTS = ("jobid", "jobidraw", "cluster", "partition", "qos", "account", "group", "gid", "user", "uid",
                 "submit", "eligible", "start", "end", "elapsed", "elapsedraw", "exitcode", "state", "nnodes",
                 "ncpus", "alloccpus", "reqcpus", "reqmem", "reqtres", "alloctres", "timelimit", "timelimitraw",
                 "nodelist", "jobname")


def _stage_sql(cols: list[str], hint: str) -> str:
    """SQL from the split columns of one segment (table ``_seg``) to typed, staged job rows with a verdict.

    Layered so that each macro is applied to a plain column (cheap to plan). ``verdict`` is NULL for a good
    row, else ``reject<US>field<US>reason``.
    """
    ncols = len(cols)
    known = set(cols)
    has_free = any(f in known for f in FREE_TEXT)
    present = ", ".join(f"c_{n}" if n in known else f"NULL::VARCHAR AS c_{n}" for n in STAGED_INPUTS)
    extra_cols = [c for c in cols if c not in MODELLED]
    extra_json = ("to_json(map([" + ", ".join(_sql_str(c) for c in extra_cols) + "], [" +
                  ", ".join(f"c_{c}" for c in extra_cols) + "]))::VARCHAR") if extra_cols else "NULL::VARCHAR"
    elapsed = ("gl_dur(c_elapsed)" if "elapsed" in known else
               "try_cast(c_elapsedraw AS BIGINT)" if "elapsedraw" in known else "NULL::BIGINT")
    timelimit = ("gl_dur(c_timelimit)" if "timelimit" in known else
                 "try_cast(try_cast(c_timelimitraw AS BIGINT) * 60.0 AS BIGINT)" if "timelimitraw" in known else "NULL::BIGINT")
    no_id = "jobid" not in known and "jobidraw" not in known
    shape_ok = f"nf = {ncols}" + (f" OR nf > {ncols}" if has_free else "")
    field_checks = " ".join(f"WHEN {cond} THEN 'reject{SEP}{name}{SEP}' || {msg}" for name, cond, msg in _checks(cols))
    return f"""
    WITH r AS (
      SELECT line_no, nf, {present}, {extra_json} AS c_extra FROM _seg
    ), t AS (
      SELECT *,
        coalesce(nullif(trim(c_jobid), ''), nullif(trim(c_jobidraw), '')) AS anyid,
        nullif(trim(c_jobidraw), '') AS jidraw,
        gl_ts(c_submit, $tz) AS t_submit, gl_ts(c_eligible, $tz) AS t_eligible,
        gl_ts(c_start, $tz) AS t_start, gl_ts(c_end, $tz) AS t_end,
        {elapsed} AS t_elapsed, {timelimit} AS t_timelimit,
        gl_state_base(c_state) AS state_base,
        ',' || c_alloctres || ',' AS ua, ',' || c_reqtres || ',' AS uq,
        gl_tres_ntyped(c_alloctres) AS a_n, gl_tres_ntyped(c_reqtres) AS q_n,
        CASE WHEN right(c_reqmem, 1) IN ('c', 'n') THEN c_reqmem[1:-2] ELSE c_reqmem END AS rm_amount,
        CASE WHEN right(c_reqmem, 1) IN ('c', 'n') THEN right(c_reqmem, 1) ELSE '' END AS rm_per,
        try_cast(c_nnodes AS INTEGER) AS t_nnodes, try_cast(coalesce(c_ncpus, c_alloccpus) AS INTEGER) AS t_ncpus,
        try_cast(c_reqcpus AS INTEGER) AS t_reqcpus
      FROM r
    ), t2 AS (
      SELECT *,
        gl_tres_val(ua, 'gres/gpu') AS a_gpu, gl_tres_val(uq, 'gres/gpu') AS q_gpu,
        gl_tres_val(ua, 'mem') AS a_mem, gl_tres_val(uq, 'mem') AS q_mem,
        gl_tres_val(ua, 'billing') AS a_bill, gl_tres_val(uq, 'billing') AS q_bill
      FROM t
    ), u AS (
      SELECT *,
        gl_state_of(state_base) AS t_state,
        coalesce(try_cast(a_gpu AS DOUBLE), gl_tres_typed_sum(c_alloctres, a_n), 0) AS ngpus,
        coalesce(try_cast(q_gpu AS DOUBLE), gl_tres_typed_sum(c_reqtres, q_n)) AS req_gpus,
        coalesce(gl_tres_type(c_alloctres, a_n), gl_tres_type(c_reqtres, q_n)) AS gpu_type,
        gl_mem_bytes(a_mem) AS mem_bytes,
        coalesce(gl_reqmem(rm_amount, rm_per, coalesce(t_reqcpus, t_ncpus), t_nnodes), gl_mem_bytes(q_mem)) AS req_mem_bytes,
        coalesce(try_cast(a_bill AS DOUBLE), try_cast(q_bill AS DOUBLE)) AS billing
      FROM t2
    ), v AS (
      SELECT *,
        CASE
          WHEN {'true' if no_id else 'false'} THEN 'reject{SEP}jobid{SEP}no JobID or JobIDRaw column in this input'
          WHEN NOT ({shape_ok}) THEN 'reject{SEP}{SEP}expected {ncols} fields ({hint}), found ' || nf
          WHEN anyid IS NULL THEN 'reject{SEP}jobid{SEP}empty job id'
          WHEN NOT regexp_full_match(anyid, '{JOBID_RE}') THEN 'reject{SEP}jobid{SEP}not a Slurm job id: ' || anyid
          WHEN jidraw IS NOT NULL AND NOT regexp_full_match(jidraw, '[0-9]+') AND jidraw <> anyid
            THEN 'reject{SEP}jobidraw{SEP}JobIDRaw is not a number: ' || jidraw
          {field_checks}
          ELSE NULL
        END AS verdict,
        gl_state_rank(t_state) AS rank
      FROM u
    )
    SELECT line_no, verdict,
      coalesce(nullif(trim(c_cluster), ''), $cluster) AS cluster,
      anyid AS job_id,
      coalesce(jidraw, anyid) AS job_id_raw,
      CASE WHEN strpos(anyid, '_') > 0 THEN try_cast(gl_before(anyid, '_') AS BIGINT) END AS array_job_id,
      try_cast(gl_after(anyid, '_') AS BIGINT) AS array_task_id,
      rtrim(gl_after(anyid, '_['), ']') AS array_task_spec,
      CASE WHEN strpos(anyid, '+') > 0 THEN try_cast(gl_before(anyid, '+') AS BIGINT) END AS het_job_id,
      try_cast(gl_after(anyid, '+') AS INTEGER) AS het_offset,
      nullif(trim(c_user), '') AS "user", try_cast(c_uid AS BIGINT) AS uid,
      nullif(trim(c_group), '') AS "group", try_cast(c_gid AS BIGINT) AS gid,
      nullif(trim(c_account), '') AS account, nullif(trim(c_partition), '') AS partition,
      nullif(trim(c_qos), '') AS qos,
      t_state AS state, c_state AS state_raw,
      try_cast(gl_after(c_state, ' by ') AS BIGINT) AS cancelled_by_uid,
      try_cast(gl_before(c_exitcode, ':') AS INTEGER) AS exit_code,
      try_cast(gl_after(c_exitcode, ':') AS INTEGER) AS signal,
      t_submit AS submit, t_eligible AS eligible, t_start AS start,
      CASE WHEN rank = 0 THEN NULL ELSE t_end END AS "end",
      CASE WHEN t_elapsed IS NOT NULL THEN t_elapsed
           WHEN t_start IS NOT NULL AND t_end IS NOT NULL AND rank > 0
             THEN greatest(0, epoch(t_end) - epoch(t_start))::BIGINT END AS elapsed_s,
      t_timelimit AS timelimit_s, nullif(coalesce(c_timelimit, c_timelimitraw), '') AS timelimit_raw,
      t_nnodes AS nnodes, t_ncpus AS ncpus, t_reqcpus AS req_cpus,
      ngpus, NULL::INTEGER AS gpu_milli, req_gpus, gpu_type, mem_bytes, req_mem_bytes, billing,
      nullif(c_alloctres, '') AS alloc_tres, nullif(c_reqtres, '') AS req_tres,
      nullif(trim(c_nodelist), '') AS nodelist, c_jobname AS job_name, c_extra AS extra, $source AS source
    FROM v"""


def _header_lines(con, lines: textsplit.Lines, nonblank: np.ndarray, delim: str) -> dict[int, list[str]]:
    """{line index: columns} of the header lines: a line whose every field is a sacct field name."""
    # Every field name starts with a letter and every job id with a digit: only lines that start with a
    # letter (or blanks) can be headers, which leaves the SQL below a handful of lines, not a million.
    head = lines.buf[lines.starts[nonblank]] | 0x20                 # ASCII lower case
    nonblank = nonblank[((head >= ord("a")) & (head <= ord("z"))) | (head == 0x20) | (head == 0x29)]
    if not len(nonblank):
        return {}
    # a field name is short: a header's first field ends within the line's first 41 bytes (a line cut there
    # with no delimiter yet is no header, and is not cut inside a character: it gets an empty first field)
    d = delim.encode()
    starts, ends = lines.starts[nonblank], lines.ends[nonblank]
    heads = [bytes(lines.data[s:min(e, s + 41)]) for s, e in zip(starts.tolist(), ends.tolist())]
    first_len = np.array([h.find(d) if d in h else len(h) if len(h) < 41 else 0 for h in heads], dtype=np.int64)
    first = textsplit.string_views(lines.data, lines.buf, starts, first_len)
    con.register("_first", pa.table({"i": textsplit.int_array(nonblank), "first": first}))
    try:
        cand = [r[0] for r in con.execute(
            """SELECT i FROM _first WHERE length(first) < 40 AND
                      list_contains($names, regexp_replace(lower(trim(first)), '%-?[0-9]+$', ''))""",
            {"names": sorted(SACCT_FIELDS)}).fetchall()]
    finally:
        con.unregister("_first")
    out = {}
    for i in cand:
        text = lines.line(i).decode("utf-8", errors="replace")
        names = _header_fields(text, delim)
        if names:
            out[int(i)] = names
    return out


def _check_layout_options(lines: textsplit.Lines, headers: dict[int, list[str]], is_data: np.ndarray,
                          opts: SacctOptions, given_delimiter: str | None, input_name: str) -> None:
    """--fields and --delimiter are honoured or refused, never silently ignored (InputError naming the option).

    --fields lays out the lines before the first header line; when a header comes first it names the columns
    itself, and a different --fields would apply to no line. A given --delimiter that is not the header's is
    refused too (every line would be rejected as having the wrong number of fields)."""
    first = next((i for i in range(min(len(lines), 50)) if lines.ends[i] > lines.starts[i]), None)
    if first is None:
        return
    if given_delimiter and first not in headers:
        text = lines.line(first).decode("utf-8", "replace")
        other = next((d for d in ("^|^", "|") if d != given_delimiter and _header_fields(text, d)), None)
        if other:
            raise InputError("--delimiter", f"{input_name}:{first + 1} is a header line delimited by {other!r}, "
                                            f"not {given_delimiter!r}: drop --delimiter or give {other!r}")
    if opts.fields and headers and not is_data[:min(headers)].any():
        named = headers[min(headers)]
        if named != parse_fields(opts.fields):
            raise InputError("--fields", f"{input_name}:{min(headers) + 1} is a header line naming the columns "
                                         f"({','.join(named)}); --fields ({opts.fields}) would apply to no line: "
                                         "drop it (it is for headerless input)")


def _detect_delimiter(lines: textsplit.Lines) -> str:
    for i in range(min(len(lines), 50)):
        s = lines.line(i)
        if s.strip():
            return "^|^" if b"^|^" in s else "|"
    return "|"


def default_cluster(con, opts: SacctOptions) -> str:
    if opts.cluster:
        return opts.cluster
    known = [r[0] for r in con.sql("SELECT cluster FROM clusters").fetchall()]
    return known[0] if len(known) == 1 else "default"


def _cluster_tz(con, cluster: str) -> str | None:
    rows = con.execute("SELECT tz FROM clusters WHERE cluster = ?", [cluster]).fetchall()
    return rows[0][0] if rows else None


def _line_text(lines: textsplit.Lines, line_nos) -> pa.Array:
    return textsplit.str_array([lines.line(i - 1).decode("utf-8", "replace") for i in line_nos])


def _trailing_delimiter(lines: textsplit.Lines, rows: np.ndarray, d: bytes, ncols: int, header: int | None) -> bool:
    """Whether the lines end with a delimiter after their last field (``--parsable``) rather than not
    (``--parsable2``). sacct ends its header line as it ends the data lines, so a header decides; without one, a
    line of ``--parsable`` output has a delimiter for every field, one more than ``--parsable2``'s. Whether most
    lines end with a delimiter does not tell: under ``--parsable2`` every line whose last field is empty (a
    Reservation or Comment column last) ends with one."""
    if header is not None:
        return bytes(lines.data[lines.starts[header]:lines.ends[header]]).endswith(d)
    sample = [bytes(lines.data[lines.starts[r]:lines.ends[r]]) for r in rows[:200]]
    return bool(sample) and sum(t.endswith(d) and t.count(d) >= ncols for t in sample) > len(sample) / 2


def _stage_segment(con, run, lines, rows: np.ndarray, cols: list[str], opts: SacctOptions, cluster: str,
                   source: str, hint: str, table: str, window: plausible.Window, header: int | None) -> None:
    """Split, type and validate the lines ``rows`` with layout ``cols`` (named by line ``header``, None for
    headerless input) into temp table ``table``."""
    d = opts.delimiter.encode()
    free = next((f for f in FREE_TEXT if f in cols), None)
    trailing = _trailing_delimiter(lines, rows, d, len(cols), header)
    split = (lines, d, len(cols), cols.index(free) if free else None, trailing)
    key = "jobid" if "jobid" in cols else "jobidraw" if "jobidraw" in cols else None
    if key:
        rows = _skip_steps(con, run, rows, split, cols.index(key))
    fields = textsplit.split_fields(lines, rows, *split[1:])
    arrays = {"line_no": textsplit.int_array(rows + 1), "nf": textsplit.int_array(fields.nfields)}
    for name, col in zip(cols, fields.columns):
        arrays.setdefault(f"c_{name}", col)     # a repeated column name keeps its first occurrence
    # the split columns are scanned in place (Arrow views over the input), never copied into a table
    con.register("_seg", pa.table(arrays))
    try:
        sql = _stage_sql(cols, hint)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {sql}", {"tz": opts.tz, "cluster": cluster, "source": source,
                                                                         **plausible.sql_params(window, sql)})
    finally:
        con.unregister("_seg")
    bad = con.execute(f"""SELECT line_no, nullif(split_part(verdict, $sep, 2), ''), split_part(verdict, $sep, 3)
                          FROM {table} WHERE verdict IS NOT NULL ORDER BY line_no""", {"sep": SEP}).fetchall()
    if bad:
        _reject(con, run, lines, [b[0] for b in bad], [b[1] for b in bad], [b[2] for b in bad])


def _skip_steps(con, run, rows: np.ndarray, split: tuple, k: int) -> np.ndarray:
    """Count the job-step lines (``123.batch``, ``123.extern``, ``123.4``; with a full set of fields) among
    ``rows`` as skipped, by kind, and return the other rows. Only the job id column is split for this, so the
    steps (often half of an export) never cost a full split."""
    lines, d, ncols, free_at, trailing = split
    f = textsplit.split_fields(lines, rows, d, ncols, free_at, trailing, only=[k])
    con.register("_ids", pa.table({"i": textsplit.int_array(np.arange(len(rows))), "nf": textsplit.int_array(f.nfields), "id": f.columns[0]}))
    try:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _steps AS
                        SELECT i, regexp_extract(id, '{STEP_RE}', 2) AS k FROM _ids
                        WHERE nf >= {ncols} AND regexp_matches(id, '{STEP_RE}')""")
    finally:
        con.unregister("_ids")
    for reason, n, first in con.execute("""
            SELECT 'job step (.' || CASE WHEN k SIMILAR TO '[0-9]+' THEN 'N' ELSE k END || ')', count(*), min(i)
            FROM _steps GROUP BY 1""").fetchall():
        run.skip(reason, n, int(rows[first]) + 1)
    step = np.zeros(len(rows), dtype=bool)
    step[con.execute("SELECT i FROM _steps").fetchnumpy()["i"]] = True
    con.execute("DROP TABLE _steps")
    return rows[~step]


def _reject(con, run, lines, line_nos, fields, reasons) -> None:
    tbl = pa.table({"line_no": textsplit.int_array(line_nos), "field": textsplit.str_array(fields),
                    "reason": textsplit.str_array(reasons), "raw": _line_text(lines, line_nos)})
    run.reject_rows(tbl)


#: `scontrol show ...` output (key=value records) and the command that reads it, by its first key.
_SCONTROL = {"JobId=": ("`scontrol show job` output: the live state of jobs, not their accounting; run sacct "
                        "--parsable2 (or --json) for it (docs/CLI.md, ingest sacct)"),
             "NodeName=": "`scontrol show node` output: load it with `gpuledger ingest nodes`",
             "ReservationName=": "`scontrol show reservation` output: load it with `gpuledger ingest reservations`"}


def _refuse_other_outputs(data, name: str) -> None:
    """One clear error for another command's output, not a reject per line: scontrol's key=value records among
    the first 50 lines (a line that starts with one of their first keys and holds another ``Key=`` and no ``|``,
    which no sacct line does), or another Slurm command's header (`lines.other_output`)."""
    head = text_lines(bytes(data[:1 << 16]))
    if (first := first_text_line(head)) is not None:
        other_output(head[first], name, first + 1, "sacct")
    for line in head[:50]:
        key = next((k for k in _SCONTROL if line.lstrip().startswith(k)), None)
        if key and "|" not in line and re.search(r" [A-Za-z]+=", line):
            raise InputError(name, f"this is {_SCONTROL[key]}")


def ingest_bytes(con: duckdb.DuckDBPyConnection, data: bytes, input_name: str, opts: SacctOptions,
                 source: str = "sacct", buf: np.ndarray | None = None) -> dict:
    """Load one sacct output in one transaction; returns the run summary.

    ``data`` is the input; ``buf``, when given, is the same bytes followed by 16 zero bytes (and ``data`` a
    view of it), which saves a copy of a large input.
    """
    opts = SacctOptions(**vars(opts))
    json_input = looks_like_json(data)
    if json_input:     # `sacct --json`: one line per job record, in our field list, times in UTC
        if opts.fields or opts.delimiter:
            raise InputError("--fields", f"{input_name} is JSON, whose records name their fields: drop "
                                         f"{'--fields' if opts.fields else '--delimiter'}")
        data, buf = sacct_json.to_sacct_text(data, input_name), None
        opts.fields, opts.delimiter, opts.tz = ",".join(sacct_json.FIELDS), "|", "UTC"
    if not json_input:
        aligned_table(data, input_name, "sacct --parsable2 (or --json); docs/CLI.md, ingest sacct")
        _refuse_other_outputs(data, input_name)
    data, bad_utf8 = textsplit.to_utf8(data)
    if bad_utf8:
        buf = None
    lines = textsplit.split_lines(data, buf)
    given_delimiter = opts.delimiter
    opts.delimiter = opts.delimiter or _detect_delimiter(lines)
    cluster = default_cluster(con, opts)
    opts.tz = opts.tz or _cluster_tz(con, cluster) or "UTC"
    check_zone(con, opts.tz)
    default_cols = parse_fields(opts.fields) if opts.fields else list(XDMOD_FIELDS)
    slurm_sql.register(con)
    window = plausible.window()
    options = {"delimiter": opts.delimiter, "tz": opts.tz, "fields": opts.fields, "cluster": cluster,
               "non_utf8_bytes": bad_utf8, "time_window": window.describe(),
               **({"format": "json", "records": sacct_json.RECORDS_NOTE, "read_as": "job records"}
                  if json_input else {})}
    # hashlib releases the GIL: the digest of a large input is computed while it is split and typed
    digest = ThreadPoolExecutor(max_workers=1)
    sha = digest.submit(lambda: hashlib.sha256(data).hexdigest())
    digest.shutdown(wait=False)
    run = warehouse.IngestRun(con, source, input_name, sha256=sha, nbytes=len(data),
                              cluster=cluster, options=options)
    with run:
        run.lines_read = len(lines)
        blank_mask = lines.ends == lines.starts
        blank = np.flatnonzero(blank_mask)
        run.skip("blank line", len(blank), int(blank[0]) + 1 if len(blank) else None)
        nonblank = np.flatnonzero(~blank_mask)
        headers = _header_lines(con, lines, nonblank, opts.delimiter) if len(nonblank) else {}
        run.notes = unknown_fields(headers, input_name)
        run.skip("header line", len(headers), min(headers) + 1 if headers else None)
        is_data = ~blank_mask
        is_data[list(headers)] = False
        _check_layout_options(lines, headers, is_data, opts, given_delimiter, input_name)
        bounds = [-1] + sorted(headers) + [len(lines)]
        layouts = [default_cols] + [headers[h] for h in sorted(headers)]
        staged = []
        for seg, (lo, hi, cols) in enumerate(zip(bounds[:-1], bounds[1:], layouts)):
            rows = np.flatnonzero(is_data[lo + 1:hi]) + lo + 1
            if not len(rows):
                continue
            hint = ("columns of the header line" if seg else "a job record of the JSON" if json_input else
                    "the Open XDMoD default list; give --fields for other layouts" if not opts.fields else "--fields")
            _stage_segment(con, run, lines, rows, cols, opts, cluster, source, hint, f"_stg_seg{seg}", window,
                           lo if seg else None)
            staged.append(f"_stg_seg{seg}")
        _load_staged(con, run, lines, staged)
        examples = [f"{input_name}:{ln}: " + (f"field {fld}: " if fld else "") + reason
                    for ln, fld, reason in con.execute(
                        "SELECT line_no, field, reason FROM rejects WHERE run_id = ? ORDER BY line_no LIMIT 10",
                        [run.run_id]).fetchall()]
        con.execute(f"DROP {'VIEW' if len(staged) == 1 else 'TABLE'} IF EXISTS stg_jobs")
        for t in staged:
            con.execute(f"DROP TABLE IF EXISTS {t}")
    summary = run.summary()
    summary["reject_examples"] = examples
    summary["transitions"] = run.options.get("transitions", {})
    return summary


def _load_staged(con, run, lines, staged: list[str]) -> None:
    """Reject bad nodelists, then merge the good staged rows into jobs/job_nodes and resolve teams."""
    if not staged:
        return
    # one layout (the usual case): a view, not a copy
    kind = "VIEW" if len(staged) == 1 else "TABLE"
    con.execute(f"CREATE OR REPLACE TEMP {kind} stg_jobs AS " + " UNION ALL BY NAME ".join(
        f"SELECT * EXCLUDE (verdict) FROM {t} WHERE verdict IS NULL" for t in staged))
    bad = jobs_store.stage_nodelists(con, "stg_jobs")
    if bad:
        rows = con.execute("SELECT line_no, nodelist FROM stg_jobs WHERE list_contains($bad, nodelist) ORDER BY line_no",
                           {"bad": list(bad)}).fetchall()
        _reject(con, run, lines, [r[0] for r in rows], ["nodelist"] * len(rows),
                [f"bad nodelist: {bad[r[1]]}" for r in rows])
        for t in staged:   # the view over the staged tables then leaves them out
            con.execute(f"UPDATE {t} SET verdict = 'reject' WHERE verdict IS NULL AND list_contains($bad, nodelist)",
                        {"bad": list(bad)})
    run.loaded = con.sql("SELECT count(*) FROM stg_jobs").fetchall()[0][0]
    table, notes = gpu_shares.resolve_staged(con, "stg_jobs")
    run.notes += notes
    jobs_store.merge_jobs(con, run, table)
    jobs_store.assign_teams(con, run.run_id)
    gpu_shares.drop_staged(con)


def ingest_path(con, path: str, opts: SacctOptions) -> dict:
    if path != "-":
        try:
            buf = textsplit.read_padded(path)
        except OSError:
            buf = None   # read_input names the problem
        if buf is not None and not needs_decoding(bytes(buf[:8]), path):
            return ingest_bytes(con, memoryview(buf)[: len(buf) - 16], path, opts, buf=buf)
    data, name = read_input(path)
    return ingest_bytes(con, data, name, opts)
