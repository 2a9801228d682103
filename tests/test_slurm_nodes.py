"""`gpuledger ingest nodes`: scontrol and sinfo forms, gres parsing, validity periods."""
import datetime as dt

import pytest

from conftest import FIXTURES, shared_path
from ingest import slurm_nodes
from ingest.errors import InputError
from ingest.slurm_nodes import normalise_state, parse_gres

SCONTROL_O = (
    "NodeName=gpu01 Arch=x86_64 CoresPerSocket=16 CPUAlloc=16 CPUTot=64 Gres=gpu:a100:8(S:0-1) GresUsed=gpu:a100:4(IDX:0-3) "
    "RealMemory=512000 State=MIXED Partitions=a100,all CfgTRES=cpu=64,mem=500G,billing=64,gres/gpu=8 "
    "AllocTRES=cpu=16,gres/gpu=4\n"
    "NodeName=gpu02 Arch=x86_64 CPUTot=64 Gres=gpu:a100:8 RealMemory=512000 State=IDLE+DRAIN Partitions=a100 "
    "Reason=fake XID 79: GPU fell off the bus [root@2026-12-02T10:37:42]\n"
    "NodeName=gpu03 Arch=x86_64 CPUTot=32 Gres=gpu:h100:4 RealMemory=256000 State=DOWN* Partitions=h100\n"
)


@pytest.mark.parametrize("gres, gpus, gtype", [
    ("gpu:a100:4(S:0-3),nsight:no_consume:1,pfsdir:scratch:no_consume:1", 4, "a100"),
    ("gpu:tesla:2(S:0-1),gpu:kepler:2(S:0-1)", 4, "kepler+tesla"),
    ("gpu:4,shard:20", 4, None), ("gpu:quadro:1(S:0),vmem:2G", 1, "quadro"), ("(null)", 0, None),
    ("gpu:nvidia_rtx_pro_6000_blackwell_server_edition:8(S:0-1)", 8, "nvidia_rtx_pro_6000_blackwell_server_edition"),
    ("gpu:2(S:1)", 2, None), ("gpu:a100:3(S:2,4,7),vis:no_consume:1", 3, "a100"),
])
def test_parse_gres(gres, gpus, gtype):
    assert parse_gres(gres) == (gpus, gtype)


@pytest.mark.parametrize("raw, state", [
    ("MIXED", "MIXED"), ("mixed+drain", "DRAIN"), ("idle*", "DOWN"), ("drng", "DRAIN"), ("IDLE+DRAIN", "DRAIN"),
    ("alloc", "ALLOCATED"), ("down*", "DOWN"), ("maint", "MAINT"), ("mixed-", "MIXED"), ("idle#", "IDLE"),
    ("MIXED+DRAIN", "DRAIN"), ("ALLOCATED+COMPLETING", "ALLOCATED"), ("idle~", "IDLE"),
])
def test_states(raw, state):
    assert normalise_state(raw) == state


def test_scontrol_one_line_snapshot(con):
    s = slurm_nodes.ingest_bytes(con, SCONTROL_O.encode(), "nodes.txt", cluster="lab", as_of="2026-12-01T00:00:00")
    assert (s["read"], s["loaded"], s["inserted"]) == (3, 3, 3)
    assert con.sql("SELECT node, partitions, gpu_type, gpus, cpus, mem_bytes, valid_from, valid_to FROM nodes "
                   "ORDER BY node").fetchall() == [
        ("gpu01", "a100,all", "a100", 8, 64, 512000 * 2 ** 20, None, None),
        ("gpu02", "a100", "a100", 8, 64, 512000 * 2 ** 20, None, None),
        ("gpu03", "h100", "h100", 4, 32, 256000 * 2 ** 20, None, None)]
    assert con.sql("SELECT node, state, gpus_alloc, reason FROM node_states ORDER BY node").fetchall() == [
        ("gpu01", "MIXED", 4, None), ("gpu02", "DRAIN", None, "fake XID 79: GPU fell off the bus [root@2026-12-02T10:37:42]"),
        ("gpu03", "DOWN", None, None)]


def test_validity_periods_follow_changes(con):
    slurm_nodes.ingest_bytes(con, SCONTROL_O.encode(), "a", cluster="lab", as_of="2026-11-01T00:00:00")
    grown = SCONTROL_O.replace("gpu:h100:4", "gpu:h100:8") + \
        "NodeName=gpu04 CPUTot=32 Gres=gpu:h100:8 RealMemory=256000 State=IDLE Partitions=h100\n"
    s = slurm_nodes.ingest_bytes(con, grown.encode(), "b", cluster="lab", as_of="2026-11-15T00:00:00")
    assert (s["inserted"], s["updated"], s["unchanged"]) == (1, 1, 2)
    rows = con.sql("SELECT node, gpus, valid_from, valid_to FROM nodes WHERE node IN ('gpu03', 'gpu04') "
                   "ORDER BY node, valid_from NULLS FIRST").fetchall()
    t = dt.datetime(2026, 11, 15)
    assert rows == [("gpu03", 4, None, t), ("gpu03", 8, t, None), ("gpu04", 8, t, None)]
    # capacity on any date comes from the validity periods
    def capacity(day):
        return con.execute("SELECT sum(gpus) FROM nodes WHERE (valid_from IS NULL OR valid_from <= ?) "
                           "AND (valid_to IS NULL OR valid_to > ?)", [day, day]).fetchall()[0][0]
    assert capacity(dt.datetime(2026, 10, 1)) == 20 and capacity(dt.datetime(2026, 11, 20)) == 32
    # re-ingesting the same snapshot changes nothing; an older one is refused
    s = slurm_nodes.ingest_bytes(con, grown.encode(), "b", cluster="lab", as_of="2026-11-15T00:00:00")
    assert (s["inserted"], s["updated"]) == (0, 0)
    with pytest.raises(Exception, match="time order"):
        slurm_nodes.ingest_bytes(con, SCONTROL_O.encode(), "old", cluster="lab", as_of="2026-11-02T00:00:00")


def test_retire_missing_nodes(con):
    slurm_nodes.ingest_bytes(con, SCONTROL_O.encode(), "a", cluster="lab", as_of="2026-11-01T00:00:00")
    only_two = "\n".join(SCONTROL_O.splitlines()[:2]) + "\n"
    slurm_nodes.ingest_bytes(con, only_two.encode(), "b", cluster="lab", as_of="2026-11-10T00:00:00", retire_missing=True)
    assert con.sql("SELECT valid_to FROM nodes WHERE node = 'gpu03'").fetchall() == [(dt.datetime(2026, 11, 10),)]


def test_multi_line_scontrol_from_a_real_site(con):
    path = shared_path("samples", "scontrol_node", "irush-cs-huji-scontrol-show-node-gpu.txt")
    s = slurm_nodes.ingest_path(con, str(path), cluster="huji")
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (82, 77, 5, 0)
    assert con.sql("SELECT node, gpu_type, gpus FROM nodes ORDER BY node").fetchall() == [
        ("cortex-01", "m60", 8), ("cricket", "quadro", 1), ("dumfries-002", "rtx2080", 4), ("oxygen-04", None, 0)]
    assert con.sql("SELECT state FROM node_states WHERE node = 'oxygen-04'").fetchall() == [("DRAIN",)]


def test_sinfo_with_header_one_line_per_partition(con):
    text = ("NODELIST|PARTITION|STATE|CPUS(A/I/O/T)|MEMORY|GRES|GRES_USED|REASON\n"
            "gpu01|a100*|mixed|16/48/0/64|512000|gpu:a100:8(S:0-1)|gpu:a100:4(IDX:0-3)|none\n"
            "gpu01|all|mixed|16/48/0/64|512000|gpu:a100:8(S:0-1)|gpu:a100:4(IDX:0-3)|none\n"
            "gpu[02-03]|a100*|drng|0/64/0/64|512000|gpu:a100:8(S:0-1)|gpu:a100:0(IDX:N/A)|ECC\n")
    s = slurm_nodes.ingest_bytes(con, text.encode(), "sinfo.psv", cluster="lab")
    assert (s["read"], s["loaded"], s["skipped"]) == (4, 3, 1)
    assert con.sql("SELECT node, partitions, gpus, cpus FROM nodes ORDER BY node").fetchall() == [
        ("gpu01", "a100,all", 8, 64), ("gpu02", "a100", 8, 64), ("gpu03", "a100", 8, 64)]
    assert con.sql("SELECT DISTINCT state FROM node_states WHERE node <> 'gpu01'").fetchall() == [("DRAIN",)]


def test_mig_slices_count_as_gpus_of_their_pool_and_the_summary_says_so(con, run_cli, tmp_path):
    """Slurm's MIG management example (gres.html): a node whose A100 is cut into 1g.5gb x 2, 2g.10gb and 3g.20gb
    registers 4 GPUs of those types; we count them as Slurm does, and the summary says the unit is a slice.
    AutoDetect=nvml names them after the card (a100_1g.10gb); a whole-GPU node gets no note."""
    text = ("NODELIST|PARTITION|STATE|CPUS(A/I/O/T)|MEMORY|GRES|GRES_USED|REASON\n"
            "mig01|a100|idle|0/64/0/64|512000|gpu:1g.5gb:2,gpu:2g.10gb:1,gpu:3g.20gb:1|gpu:0|none\n"
            "mig02|a100|idle|0/64/0/64|512000|gpu:a100_1g.10gb:7(S:0)|gpu:a100_1g.10gb:0(IDX:N/A)|none\n"
            "gpu01|a100|idle|0/64/0/64|512000|gpu:a100:8(S:0-1)|gpu:a100:0(IDX:N/A)|none\n")
    s = slurm_nodes.ingest_bytes(con, text.encode(), "sinfo.psv", cluster="lab")
    assert con.sql("SELECT node, gpu_type, gpus FROM nodes ORDER BY node").fetchall() == [
        ("gpu01", "a100", 8), ("mig01", "1g.5gb+2g.10gb+3g.20gb", 4), ("mig02", "a100_1g.10gb", 7)]
    assert s["notes"] == ["2 nodes carry MIG slices (1g.5gb, 2g.10gb, 3g.20gb, a100_1g.10gb): as in Slurm, each "
                          "slice counts as one GPU of its pool, so those pools' capacity, utilization and charges are "
                          "in slices, not physical GPUs (give them per-slice rates in the governance file)"]
    header, _, _, whole_gpus = text.splitlines()
    assert slurm_nodes.ingest_bytes(con, f"{header}\n{whole_gpus}\n".encode(), "whole.psv")["notes"] == []
    (tmp_path / "sinfo.psv").write_text(text)
    code, _, err = run_cli("ingest", "nodes", str(tmp_path / "sinfo.psv"), "--cluster", "lab", "--no-refresh")
    assert code == 0 and "\n  note: 2 nodes carry MIG slices (1g.5gb, 2g.10gb, 3g.20gb, a100_1g.10gb)" in err


def test_nodes_offering_gpu_shards_or_mps_are_named_in_a_note(con):
    """Slurm's GPU sharding (gres.html: `Gres=gpu:4,shard:64`) and CUDA MPS (`mps:400`): the node's GPUs count
    whole, and the summary says how a job on shards or MPS shares counts (tests/test_gpu_shares.py: the counting)."""
    text = ("NODELIST|PARTITION|STATE|CPUS(A/I/O/T)|MEMORY|GRES|GRES_USED|REASON\n"
            "inf01|inf|mixed|8/56/0/64|512000|gpu:l4:4(S:0),shard:l4:64(S:0)|gpu:l4:0(IDX:N/A),shard:l4:12(0/16)|none\n"
            "inf02|inf|idle|0/64/0/64|512000|gpu:a100:4(S:0-1),mps:400(S:0-1)|gpu:a100:0(IDX:N/A)|none\n"
            "gpu01|a100|idle|0/64/0/64|512000|gpu:a100:8(S:0-1),nsight:no_consume:1|gpu:a100:0(IDX:N/A)|none\n")
    s = slurm_nodes.ingest_bytes(con, text.encode(), "sinfo.psv", cluster="lab")
    assert con.sql("SELECT node, gpu_type, gpus FROM nodes ORDER BY node").fetchall() == [
        ("gpu01", "a100", 8), ("inf01", "l4", 4), ("inf02", "a100", 4)]
    assert s["notes"] == ["2 nodes offer GPUs shared among jobs (mps, shard): a job holding only mps or shard counts "
                          "its shares over the node's shares per GPU (sreport's gres/gpu counts it as 0)"]
    header, _, _, whole = text.splitlines()
    assert slurm_nodes.ingest_bytes(con, f"{header}\n{whole}\n".encode(), "whole.psv")["notes"] == []


@pytest.mark.parametrize("gpu_type, mig", [
    ("1g.10gb", True), ("a100_1g.5gb", True), ("nvidia_a100_80gb_pcie_3g.39gb", True), ("h100_7g.80gb", True),
    ("nvidia_a100_80gb_pcie", False), ("a100-sxm4-80gb", False), ("h100", False), ("rtx_6000", False)])
def test_mig_types_as_sites_name_them(gpu_type, mig):
    """GRES types of MIG slices in public job scripts (AutoDetect=nvml names them after the card, with its
    memory: nvidia_a100_80gb_pcie_3g.39gb), and whole-GPU types that merely mention memory."""
    assert bool(slurm_nodes.MIG_TYPE.search(gpu_type)) is mig


def test_sinfo_without_header_is_a_clear_error(con, fixtures):
    with pytest.raises(Exception, match="no header line naming the columns: give them with --fields"):
        slurm_nodes.ingest_path(con, str(fixtures / "sinfo" / "datadog-sinfo.txt"))


def test_sacct_output_is_named_and_a_row_without_a_node_is_rejected(con, fixtures):
    """sacct's header names NodeList and State, so it passed for sinfo's, and its first job without a node list
    crashed the reader (IndexError): sacct output is now named, and any row without a node name is rejected."""
    with pytest.raises(InputError, match=r"sacct-allocations.psv: line 1 heads sacct output: "
                                         r"load it with `gpuledger ingest sacct`"):
        slurm_nodes.ingest_path(con, str(fixtures / "realbox" / "sacct-allocations.psv"), cluster="c")
    text = b"NODELIST|PARTITION|STATE|GRES\n|gpu|idle|gpu:a100:4\ngpu01|gpu|idle|gpu:a100:4\n"
    s = slurm_nodes.ingest_bytes(con, text, "sinfo.txt", cluster="c")
    assert (s["loaded"], s["skipped"], s["rejected"]) == (1, 1, 1)
    assert con.sql("SELECT line_no, field, reason FROM rejects").fetchall() == [(2, "node", "no node name")]


#: the -O list DataDog's Slurm check runs (tests/fixtures/PROVENANCE.md)
DATADOG_FIELDS = ("PartitionName:|,Available:|,NodeList:|,NodeAIOT:|,Memory:|,Cluster:|,CPUsLoad:|,FreeMem:|,Disk:|,"
                  "StateLong:|,Reason:|,features_act:|,Threads:|,Gres:|,GresUsed:")


def test_headerless_sinfo_reads_with_the_fields_it_was_run_with(con, fixtures):
    """`sinfo -haNO ...` as a monitoring check runs it: no header, the -O list given as --fields. NodeAIOT
    (nodes allocated/idle/other/total) is not the CPUs: c1's "0/1/0/1" once read as 1 CPU."""
    fields = slurm_nodes.parse_sinfo_fields(DATADOG_FIELDS)
    assert fields[:4] == ["partition", "_available", "node", "_nodeaiot"] and fields[-2:] == ["gres", "gresused"]
    s = slurm_nodes.ingest_path(con, str(fixtures / "sinfo" / "datadog-sinfo.txt"), cluster="dd", fields=fields)
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"], s["inserted"]) == (3, 3, 0, 0, 3)
    assert con.sql("""SELECT node, partitions, gpus, gpu_type, cpus, mem_bytes // 2^20, features FROM nodes
                      ORDER BY node""").fetchall() == [
        ("c1", "normal", 4, "tesla", None, 1000, None), ("c2", "normal", 4, "tesla", None, 1000, None),
        ("c3", "buz", 0, None, None, 5000, "foo")]
    assert con.sql("SELECT node, state, reason, gpus_alloc FROM node_states ORDER BY node").fetchall() == [
        ("c1", "IDLE", None, 3), ("c2", "IDLE", None, 4), ("c3", "IDLE", "test", None)]


def test_sinfo_fields_name_a_node_and_a_header_refuses_other_fields(con, fixtures):
    with pytest.raises(InputError, match="no node name field"):
        slurm_nodes.parse_sinfo_fields("Gres,StateLong")
    with pytest.raises(InputError, match="an empty field name"):
        slurm_nodes.parse_sinfo_fields("NodeList,,Gres")
    # a header line names the columns: --fields naming others is refused, never silently ignored
    path = fixtures / "sinfo" / "biocloud-aau-sinfo-custom-format.txt"
    with pytest.raises(InputError) as err:
        slurm_nodes.ingest_path(con, str(path), cluster="aau", fields=slurm_nodes.parse_sinfo_fields("Gres,NodeList"))
    assert str(err.value) == (f"--fields: {path}:2 is a header line naming other columns; --fields would apply "
                              "to no line: drop it (it is for output without a header)")
    assert con.sql("SELECT count(*) FROM nodes").fetchall() == [(0,)]
    # a copied "$ sinfo" prompt before the header is skipped, and the header names the columns
    header = path.read_text().splitlines()[1]
    s = slurm_nodes.ingest_path(con, str(path), cluster="aau", fields=slurm_nodes.parse_sinfo_fields(
        ",".join(h for h in header.split())))
    assert s["skip_reasons"] == {"shell prompt line": 1, "header line": 1}
    # 12 lines name 14 nodes; the line whose NODELIST sinfo's fixed width cut ("bio-node[03,06-") is rejected
    assert (s["read"], s["loaded"], s["rejected"], s["inserted"], s["stored_as"]) == (15, 12, 1, 14, "nodes")
    assert s["reject_examples"] == [f"{fixtures / 'sinfo' / 'biocloud-aau-sinfo-custom-format.txt'}:9: field node: "
                                    "unbalanced '[' in 'bio-node[03,06-'"]


def test_cli_ingest_nodes_with_fields(run_cli, fixtures):
    code, _, err = run_cli("ingest", "nodes", str(fixtures / "sinfo" / "datadog-sinfo.txt"), "--cluster", "dd",
                           "--fields", DATADOG_FIELDS, "--no-refresh")
    assert code == 0 and "loaded 3 (new 3" in err
    code, _, err = run_cli("ingest", "nodes", str(fixtures / "sinfo" / "datadog-sinfo.txt"), "--format", "scontrol",
                           "--fields", DATADOG_FIELDS)
    assert code == 2 and "--fields names sinfo columns" in err


def test_sinfo_whitespace_with_header(con, fixtures):
    text = (fixtures / "sinfo" / "ood_core-osc-gpus_null.txt").read_text()
    s = slurm_nodes.ingest_bytes(con, ("HOSTNAMES GRES GRES_USED STATE\n" + text).encode(), "ood", cluster="osc")
    assert s["rejected"] == 0
    assert con.sql("SELECT node, gpus FROM nodes ORDER BY node").fetchall() == [
        ("gput072", 2), ("gput073", 2), ("gput074", 4), ("gput075", 4)]


def test_a_listing_without_gres_keeps_the_inventorys_gpus(con):
    """Real 22.05 `sinfo -N -o '%N %P %T'` (states only, as monitoring runs it) after a scontrol snapshot: it
    used to open a new validity period with 0 GPUs, no CPUs and no memory for every node (capacity gone from
    then on); what a listing does not report now stays as the inventory has it, and the summary says so."""
    real = FIXTURES / "slurm_real"
    slurm_nodes.ingest_bytes(con, (real / "scontrol-show-node-o.txt").read_bytes(), "scontrol.txt",
                             cluster="glcluster", as_of="2026-12-06T09:00:00")
    before = con.execute("SELECT * EXCLUDE (ingest_run_id) FROM nodes ORDER BY node").fetchall()
    s = slurm_nodes.ingest_bytes(con, (real / "sinfo-no-gres.txt").read_bytes(), "sinfo.txt",
                                 cluster="glcluster", as_of="2026-12-06T10:28:47")
    assert (s["inserted"], s["updated"], s["unchanged"]) == (0, 0, 3)
    assert s["notes"] == ["this listing names no GPUs (no Gres column): 3 nodes keep the GPUs of the inventory"]
    assert con.execute("SELECT * EXCLUDE (ingest_run_id) FROM nodes ORDER BY node").fetchall() == before
    assert con.execute("SELECT sum(gpus), count(*) FROM nodes WHERE valid_to IS NULL").fetchall()[0] == (12, 3)
    assert con.execute("SELECT count(DISTINCT observed_at) FROM node_states").fetchall()[0][0] == 2
    # a listing that does report a changed attribute still changes it, the unreported ones kept
    text = "NODELIST PARTITION STATE GRES\ngpu01 a100 idle gpu:a100:8\n"
    s = slurm_nodes.ingest_bytes(con, text.encode(), "later.txt", cluster="glcluster", as_of="2026-12-06T11:00:00")
    assert (s["updated"], s["notes"]) == (1, [])
    got = con.execute("SELECT gpus, cpus, mem_bytes, partitions FROM nodes WHERE node = 'gpu01' AND valid_to IS NULL")
    assert got.fetchall() == [(8, 32, 256000 * 2**20, "a100")]


def test_a_first_listing_without_gres_says_its_nodes_count_no_gpus(con):
    s = slurm_nodes.ingest_bytes(con, (FIXTURES / "slurm_real" / "sinfo-no-gres.txt").read_bytes(), "sinfo.txt",
                                 cluster="glcluster")
    assert s["inserted"] == 3 and s["notes"] == [
        "this listing names no GPUs (no Gres column): 0 nodes keep the GPUs of the inventory, 3 nodes new to it "
        "count 0 GPUs until a listing with Gres"]
