"""`ingest prometheus` against a real Prometheus 2.42 (Debian package) backfilled from real DCGM samples.

The OpenMetrics history is built from the label sets and values of real dcgm-exporter output
(tests/fixtures/telemetry: an A100 with a MIG slice, a Tesla T4), laid out over two hours at one-minute steps
in a pattern whose efficiency figures are computed by hand below.
"""
from __future__ import annotations

import datetime as dt
import re
import time

import pytest

from ingest import prometheus, telemetry_store
from ingest.errors import InputError

import prometheus_server
from conftest import FIXTURES

pytestmark = pytest.mark.prometheus

T0 = int(dt.datetime(2026, 7, 14, 10, 0, tzinfo=dt.timezone.utc).timestamp())
MINUTES = 120
LINE = re.compile(r"^(DCGM_FI_\w+)\{(.*)\} (\S+)$")

JOBS = """JobID|JobIDRaw|Cluster|Partition|Account|User|Submit|Start|End|State|NNodes|NCPUS|AllocTRES|NodeList
200|200|lab|a100|physics|alice|2026-07-14T09:55:00|2026-07-14T10:00:00|2026-07-14T12:00:00|COMPLETED|1|8|cpu=8,gres/gpu=1,node=1|ub20-a100-k8s
201|201|lab|a100|bio|bob|2026-07-14T10:25:00|2026-07-14T10:30:00|2026-07-14T11:30:00|COMPLETED|1|4|cpu=4,gres/gpu=1,node=1|ub20-a100-k8s
202|202|lab|t4|bio|bob|2026-07-14T09:59:00|2026-07-14T10:00:00|2026-07-14T12:00:00|COMPLETED|1|4|cpu=4,gres/gpu=1,node=1|424773df46e0
203|203|lab|a100|physics|carol|2026-07-14T09:59:00|2026-07-14T10:00:00|2026-07-14T11:00:00|FAILED|1|4|cpu=4,gres/gpu=2,node=1|gpu-dark
"""


def _real(name: str) -> list[tuple[str, str, float]]:
    """(metric, label text, value) of the real sample lines for the metrics gpuledger uses."""
    out = []
    for line in (FIXTURES / "telemetry" / name).read_text().splitlines():
        m = LINE.match(line)
        if m and m.group(1) in telemetry_store.METRICS:
            out.append((m.group(1), m.group(2), float(m.group(3))))
    return out


def _history() -> str:
    """Two hours of the real series. A100 GPU 0: busy (its real values) for an hour, then idle; XID 79 at
    minutes 90-94. Its MIG slice 13 (labelled hpc_job="201"): busy throughout. T4 on 424773df46e0: GPU_UTIL 0 for
    30 minutes, then 50 %."""
    fams: dict[str, list] = {}
    for metric, labels, v in _real("nvidia-cloud-native-docs-a100-mig-prof.prom"):
        mig = "GPU_I_ID" in labels
        if mig:
            labels += ',hpc_job="201"'
        def val(m, metric=metric, v=v, mig=mig):
            if metric == "DCGM_FI_DEV_XID_ERRORS":
                return 79 if (not mig and 90 <= m < 95) else 0
            if mig or metric in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"):
                return v
            if metric == "DCGM_FI_DEV_POWER_USAGE":
                return v if m < 60 else 60.0
            return v if m < 60 else 0.0
        fams.setdefault(metric, []).append((labels, [(T0 + 60 * m, val(m)) for m in range(MINUTES)]))
    for metric, labels, v in _real("datadog-dcgm-metrics-t4.prom"):
        if 'Hostname="424773df46e0"' not in labels:
            continue
        fams.setdefault(metric, []).append(
            (labels, [(T0 + 60 * m, (0 if m < 30 else 50) if metric == "DCGM_FI_DEV_GPU_UTIL" else v)
                      for m in range(MINUTES)]))
    return prometheus_server.openmetrics(fams)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    server = prometheus_server.start(_history(), tmp_path_factory.mktemp("prom"))
    yield server
    server.stop()


def _window(**kw) -> prometheus.QueryOptions:
    return prometheus.QueryOptions(url=kw.pop("url"), start=dt.datetime(2026, 7, 14, 10, 0),
                                   end=dt.datetime(2026, 7, 14, 11, 59), step_s=60, **kw)


def _load_jobs(con, tmp_path):
    from ingest import sacct
    f = tmp_path / "jobs.psv"
    f.write_text(JOBS)
    sacct.ingest_path(con, str(f), sacct.SacctOptions())


def test_ingest_over_http_values_and_attribution(prom, run_cli, db_path, tmp_path):
    """Values, the one activity scale, MIG devices, XID events and per-job efficiency, all by hand."""
    f = tmp_path / "jobs.psv"
    f.write_text(JOBS)
    assert run_cli("ingest", "sacct", str(f), "--no-refresh")[0] == 0
    code, out, err = run_cli("ingest", "prometheus", "--url", prom.url, "--start", "2026-07-14T10:00:00Z",
                             "--end", "2026-07-14T11:59:00Z", "--step", "60s", "--cluster", "lab")
    assert code == 0, err
    # 14 real series (6 whole-A100, 3 MIG, 5 T4) x 120 minutes, every point loaded
    assert "read 1680 lines: loaded 1680 into 360 per-minute GPU samples (new 360" in err and "rejected 0" in err
    from ingest import warehouse
    con = warehouse.connect(db_path)
    rows = dict(((n, g), (c, lo, hi)) for n, g, c, lo, hi in con.sql(
        "SELECT node, gpu, count(*), min(ts), max(ts) FROM gpu_samples GROUP BY ALL").fetchall())
    assert rows == {("ub20-a100-k8s", "0"): (120, dt.datetime(2026, 7, 14, 10), dt.datetime(2026, 7, 14, 11, 59)),
                    ("ub20-a100-k8s", "0/mig13"): (120, dt.datetime(2026, 7, 14, 10), dt.datetime(2026, 7, 14, 11, 59)),
                    ("424773df46e0", "0"): (120, dt.datetime(2026, 7, 14, 10), dt.datetime(2026, 7, 14, 11, 59))}
    ten30 = con.sql("""SELECT gr_engine_active, tensor_active, fb_used_mib, power_w, temp_c, gpu_util, hpc_jobs
                       FROM gpu_samples WHERE node = 'ub20-a100-k8s' AND gpu = '0' AND ts = '2026-07-14 10:30:00'""")
    assert ten30.fetchall() == [(0.99563, 0.92926, 4845.0, 409.692, 61.0, None, None)]
    assert con.sql("""SELECT gpu_util FROM gpu_samples WHERE node = '424773df46e0' AND ts = '2026-07-14 11:00:00'"""
                   ).fetchall() == [(0.5,)]   # 50 % stored as 0.5
    assert con.sql("SELECT hpc_jobs FROM gpu_samples WHERE gpu = '0/mig13' LIMIT 1").fetchall() == [("201",)]
    assert con.sql("SELECT gpu_index, mig_instance, mig_profile FROM gpu_devices WHERE gpu = '0/mig13'"
                   ).fetchall() == [(0, 13, "1g.5gb")]
    assert con.sql("SELECT node, gpu, ts, code FROM gpu_events").fetchall() == [
        ("ub20-a100-k8s", "0", dt.datetime(2026, 7, 14, 11, 30), 79)]
    eff = {r[0]: r[1:] for r in con.sql("""
        SELECT j.job_id, e.metric, e.method, e.alloc_gpu_s / 3600, e.telemetry_gpu_s / 3600, e.act_mean,
               e.act_p95, e.idle_alloc_gpu_s / 3600, e.fb_max_mib, e.energy_j / 3.6e6
        FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)""").fetchall()}
    # J200: GPU 0 (the MIG slice is labelled for 201): busy 0.99563 for 60 of 120 minutes; idle the other 60
    m, meth, alloc, tel, mean, p95, idle, fb, kwh = eff["200"]
    assert (m, meth, fb) == ("GR_ENGINE_ACTIVE", "node-share", 4845.0)
    assert (alloc, tel, idle) == pytest.approx((2.0, 2.0, 1.0))
    assert mean == pytest.approx(0.99563 / 2) and p95 == pytest.approx(0.99563)
    assert kwh == pytest.approx((409.692 + 60.0) * 3600 / 3.6e6)
    # J201: the slice the exporter labels, 10:30-11:30
    m, meth, alloc, tel, mean, p95, idle, fb, kwh = eff["201"]
    assert (m, meth, fb, kwh) == ("GR_ENGINE_ACTIVE", "exporter-label", None, None)
    assert (alloc, tel, mean, idle) == pytest.approx((1.0, 1.0, 0.995687, 0.0))
    # J202: T4, GPU_UTIL only: 30 minutes at 0 (>= 5 min: idle) then 50 %
    m, meth, alloc, tel, mean, p95, idle, fb, kwh = eff["202"]
    assert (m, meth) == ("GPU_UTIL", "node-share")
    assert (alloc, tel, mean, p95, idle, kwh) == pytest.approx((2.0, 2.0, 0.375, 0.5, 0.5, 8.969 * 2 / 1000))
    # J203 ran where no exporter reports: counted, never 0 % busy
    assert eff["203"][:5] == (None, "none", 2.0, 0.0, None)
    code, out, err = run_cli("report", "efficiency", "--total", "--format", "csv")
    assert code == 0
    assert "exact by exporter label 20.0%" in err and "node share 80.0%" in err
    assert "1 of 4 GPU jobs had no telemetry (2.00 of 7.00 allocated GPU-h)" in err


def test_chunks_stay_under_the_point_limit_and_give_the_same_rows(prom, con, tmp_path):
    _load_jobs(con, tmp_path)
    q = _window(url=prom.url, max_points=50)
    s = prometheus.ingest(con, q, telemetry_store.TelemetryOptions(cluster="lab"))
    # 7 metrics have series; 120 points per series in windows of <= 50 -> 3 windows x 7 queries
    assert q.stats["queries"] == 21 and s["read"] == 1680 and s["loaded"] == 1680 and s["inserted"] == 360
    again = prometheus.ingest(con, _window(url=prom.url), telemetry_store.TelemetryOptions(cluster="lab"))
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 360)
    assert con.sql("SELECT count(*) FROM gpu_samples").fetchall() == [(360,)]


def test_match_selector_limits_the_series(prom, con):
    s = prometheus.ingest(con, _window(url=prom.url, match='{Hostname="424773df46e0"}'),
                          telemetry_store.TelemetryOptions(cluster="lab"))
    assert s["read"] == 5 * MINUTES
    assert con.sql("SELECT DISTINCT node FROM gpu_samples").fetchall() == [("424773df46e0",)]


def test_prometheus_error_is_one_clear_line(prom, run_cli):
    code, out, err = run_cli("ingest", "prometheus", "--url", prom.url, "--start", "2026-07-14T10:00:00Z",
                             "--end", "2026-07-14T11:00:00Z", "--match", '{Hostname=~"("}')
    assert code == 1
    assert err.count("\n") == 1 and err.startswith(f"gpuledger: {prom.url}: Prometheus answered HTTP 400: bad_data")


def test_unreachable_server_fails_fast_with_a_clear_error(run_cli):
    port = prometheus_server.free_port()
    t0 = time.monotonic()
    code, out, err = run_cli("ingest", "prometheus", "--url", f"http://127.0.0.1:{port}", "--start", "2026-07-14",
                             "--end", "2026-07-15", "--retries", "2")
    assert code == 1
    assert err == (f"gpuledger: http://127.0.0.1:{port}: cannot reach Prometheus: connection refused "
                   "(after 3 attempts)\n")
    assert time.monotonic() - t0 < 10   # backoff 0.5 s + 1 s, bounded


def test_credentials_come_from_the_environment_and_are_never_shown(prom, run_cli, db_path, monkeypatch):
    monkeypatch.setenv(prometheus.ENV_TOKEN, "s3cret-token-value")
    url = prom.url.replace("http://", "http://admin:hunter2@")
    code, out, err = run_cli("ingest", "prometheus", "--url", url, "--start", "2026-07-14T10:00:00Z",
                             "--end", "2026-07-14T10:09:00Z", "--cluster", "lab")
    assert code == 0
    from ingest import warehouse
    con = warehouse.connect(db_path)
    audit = " ".join(str(v) for row in con.sql("SELECT * FROM ingest_runs").fetchall() for v in row)
    for secret in ("s3cret", "hunter2", "admin:"):
        assert secret not in out + err + audit
    assert '"auth": "bearer"' in audit


def test_query_range_answer_format_from_the_docs(con):
    """The documented matrix answer: float timestamps, values as strings; a series with no GPU label is
    rejected with its reason, point by point."""
    import json
    doc = json.loads((FIXTURES / "telemetry" / "prometheus-docs-api-query_range-up.json").read_text())
    points, series = prometheus._to_tables(doc["data"]["result"], 1, "DCGM_FI_DEV_GPU_UTIL",
                                           telemetry_store.TelemetryOptions(node="n1"), "c", {}, 0)
    assert points.column("value").to_pylist() == ["1", "1", "1", "0", "0", "1"]
    assert points.column("ts").to_pylist()[0] == 1435781430.781
    from ingest import warehouse
    run = warehouse.IngestRun(con, "prometheus", "docs")
    with run:
        run.lines_read = points.num_rows
        telemetry_store.ingest_readings(con, run, points, telemetry_store.series_table(series), "prometheus",
                                        telemetry_store.TelemetryOptions(node="n1"), interval_s=60)
    assert (run.loaded, run.rejected) == (0, 6)
    assert con.sql("SELECT DISTINCT field, reason FROM rejects").fetchall() == [("gpu", "no gpu label (GPU index)")]


@pytest.mark.parametrize("start,end,step,limit", [(0, 0, 60, 10), (0, 59 * 60, 60, 10), (0, 86400, 15, 11000),
                                                  (100, 100 + 7 * 300, 300, 3)])
def test_chunks_cover_every_point_once_under_the_limit(start, end, step, limit):
    windows = prometheus.chunks(start, end, step, limit)
    points = [t for a, b in windows for t in range(int(a), int(b) + 1, step)]
    assert points == list(range(start, end + 1, step))
    assert all((b - a) / step + 1 <= limit for a, b in windows)


def test_bad_inputs_are_clear():
    with pytest.raises(InputError, match="--step"):
        prometheus.parse_step("soon")
    with pytest.raises(InputError, match="braces"):
        prometheus.matchers('Hostname="x"')
    assert prometheus.redact("https://u:p@prom.example:9090/x") == "https://prom.example:9090/x"
