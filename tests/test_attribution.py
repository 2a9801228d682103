"""Attribution of readings to jobs: exporter label, GPU index, node share; hand-computed, plus invariants."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.metrics import efficiency

from telemetry_fixtures import add_jobs, at, busy, load_readings, readings
from models.marts import efficiency as efficiency_mart


def _eff(con):
    efficiency_mart.build(con, full=True)
    return {r[0]: r[1:] for r in con.sql("""
        SELECT j.job_id, e.method, e.telemetry_gpu_s / 60, e.active_gpu_s / 60, e.idle_alloc_gpu_s / 60,
               e.label_gpu_s / 60, e.index_gpu_s / 60, e.share_gpu_s / 60, e.n_devices
        FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)""").fetchall()}


def test_node_share_takes_the_busiest_devices_of_a_part_full_node(con, tmp_path):
    """gpu01 has 4 GPUs. Job 100 (2 GPUs) runs 10:00-11:00, job 101 (1 GPU) 10:30-11:00. Activity: GPU0 100 %;
    GPU1 0 % for 10 min then 50 %; GPU2 0 % until 10:30 then 80 %; GPU3 idle (unallocated).

    10:00-10:30, A = 2: the pool is GPU0 and GPU1 (the busiest; ties by index) -> job 100 gets both.
    10:30-11:00, A = 3: the pool is GPU0, GPU2, GPU1, shared 2:1 -> job 100 gets 2/3 and job 101 1/3 of each.
    Job 100: covered 2x30 + 3x30x2/3 = 120 GPU-min; active 10x1 + 20x1.5 + 30x(2/3)x2.3 = 86; idle 10 (GPU1).
    Job 101: covered 30; active 30x(1/3)x2.3 = 23; idle 0."""
    add_jobs(con, tmp_path, [dict(id=100, start=0, end=60, gpus=2, nodes="gpu01"),
                             dict(id=101, start=30, end=60, gpus=1, nodes="gpu01")])
    util = {0: lambda m: 100, 1: lambda m: 0 if m < 10 else 50, 2: lambda m: 0 if m < 30 else 80, 3: lambda m: 0}
    load_readings(con, readings({("gpu01", g): {m: f(m) for m in range(60)} for g, f in util.items()}))
    eff = _eff(con)
    assert eff["100"][:5] == ("node-share", 120, pytest.approx(86), pytest.approx(10), 0)
    assert eff["101"][:5] == ("node-share", 30, pytest.approx(23), 0, 0)
    assert eff["100"][-1] == 3 and eff["101"][-1] == 3


def test_exporter_label_is_exact_and_keeps_labelled_gpus_from_others(con, tmp_path):
    """gpu02: GPU0 labelled for job 200 (busy 40 %), GPU1 labelled for job 999 that the warehouse does not know
    (busy 90 %), GPU2 unlabelled and idle. Job 201 (1 GPU) shares what is left: GPU2 only, never 999's GPU."""
    add_jobs(con, tmp_path, [dict(id=200, start=0, end=30, gpus=1, nodes="gpu02"),
                             dict(id=201, start=0, end=30, gpus=1, nodes="gpu02")])
    load_readings(con, readings({("gpu02", 0, 'hpc_job="200"'): busy(range(30), 40),
                                 ("gpu02", 1, 'hpc_job="999"'): busy(range(30), 90),
                                 ("gpu02", 2): busy(range(30), 0)}))
    eff = _eff(con)
    assert eff["200"][:6] == ("exporter-label", 30, pytest.approx(12), 0, 30, 0)
    assert eff["201"][:5] == ("node-share", 30, 0, 30, 0)


def test_exporter_label_gives_a_job_on_part_of_a_gpu_its_part(con, tmp_path):
    """gpu06, 30 minutes, every GPU 80 % busy. GPU0 labelled for shard jobs 210 (0.25 GPU) and 211 (0.5 GPU): each
    its part of the device-minute, 7.5 and 15 GPU-min (the label count would give each 15, twice 210's
    allocation). GPU1 labelled for whole-GPU jobs 212 and 213 (a stale mapping claiming it twice): half each.
    GPU2 labelled for 214 (0.5 GPU) and an unknown job claiming the whole device: 0.5 / 1.5 of it to 214."""
    add_jobs(con, tmp_path, [dict(id=i, start=0, end=30, gpus=g, nodes="gpu06")
                             for i, g in ((210, 0.25), (211, 0.5), (212, 1), (213, 1), (214, 0.5))])
    load_readings(con, readings({("gpu06", d, f'hpc_job="{j}"'): busy(range(30), 80)
                                 for d, j in ((0, 210), (0, 211), (1, 212), (1, 213), (2, 214), (2, 999))}))
    eff = _eff(con)
    want = {"210": 7.5, "211": 15, "212": 15, "213": 15, "214": 10}
    assert {j: eff[j][:5] for j in want} == {j: ("exporter-label", pytest.approx(c), pytest.approx(0.8 * c), 0,
                                                 pytest.approx(c)) for j, c in want.items()}


def test_known_gpu_indices_make_attribution_exact(con, tmp_path):
    """Job 300 held GPU 3 of gpu03 (job_gpu_indices); job 301 shares the rest by node."""
    add_jobs(con, tmp_path, [dict(id=300, start=0, end=20, gpus=1, nodes="gpu03"),
                             dict(id=301, start=0, end=20, gpus=1, nodes="gpu03")])
    con.execute("""INSERT INTO job_gpu_indices SELECT cluster, job_uid, 'gpu03', '3', 'test', NULL
                   FROM jobs WHERE job_id = '300'""")
    load_readings(con, readings({("gpu03", 0): busy(range(20), 0), ("gpu03", 3): busy(range(20), 20),
                                 ("gpu03", 5): busy(range(20), 70)}))
    eff = _eff(con)
    assert eff["300"][:7] == ("gpu-index", 20, pytest.approx(4), 0, 0, 20, 0)
    # 301 gets the busiest remaining GPU (5), not GPU 3 (owned) nor the idle GPU 0
    assert eff["301"][:5] == ("node-share", 20, pytest.approx(14), 0, 0)


def test_partial_minutes_multi_node_jobs_and_mig_slices(con, tmp_path):
    """Job 400: 4 GPUs over n1,n2 (2 each) from 10:00:30 to 10:10:30, so 10 minutes x 4 GPUs = 40 GPU-min,
    the first and last minutes half each. n2 exposes MIG slices: each slice is a device."""
    import datetime as dt
    add_jobs(con, tmp_path, [dict(id=400, start=0.5, end=10.5, gpus=4, nodes="n[1-2]", nnodes=2)])
    load_readings(con, readings({("n1", 0): busy(range(11), 100), ("n1", 1): busy(range(11), 100),
                                 ("n2", 0, 'GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"'): busy(range(11), 50),
                                 ("n2", 0, 'GPU_I_ID="2",GPU_I_PROFILE="3g.40gb"'): busy(range(11), 50)}))
    eff = _eff(con)
    method, tel, act, idle, *_ = eff["400"]
    assert (method, tel, act, idle) == ("node-share", pytest.approx(40), pytest.approx(30), 0)
    assert eff["400"][-1] == 4
    assert con.sql("SELECT alloc_gpu_s / 60 FROM gpu_efficiency_job").fetchall() == [(pytest.approx(40),)]
    hours = con.sql("SELECT hour, alloc_gpu_s / 60 FROM gpu_efficiency_job_hour").fetchall()
    assert hours == [(dt.datetime(2026, 7, 14, 10), pytest.approx(40))]


def test_running_job_is_counted_to_the_accounting_horizon(con, tmp_path):
    """Job 501 is still running; the newest accounting time is job 500's end (10:20): 501 counts to 10:20."""
    add_jobs(con, tmp_path, [dict(id=500, start=0, end=20, gpus=1, nodes="r1"),
                             dict(id=501, start=5, end=None, gpus=1, nodes="r2")])
    load_readings(con, readings({("r2", 0): busy(range(40), 60)}))
    eff = _eff(con)
    assert eff["501"][1] == pytest.approx(15) and eff["501"][2] == pytest.approx(9)


def test_pruned_raw_rows_are_read_from_the_rollup(con, tmp_path):
    add_jobs(con, tmp_path, [dict(id=600, start=0, end=30, gpus=1, nodes="p1")])
    load_readings(con, readings({("p1", 0): {m: (0 if 10 <= m < 20 else 60) for m in range(30)}}))
    before = _eff(con)["600"]
    # keep no days of raw rows: the cut falls at the newest row's 5-minute bucket (10:25)
    load_readings(con, readings({("p1", 0): {29: 60}}), keep_raw_days=0)
    assert con.sql("SELECT count(*), min(ts) FROM gpu_samples").fetchall() == [(5, at(25))]
    after = _eff(con)["600"]
    assert after[1:4] == pytest.approx(before[1:4])      # same coverage, activity and idle from 5-min buckets
    assert con.sql("SELECT rollup_gpu_s / 60 FROM gpu_efficiency_job").fetchall() == [(pytest.approx(25),)]


job_strategy = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 40), st.integers(1, 4)), min_size=1, max_size=5)
util_strategy = st.lists(st.lists(st.sampled_from([0, 0, 10, 50, 100]), min_size=60, max_size=60),
                         min_size=1, max_size=4)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=job_strategy, utils=util_strategy)
def test_shares_never_exceed_allocation_or_readings(con, tmp_path, jobs, utils):
    for t in ("jobs", "job_nodes", "gpu_samples", "gpu_samples_5m", "gpu_efficiency_job", "gpu_efficiency_job_hour",
              "mart_state"):
        con.execute(f"DELETE FROM {t}")
    add_jobs(con, tmp_path, [dict(id=700 + i, start=s, end=s + d, gpus=g, nodes="h1")
                             for i, (s, d, g) in enumerate(jobs)])
    load_readings(con, readings({("h1", g): dict(enumerate(u)) for g, u in enumerate(utils)}))
    efficiency_mart.build(con, full=True)
    per_job = con.sql("SELECT alloc_gpu_s, telemetry_gpu_s, active_gpu_s, idle_alloc_gpu_s FROM gpu_efficiency_job"
                      ).fetchall()
    for alloc, tel, act, idle in per_job:
        assert tel <= alloc + 1e-6 and act <= tel + 1e-6 and idle <= tel + 1e-6
    # all jobs together never take more than the readings there were
    total = sum(t for _, t, _, _ in per_job)
    assert total <= 60 * 60 * len(utils) + 1e-6


def test_node_groups_give_the_same_answer_as_one_pass(con, tmp_path, monkeypatch):
    """The mart is built node group by node group; a multi-node job keeps its nodes in one group."""
    from models.kernels import attribution
    add_jobs(con, tmp_path, [dict(id=800, start=0, end=30, gpus=2, nodes="k1"),
                             dict(id=801, start=10, end=40, gpus=4, nodes="k[2-3]", nnodes=2),
                             dict(id=802, start=0, end=40, gpus=1, nodes="k4"),
                             dict(id=803, start=5, end=25, gpus=1, nodes="k9")])   # no telemetry there
    load_readings(con, readings({(f"k{n}", g): {m: (n * 17 + g * 5 + m) % 100 for m in range(40)}
                                 for n in range(1, 5) for g in range(2)}))
    one = _eff(con)
    monkeypatch.setattr(attribution, "CHUNK_PIECES", 1)
    attribution.prepare(con, "(SELECT job_uid FROM jobs)")
    groups = attribution.node_chunks(con)
    names = [sorted(con.sql("SELECT node FROM _nodes_all WHERE list_contains($g, nid)", params={"g": g}
                            ).fetchall()) for g in groups]
    # k9 has no telemetry: it is no group's (its job keeps its allocated GPU-hours, "none")
    assert names == [[("k1",)], [("k2",), ("k3",)], [("k4",)]]
    again = _eff(con)
    assert again.keys() == one.keys()
    for k in one:
        assert again[k][0] == one[k][0] and again[k][1:] == pytest.approx(one[k][1:])


def test_only_the_telemetry_span_is_attributed_and_the_rest_stays_allocated(con, tmp_path):
    """Job 900 (2 GPUs on gpu09) runs minutes 0-600; readings exist for minutes 300-359 only (GPU0 at 50 %,
    GPU1 at 0 %). Covered 2x60 = 120 GPU-min, active 60x0.5 = 30, idle 60; allocated stays 2x600 = 1,200.
    Job 901 ran on gpu10, which never reported: allocated only, method 'none'."""
    add_jobs(con, tmp_path, [dict(id=900, start=0, end=600, gpus=2, nodes="gpu09"),
                             dict(id=901, start=0, end=600, gpus=1, nodes="gpu10")])
    load_readings(con, readings({("gpu09", 0): busy(range(300, 360), 50), ("gpu09", 1): busy(range(300, 360), 0)}))
    eff = _eff(con)
    assert eff["900"][:4] == ("node-share", 120, pytest.approx(30), pytest.approx(60))
    assert eff["901"][:2] == ("none", 0)
    alloc = dict(con.sql("SELECT j.job_id, e.alloc_gpu_s / 60 FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)"
                         ).fetchall())
    assert alloc == {"900": pytest.approx(1200), "901": pytest.approx(600)}
