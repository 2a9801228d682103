"""`gpuledger ingest nvidia-smi`: ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` logs.

Columns are found by name in the header line (units in brackets such as ``memory.used [MiB]`` are ignored;
a later header line starts a new layout, as when several ``-l`` runs are concatenated); without a header,
``--fields`` gives the ``--query-gpu`` list. Values may carry units (``100 %``, ``19818 MiB``, ``631.95 W``) or
not (``nounits``); ``[N/A]``, ``N/A`` and other bracketed notes (``[Not Supported]``) mean "no reading" and are
never stored as 0. Timestamps (``2026/07/14 08:12:53.353``) are the host's local time: ``--tz`` (default the
cluster's zone, else UTC).

Used fields: ``timestamp``, ``index``, ``uuid``, ``name``, ``utilization.gpu`` (percent -> fraction 0..1),
``memory.used`` (MiB), ``power.draw`` (or ``power.draw.average``/``.instant``), ``temperature.gpu``, and a
``hostname`` column when present (else ``--node``). Parsing is done in DuckDB over the whole file.
"""
from __future__ import annotations

import hashlib
import re

import duckdb
import numpy as np
import pyarrow as pa

from ingest import lines, nvidia_smi_xml, plausible, telemetry_store as store, warehouse
from ingest.errors import InputError
from ingest.inputs import check_zone, read_file

#: stored column -> nvidia-smi field names, first present wins
FIELDS = {"gpu_util": ("utilization.gpu",), "fb_used_mib": ("memory.used",),
          "power_w": ("power.draw", "power.draw.average", "power.draw.instant"), "temp_c": ("temperature.gpu",)}
_HEADER_FIELD = re.compile(r"[A-Za-z_][\w.]*(\s*\[[^\]]*\])?")
_NUMBER = r"^([-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)\s*(%|MiB|W|C|MHz)?$"


def _names(header: str) -> list[str]:
    return [re.sub(r"\s*\[[^\]]*\]$", "", f.strip()).lower() for f in header.split(",")]


def _is_header(line: str) -> bool:
    """A header names fields (no numbers or times) and includes `timestamp` or `index`."""
    fields = [f.strip() for f in line.split(",")]
    return all(_HEADER_FIELD.fullmatch(f) for f in fields) and bool({"timestamp", "index"} & set(_names(line)))


def _segment_sql(cols: list[str]) -> str:
    """Typed readings of one layout's lines: (line_no, verdict, host, idx, uuid, model, ts_local, values...)."""
    pos = {c: i + 1 for i, c in reversed(list(enumerate(cols)))}

    def cell(name):
        return f"f[{pos[name]}]" if name in pos else "NULL"

    def num(col):
        name = next((n for n in FIELDS[col] if n in pos), None)
        if name is None:
            return "NULL::DOUBLE", "FALSE", "NULL"
        c = cell(name)
        na = f"({c} IN ('N/A', '') OR {c} LIKE '[%]')"
        val = f"TRY_CAST(regexp_extract({c}, '{_NUMBER}', 1) AS DOUBLE)"
        return f"CASE WHEN {na} THEN NULL ELSE {val} END", f"(NOT {na} AND {val} IS NULL)", f"'{name}'"

    nums = {col: num(col) for col in FIELDS}
    bad_num = "\n        ".join(
        f"WHEN {bad} THEN 'reject|{name.strip(chr(39))}|not a number: ' || {cell(name.strip(chr(39)))}"
        for _, bad, name in nums.values() if name != "NULL")
    host = cell("hostname")
    return f"""
    WITH s AS (SELECT line_no, line, list_transform(string_split(line, ','), lambda x: trim(x)) AS f
               FROM _lines WHERE line_no > $lo AND line_no < $hi AND trim(line) <> ''),
    t AS (SELECT line_no, line, f, len(f) AS nf,
                 try_strptime({cell('timestamp')}, ['%Y/%m/%d %H:%M:%S.%f', '%Y/%m/%d %H:%M:%S',
                                                    '%Y-%m-%d %H:%M:%S.%f', '%Y-%m-%d %H:%M:%S']) AS ts_local,
                 CASE WHEN {host} IS NULL OR {host} IN ('N/A', '') OR {host} LIKE '[%]' THEN $node ELSE {host} END AS host,
                 TRY_CAST({cell('index')} AS INTEGER) AS idx,
                 nullif({cell('uuid')}, '[N/A]') AS uuid, nullif({cell('name')}, '[N/A]') AS model,
                 {nums['gpu_util'][0]} / 100.0 AS gpu_util, {nums['fb_used_mib'][0]} AS fb_used_mib,
                 {nums['power_w'][0]} AS power_w, {nums['temp_c'][0]} AS temp_c
          FROM s)
    SELECT *, CASE
        WHEN nf <> {len(cols)} THEN 'reject||expected {len(cols)} comma-separated fields, found ' || nf
        WHEN ts_local IS NULL THEN 'reject|timestamp|not a time: ' || coalesce({cell('timestamp')}, '')
        WHEN timezone('UTC', timezone($tz, ts_local)) NOT BETWEEN $win_lo AND $win_hi
          THEN 'reject|timestamp|' || {plausible.sql_reason(cell('timestamp'))}
        WHEN idx IS NULL THEN 'reject|index|not a GPU index: ' || coalesce({cell('index')}, '')
        WHEN host IS NULL THEN 'reject|hostname|no hostname in the line and no --node given'
        {bad_num}
        WHEN gpu_util NOT BETWEEN 0 AND 1 THEN 'reject|utilization.gpu|out of range 0-100 %'
        WHEN coalesce(gpu_util, fb_used_mib, power_w, temp_c) IS NULL THEN 'skip|no readings ([N/A])'
        END AS verdict
    FROM t"""


#: what other nvidia-smi outputs look like (their first non-blank line), so a wrong file is named, not told it
#: lacks a header: (test, what it is)
XML_OUTPUT = "`nvidia-smi -q -x` (XML) output"
_OTHER_OUTPUTS = (
    (lambda l: l.startswith("<?xml") or l.startswith("<nvidia_smi_log"), XML_OUTPUT),
    (lambda l: l.startswith("==============NVSMI LOG"), "`nvidia-smi -q` output"),
    (lambda l: l.startswith("# gpu"), "`nvidia-smi dmon` output"),
    (lambda l: re.match(r"GPU \d+: .*\(UUID: ", l) is not None, "`nvidia-smi -L` output"),
    (lambda l: l.startswith("+---") or "NVIDIA-SMI" in l or re.match(r"\w{3} \w{3} [ \d]\d \d\d:", l) is not None,
     "the `nvidia-smi` summary table"),
    (lambda l: "pid" in _names(l) and "process_name" in _names(l),
     "`--query-compute-apps` output (one line per process)"),
    (lambda l: l.startswith(("# HELP ", "# TYPE ")) or re.match(r"DCGM_FI_\w+[{ ]", l) is not None,
     "a DCGM exporter's Prometheus text (load it with `gpuledger ingest dcgm`)"),
)


def _other_output(lines: list[str]) -> str | None:
    first = next((line.strip() for line in lines if line.strip()), "")
    return next((what for test, what in _OTHER_OUTPUTS if test(first)), None)


def _layouts(lines: list[str], fields: str | None, name: str) -> list[tuple[int, int, list[str]]]:
    """(after_line, before_line, columns) per layout; header lines are the boundaries."""
    other = _other_output(lines)
    if other:
        raise InputError(name, f"this is {other}; `ingest nvidia-smi` reads `nvidia-smi --query-gpu="
                               "timestamp,index,utilization.gpu,... --format=csv` logs (docs/CLI.md)")
    heads = [i + 1 for i, line in enumerate(lines) if line.strip() and _is_header(line)]
    segs = []
    if not heads or heads[0] != next((i + 1 for i, line in enumerate(lines) if line.strip()), 1):
        if not fields:
            raise InputError(name, "no header line; give --fields with the --query-gpu list", line_no=1)
        segs.append((0, heads[0] if heads else len(lines) + 1, [f.strip().lower() for f in fields.split(",")]))
    elif fields and [f.strip().lower() for f in fields.split(",")] != _names(lines[heads[0] - 1]):
        # honoured or refused, never silently ignored: a header first leaves --fields no line to lay out
        raise InputError("--fields", f"{name}:{heads[0]} is a header line naming the columns; --fields would apply "
                                     "to no line: drop it (it is for output without a header)")
    for k, h in enumerate(heads):
        segs.append((h, heads[k + 1] if k + 1 < len(heads) else len(lines) + 1, _names(lines[h - 1])))
    for _, _, cols in segs:
        for need in ("timestamp", "index"):
            if need not in cols:
                raise InputError(name, f"the query has no `{need}` field; add it to --query-gpu")
    return segs


def ingest_bytes(con: duckdb.DuckDBPyConnection, data: bytes, name: str, opts: store.TelemetryOptions,
                 fields: str | None = None, tz: str | None = None) -> dict:
    text_lines = lines.text_lines(data)
    xml = _other_output(text_lines) == XML_OUTPUT
    if xml:     # `nvidia-smi -q -x`: one reading per GPU per document, as the query's CSV lines
        if fields:
            raise InputError("--fields", f"{name} is nvidia-smi XML, whose elements name their readings: drop it")
        fields = nvidia_smi_xml.FIELDS
        text_lines = lines.text_lines(nvidia_smi_xml.to_query_csv(data, name))
    segs = _layouts(text_lines, fields, name)
    cluster = opts.cluster or store.default_cluster(con)
    zone = tz or next(iter(r[0] for r in con.execute("SELECT tz FROM clusters WHERE cluster = ?",
                                                     [cluster]).fetchall()), "UTC")
    check_zone(con, zone)
    if not opts.node and not any("hostname" in cols for _, _, cols in segs):
        raise InputError(name, "nvidia-smi output does not name the host (no hostname field); give --node NAME")
    options = {"tz": zone, "node": opts.node, "fields": fields,
               **({"format": "xml", "read_as": "GPU readings"} if xml else {})}
    run = warehouse.IngestRun(con, "nvidia-smi", name, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data),
                              cluster=cluster, options=options)
    with run:
        run.lines_read = len(text_lines)
        con.register("_lines_in", pa.table({"line_no": pa.array(np.arange(1, len(text_lines) + 1)),
                                            "line": pa.array(text_lines, pa.string())}))
        con.execute("CREATE OR REPLACE TEMP TABLE _lines AS SELECT * FROM _lines_in")
        con.unregister("_lines_in")
        blank = [i + 1 for i, s in enumerate(text_lines) if not s.strip()]
        run.skip("blank line", len(blank), blank[0] if blank else None)
        run.skip("header line", sum(1 for lo, _, _ in segs if lo > 0), next((lo for lo, _, _ in segs if lo > 0), None))
        con.execute("CREATE OR REPLACE TEMP TABLE _smi (line_no BIGINT, verdict VARCHAR, host VARCHAR, idx INTEGER, "
                    "uuid VARCHAR, model VARCHAR, ts TIMESTAMP, gpu_util DOUBLE, fb_used_mib DOUBLE, power_w DOUBLE, "
                    "temp_c DOUBLE)")
        window = plausible.window()
        run.options["time_window"] = window.describe()
        for lo, hi, cols in segs:
            sql = _segment_sql(cols)
            con.execute(f"""INSERT INTO _smi SELECT line_no, verdict, host, idx, uuid, model,
                                timezone('UTC', timezone($tz, ts_local)), gpu_util, fb_used_mib, power_w, temp_c
                            FROM ({sql})""", {"lo": lo, "hi": hi, "node": opts.node, "tz": zone,
                                             **plausible.sql_params(window, sql)})
        named, total = con.sql("SELECT count(host), count(*) FROM _smi").fetchall()[0]
        if total and not named:
            raise InputError(name, "nvidia-smi output does not name the host (hostname is [N/A]); give --node NAME")
        _account(con, run)
        _stage(con, cluster)
        store.write_rows(con, run, "nvidia-smi", opts)
        for t in ("_lines", "_smi"):
            con.execute(f"DROP TABLE IF EXISTS {t}")
        con.execute("DROP VIEW IF EXISTS _pv")
    return store.summary(con, run)


def _account(con: duckdb.DuckDBPyConnection, run: warehouse.IngestRun) -> None:
    for reason, n, first in con.sql("""SELECT split_part(verdict, '|', 2), count(*), min(line_no) FROM _smi
                                        WHERE verdict LIKE 'skip|%' GROUP BY 1""").fetchall():
        run.skip(reason, n, first)
    run.rejected += con.execute("""
        INSERT INTO rejects SELECT ?, s.line_no, nullif(split_part(s.verdict, '|', 2), ''),
               substr(s.verdict, length(split_part(s.verdict, '|', 2)) + 9), l.line
        FROM _smi s JOIN _lines l USING (line_no) WHERE s.verdict LIKE 'reject|%'""", [run.run_id]).fetchall()[0][0]
    run.loaded += con.sql("SELECT count(*) FROM _smi WHERE verdict IS NULL").fetchall()[0][0]


def _stage(con: duckdb.DuckDBPyConnection, cluster: str) -> None:
    """Good lines -> the store's series (``_sv``) and readings (``_pv``) shapes."""
    metrics = [c for c in FIELDS]
    codes = {c: store.SAMPLE_COLS.index(c) for c in metrics}
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _sv AS
        SELECT (row_number() OVER ())::INTEGER AS sid, dense_rank() OVER (ORDER BY node, gpu)::INTEGER AS dev, *
        FROM (SELECT DISTINCT $cluster AS cluster, host AS node, idx::VARCHAR AS gpu, idx AS gpu_index,
                     NULL::INTEGER AS mig_instance, NULL::VARCHAR AS mig_profile, uuid, model,
                     NULL::VARCHAR AS hpc_job, NULL::VARCHAR AS pod, NULL::VARCHAR AS namespace,
                     NULL::VARCHAR AS container, m.metric, m.mcode
              FROM _smi, (VALUES {', '.join(f"('{c}', {codes[c]})" for c in metrics)}) m(metric, mcode)
              WHERE verdict IS NULL)""", {"cluster": cluster})
    cases = " ".join(f"WHEN {codes[c]} THEN s.{c}" for c in metrics)
    con.execute(f"""CREATE OR REPLACE TEMP VIEW _pv AS
        SELECT v.sid, v.dev, v.mcode, epoch_us(s.ts) AS us, CASE v.mcode {cases} END AS val
        FROM _smi s JOIN _sv v ON v.node = s.host AND v.gpu = s.idx::VARCHAR
             AND v.uuid IS NOT DISTINCT FROM s.uuid AND v.model IS NOT DISTINCT FROM s.model
        WHERE s.verdict IS NULL AND CASE v.mcode {cases} END IS NOT NULL""")


def ingest_path(con: duckdb.DuckDBPyConnection, path: str, opts: store.TelemetryOptions, fields: str | None = None,
                tz: str | None = None) -> dict:
    return ingest_bytes(con, read_file(path, "an nvidia-smi CSV file"), path, opts, fields=fields, tz=tz)
