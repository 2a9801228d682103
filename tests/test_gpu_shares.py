"""Jobs on GPU shards (gres/shard) and MPS shares (gres/mps) count the part of a GPU their shares are on their nodes,
whichever of sacct and the node inventory is loaded first (ingest/gpu_shares.py)."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest import sacct, slurm_nodes, warehouse
from models.metrics import pending
from models.pipeline import refresh
from conftest import FIXTURES
from test_sacct import line

# inf01/inf03: 4 L4 in 64 shards (16 to a GPU); inf02: 4 A100 with 400 MPS units (100 to a GPU); gpu01: whole GPUs
SINFO = ("NODELIST|PARTITION|STATE|CPUS(A/I/O/T)|MEMORY|GRES|GRES_USED|REASON\n"
         "inf01|inf|mixed|8/56/0/64|512000|gpu:l4:4(S:0),shard:l4:64(S:0)|gpu:l4:0(IDX:N/A),shard:l4:12(0/16)|none\n"
         "inf02|inf|idle|0/64/0/64|512000|gpu:a100:4(S:0-1),mps:400(S:0-1)|gpu:a100:0(IDX:N/A)|none\n"
         "inf03|inf|idle|0/64/0/64|512000|gpu:l4:4,shard:64|gpu:l4:0(IDX:N/A)|none\n"
         "gpu01|a100|idle|0/64/0/64|512000|gpu:a100:8(S:0-1)|gpu:a100:0(IDX:N/A)|none\n")


REAL = FIXTURES / "slurm_shards"


def _job(jobid, tres, nodes="inf01", **kw):
    return line(jobid, cluster="lab", partition="inf", nodelist=nodes, nnodes=str(nodes.count(",") + 1),
                alloctres=f"billing=1,cpu=1,{tres},mem=8G,node=1", **kw)


SACCT = "\n".join([
    _job("7", "gres/gpu:a100=1,gres/gpu=1,gres/shard=4", "gpu01"),   # a whole GPU as well: that counts
    _job("8", "gres/shard=4"),                                       # 4 of 16: a quarter of a GPU
    _job("9", "gres/mps:a100=50", "inf02"),                          # typed entry only: 50 of 100
    _job("10", "gres/shard=40"),                                     # 2.5 GPUs: whole GPUs and a half
    _job("11", "gres/shard=8", "inf[01,03]"),                        # a quarter on each of two nodes
    _job("12", "gres/shard=16", "inf[01-02]"),                       # inf02 has no shards: not resolved
    _job("13", "gres/shard=2", "None assigned", start="Unknown", end="Unknown", elapsed="00:00:00",
         state="PENDING"),                                           # never started: holds nothing
])
#: job -> (ngpus, gpu_milli, {node: gpus_on_node}), by hand from the shares above
EXPECTED = {"7": (1.0, None, {"gpu01": 1.0}), "8": (0.25, 250, {"inf01": 0.25}), "9": (0.5, 500, {"inf02": 0.5}),
            "10": (2.5, None, {"inf01": 2.5}), "11": (0.5, 250, {"inf01": 0.25, "inf03": 0.25}),
            "12": (0.0, None, {"inf01": 0.0, "inf02": 0.0}), "13": (0.0, None, {})}


def _stored(con) -> dict:
    rows = con.sql("""SELECT job_id, ngpus, gpu_milli, list(node ORDER BY node), list(gpus_on_node ORDER BY node)
                      FROM jobs LEFT JOIN job_nodes USING (job_uid) GROUP BY ALL""").fetchall()
    return {j: (g, m, {n: x for n, x in zip(nodes, on) if n is not None}) for j, g, m, nodes, on in rows}


def _sacct(con, text=SACCT):
    return sacct.ingest_bytes(con, text.encode(), "shares.psv", sacct.SacctOptions())


def test_inventory_first_then_accounting(con):
    slurm_nodes.ingest_bytes(con, SINFO.encode(), "sinfo.psv", cluster="lab")
    s = _sacct(con)
    assert _stored(con) == EXPECTED
    assert s["notes"] == [
        "4 jobs on GPU shards or MPS shares (gres/shard, gres/mps) and no whole GPU counted as the part of a GPU "
        "their shares are on their nodes (first: 8: 0.25 GPU; sreport's gres/gpu counts them as 0)",
        "1 job (first: 12) on GPU shards or MPS shares count 0 GPUs for now: its nodes' shares per GPU are not in "
        "the inventory (load it with `gpuledger ingest nodes` and they are resolved then)"]
    again = _sacct(con)
    assert (again["inserted"], again["updated"]) == (0, 0) and _stored(con) == EXPECTED


def test_accounting_first_then_inventory_resolves_the_stored_jobs(con):
    s = _sacct(con)
    assert s["notes"][-1].startswith("5 jobs (first: 8) on GPU shards or MPS shares count 0 GPUs for now: their")
    assert {j: v[0] for j, v in _stored(con).items()} == {"7": 1.0, **{j: 0.0 for j in "8 9 10 11 12 13".split()}}
    n = slurm_nodes.ingest_bytes(con, SINFO.encode(), "sinfo.psv", cluster="lab")
    assert _stored(con) == EXPECTED
    assert n["notes"][-1] == ("3 nodes offer GPUs shared among jobs (mps, shard): a job holding only mps or shard "
                              "counts its shares over the node's shares per GPU (sreport's gres/gpu counts it as 0); "
                              "4 stored jobs on them resolved")
    run = con.sql("SELECT max(run_id) FROM ingest_runs WHERE source = 'nodes'").fetchall()[0][0]
    assert con.sql(f"SELECT job_id FROM jobs WHERE updated_run_id = {run} ORDER BY job_id").fetchall() == [
        ("10",), ("11",), ("8",), ("9",)]
    again = _sacct(con)      # the file again, now that the inventory is known: nothing changes
    assert (again["inserted"], again["updated"]) == (0, 0) and _stored(con) == EXPECTED


def test_the_inventory_valid_when_the_job_started_sets_the_share(con):
    """inf01 goes from 16 shards a GPU to 8 on 2026-03-02: a job started before counts 4 shards as 0.25 GPU, one
    started after as 0.5 (a job that started before the first listing takes the node's first known inventory)."""
    slurm_nodes.ingest_bytes(con, SINFO.encode(), "sinfo.psv", cluster="lab", as_of="2026-02-01T00:00:00")
    slurm_nodes.ingest_bytes(con, SINFO.replace("shard:l4:64", "shard:l4:32").encode(), "sinfo2.psv", cluster="lab",
                             as_of="2026-03-02T00:00:00")
    _sacct(con, "\n".join([
        _job("20", "gres/shard=4", submit="2026-01-05T10:00:00", start="2026-01-05T10:05:00",
             end="2026-01-05T11:05:00", elapsed="01:00:00"),
        _job("21", "gres/shard=4", submit="2026-03-01T10:00:00", start="2026-03-01T23:59:59",
             end="2026-03-02T01:00:00", elapsed="01:00:01"),
        _job("22", "gres/shard=4", submit="2026-03-02T10:00:00", start="2026-03-02T10:00:01",
             end="2026-03-02T11:00:00", elapsed="00:59:59")]))
    assert {j: (g, m) for j, (g, m, _) in _stored(con).items()} == {
        "20": (0.25, 250), "21": (0.25, 250), "22": (0.5, 500)}


def test_pending_demand_counts_what_a_share_job_asked_for(con, db_path):
    """The real Slurm's job 2 asked for 12 of gpu03's shards (8 a GPU) and was cancelled while pending: 1.5 GPUs
    waiting from the data start (the first job's start, 09:30:05) to its end (09:30:10), as bob's wait."""
    slurm_nodes.ingest_bytes(con, (REAL / "sinfo-gres.psv").read_bytes(), "sinfo-gres.psv", cluster="glcluster")
    sacct.ingest_bytes(con, (REAL / "sacct-allocations.psv").read_bytes(), "sacct.psv", sacct.SacctOptions())
    refresh.run(con, db_path, publish=False)
    waits = pending.by_reason(con, by="user")
    assert waits.filter(pl.col("user") == "bob")["eligible_gpu_h"].to_list() == [pytest.approx(1.5 * 5 / 3600)]


def test_the_timeline_counts_the_part_of_the_gpu(con, db_path):
    """Through the refresh: a quarter of a GPU for 2 h is 0.5 GPU-hours allocated on inf01, held as 250 milli-GPU."""
    slurm_nodes.ingest_bytes(con, SINFO.encode(), "sinfo.psv", cluster="lab", as_of="2026-03-01T00:00:00")
    _sacct(con, _job("8", "gres/shard=4"))
    refresh.run(con, db_path, publish=False)
    got = con.sql("""SELECT node, sum(gpus * epoch(t1 - t0)) / 3600, any_value(whole_gpus), any_value(frac_milli)
                     FROM tl_job_alloc GROUP BY node""").fetchall()
    assert got == [("inf01", pytest.approx(0.5), 0, 250)]


def _pending(jobid, tres, partition="inf"):
    return line(jobid, cluster="lab", partition=partition, nodelist="None assigned", start="Unknown", end="Unknown",
                elapsed="00:00:00", state="PENDING", reqtres=f"billing=1,cpu=1,{tres},mem=8G,node=1", alloctres="")


PENDING = "\n".join([
    _pending("30", "gres/shard=4"),                            # inf01 and inf03: 16 shards a GPU: 0.25
    _pending("31", "gres/mps=50"),                             # only inf02 offers MPS (100 a GPU): 0.5
    _pending("32", "gres/shard:l4=8", partition="a100,inf"),   # either partition: inf's shard nodes: 0.5
    _pending("33", "gres/shard=4", partition="a100"),          # gpu01 offers no shards: asks for 0 GPU
])


def _asked(con) -> dict:
    return dict(con.sql("SELECT job_id, req_gpus FROM jobs WHERE ngpus = 0 ORDER BY job_id").fetchall())


def test_jobs_not_started_ask_for_their_partitions_share_of_a_gpu(con):
    """A pending share job has no node: it asks for its shares over the shares per GPU of its partition's nodes
    offering that kind (it holds none: ngpus stays 0), in either order of ingestion."""
    slurm_nodes.ingest_bytes(con, SINFO.encode(), "sinfo.psv", cluster="lab")
    s = _sacct(con, PENDING)
    assert _asked(con) == {"30": 0.25, "31": 0.5, "32": 0.5, "33": None}
    assert s["notes"] == [
        "3 jobs never started on GPU shards or MPS shares counted as asking for the part of a GPU their shares are "
        "on their partition's nodes (first: 30: 0.25 GPU; pending demand counts them)",
        "1 job (first: 33) never started on GPU shards or MPS shares asks for 0 GPUs for now: its partition's nodes "
        "offering those shares are not in the inventory, or differ in shares per GPU (load it with `gpuledger "
        "ingest nodes` and they are resolved then)"]
    again = _sacct(con, PENDING)
    assert (again["inserted"], again["updated"]) == (0, 0)
    other = warehouse.connect(":memory:")
    _sacct(other, PENDING)
    assert _asked(other) == {j: None for j in ("30", "31", "32", "33")}
    n = slurm_nodes.ingest_bytes(other, SINFO.encode(), "sinfo.psv", cluster="lab")
    assert _asked(other) == _asked(con) and n["notes"][-1].endswith("; 3 stored jobs on them resolved")


def test_a_partition_whose_nodes_differ_in_shares_per_gpu_leaves_the_request_open(con):
    """inf03 at 8 shards a GPU beside inf01's 16: 4 shards may be a quarter or half a GPU, so no request is made
    up; MPS (inf02 alone) still resolves."""
    slurm_nodes.ingest_bytes(con, SINFO.replace("gpu:l4:4,shard:64", "gpu:l4:4,shard:32").encode(), "sinfo.psv",
                             cluster="lab")
    s = _sacct(con, PENDING)
    assert _asked(con) == {"30": None, "31": 0.5, "32": None, "33": None}
    assert s["notes"][-1].startswith("3 jobs (first: 30) never started on GPU shards or MPS shares ask for 0 GPUs")


@pytest.mark.parametrize("nodes_first", [True, False])
def test_real_slurm_shard_jobs_count_their_part_of_an_h100(con, nodes_first):
    """A real Slurm 22.05 offering gpu03's 4 H100 as 32 shards (tests/fixtures/slurm_shards/README.md): 8 shards
    to a GPU, so 4 shards are 0.5 GPU; the sinfo listing first, or sacct first and then `scontrol show node`."""
    def nodes():
        if nodes_first:
            return slurm_nodes.ingest_bytes(con, (REAL / "sinfo-gres.psv").read_bytes(), "sinfo-gres.psv",
                                            cluster="glcluster")
        return slurm_nodes.ingest_bytes(con, (REAL / "scontrol-show-node.txt").read_bytes(), "show-node.txt",
                                        cluster="glcluster")
    first = nodes() if nodes_first else None
    s = sacct.ingest_bytes(con, (REAL / "sacct-allocations.psv").read_bytes(), "sacct.psv", sacct.SacctOptions())
    n = first or nodes()
    assert _stored(con) == {"1": (0.5, 500, {"gpu03": 0.5}), "2": (0.0, None, {}), "3": (4.0, None, {"gpu03": 4.0}),
                            "4": (0.25, 250, {"gpu03": 0.25}), "5": (0.75, 750, {"gpu03": 0.75}),
                            "6": (1.0, None, {"gpu03": 1.0})}
    # GPU-seconds: 0.5 x 6 + 0.25 x 8 + 0.75 x 5 + 1 x 5 on shards (sreport's gres/gpu: none), 4 x 3 whole
    assert con.sql("SELECT sum(ngpus * elapsed_s) FROM jobs").fetchall()[0][0] == pytest.approx(13.75 + 12)
    resolved = "1 node offers GPUs shared among jobs (shard): a job holding only shard counts its shares over the "
    assert n["notes"][-1] == resolved + ("node's shares per GPU (sreport's gres/gpu counts it as 0)" + (
        "" if nodes_first else "; 5 stored jobs on them resolved"))   # 4 started, 1 pending
    assert s["notes"][0].startswith("4 jobs on GPU shards" if nodes_first else "4 jobs (first: 1) on GPU shards")
    # job 2 asked for 12 shards and was cancelled while pending: 1.5 H100 of demand for its 6 s in the queue
    assert con.sql("SELECT req_gpus FROM jobs WHERE job_id = '2'").fetchall() == [(1.5,)]


_node = st.tuples(st.integers(1, 8), st.sampled_from(["shard", "mps", None]), st.integers(1, 16))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nodes=st.lists(_node, min_size=1, max_size=4),
       jobs=st.lists(st.tuples(st.sampled_from(["shard", "mps"]), st.integers(1, 64), st.integers(0, 15)),
                     min_size=1, max_size=8))
def test_either_order_of_ingestion_stores_the_same_jobs(nodes, jobs):
    """Nodes of g GPUs offering k shares per GPU (or none), jobs of n shares on a subset of them: loading sacct
    before or after the inventory stores the same GPUs, each the shares over the nodes' shares per GPU; jobs
    that never started the same requests."""
    names = [f"n{i}" for i in range(len(nodes))]
    sinfo = "NODELIST|PARTITION|STATE|CPUS(A/I/O/T)|MEMORY|GRES|GRES_USED|REASON\n" + "".join(
        f"{n}|inf|idle|0/64/0/64|512000|gpu:l4:{g}{f',{kind}:{g * k}' if kind else ''}|gpu:l4:0|none\n"
        for n, (g, kind, k) in zip(names, nodes))
    lines, want, asked = [], {}, {}
    for i, (kind, n, mask) in enumerate(jobs):
        on = [x for b, x in enumerate(names) if mask >> b & 1] or names[:1]
        inv = [nodes[names.index(x)] for x in on]
        lines.append(_job(str(100 + i), f"gres/{kind}={n}", f"{on[0]}" if len(on) == 1 else ",".join(on)))
        ok = all(k2 == kind for _, k2, _ in inv)
        want[str(100 + i)] = n * sum(g for g, _, _ in inv) / sum(g * k for g, _, k in inv) if ok else 0.0
    # and a job of each kind that never started, in partition inf: n shares over the one shares-per-GPU (k) of
    # the nodes offering that kind, or no request where they differ or none offers it
    for job, kind in (("900", "shard"), ("901", "mps")):
        lines.append(_pending(job, f"gres/{kind}=8"))
        ks = {k for _, k2, k in nodes if k2 == kind}
        asked[job] = 8 / ks.pop() if len(ks) == 1 else None
    stored = []
    for first_nodes in (True, False):
        con = warehouse.connect(":memory:")
        steps = [lambda: slurm_nodes.ingest_bytes(con, sinfo.encode(), "sinfo.psv", cluster="lab",
                                                  as_of="2026-01-01T00:00:00"),
                 lambda: _sacct(con, "\n".join(lines))]
        for step in steps if first_nodes else steps[::-1]:
            step()
        stored.append((_stored(con), _asked(con)))
        con.close()
    assert stored[0] == stored[1]
    assert {j: v[0] for j, v in stored[0][0].items() if j in want} == pytest.approx(want)
    assert {j: stored[0][1][j] for j in asked} == pytest.approx(asked)
    stored = [s for s, _ in stored]
    for g, milli, on_node in stored[0].values():
        assert sum(on_node.values()) == pytest.approx(g)
        assert milli is None or milli == round(1000 * g / len(on_node))
