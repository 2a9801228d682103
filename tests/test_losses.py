"""Failure losses (models/marts/losses.py, models/metrics/losses.py): hand-computed jobs through the real
ingestors (sacct, scontrol show node, sacctmgr show event, DCGM text, governance TOML) and the real refresh."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest import governance, warehouse
from models.definitions.losses_sql import CAUSES
from models.metrics import losses
from models.pipeline import refresh
from tests.telemetry_fixtures import add_jobs, at, load_readings, readings
from tests.timeline_fixtures import Job, load


def T(s: str) -> dt.datetime:
    """"03-01 10:17:23" -> 2024-03-01 10:17:23."""
    return dt.datetime.fromisoformat(f"2024-{s}")

NODES = [("gpu01", 8, "a100", "a100"), ("gpu02", 8, "a100", "a100"), ("gpu03", 8, "h100", "h100")]
GOV = """
currency = "EUR"
[[teams]]
name = "research"
accounts = ["ml"]
[[teams]]
name = "product"
accounts = ["cv"]
{extra}
"""


def _refresh(con, db_path):
    refresh.run(con, db_path, publish=False)


def _gov(con, tmp_path, extra: str = "") -> None:
    p = tmp_path / "gov.toml"
    p.write_text(GOV.format(extra=extra))
    governance.ingest_path(con, p)


def test_node_fail_two_nodes_loses_gpus_times_elapsed(con, db_path, tmp_path):
    """A 16-GPU job on two nodes ends NODE_FAIL at 13:42:11 (started 10:17:23) as gpu02 goes DOWN at 13:41:50:
    16 x 12,288 s = 196,608 GPU-seconds of node-failure loss, to the second; a completed job loses nothing."""
    jobs = [Job(1, "alice", "ml", "a100", 16, ["gpu01", "gpu02"], start=T("03-01 10:17:23"),
                end=T("03-01 13:42:11"), state="NODE_FAIL"),
            Job(2, "bob", "cv", "h100", 4, ["gpu03"], start=T("03-01 09:00"), end=T("03-01 15:00"))]
    load(con, "tc", jobs, NODES, [("gpu02", T("03-01 13:41:50"), T("03-01 16:00"), "DOWN", "Not responding")],
         refresh=False)
    _gov(con, tmp_path)
    _refresh(con, db_path)
    j = losses.jobs(con)
    assert j.height == 1
    r = j.row(0, named=True)
    assert (r["cause"], r["detail"], r["event_node"], r["basis"]) == ("node_failure", "Not responding", "gpu02",
                                                                      "since start")
    elapsed = (T("03-01 13:42:11") - T("03-01 10:17:23")).total_seconds()
    assert elapsed == 12288
    assert r["lost_gpu_h"] * 3600 == pytest.approx(16 * elapsed, abs=1e-6)
    rep = losses.report(con, bucket=None, by=["team"])
    research = rep.filter(pl.col("team") == "research").row(0, named=True)
    assert research["node_failure_gpu_h"] * 3600 == pytest.approx(16 * 12288)
    assert research["allocated_gpu_h"] * 3600 == pytest.approx(16 * 12288)
    assert research["goodput_share"] == pytest.approx(0.0)
    product = rep.filter(pl.col("team") == "product").row(0, named=True)
    assert (product["lost_gpu_h"], product["goodput_share"]) == (0.0, 1.0)
    nodes = losses.report(con, bucket=None, by=["node"])
    assert dict(zip(nodes["node"], nodes["lost_gpu_h"] * 3600)) == pytest.approx({"gpu01": 8 * 12288,
                                                                                  "gpu02": 8 * 12288})
