"""gpuledger.toml (models/service/config.py): the documented example parses to what its comments say, and every
kind of mistake is one line naming the file, the line and the key."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from conftest import ROOT
from dashboards import access
from ingest import encoding
from ingest.errors import InputError
from models.service import config
from models.service.sources import KINDS

EXAMPLE = ROOT / "data" / "gpuledger.example.toml"

MINIMAL = """\
[service]
warehouse = "wh.duckdb"
cycle = "2s"

[[clusters]]
name = "alpha"

[clusters.sacct]
interval = 3
"""


def _parse(tmp_path: Path, text: str) -> config.ServiceConfig:
    p = tmp_path / "gpuledger.toml"
    p.write_text(text, encoding="utf-8")
    return config.load(p)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(InputError) as info:
        _parse(tmp_path, text)
    msg = str(info.value)
    assert "\n" not in msg
    return msg.removeprefix(str(tmp_path / "gpuledger.toml"))


def test_the_example_parses_as_documented():
    cfg = config.load(EXAMPLE)
    assert cfg.warehouse == ROOT / "data" / "warehouse.duckdb"           # relative to the config's directory
    assert (cfg.cycle_s, cfg.backoff_initial_s, cfg.backoff_max_s, cfg.lock_timeout_s) == (60, 30, 900, 60)
    assert cfg.health_listen == ("127.0.0.1", 9464) and cfg.max_cycle_age_s == 240
    assert (cfg.dashboard, cfg.dashboard_host, cfg.dashboard_port) == (True, "127.0.0.1", 8501)
    assert cfg.clusters == ("alpha", "beta")
    got = [(s.where.cluster, s.kind, s.interval_s) for s in cfg.sources]
    assert got == [("*", "governance", 60), ("alpha", "sacct", 300), ("alpha", "nodes", 900),
                   ("alpha", "events", 900), ("alpha", "squeue", 300), ("alpha", "reservations", 900),
                   ("alpha", "job-gpus", 300), ("alpha", "prometheus", 300), ("beta", "sacct", 600)]   # beta nodes: off
    prom = next(s for s in cfg.sources if s.kind == "prometheus").opts
    assert prom == {"url": "http://prometheus:9090", "metrics": [], "match": '{cluster="alpha"}', "step": 60,
                    "lookback": 3600, "overlap": 300, "max_window": 21600, "retries": 1, "keep_raw_days": 0,
                    "aggregate": None, "timeout": 60}
    beta = next(s for s in cfg.sources if s.where.cluster == "beta")
    assert beta.where.env == (("SLURM_CONF", "/etc/slurm-beta/slurm.conf"),)
    assert beta.where.command("sacct") == ["env", "SLURM_CONF=/etc/slurm-beta/slurm.conf", "sacct"]
    gov = cfg.sources[0].opts["path"]
    assert gov == str(ROOT / "data" / "governance.example.toml") and Path(gov).exists()


def test_a_config_saved_as_utf16_is_read_by_the_service_and_its_dashboard(tmp_path):
    """Notepad's "Unicode" (UTF-16 with its mark): the collector, its scheduled reports and the dashboard's access
    rules read the same text from it as from the UTF-8 file (all through ingest/encoding.py)."""
    text = EXAMPLE.read_text(encoding="utf-8") + '\n[access]\ntrusted_proxies = ["127.0.0.1"]\ncontact = "zoë"\n'
    (tmp_path / "utf8.toml").write_text(text, encoding="utf-8")
    (tmp_path / "utf16.toml").write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    assert encoding.read_text(tmp_path / "utf16.toml") == text
    got, want = config.load(tmp_path / "utf16.toml"), config.load(tmp_path / "utf8.toml")
    assert replace(got, path=want.path) == want and got.path == tmp_path / "utf16.toml"
    got, want = access.read_config(tmp_path / "utf16.toml"), access.read_config(tmp_path / "utf8.toml")
    assert got.access.contact == "zoë" and (got.host, got.port, got.warehouse) == (want.host, want.port, want.warehouse)


def test_every_key_of_every_section_is_documented_in_the_example():
    text = EXAMPLE.read_text()
    keys = {k for sec in config.SECTIONS.values() for k in sec} | set(config.CLUSTER_KEYS) | set(config.COMMON)
    keys |= {k for kind in KINDS.values() for k in kind.keys}
    missing = [k for k in sorted(keys) if f"{k} =" not in text]
    assert not missing, f"keys not shown in {EXAMPLE.name}: {missing}"


def test_defaults_and_unknown_tables_pass_through(tmp_path):
    cfg = _parse(tmp_path, MINIMAL + '\n[access]\nheader = "X-Auth-Request-User"\n[access.roles]\nadmin = ["ann"]\n')
    assert cfg.warehouse == tmp_path / "wh.duckdb" and cfg.cycle_s == 2
    assert [(s.key, s.interval_s, s.opts) for s in cfg.sources] == [
        (("alpha", "sacct"), 3, {"command": "sacct", "sdiag": "sdiag", "window": 86400, "timeout": 900})]
    assert cfg.extra == {"access": {"header": "X-Auth-Request-User", "roles": {"admin": ["ann"]}}}
    assert cfg.health_listen == ("127.0.0.1", 9464) and cfg.max_cycle_age_s == 3 * 2 + 60


def test_errors_name_file_line_and_key(tmp_path):
    assert _error(tmp_path, MINIMAL + "[clusters.prometheus]\nstep = 60\n") == \
        ":10: key clusters[0].prometheus.url: is required"
    two = MINIMAL + '\n[[clusters]]\nname = "beta"\n\n[clusters.prometheus]\nurl = "http://p:9090"\nsteps = "1m"\n'
    assert _error(tmp_path, two).startswith(":16: key clusters[1].prometheus.steps: unknown key (allowed: ")
    assert _error(tmp_path, MINIMAL.replace("cycle = \"2s\"", "cycle = \"2 minutes\"")) == \
        ":3: key service.cycle: cannot read duration '2 minutes': use seconds or e.g. 5m, 1h, 2d"
    assert _error(tmp_path, MINIMAL.replace("interval = 3", "interval = true")).startswith(
        ":9: key clusters[0].sacct.interval: must be a duration")
    assert _error(tmp_path, MINIMAL + "[health]\nlisten = \"localhost\"\n") == \
        ":11: key health.listen: expected HOST:PORT (e.g. 127.0.0.1:9464), got 'localhost'"
    assert _error(tmp_path, MINIMAL + '\n[[clusters]]\nname = "alpha"\n[clusters.sacct]\n') == \
        ":12: key clusters[1].name: cluster 'alpha' is configured twice"
    assert _error(tmp_path, MINIMAL.replace("[clusters.sacct]", "[clusters.sacc]")) == (
        ":8: key clusters[0].sacc: unknown key (allowed: events, job-gpus, name, nodes, prometheus, reservations, "
        "sacct, slurm_conf, squeue)")
    assert _error(tmp_path, MINIMAL + "[dashboard]\nport = \"8501\"\n") == \
        ":11: key dashboard.port: must be a TCP port 1-65535, got '8501'"
    assert _error(tmp_path, "[service]\ncycle = 5\n") .startswith(":1: key clusters: nothing to collect")
    assert _error(tmp_path, "[service\ncycle = 5\n") == ":1: not valid TOML: Expected ']' at the end of a table declaration"


def test_serve_with_a_bad_config_exits_1_in_one_line(tmp_path, capsys):
    import gpuledger
    p = tmp_path / "gpuledger.toml"
    p.write_text(MINIMAL.replace("interval = 3", "interval = -3"), encoding="utf-8")
    assert gpuledger.main(["serve", "--config", str(p)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"gpuledger: {p}:9: key clusters[0].sacct.interval: duration must be a whole number of seconds " \
                  ">= 1, not -3"
    assert gpuledger.main(["serve", "--config", str(tmp_path / "absent.toml")]) == 1
    assert "absent.toml: cannot read: No such file or directory" in capsys.readouterr().err
