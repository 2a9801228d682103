"""SQL macros that read Slurm's text forms, so parsing runs vectorised inside DuckDB.

Each macro returns NULL both for Slurm's "no value" tokens and for text it cannot read; callers tell the
two apart with :data:`NULL_TOKENS` (``gl_is_null_token``) and reject the line naming the field.
Register them on a connection with :func:`register` (temporary macros, per connection).
"""
from __future__ import annotations

import weakref

import duckdb

#: What Slurm prints for "no value" in time, duration and count fields.
NULL_TOKENS = ("", "Unknown", "None", "N/A", "n/a", "(null)", "INVALID")

#: Normalised job states (sacct long names) and the short codes squeue/sacct -X may print.
JOB_STATES = (
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "REVOKED", "SPECIAL_EXIT", "STOPPED", "SIGNALING", "STAGE_OUT",
    "CONFIGURING", "RESV_DEL_HOLD", "LAUNCH_FAILED", "POWER_UP_NODE", "UPDATE_DB", "RECONFIG_FAIL",
)
STATE_CODES = {
    "PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CG": "COMPLETING", "CD": "COMPLETED",
    "CA": "CANCELLED", "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED",
    "BF": "BOOT_FAIL", "DL": "DEADLINE", "OOM": "OUT_OF_MEMORY", "RQ": "REQUEUED", "RV": "REVOKED",
    "SE": "SPECIAL_EXIT", "ST": "STOPPED", "RS": "RESIZING", "CF": "CONFIGURING", "SO": "STAGE_OUT",
    "RH": "REQUEUE_HOLD", "RF": "REQUEUE_FED", "SI": "SIGNALING",
}
#: States after which the job instance can no longer change.
FINAL_STATES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                "DEADLINE", "OUT_OF_MEMORY", "REQUEUED", "REVOKED", "SPECIAL_EXIT", "LAUNCH_FAILED",
                "RECONFIG_FAIL")
#: States of a job that has not started.
WAITING_STATES = ("PENDING", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD")


def _sql_list(values) -> str:
    return "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


def macros() -> list[str]:
    """The macro definitions. Arguments are referenced directly (never a nested macro call on an argument),
    because DuckDB inlines macros textually: nesting multiplies the expression tree and its planning time."""
    null_tokens = ", ".join(_sql_list(NULL_TOKENS)[1:-1].split(", "))
    states = ", ".join(_sql_list(JOB_STATES)[1:-1].split(", "))
    codes = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in STATE_CODES.items())
    waiting = _sql_list(WAITING_STATES)[1:-1]
    final = _sql_list(FINAL_STATES)[1:-1]
    return [
        f"CREATE OR REPLACE TEMP MACRO gl_is_null_token(s) AS (s IS NULL OR trim(s) IN ({null_tokens}))",
        # Times: ISO local (interpreted in zone tz), ISO with an offset, or epoch seconds. The date and time may
        # be parted by a space: sites set SLURM_TIME_FORMAT="%Y-%m-%d %H:%M:%S" (and "%s" for epoch seconds).
        """CREATE OR REPLACE TEMP MACRO gl_ts(s, tz) AS (
            CASE
              WHEN length(s) = 19 AND s[11] = 'T' THEN
                CASE WHEN tz = 'UTC' THEN try_strptime(s, '%Y-%m-%dT%H:%M:%S')
                     ELSE timezone('UTC', timezone(tz, try_strptime(s, '%Y-%m-%dT%H:%M:%S'))) END
              WHEN length(s) > 19 AND s[11] = 'T' THEN
                timezone('UTC', try_strptime(replace(s, 'Z', '+0000'), '%Y-%m-%dT%H:%M:%S%z'))
              WHEN length(s) = 19 AND s[11] = ' ' THEN
                CASE WHEN tz = 'UTC' THEN try_strptime(s, '%Y-%m-%d %H:%M:%S')
                     ELSE timezone('UTC', timezone(tz, try_strptime(s, '%Y-%m-%d %H:%M:%S'))) END
              WHEN length(s) > 19 AND s[11] = ' ' THEN
                timezone('UTC', try_strptime(replace(s, 'Z', '+0000'), '%Y-%m-%d %H:%M:%S%z'))
              WHEN length(s) BETWEEN 2 AND 12 AND regexp_full_match(s, '[0-9]+') THEN make_timestamp(s::BIGINT * 1000000)
              ELSE NULL
            END)""",
        # Durations: [D-][HH:]MM:SS[.mmm]. String slicing, not regular expressions: this runs on every line.
        # Lengths are bounded so that no digit string can overflow BIGINT (one line must not fail the query).
        """CREATE OR REPLACE TEMP MACRO gl_hms(r) AS (
            CASE WHEN length(r) = 8 AND r[3] = ':' AND r[6] = ':'
                   THEN try_cast(r[1:2] AS BIGINT) * 3600 + try_cast(r[4:5] AS BIGINT) * 60 + try_cast(r[7:8] AS BIGINT)
                 WHEN length(r) > 16 THEN NULL
                 WHEN length(r) - length(replace(r, ':', '')) = 2
                   THEN try_cast(split_part(r, ':', 1) AS BIGINT) * 3600 + try_cast(split_part(r, ':', 2) AS BIGINT) * 60
                        + try_cast(round(try_cast(split_part(r, ':', 3) AS DOUBLE)) AS BIGINT)
                 WHEN length(r) - length(replace(r, ':', '')) = 1
                   THEN try_cast(split_part(r, ':', 1) AS BIGINT) * 60
                        + try_cast(round(try_cast(split_part(r, ':', 2) AS DOUBLE)) AS BIGINT)
            END)""",
        """CREATE OR REPLACE TEMP MACRO gl_dur(s) AS (
            CASE WHEN strpos(s, '-') > 9 THEN NULL
                 WHEN strpos(s, '-') > 0 THEN try_cast(s[1:strpos(s, '-') - 1] AS BIGINT) * 86400
                                              + gl_hms(s[strpos(s, '-') + 1:])
                 ELSE gl_hms(s) END)""",
        # "no number" forms of a duration: a NULL from gl_dur on anything else is unreadable text
        f"""CREATE OR REPLACE TEMP MACRO gl_dur_is_none(s) AS (
            s IS NULL OR trim(s) IN ({null_tokens}, 'UNLIMITED', 'Partition_Limit', 'NONE'))""",
        # split_part() builds a list per row; these slice by position instead (hot path)
        """CREATE OR REPLACE TEMP MACRO gl_before(s, sep) AS (
            CASE WHEN strpos(s, sep) > 0 THEN substr(s, 1, strpos(s, sep) - 1) ELSE s END)""",
        """CREATE OR REPLACE TEMP MACRO gl_after(s, sep) AS (
            CASE WHEN strpos(s, sep) > 0 THEN substr(s, strpos(s, sep) + length(sep)) END)""",
        # TRES strings: billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=16000M,node=1. u is ',' || tres || ','
        """CREATE OR REPLACE TEMP MACRO gl_tres_val(u, key) AS (
            nullif(gl_before(gl_after(u, ',' || key || '='), ','), ''))""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_get(t, key) AS (gl_tres_val(',' || t || ',', key))""",
        # Typed entries (gres/gpu:a100=2): one is the common case and needs no regular expression.
        """CREATE OR REPLACE TEMP MACRO gl_tres_ntyped(t) AS ((length(t) - length(replace(t, 'gres/gpu:', ''))) // 9)""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_typed_sum(t, n) AS (
            CASE n WHEN 0 THEN NULL
                   WHEN 1 THEN try_cast(gl_before(gl_after(gl_after(t, 'gres/gpu:'), '='), ',') AS DOUBLE)
                   ELSE list_sum(list_transform(regexp_extract_all(t, '(?:^|,)gres/gpu:[^=,]+=([0-9.]+)', 1),
                                                lambda x: try_cast(x AS DOUBLE))) END)""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_type(t, n) AS (
            CASE n WHEN 0 THEN NULL
                   WHEN 1 THEN nullif(gl_before(gl_after(t, 'gres/gpu:'), '='), '')
                   ELSE nullif(array_to_string(list_sort(list_distinct(
                          regexp_extract_all(t, '(?:^|,)gres/gpu:([^=,]+)=[0-9.]+', 1))), '+'), '') END)""",
        # 3000M, 320.5G, 512K; a bare number is MB (Slurm's TRES unit for memory); NULL beyond BIGINT
        """CREATE OR REPLACE TEMP MACRO gl_mem_bytes(v) AS (
            CASE WHEN strpos('KMGTPkmgtp', right(v, 1)) > 0
                   THEN try_cast(try_cast(v[1:-2] AS DOUBLE) * power(1024, strpos('KMGTP', upper(right(v, 1)))) AS BIGINT)
                 ELSE try_cast(try_cast(v AS DOUBLE) * 1048576 AS BIGINT) END)""",
        # ReqMem: 3000Mc (per CPU), 48000Mn (per node), 32G (per node in Slurm >= 21.08); a is the text
        # without its c/n suffix, per is 'c', 'n' or ''
        """CREATE OR REPLACE TEMP MACRO gl_reqmem(a, per, ncpus, nnodes) AS (
            try_cast(gl_mem_bytes(a) * CASE per WHEN 'c' THEN greatest(coalesce(ncpus, 1), 1)::DOUBLE
                                                WHEN 'n' THEN greatest(coalesce(nnodes, 1), 1)::DOUBLE ELSE 1.0 END
                     AS BIGINT))""",
        """CREATE OR REPLACE TEMP MACRO gl_state_base(s) AS (
            rtrim(upper(CASE WHEN strpos(trim(s), ' ') > 0 THEN trim(s)[1:strpos(trim(s), ' ') - 1] ELSE trim(s) END), '+'))""",
        f"""CREATE OR REPLACE TEMP MACRO gl_state_of(b) AS (
            CASE WHEN b IN ({states}) THEN b ELSE CASE b {codes} ELSE 'UNKNOWN' END END)""",
        """CREATE OR REPLACE TEMP MACRO gl_state(s) AS (gl_state_of(gl_state_base(s)))""",
        f"""CREATE OR REPLACE TEMP MACRO gl_state_rank(st) AS (
            CASE WHEN st IN ({waiting}) THEN 0 WHEN st IN ({final}) THEN 2 ELSE 1 END)""",
        # convenience forms for small inputs (events, traces): not for the hot path
        """CREATE OR REPLACE TEMP MACRO gl_tres_gpus(t) AS (
            coalesce(try_cast(gl_tres_get(t, 'gres/gpu') AS DOUBLE), gl_tres_typed_sum(t, gl_tres_ntyped(t)), 0))""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_gpu_type(t) AS (gl_tres_type(t, gl_tres_ntyped(t)))""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_mem(t) AS (gl_mem_bytes(gl_tres_get(t, 'mem')))""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_num(t, key) AS (try_cast(gl_tres_get(t, key) AS DOUBLE))""",
    ]


#: Connections whose macros are created and committed. Asking the catalog (`duckdb_functions()`, 3,000 rows)
#: takes about 20 ms, and every sacct or events ingest asks; a probe call that fails would abort an open
#: transaction.
_REGISTERED: weakref.WeakSet = weakref.WeakSet()


def _in_transaction(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether an explicit transaction is open: under autocommit each statement has a transaction id of its own."""
    return con.execute("SELECT txid_current()").fetchall() == con.execute("SELECT txid_current()").fetchall()


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Create the gl_* macros on this connection, once (they are temporary: per connection). Macros created
    inside an open transaction are not remembered, since a rollback would drop them."""
    if con in _REGISTERED:
        return
    if not con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'gl_tres_num' "
                       "AND schema_name = 'main' AND database_name = 'temp'").fetchall()[0][0]:
        for sql in macros():
            con.execute(sql)
    if not _in_transaction(con):
        _REGISTERED.add(con)
