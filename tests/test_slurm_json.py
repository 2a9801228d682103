"""ingest/slurm_json.py: what every Slurm JSON answer shares."""
import pytest

from ingest import slurm_json
from ingest.errors import InputError


def test_json_is_told_from_text_by_its_first_byte():
    assert slurm_json.looks_like_json(b"  \n{") and not slurm_json.looks_like_json(b"JobID|State\n")


def test_numbers_and_times_as_slurm_prints_them():
    assert slurm_json.number({"set": True, "infinite": False, "number": 7}) == 7 and slurm_json.number(7) == 7
    assert slurm_json.number({"set": False, "number": 0}) is None and slurm_json.number({"infinite": True}) is None
    assert slurm_json.utc_text(1796551200) == "2026-12-06T10:00:00" and slurm_json.utc_text(0) == "Unknown"
    assert slurm_json.utc_text("soon") == "not-a-time-str" and slurm_json.utc_text(10**30) == "not-a-time-int"
    assert slurm_json.list_text(["a", "b"]) == "a,b" and slurm_json.list_text(None) == ""


def test_records_and_the_cluster_of_an_answer():
    doc, items = slurm_json.records(b'{"nodes": [1], "meta": {"slurm": {"cluster": "hpc"}}}', "x", "nodes", "n")
    assert items == [1] and slurm_json.meta_cluster(doc) == "hpc"
    assert slurm_json.meta_cluster({"meta": []}) is None and slurm_json.meta_cluster({}) is None
    with pytest.raises(InputError, match=r"^x: JSON without a `nodes` list: not cmd \(a hint\)$"):
        slurm_json.records(b'{"sinfo": []}', "x", "nodes", "cmd", {"sinfo": " (a hint)"})
    with pytest.raises(InputError, match=r"^x: not JSON: "):
        slurm_json.records(b"{nope", "x", "nodes", "cmd")
