"""Hostile JSON through the three slurmrestd-shaped ingestors (nodes, squeue, reservations): whatever the values,
an input ends as one clear InputError or as a run whose records add up (loaded + skipped + rejected = read),
never another exception. Property tests (hypothesis) over records whose known keys hold anything JSON can."""
from __future__ import annotations

import datetime as dt
import json
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from ingest import reservations, slurm_nodes, squeue, warehouse
from ingest.errors import InputError

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63), st.floats(allow_nan=False),
                    st.text(max_size=12), st.sampled_from(["", "gpu:a100:4", "IDLE", "(null)", "1-3%2", "|", "a b"]))
_value = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(["set", "infinite", "number"]),
                                                                       inner, max_size=3)), max_leaves=6)
KEYS = {"nodes": ["name", "state", "state_flags", "gres", "gres_used", "cpus", "real_memory", "partitions",
                  "active_features", "reason", "reason_set_by_user", "reason_changed_at", "tres", "tres_used"],
        "jobs": ["job_id", "job_state", "state_reason", "array_job_id", "array_task_id", "array_task_string",
                 "het_job_id", "het_job_offset", "tres_per_node", "tres_alloc_str", "node_count", "submit_time",
                 "partition", "account", "user_name", "name", "cluster"],
        "reservations": ["name", "start_time", "end_time", "node_list", "tres", "users", "accounts", "flags"]}
AT = dt.datetime(2026, 12, 6, 10, 0)


def _records(kind: str):
    record = st.fixed_dictionaries({}, optional={k: _value for k in KEYS[kind]})
    return st.lists(st.one_of(record, record, record, _scalar), max_size=4)     # now and then not an object


def _load(con, kind: str, data: bytes) -> dict:
    if kind == "nodes":
        return slurm_nodes.ingest_bytes(con, data, "x.json", cluster="c1", as_of="2026-12-06T10:00:00")
    if kind == "jobs":
        return squeue.load(con, data, AT, "x.json", cluster="c1")
    return reservations.load(con, data, "x.json", cluster="c1")


def test_hostile_records_end_as_an_error_or_a_run_that_adds_up(tmp_path):
    con = warehouse.connect(tmp_path / "w.duckdb")       # one warehouse for every case, as the CLI's user has

    @settings(max_examples=int(os.environ.get("GPULEDGER_FUZZ_CASES", "100")), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(kind=st.sampled_from(sorted(KEYS)), data=st.data())
    def one(kind, data):
        records = data.draw(_records(kind))
        doc = json.dumps({kind: records, "meta": data.draw(st.one_of(st.none(), _value))}).encode()
        try:
            s = _load(con, kind, doc)
        except InputError as exc:
            assert "\n" not in str(exc)
            return
        assert s["read"] == s["loaded"] + s["skipped"] + s["rejected"]
        assert s["read"] >= len(records) if kind == "jobs" else s["read"] == len(records)

    try:
        one()
    finally:
        con.close()
