"""The synthetic workload generator: deterministic, physically possible, calibrated in shape, and written in
real formats that the real ingestors load without a single reject."""
from __future__ import annotations

import datetime as dt
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest import governance, sacct, slurm_events, slurm_nodes
from models.demo import build, config, faults, layout, sacct_writer, scheduler, slurm_writers, workload
from models.demo.config import GPUS_PER_NODE


def tiny(**kw) -> config.Config:
    """15 nodes (6+2 H100, 7 A100), three weeks: a few thousand jobs, generated in about a second."""
    return config.for_scale(0.25, seed=kw.pop("seed", 7), days=kw.pop("days", 21), telemetry_days=1,
                             squeue_days=1, **kw)


@pytest.fixture(scope="module")
def syn():
    return build.generate(tiny())


def test_generation_is_deterministic_for_a_seed(syn):
    again = build.generate(tiny())
    for f in ("job_id", "submit", "gpus", "run_s", "partition", "user"):
        assert np.array_equal(getattr(syn.jobs, f), getattr(again.jobs, f)), f
    for f in ("job", "start", "end", "state", "gpu_node", "gpu_index"):
        assert np.array_equal(getattr(syn.inst, f), getattr(again.inst, f)), f
    other = build.generate(tiny(seed=8))
    assert not np.array_equal(other.jobs.submit[:100], syn.jobs.submit[:100])


def _busy_intervals(syn):
    inst = syn.inst
    s = inst.start[inst.gpu_inst]
    e = np.where(inst.end[inst.gpu_inst] < 0, syn.t_end, inst.end[inst.gpu_inst])
    return s, e


def test_no_node_ever_holds_more_gpus_than_it_has(syn):
    s, e = _busy_intervals(syn)
    node = syn.inst.gpu_node
    for n in np.unique(node):
        m = node == n
        times = np.concatenate([s[m], e[m]])
        delta = np.concatenate([np.ones(m.sum()), -np.ones(m.sum())])
        order = np.lexsort((delta, times))          # ends before starts at the same second
        assert np.cumsum(delta[order]).max() <= GPUS_PER_NODE
    # and no GPU slot is shared by two instances at once
    key = node.astype(np.int64) * GPUS_PER_NODE + syn.inst.gpu_index
    order = np.lexsort((s, key))
    same = key[order][1:] == key[order][:-1]
    assert np.all(s[order][1:][same] >= e[order][:-1][same])


def test_jobs_run_only_on_existing_healthy_nodes_of_their_pool(syn):
    inst, jobs, lay = syn.inst, syn.jobs, syn.layout
    s, e = _busy_intervals(syn)
    node = inst.gpu_node
    assert np.all(s >= lay.since[node]), "a job started on a node before the capacity addition"
    part = jobs.partition[inst.job[inst.gpu_inst]]
    pools = [set(p.pools) for p in syn.cfg.partitions]
    pool_names = np.array([p.name for p in syn.cfg.pools])[lay.pool[node]]
    assert all(pn in pools[pt] for pn, pt in zip(pool_names, part))
    o = syn.outages
    for n, k, os_, oe in zip(o.node, o.kind, o.start, o.end):
        m = node == n
        if k == faults.DOWN:   # nothing runs through a failure: jobs end at the failure at the latest
            assert not np.any((s[m] < os_) & (e[m] > os_)), "a job survived its node going down"
        assert not np.any((s[m] >= os_) & (s[m] < oe)), "a job started on a down or drained node"


def test_gangs_take_whole_nodes_and_sizes_match_allocations(syn):
    inst, jobs = syn.inst, syn.jobs
    ran = np.flatnonzero(inst.start >= 0)
    per_inst = np.bincount(inst.gpu_inst, minlength=len(inst))
    assert np.array_equal(per_inst[ran], jobs.gpus[inst.job[ran]])
    gang = jobs.gpus[inst.job[inst.gpu_inst]] > GPUS_PER_NODE
    nodes_of = {}
    for i, n in zip(inst.gpu_inst[gang], inst.gpu_node[gang]):
        nodes_of.setdefault(i, []).append(n)
    for i, ns in nodes_of.items():
        assert all(c == GPUS_PER_NODE for c in np.unique(ns, return_counts=True)[1])


def test_waits_come_only_from_contention():
    # a cluster far bigger than its demand: nobody waits longer than the backfill interval
    cfg = tiny(jobs_per_gpu_day=0.05)
    s = build.generate(cfg)
    started = s.inst.start >= 0
    wait = (s.inst.start - s.inst.eligible)[started]
    assert wait.max() <= scheduler.BF_INTERVAL
    # and the demo-sized load does make some jobs wait
    busy = build.generate(tiny())
    w = (busy.inst.start - busy.inst.eligible)[busy.inst.start >= 0]
    assert np.percentile(w, 95) > 600


def test_calendar_cycles_and_growth(syn):
    cfg = tiny(days=56)
    jobs, _ = workload.sample_jobs(cfg, np.random.default_rng(3))
    zone = dt.timezone(dt.timedelta(hours=-8))
    local = [dt.datetime.fromtimestamp(int(t), zone) for t in jobs.submit[::7]]
    weekday = np.array([d.weekday() for d in local])
    hour = np.array([d.hour for d in local])
    assert (weekday < 5).mean() / 5 > 1.6 * (weekday >= 5).mean() / 2       # weekends are quieter
    assert ((hour >= 13) & (hour < 17)).mean() > 3 * ((hour >= 2) & (hour < 6)).mean()  # afternoons beat nights
    half = jobs.submit < jobs.submit.min() + 28 * 86400
    assert (~half).sum() > half.sum()                                        # growth


def test_size_mix_and_final_states_are_in_published_ranges(syn):
    jobs, inst = syn.jobs, syn.inst
    assert 0.55 < (jobs.gpus == 1).mean() < 0.9
    assert (jobs.gpus > GPUS_PER_NODE).any() and np.all(jobs.gpus[jobs.gpus > 8] % 8 == 0)
    final = np.isin(inst.state, [scheduler.S_COMPLETED, scheduler.S_FAILED, scheduler.S_CANCELLED,
                                 scheduler.S_TIMEOUT, scheduler.S_OOM, scheduler.S_NODE_FAIL])
    share = lambda *codes: np.isin(inst.state[final], codes).mean()  # noqa: E731
    assert 0.45 < share(scheduler.S_COMPLETED) < 0.65          # Acme/Philly/Helios: 0.50-0.62
    assert 0.05 < share(scheduler.S_CANCELLED) < 0.25          # 0.06-0.22
    assert 0.15 < share(scheduler.S_FAILED, scheduler.S_TIMEOUT, scheduler.S_OOM, scheduler.S_NODE_FAIL) < 0.45


def test_array_ids_follow_slurm():
    jobs, _ = workload.sample_jobs(tiny(), np.random.default_rng(1))
    arr = jobs.array_id >= 0
    assert arr.any()
    last = jobs.array_last
    assert np.array_equal(jobs.job_id[last], jobs.array_id[last])       # the last task carries the master id
    assert np.all(jobs.job_id[arr & ~last] > jobs.array_id[arr & ~last])
    assert len(np.unique(jobs.job_id)) == len(jobs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rate=st.floats(0.2, 3.0), mtbf=st.floats(2.0, 60.0))
def test_scheduler_invariants_hold_for_any_workload(seed, rate, mtbf):
    cfg = config.for_scale(0.1, seed=seed, days=4, jobs_per_gpu_day=rate, node_mtbf_days=mtbf)
    s = build.generate(cfg)
    inst = s.inst
    assert np.all((inst.start < 0) | (inst.start >= inst.eligible))
    ended = (inst.start >= 0) & (inst.end >= 0)
    assert np.all(inst.end[ended] >= inst.start[ended])
    running = inst.state == scheduler.S_RUNNING
    assert np.all(inst.end[running] < 0) and np.all(inst.start[running] >= 0)
    test_no_node_ever_holds_more_gpus_than_it_has(s)
    # requeued and node-failed instances come back as new instances of the same job
    killed = np.isin(inst.state, [scheduler.S_REQUEUED])
    for i in np.flatnonzero(killed):
        assert (inst.job == inst.job[i]).sum() >= 2


# ---------------------------------------------------------------- real formats through the real ingestors

def test_sacct_exports_load_without_rejects_and_running_jobs_later_finish(syn, con):
    frame = sacct_writer.instance_frame(syn.cfg, syn.jobs, syn.users, syn.layout, syn.inst, syn.reservations)
    mid = syn.t0 + 10 * 86400
    opts = sacct.SacctOptions(cluster=syn.cfg.cluster, tz="UTC")
    first = sacct.ingest_bytes(con, sacct_writer.export(frame, syn.cfg.cluster, syn.t0, mid), "a.psv", opts)
    assert first["rejected"] == 0
    assert first["skip_reasons"]["job step (.batch)"] > 0 and first["skip_reasons"]["header line"] == 1
    running = con.sql("SELECT count(*) FROM jobs WHERE state IN ('RUNNING', 'PENDING')").fetchall()[0][0]
    assert running > 0
    second = sacct.ingest_bytes(con, sacct_writer.export(frame, syn.cfg.cluster, mid, syn.t_end), "b.psv", opts)
    assert second["rejected"] == 0 and second["updated"] > 0
    assert sum(n for k, n in second["transitions"].items() if k.startswith("RUNNING->")) > 0
    # every instance is one row (pending array tasks fold into their array's record until they run)
    n_jobs = con.sql("SELECT count(*) FROM jobs").fetchall()[0][0]
    assert n_jobs == len(syn.inst) - _folded_pending(syn)
    states = dict(con.sql("SELECT state, count(*) FROM jobs GROUP BY ALL").fetchall())
    want = dict(zip(*np.unique(np.array(scheduler.STATES)[syn.inst.state], return_counts=True)))
    for state in ("COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED"):
        assert states.get(state, 0) == want.get(state, 0), state
    # GPU-seconds survive the round trip exactly
    got = con.sql("SELECT sum(ngpus * elapsed_s)::BIGINT FROM jobs WHERE \"end\" IS NOT NULL").fetchall()[0][0]
    inst = syn.inst
    ended = (inst.start >= 0) & (inst.end >= 0)
    assert got == int((syn.jobs.gpus[inst.job[ended]] * (inst.end - inst.start)[ended]).sum())
    cancelled = con.sql("SELECT count(*) FROM jobs WHERE state = 'CANCELLED' AND cancelled_by_uid = uid").fetchall()
    assert cancelled[0][0] == states["CANCELLED"]


def _folded_pending(syn) -> int:
    inst, jobs = syn.inst, syn.jobs
    pend = (inst.state == scheduler.S_PENDING) & (jobs.array_id[inst.job] >= 0)
    arrays = jobs.array_id[inst.job[pend]]
    return int(pend.sum() - len(np.unique(arrays)))


def test_requeued_instances_are_separate_records(con):
    s = build.generate(tiny(node_mtbf_days=3.0))
    frame = sacct_writer.instance_frame(s.cfg, s.jobs, s.users, s.layout, s.inst, s.reservations)
    data = sacct_writer.export(frame, s.cfg.cluster, s.t0, s.t_end)
    sacct.ingest_bytes(con, data, "x.psv", sacct.SacctOptions(cluster=s.cfg.cluster, tz="UTC"))
    rows = con.sql("""SELECT job_id_raw, list(state ORDER BY submit) FROM jobs GROUP BY 1 HAVING count(*) > 1""").fetchall()
    assert rows, "a node failing every 3 days must requeue some jobs"
    assert all(states[0] in ("NODE_FAIL", "PREEMPTED", "REQUEUED") for _, states in rows)
    text = data.decode()
    assert "|NODE_FAIL|" in text and "CANCELLED by " in text and "None assigned" in text


def test_node_snapshots_and_events_load_and_show_the_capacity_addition(syn, con):
    cfg = syn.cfg
    for when in (syn.t0, syn.t_add):
        data = slurm_writers.scontrol_nodes(cfg, syn.layout, syn.inst, syn.outages, when)
        s = slurm_nodes.ingest_bytes(con, data, f"nodes@{when}", fmt="scontrol", cluster=cfg.cluster,
                                     as_of=slurm_writers.iso(when))
        assert s["rejected"] == 0
    before = sum(p.nodes for p in cfg.pools)
    after = before + sum(p.added for p in cfg.pools)
    rows = con.sql("SELECT count(*) FILTER (valid_from IS NULL), count(*), sum(gpus) FROM nodes").fetchall()[0]
    assert rows == (before, after, after * GPUS_PER_NODE)
    assert con.sql("SELECT DISTINCT gpu_type FROM nodes ORDER BY 1").fetchall() == [("a100",), ("h100",)]
    ev = slurm_writers.sacctmgr_events(cfg, syn.layout, syn.outages, syn.t0, syn.t_add, syn.t_end)
    s = slurm_events.ingest_bytes(con, ev, "events", cluster=cfg.cluster, tz="UTC")
    assert s["rejected"] == 0 and s["skip_reasons"].get("cluster-level event (no node)") == 2
    got = dict(con.sql("SELECT state, count(*) FROM node_events GROUP BY ALL").fetchall())
    o = syn.outages
    assert got.get("DOWN", 0) == int((o.kind == faults.DOWN).sum())
    assert got.get("DRAIN", 0) == int((o.kind == faults.DRAIN).sum())


def test_governance_file_is_valid_and_maps_every_account(syn, con):
    from models.demo import governance_writer
    text = governance_writer.governance_toml(syn.cfg, dt.date(2026, 2, 1))
    gov = governance.parse(text, "governance.toml")
    assert {t[0] for t in gov.teams} == {t.name for t in syn.cfg.teams}
    for pool, shares in governance_writer.pool_shares(syn.cfg).items():
        assert sum(shares.values()) == 1, pool
    # a monthly GPU-hour budget per team, its entitlement of the 13 nodes x 8 GPUs at the start for 730.5 h:
    # llm-pretrain 0.22 x 104 x 730.5 = 16,714 -> 16,700; vision 0.10 x 104 x 730.5 = 7,597 -> 7,600
    budgets = {b[2]: b[3:6] for b in gov.budgets}
    assert set(budgets) == {t.name for t in syn.cfg.teams}
    assert budgets["llm-pretrain"] == ("month", "gpu_hours", 16700) and budgets["vision"][2] == 7600


def test_build_is_atomic_and_reruns_are_detected(tmp_path):
    cfg = tiny(days=7)
    db = tmp_path / "demo.duckdb"
    info = build.build(db, cfg)
    assert db.exists() and info["jobs"] > 100
    assert build.is_up_to_date(db, cfg)
    assert not build.is_up_to_date(db, replace(cfg, seed=99))
    import duckdb
    con = duckdb.connect(str(db), read_only=True)
    runs = con.sql("SELECT source, count(*), sum(rejected) FROM ingest_runs WHERE status = 'ok' GROUP BY ALL").fetchall()
    con.close()
    by = {r[0]: r for r in runs}
    assert {"sacct", "nodes", "events", "governance", "dcgm", "squeue"} <= set(by)
    assert all(r[2] == 0 for r in runs)
    assert not list(tmp_path.glob("demo.duckdb.tmp*"))


def test_demo_command_builds_once_and_reuses_an_up_to_date_demo(tmp_path, capsys):
    import gpuledger
    db = tmp_path / "demo.duckdb"
    argv = ["--db", str(db), "demo", "--scale", "0.25", "--days", "5", "--no-serve"]
    assert gpuledger.main(argv) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(db) and "built" in err
    first = db.stat().st_mtime_ns
    assert gpuledger.main(argv) == 0
    out, err = capsys.readouterr()
    assert "up to date" in err and db.stat().st_mtime_ns == first
    assert not build.is_up_to_date(db, config.for_scale(0.25, seed=2, days=5))   # another seed would rebuild
    assert gpuledger.main(["--db", str(db), "demo", "--scale", "-1", "--no-serve"]) == 2


def test_cpus_and_memory_fit_the_nodes_jobs_run_on(syn):
    inst, jobs, lay, cfg = syn.inst, syn.jobs, syn.layout, syn.cfg
    j = inst.job[inst.gpu_inst]
    pool = lay.pool[inst.gpu_node]
    node_cpus = np.array([p.cpus for p in cfg.pools])[pool]
    node_mem = np.array([p.mem_mib for p in cfg.pools])[pool]
    assert np.all(jobs.cpus[j] // jobs.nodes[j] <= node_cpus)
    assert np.all(jobs.mem_mib[j] // jobs.nodes[j] <= node_mem)
