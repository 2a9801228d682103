"""`gpuledger ingest nodes` of JSON node lists: `sinfo --json` (22.05), `scontrol show nodes --json` and
slurmrestd's /slurm/v0.0.XX/nodes (v0.0.39 and later), loaded as the scontrol snapshot of the same moment."""
import json

import pytest

import gpuledger
from conftest import FIXTURES
from ingest import slurm_nodes, slurm_nodes_json, warehouse
from ingest.errors import InputError
from models.service import config

REAL = FIXTURES / "slurm_real"
JSON = FIXTURES / "slurmrestd"
WHEN = "2026-12-06T10:08:49"      # the capture time in sinfo-json-midrun.json.cmd


def _rows(con, table: str) -> list[tuple]:
    return con.execute(f"SELECT * EXCLUDE (ingest_run_id) FROM {table} ORDER BY ALL").fetchall()


def test_sinfo_json_of_22_05_loads_as_scontrol_of_the_same_moment(con, tmp_path):
    """Real Slurm 22.05 (tests/slurm): gpu02 DOWN, gpu03 MIXED+DRAIN with a job, gpu01 MIXED, both taken at
    once: the nodes, states, reasons (with who set them and when) and allocated GPUs are the same rows."""
    s = slurm_nodes.ingest_bytes(con, (REAL / "sinfo-json-midrun.json").read_bytes(), "sinfo.json",
                                 cluster="glcluster", as_of=WHEN)
    assert (s["read"], s["read_as"], s["loaded"], s["rejected"]) == (3, "node records", 3, 0)
    other = warehouse.connect(tmp_path / "scontrol.duckdb")
    slurm_nodes.ingest_bytes(other, (REAL / "sinfo-json-midrun.scontrol-o.txt").read_bytes(), "scontrol.txt",
                             cluster="glcluster", as_of=WHEN)
    assert _rows(con, "nodes") == _rows(other, "nodes")
    assert _rows(con, "node_states") == _rows(other, "node_states")
    got = con.execute("SELECT node, state, state_raw, gpus_alloc FROM node_states ORDER BY node").fetchall()
    assert got == [("gpu01", "MIXED", "MIXED", 1), ("gpu02", "DOWN", "DOWN", 0),
                   ("gpu03", "DRAIN", "MIXED+DRAIN", 1)]
    assert con.execute("SELECT reason FROM node_states WHERE node = 'gpu02'").fetchall()[0][0] == (
        "gl-test: XID 79 GPU has fallen off the bus [root@2026-12-06T10:08:49]")


def test_slurmrestd_nodes_of_24_05_and_25_11(con):
    """v0.0.41 / v0.0.42 (state as a list, numbers as objects, the cluster named in meta): a GPU node with one
    of its four h100 in use, and a drained CPU node whose reason root set."""
    s = slurm_nodes.ingest_bytes(con, (JSON / "slurmweb-24.05-v0.0.41-slurm-node-with-gpus-model-mixed.json")
                                 .read_bytes(), "gpu1.json", as_of="2025-11-07T15:00:00")
    assert (s["loaded"], s["rejected"]) == (1, 0)
    s = slurm_nodes.ingest_bytes(con, (JSON / "slurmweb-25.11-v0.0.42-slurm-node-drain.json").read_bytes(),
                                 "cn3.json", as_of="2025-11-12T10:20:00")
    assert (s["loaded"], s["rejected"]) == (1, 0)
    nodes = con.execute("""SELECT cluster, node, partitions, gpus, gpu_type, cpus, mem_bytes FROM nodes
                           ORDER BY node""").fetchall()
    assert nodes == [("hpc", "cn3", "normal", 0, None, 64, 131072 * 1048576),
                     ("hpc", "gpu1", "normal", 4, "h100", 32, 524288 * 1048576)]
    states = con.execute("SELECT node, state, state_raw, reason, gpus_alloc FROM node_states ORDER BY node").fetchall()
    # 1762942741 = 2025-11-12T10:19:01Z
    assert states == [("cn3", "DRAIN", "IDLE+DRAIN", "ECC memory error [root@2025-11-12T10:19:01]", 0),
                      ("gpu1", "ALLOCATED", "ALLOCATED", None, 1)]


def _doc(*nodes) -> bytes:
    return json.dumps({"nodes": list(nodes), "meta": {}, "errors": []}).encode()


def test_not_responding_flag_and_an_unreadable_record():
    lines, bad, cluster = slurm_nodes_json.to_scontrol_lines(
        _doc({"name": "n1", "state": "idle", "state_flags": ["NOT_RESPONDING"], "cpus": 8},
             {"name": "n2", "state": ["DOWN", "NOT_RESPONDING"], "cpus": {"set": True, "number": 16}},
             {"state": ["IDLE"]}), "x.json")
    assert "State=IDLE* " in lines[0] and "State=DOWN* " in lines[1] and "CPUTot=16 " in lines[1]
    assert slurm_nodes.normalise_state("IDLE*") == "DOWN"
    assert lines[2] is None and bad == {3: "cannot read node record 3: KeyError 'name'"} and cluster is None


def test_json_node_errors_name_the_input(con, run_cli, tmp_path):
    data = _doc({"name": "n1", "state": ["IDLE"], "cpus": 8, "gres": "gpu:a100:x"}, {"cpus": 8})
    s = slurm_nodes.ingest_bytes(con, data, "x.json", cluster="c1")
    assert (s["read"], s["loaded"], s["rejected"]) == (2, 0, 2)
    assert s["reject_examples"][1] == "x.json:2: cannot read node record 2: KeyError 'name'"
    assert s["reject_examples"][0].startswith("x.json:1: field Gres: node record:")
    with pytest.raises(InputError, match="sinfo --json` of Slurm 23.02 and later lists groups of nodes"):
        slurm_nodes.ingest_bytes(con, b'{"sinfo": [], "meta": {}}', "s.json", cluster="c1")
    f = tmp_path / "jobs.json"
    f.write_text('{"jobs": []}')
    code, _, err = run_cli("ingest", "nodes", str(f), "--cluster", "c1", "--no-refresh")
    assert code == 1 and err.strip() == (f"gpuledger: {f}: JSON without a `nodes` list: not `scontrol show nodes "
                                         "--json` or slurmrestd /slurm/.../nodes")


def test_the_formats_are_one_list_for_the_cli_the_service_and_the_ingestor(con, tmp_path):
    args = gpuledger.build_parser().parse_args(["ingest", "nodes", "x", "--format", "json"])
    assert args.format == "json"
    action = next(a for a in _nodes_parser(gpuledger.build_parser())._actions if a.dest == "format")
    assert tuple(action.choices) == slurm_nodes.FORMATS
    with pytest.raises(InputError, match="'xml' is not a node snapshot format"):
        slurm_nodes.ingest_bytes(con, b"NodeName=n1 CPUTot=8\n", "x", fmt="xml", cluster="c1")
    cfg = tmp_path / "serve.toml"
    cfg.write_text('warehouse = "w.duckdb"\n[[clusters]]\nname = "a"\n[clusters.nodes]\nformat = "xml"\n')
    with pytest.raises(Exception, match=r"must be one of auto, scontrol, sinfo, json, got 'xml'"):
        config.load(cfg)


def _nodes_parser(parser):
    """The `ingest nodes` subparser."""
    ingest = next(a for a in parser._actions if getattr(a, "choices", None) and "ingest" in a.choices).choices["ingest"]
    return next(a for a in ingest._actions if getattr(a, "choices", None) and "nodes" in a.choices).choices["nodes"]
