"""hostlist.expand / compress against Slurm's documented hostlist forms."""
import pytest
from hypothesis import given, strategies as st

from ingest.hostlist import HostlistError, compress, expand


@pytest.mark.parametrize("expr, hosts", [
    ("gpu01", ["gpu01"]),
    ("gpu[001-004,010]", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"]),
    ("d09n04s[01-02],d09n05s02", ["d09n04s01", "d09n04s02", "d09n05s02"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ("compute-[0-2]", ["compute-0", "compute-1", "compute-2"]),
    ("cpn-k16-35-01,cpn-k16-37-01", ["cpn-k16-35-01", "cpn-k16-37-01"]),
    ("d13n[03,05,07-08,16]", ["d13n03", "d13n05", "d13n07", "d13n08", "d13n16"]),
    ("node[8-10]", ["node8", "node9", "node10"]),
    ("None assigned", []), ("(null)", []), ("", []), (None, []),
])
def test_expand(expr, hosts):
    assert expand(expr) == hosts


@pytest.mark.parametrize("bad", ["gpu[01-", "gpu]01[", "gpu[a-b]", "gpu[5-3]"])
def test_expand_rejects_malformed(bad):
    with pytest.raises(HostlistError):
        expand(bad)


def test_compress_examples():
    assert compress(["gpu01", "gpu02", "gpu04", "login"]) == "gpu[01-02,04],login"
    assert compress(["a1"]) == "a1"


@given(st.lists(st.integers(0, 300), min_size=1, max_size=40, unique=True), st.sampled_from(["gpu", "n", "rack1-n"]),
       st.sampled_from([0, 3]))
def test_compress_then_expand_roundtrips(nums, prefix, width):
    hosts = [f"{prefix}{str(n).zfill(width)}" for n in sorted(nums)]
    assert expand(compress(hosts)) == hosts
