"""`ingest prometheus --aggregate` against a real Prometheus (Debian's package): the push-down pull and the raw
pull of the same history give the same efficiency figures.

The series carry the label sets of real dcgm-exporter output (tests/fixtures/telemetry, the A100 sample), one GPU
per node on four nodes (``Hostname`` with a domain, as exporters often report it), over three hours at one-minute
steps. The jobs start and end off the minute and mid-interval: an idle stretch crossing an interval boundary
(n1), a handover with 30 s between two jobs and no minute at zero (n2), a 4.5-minute job (n3), a job the
exporter labels, starting mid-interval (n4).
"""
from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import prometheus, prometheus_pushdown, sacct, telemetry_store, warehouse
from ingest.errors import InputError
from models.marts import efficiency

import prometheus_server
from test_prometheus import _real

pytestmark = pytest.mark.prometheus

T0 = int(dt.datetime(2026, 7, 14, 10, 0, tzinfo=dt.timezone.utc).timestamp())
MINUTES = 180
GR, FB, POWER = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"

JOBS = """JobID|JobIDRaw|Cluster|Partition|Account|User|Submit|Start|End|State|NNodes|NCPUS|AllocTRES|NodeList
301|301|lab|a100|physics|alice|2026-07-14T10:00:00|2026-07-14T10:07:20|2026-07-14T11:13:40|COMPLETED|1|8|cpu=8,gres/gpu=1,node=1|n1
302|302|lab|a100|bio|bob|2026-07-14T10:00:00|2026-07-14T10:03:30|2026-07-14T10:48:10|COMPLETED|1|8|cpu=8,gres/gpu=1,node=1|n2
303|303|lab|a100|bio|bob|2026-07-14T10:00:00|2026-07-14T10:48:40|2026-07-14T12:21:05|COMPLETED|1|8|cpu=8,gres/gpu=1,node=1|n2
304|304|lab|a100|physics|carol|2026-07-14T11:00:00|2026-07-14T11:31:15|2026-07-14T11:35:50|COMPLETED|1|8|cpu=8,gres/gpu=1,node=1|n3
305|305|lab|a100|physics|carol|2026-07-14T10:00:00|2026-07-14T10:22:30|2026-07-14T11:52:30|COMPLETED|1|8|cpu=8,gres/gpu=1,node=1|n4
"""


def _activity(node: str, m: int) -> float:
    """GR_ENGINE_ACTIVE of the node's GPU in minute ``m`` (10:00 + m); a job holds minutes
    [ceil(start), ceil(end))."""
    if node == "n1":                      # job 301: minutes 8..73 at 0.8, idle 41..47 (across 10:45)
        return 0.8 if 8 <= m < 74 and not 41 <= m <= 47 else 0.0
    if node == "n2":                      # 302: 4..48 at 0.3; 303 from minute 49 at 0.9, no zero between
        return 0.3 if 4 <= m < 49 else 0.9 if 49 <= m < 142 else 0.0
    if node == "n3":                      # 304: minutes 92..95
        return 0.6 if 92 <= m < 96 else 0.0
    return 0.5 + 0.1 * (m % 3) if 23 <= m < 113 else 0.0     # n4, 305: 23..112, labelled hpc_job="305"


def _history() -> str:
    real = {metric: labels for metric, labels, _ in _real("nvidia-cloud-native-docs-a100-mig-prof.prom")
            if "GPU_I_ID" not in labels}
    power = {"n1": 250.0, "n2": 300.0, "n3": 80.5, "n4": 120.0}
    fams: dict[str, list] = {GR: [], FB: [], POWER: []}
    for node in ("n1", "n2", "n3", "n4"):
        for metric in fams:
            base = real[metric].replace('Hostname="ub20-a100-k8s"', f'Hostname="{node}.cluster.example"')
            if node != "n4":
                value = {GR: lambda m: _activity(node, m), FB: lambda m: 4845.0 if _activity(node, m) else 0.0,
                         POWER: lambda m: power[node]}[metric]
                fams[metric].append((base, [(T0 + 60 * m, value(m)) for m in range(MINUTES)]))
                continue
            inside = [m for m in range(MINUTES) if 23 <= m < 113]
            outside = [m for m in range(MINUTES) if not 23 <= m < 113]
            for labels, minutes in ((base + ',hpc_job="305"', inside), (base, outside)):
                value = {GR: lambda m: _activity(node, m), FB: lambda m: 4845.0 if _activity(node, m) else 0.0,
                         POWER: lambda m: power[node]}[metric]
                fams[metric].append((labels, [(T0 + 60 * m, value(m)) for m in minutes]))
    return prometheus_server.openmetrics(fams)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    server = prometheus_server.start(_history(), tmp_path_factory.mktemp("prom"))
    yield server
    server.stop()


def _pull(path, url: str, tmp_path, aggregate: int | None):
    con = warehouse.connect(str(path))
    jobs = tmp_path / "jobs.psv"
    jobs.write_text(JOBS)
    sacct.ingest_path(con, str(jobs), sacct.SacctOptions())
    q = prometheus.QueryOptions(url=url, start=dt.datetime(2026, 7, 14, 10, 0), end=dt.datetime(2026, 7, 14, 12, 59),
                                metrics=(GR, FB, POWER))
    opts = telemetry_store.TelemetryOptions(cluster="lab")
    s = prometheus_pushdown.ingest(con, q, opts, aggregate) if aggregate else prometheus.ingest(con, q, opts)
    assert s["rejected"] == 0
    efficiency.build(con, full=True)
    eff = {r[0]: r[1:] for r in con.sql("""
        SELECT j.job_id, e.alloc_gpu_s, e.telemetry_gpu_s, e.act_mean, e.idle_alloc_gpu_s, e.fb_max_mib, e.energy_j,
               e.method FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)""").fetchall()}
    return con, q.stats, eff


def test_push_down_gives_the_raw_pull_figures(prom, tmp_path):
    raw_con, raw_stats, raw = _pull(tmp_path / "raw.duckdb", prom.url, tmp_path, None)
    agg_con, agg_stats, agg = _pull(tmp_path / "agg.duckdb", prom.url, tmp_path, 300)
    # by hand, from the raw pull: 301 covers 66 min 20 s, active (58 min + 40 s) x 0.8, idle the 7 zero minutes
    assert raw["301"][1:4] == pytest.approx((3980.0, (58 * 60 + 40) * 0.8 / 3980, 420.0))
    # 302: 44 minutes and 10 s at 0.3 (the model leaves its first half-minute, 10:03:30-10:04, uncovered)
    assert raw["302"][1:3] == pytest.approx((2650.0, (44 * 60 + 10) * 0.3 / 2650))
    # 304: 45 s of minute 91 at zero, 3 minutes and 50 s at 0.6
    assert raw["304"][2] == pytest.approx((180 + 50) * 0.6 / 275)
    assert raw["305"][6] == "exporter-label"
    assert set(agg) == set(raw) == {"301", "302", "303", "304", "305"}
    for job, (alloc, tel, mean, idle, fb, energy, method) in raw.items():
        a = agg[job]
        assert (a[0], a[6]) == (alloc, method)
        assert a[1] == pytest.approx(tel)
        assert abs(a[2] - mean) <= 0.005, job          # the target: within 0.5 points of activity
        assert a[3] == pytest.approx(idle, rel=0.01)   # idle-allocated within 1 %
        assert a[4] == fb and a[5] == pytest.approx(energy)
    # exact here: every edge was mixed (asked minute by minute) or a handover
    assert {j: round(v[2], 9) for j, v in agg.items()} == {j: round(v[2], 9) for j, v in raw.items()}
    assert agg_stats["handover_intervals"] == 1                       # 10:48 on n2
    assert agg_stats["points"] < raw_stats["points"] / 2
    # whole intervals stored as one row each
    assert agg_con.sql("SELECT count(*) FROM gpu_samples WHERE interval_s = 300").fetchall()[0][0] > 0


def test_a_second_pull_over_raw_rows_counts_no_minute_twice(prom, tmp_path):
    """Raw pull, then push-down over the same hours: the whole intervals' rows replace the raw minutes inside
    them, and the figures stay the raw pull's."""
    con, _, raw = _pull(tmp_path / "both.duckdb", prom.url, tmp_path, None)
    con.close()
    con, stats, both = _pull(tmp_path / "both.duckdb", prom.url, tmp_path, 300)
    assert con.sql("""SELECT count(*) FROM gpu_samples a JOIN gpu_samples b USING (cluster, node, gpu)
                      WHERE b.ts > a.ts AND b.ts < a.ts + to_seconds(a.interval_s)""").fetchall() == [(0,)]
    for job, row in raw.items():
        assert both[job][1] == pytest.approx(row[1]) and abs(both[job][2] - row[2]) <= 1e-9


def test_handover_without_the_warehouse_jobs_is_an_interval_mean(prom, tmp_path):
    """Without the jobs (telemetry pulled first), the handover interval is one row: its mean (0.3 x 3 + 0.9 x 2)
    / 5 stands for every minute, and 302's mean moves by (2 minutes + 10 s) x 0.24 / 2680 s, past 0.5 points: the
    apportioning docs/METRICS.md states (pull after `ingest sacct`)."""
    con = warehouse.connect(str(tmp_path / "nojobs.duckdb"))
    q = prometheus.QueryOptions(url=prom.url, start=dt.datetime(2026, 7, 14, 10, 0),
                                end=dt.datetime(2026, 7, 14, 12, 59), metrics=(GR,), match='{Hostname=~"n2.*"}')
    prometheus_pushdown.ingest(con, q, telemetry_store.TelemetryOptions(cluster="lab"), 300)
    assert q.stats["handover_intervals"] == 0
    assert con.sql("""SELECT interval_s, gr_engine_active FROM gpu_samples WHERE node = 'n2'
                      AND ts = '2026-07-14 10:46:00'""").fetchall() == [(300, pytest.approx((0.3 * 3 + 0.9 * 2) / 5))]


def test_cli_aggregate_and_its_errors(prom, run_cli, db_path, tmp_path):
    f = tmp_path / "jobs.psv"
    f.write_text(JOBS)
    assert run_cli("ingest", "sacct", str(f), "--no-refresh")[0] == 0
    code, out, err = run_cli("ingest", "prometheus", "--url", prom.url, "--start", "2026-07-14T10:00:00Z",
                             "--end", "2026-07-14T12:59:00Z", "--aggregate", "--cluster", "lab")
    assert code == 0, err
    con = warehouse.connect(db_path)
    assert con.sql("SELECT json_extract(options, '$.aggregate_s')::INT FROM ingest_runs WHERE source = 'prometheus'"
                   ).fetchall() == [(300,)]
    con.close()
    code, out, err = run_cli("ingest", "prometheus", "--url", prom.url, "--start", "2026-07-14T10:00:00Z",
                             "--end", "2026-07-14T11:00:00Z", "--aggregate", "90s")
    assert code == 1 and "--aggregate: interval must be whole minutes" in err
    code, out, err = run_cli("ingest", "prometheus", "--url", prom.url, "--start", "2026-07-14T10:00:00Z",
                             "--end", "2026-07-14T11:00:00Z", "--aggregate", "soon")
    assert code == 1 and "--aggregate: not an interval: 'soon'" in err


def test_query_shapes():
    assert prometheus_pushdown.interval_ends(T0, T0 + 59 * 60, 300) == (T0, T0 + 3600)
    assert prometheus_pushdown.interval_ends(T0 + 1, T0 + 301, 300) == (T0 + 300, T0 + 600)
    assert prometheus_pushdown.expression(FB, FB, 300) == f"max_over_time({FB}[299999ms])"
    # GPU_UTIL is percent: its zero is below 0.5
    assert "< 0.5) and" in prometheus_pushdown.mixed_expression("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL", 300)
    assert prometheus_pushdown.mixed_expression(GR, "x", 300).startswith("(count_over_time(x[299999ms]) < 5) or")
    # only regex metacharacters escaped: a plain alternation of UUIDs stays a set Prometheus looks up in its index
    assert prometheus_pushdown.node_matcher(["h.x", "g-1"]) == 'Hostname=~"(g-1|h\\\\.x)([.].*)?"'
    assert prometheus_pushdown.uuid_matcher(["GPU-b-2", "GPU-a-1"]) == 'UUID=~"GPU-a-1|GPU-b-2"'
    with pytest.raises(InputError, match="--aggregate"):
        prometheus_pushdown.parse_interval("0m")


def test_service_collector_pushes_down_when_configured(prom, tmp_path):
    """The collector's ``aggregate`` option: the pull's audit row says push-down, and the rows are the CLI's."""
    from models.service import sources
    con = warehouse.connect(str(tmp_path / "svc.duckdb"))
    opts = {k: key.default for k, key in sources.KINDS["prometheus"].keys.items()}
    since = int((warehouse.utcnow() - dt.datetime(2026, 7, 14, 10, 0)).total_seconds())   # the first pull: 10:00
    opts.update(url=prom.url, metrics=[GR], lookback=since - since % 60, max_window=3 * 3600, aggregate=300)
    s = sources.collect_prometheus(con, sources.Where("lab"), opts)
    assert s["rejected"] == 0 and s["loaded"] > 0
    assert con.sql("SELECT json_extract(options, '$.aggregate_s')::INT FROM ingest_runs").fetchall() == [(300,)]
    assert con.sql("SELECT count(*) FROM gpu_samples WHERE interval_s = 300").fetchall()[0][0] > 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.3, 0.75, 1.0]), min_size=5, max_size=40),
       st.integers(0, 4))
def test_layout_keeps_each_intervals_sum_and_zero_minutes(values, gap):
    """Whatever the minutes, the stored rows (whole intervals spread evenly, mixed intervals as read) keep every
    interval's activity sum and the set of minutes at zero: what the efficiency model reads. The store's answers
    are computed here as Prometheus computes them (mean per interval; mixed = some < 0.005 and some not, or a
    minute missing)."""
    con = duckdb.connect()
    minutes = [m for m in range(len(values)) if not (gap and m == gap)]      # one reading may be missing
    s0 = T0 + 300                                                              # rows T0+60 .. T0+300: interval 1
    ts = {m: T0 + 60 + 60 * m for m in minutes}
    ident = telemetry_store.series_identity(GR, {"Hostname": "n1", "gpu": "0"},
                                            telemetry_store.TelemetryOptions(), "lab")
    ser = telemetry_store.series_table([{**ident, "sid": 0, "series_text": GR + '{Hostname="n1",gpu="0"}'}])
    ag, ed = [], []
    for s in range(s0, T0 + 60 + 60 * len(values) + 300, 300):
        inside = [m for m in minutes if s - 300 < ts[m] <= s]
        if not inside:
            continue
        vals = [values[m] for m in inside]
        ag.append((0, s, sum(vals) / len(vals)))
        if len(inside) < 5 or (min(vals) < 0.005 <= max(vals)):
            ed += [(GR + '{Hostname="n1",gpu="0"}', ts[m], values[m]) for m in inside]
    con.register("_ag", pa.table({"sid": pa.array([a[0] for a in ag], pa.int32()), "s": [a[1] for a in ag],
                                  "v": [a[2] for a in ag]}))
    con.register("_ed", pa.table({"series_text": pa.array([e[0] for e in ed], pa.string()),
                                  "ts": pa.array([e[1] for e in ed], pa.int64()), "v": [e[2] for e in ed]}))
    con.register("_as", ser)
    con.execute(prometheus_pushdown._layout_sql(300, 60))
    spread = {}
    for t, v, coarse in con.sql("SELECT ts, value, coarse FROM _lay").fetchall():
        for k in range(5 if coarse else 1):
            spread[int(t) + 60 * k] = v
    raw = {ts[m]: values[m] for m in minutes}
    for s in {a[1] for a in ag}:
        window = range(s - 240, s + 1, 60)
        assert sum(spread.get(t, 0.0) for t in window) == pytest.approx(sum(raw.get(t, 0.0) for t in window))
        assert {t for t in window if spread.get(t, 1) < 0.005} == {t for t in window if raw.get(t, 1) < 0.005}


def test_chunked_windows_store_the_same_rows(prom, tmp_path):
    """Windows of at most 4 intervals (ten windows instead of one) store the same rows."""
    def rows(path, **kw):
        con = warehouse.connect(str(path))
        jobs = tmp_path / "jobs.psv"
        jobs.write_text(JOBS)
        sacct.ingest_path(con, str(jobs), sacct.SacctOptions())
        q = prometheus.QueryOptions(url=prom.url, start=dt.datetime(2026, 7, 14, 10, 0),
                                    end=dt.datetime(2026, 7, 14, 12, 59), metrics=(GR, POWER), **kw)
        prometheus_pushdown.ingest(con, q, telemetry_store.TelemetryOptions(cluster="lab"), 300)
        return (q.stats["queries"], q.stats["batches"]), con.sql(
            """SELECT node, gpu, ts, interval_s, gr_engine_active, power_w, hpc_jobs FROM gpu_samples
               ORDER BY ALL""").fetchall()
    (n_one, b_one), one = rows(tmp_path / "one.duckdb")
    (n_many, b_many), many = rows(tmp_path / "many.duckdb", max_points=4)
    assert n_many > n_one and many == one and len(one) > 0
    assert b_one == b_many == 1                     # ten windows held, stored in one batch
    # a bound of 200 points a query (smaller windows) stores the held windows in three batches: the same rows
    (_, b_few), few = rows(tmp_path / "few.duckdb", max_query_points=200)
    assert b_few > 1 and few == one
