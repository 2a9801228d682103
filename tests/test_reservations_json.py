"""`gpuledger ingest reservations` of slurmrestd's /slurm/v0.0.XX/reservations, loaded as the scontrol listing."""
import datetime as dt
import json

from conftest import FIXTURES
from ingest import reservations, reservations_json

SAMPLE = FIXTURES / "slurmrestd" / "slurmweb-25.11-v0.0.42-slurm-reservations.json"


def test_slurmrestd_reservations_of_25_11(con):
    """v0.0.42: times as objects (1763216916 = 2025-11-15T14:28:36Z, a day long), flags a list, the owner's users
    and accounts, the cluster from meta; cpu=256 only, so its GPUs are its nodes' (models/metrics/reservations)."""
    s = reservations.load(con, SAMPLE.read_bytes(), "resv.json")
    assert (s["read"], s["read_as"], s["loaded"], s["rejected"]) == (1, "reservation records", 1, 0)
    got = con.sql("""SELECT cluster, name, start, "end", nodes, gpus, users, accounts, flags FROM reservations""")
    assert got.fetchall() == [("hpc", "training", dt.datetime(2025, 11, 15, 14, 28, 36),
                               dt.datetime(2025, 11, 16, 14, 28, 36), "cn1,cn2,cn3,cn4", None, "acuevas,acuevas",
                               "acoustic", "IGNORE_JOBS,ANY_NODES,PART_NODES,SPEC_NODES,FLEX")]


def test_v0_0_38_numbers_gpus_and_an_unreadable_record(con):
    doc = {"reservations": [
        {"name": "maint window", "start_time": 1796551200, "end_time": 1796558400, "node_list": "gpu[01-02]",
         "tres": "cpu=64,gres/gpu=8", "users": "root", "accounts": "", "flags": "MAINT,SPEC_NODES"},
        {"start_time": 1796551200}]}
    lines, cluster = reservations_json.to_scontrol_lines(json.dumps(doc).encode(), "r.json")
    assert cluster is None and lines[0].startswith("ReservationName=maint_window StartTime=2026-12-06T10:00:00 ")
    s = reservations.load(con, json.dumps(doc).encode(), "r.json", cluster="c1")
    assert (s["loaded"], s["rejected"]) == (1, 1)
    assert s["reject_examples"][0].startswith("r.json:2: field Name: no reservation name")
    got = con.sql("SELECT cluster, name, nodes, gpus, accounts, flags FROM reservations").fetchall()
    assert got == [("c1", "maint_window", "gpu01,gpu02", 8.0, None, "MAINT,SPEC_NODES")]
