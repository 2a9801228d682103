"""SQL macros that read Slurm's text forms, so parsing runs vectorised inside DuckDB.

Each macro returns NULL both for Slurm's "no value" tokens and for text it cannot read; callers tell the
two apart with :data:`NULL_TOKENS` (``gl_is_null_token``) and reject the line naming the field.
Register them on a connection with :func:`register` (temporary macros, per connection).
"""
from __future__ import annotations

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
    null_tokens = _sql_list(NULL_TOKENS)
    states = _sql_list(JOB_STATES)
    codes_k = _sql_list(STATE_CODES.keys())
    codes_v = _sql_list(STATE_CODES.values())
    unit = "CASE upper({u}) WHEN 'K' THEN 1024 WHEN 'M' THEN 1048576 WHEN 'G' THEN 1073741824 " \
           "WHEN 'T' THEN 1099511627776 WHEN 'P' THEN 1125899906842624 ELSE NULL END"
    return [
        f"CREATE OR REPLACE TEMP MACRO gl_is_null_token(s) AS (s IS NULL OR list_contains({null_tokens}, trim(s)))",
        # Times: ISO local (interpreted in zone tz), ISO with an offset, or epoch seconds.
        f"""CREATE OR REPLACE TEMP MACRO gl_ts(s, tz) AS (
            CASE
              WHEN gl_is_null_token(s) OR s = '0' THEN NULL
              WHEN length(s) = 19 AND s[11] = 'T' THEN
                CASE WHEN tz = 'UTC' THEN try_strptime(s, '%Y-%m-%dT%H:%M:%S')
                     ELSE timezone('UTC', timezone(tz, try_strptime(s, '%Y-%m-%dT%H:%M:%S'))) END
              WHEN length(s) > 19 AND s[11] = 'T' THEN
                timezone('UTC', try_strptime(replace(s, 'Z', '+0000'), '%Y-%m-%dT%H:%M:%S%z'))
              WHEN regexp_full_match(s, '[0-9]{{1,12}}') THEN make_timestamp(s::BIGINT * 1000000)
              ELSE NULL
            END)""",
        # Durations: [D-][HH:]MM:SS[.mmm]; UNLIMITED and Partition_Limit mean "no number".
        """CREATE OR REPLACE TEMP MACRO gl_dur_parts(s) AS (
            regexp_extract(trim(s), '^(?:([0-9]+)-)?(?:([0-9]+):)?([0-9]+):([0-9]+(?:[.][0-9]+)?)$', ['d', 'h', 'm', 's']))""",
        """CREATE OR REPLACE TEMP MACRO gl_dur_from_parts(p) AS (
            CASE WHEN p.s = '' THEN NULL ELSE
              coalesce(try_cast(nullif(p.d, '') AS BIGINT), 0) * 86400
              + coalesce(try_cast(nullif(p.h, '') AS BIGINT), 0) * 3600
              + try_cast(p.m AS BIGINT) * 60
              + round(try_cast(p.s AS DOUBLE))::BIGINT END)""",
        """CREATE OR REPLACE TEMP MACRO gl_dur(s) AS (
            CASE WHEN gl_is_null_token(s) OR trim(s) IN ('UNLIMITED', 'Partition_Limit', 'NONE') THEN NULL
                 ELSE gl_dur_from_parts(gl_dur_parts(s)) END)""",
        """CREATE OR REPLACE TEMP MACRO gl_dur_ok(s) AS (
            gl_is_null_token(s) OR trim(s) IN ('UNLIMITED', 'Partition_Limit', 'NONE') OR gl_dur(s) IS NOT NULL)""",
        # TRES strings: billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=16000M,node=1
        """CREATE OR REPLACE TEMP MACRO gl_tres_gpus(t) AS (
            coalesce(try_cast(nullif(regexp_extract(t, '(?:^|,)gres/gpu=([0-9.]+)', 1), '') AS DOUBLE),
                     list_sum(list_transform(regexp_extract_all(t, '(?:^|,)gres/gpu:[^=,]+=([0-9.]+)', 1),
                                             lambda x: x::DOUBLE)),
                     0))""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_gpu_type(t) AS (
            nullif(array_to_string(list_sort(list_distinct(
                regexp_extract_all(t, '(?:^|,)gres/gpu:([^=,]+)=[0-9.]+', 1))), '+'), ''))""",
        f"""CREATE OR REPLACE TEMP MACRO gl_tres_mem(t) AS (
            CASE WHEN regexp_extract(t, '(?:^|,)mem=([0-9.]+)', 1) = '' THEN NULL ELSE
              (regexp_extract(t, '(?:^|,)mem=([0-9.]+)', 1)::DOUBLE *
               {unit.format(u="coalesce(nullif(regexp_extract(t, '(?:^|,)mem=[0-9.]+([KMGTPkmgtp])', 1), ''), 'M')")})::BIGINT
            END)""",
        """CREATE OR REPLACE TEMP MACRO gl_tres_num(t, key) AS (
            try_cast(nullif(regexp_extract(t, '(?:^|,)' || key || '=([0-9.]+)', 1), '') AS DOUBLE))""",
        # ReqMem: 3000Mc (per CPU), 48000Mn (per node), 32G (per node in Slurm >= 21.08)
        f"""CREATE OR REPLACE TEMP MACRO gl_reqmem(s, ncpus, nnodes) AS (
            CASE WHEN gl_is_null_token(s) OR NOT regexp_full_match(trim(s), '[0-9.]+[KMGTPkmgtp]?[cn]?') THEN NULL ELSE
              (regexp_extract(s, '^([0-9.]+)', 1)::DOUBLE
               * {unit.format(u="coalesce(nullif(regexp_extract(s, '^[0-9.]+([KMGTPkmgtp])', 1), ''), 'M')")}
               * CASE WHEN s LIKE '%c' THEN greatest(coalesce(ncpus, 1), 1)
                      WHEN s LIKE '%n' THEN greatest(coalesce(nnodes, 1), 1) ELSE 1 END)::BIGINT
            END)""",
        f"""CREATE OR REPLACE TEMP MACRO gl_state(s) AS (
            CASE
              WHEN list_contains({states}, rtrim(upper(split_part(trim(s), ' ', 1)), '+'))
                THEN rtrim(upper(split_part(trim(s), ' ', 1)), '+')
              WHEN list_contains({codes_k}, upper(trim(s)))
                THEN {codes_v}[list_position({codes_k}, upper(trim(s)))]
              ELSE 'UNKNOWN'
            END)""",
        f"""CREATE OR REPLACE TEMP MACRO gl_state_rank(st) AS (
            CASE WHEN list_contains({_sql_list(WAITING_STATES)}, st) THEN 0
                 WHEN list_contains({_sql_list(FINAL_STATES)}, st) THEN 2
                 ELSE 1 END)""",
    ]


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Create the gl_* macros on this connection (idempotent)."""
    for sql in macros():
        con.execute(sql)
