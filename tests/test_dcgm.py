"""`ingest dcgm`: scraped dcgm-exporter /metrics text, on the real samples and on the edge cases they imply."""
from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import dcgm, telemetry_store
from ingest.errors import InputError

from conftest import FIXTURES
from telemetry_fixtures import at, load_readings, readings

TEL = FIXTURES / "telemetry"
SCRAPE = "2026-07-14T08:00:00Z"


def _ingest(con, name, **kw):
    return dcgm.ingest_path(con, str(TEL / name), telemetry_store.TelemetryOptions(**kw.pop("opts", {})),
                            scrape_time=kw.pop("scrape_time", SCRAPE), **kw)


def _counts(s):
    return s["read"], s["loaded"], s["skipped"], s["rejected"]


def test_datadog_t4_scrape(con):
    s = _ingest(con, "datadog-dcgm-metrics-t4.prom")
    # 60 # HELP/# TYPE lines, 2 "# NOTE" comments, 24 metrics gpuledger does not use, 6 readings loaded (the
    # clock-throttle reasons among them, kept as events); the row-remap reading names no device: rejected
    assert _counts(s) == (92, 6, 85, 1)
    assert s["skip_reasons"] == {"# HELP/# TYPE/# UNIT line": 60, "comment line": 2,
                                 "metric not used by gpuledger": 23}
    assert s["reject_examples"] == [f"{TEL / 'datadog-dcgm-metrics-t4.prom'}:89: field Hostname: no Hostname/"
                                    "hostname label and no --node given"]
    assert con.sql("""SELECT cluster, node, gpu, ts, interval_s, gpu_util, fb_used_mib, power_w, temp_c, xid, n_raw
                      FROM gpu_samples""").fetchall() == [
        ("default", "424773df46e0", "0", dt.datetime(2026, 7, 14, 8), 60, 0.0, 0.0, 8.969, 25.0, 0, 1)]
    assert con.sql("SELECT uuid, model FROM gpu_devices").fetchall() == [
        ("GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", "Tesla T4")]


def test_a100_mig_slice_is_its_own_device(con):
    s = _ingest(con, "nvidia-cloud-native-docs-a100-mig-prof.prom", opts={"cluster": "lab"})
    assert _counts(s) == (22, 9, 13, 0)
    rows = con.sql("""SELECT gpu, gr_engine_active, tensor_active, fb_used_mib, power_w, temp_c, xid
                      FROM gpu_samples ORDER BY gpu""").fetchall()
    assert rows == [("0", 0.99563, 0.92926, 4845.0, 409.692, 61.0, 0),
                    ("0/mig13", 0.995687, 0.930433, None, None, None, 0)]
    assert con.sql("SELECT gpu, gpu_index, mig_instance, mig_profile FROM gpu_devices ORDER BY gpu").fetchall() == [
        ("0", 0, None, None), ("0/mig13", 0, 13, "1g.5gb")]


def test_readme_scrapes_without_hostname_use_node_and_reject_elisions(con):
    s = _ingest(con, "dcgm-exporter-readme-k8s.prom", opts={"node": "k8s-node-1"})
    # the README's `...` lines are not samples; SM_CLOCK, MEM_CLOCK, MEMORY_TEMP are not used
    assert _counts(s) == (12, 0, 10, 2)
    assert s["reject_examples"][0].endswith("dcgm-exporter-readme-k8s.prom:7: expected `metric{labels} value [timestamp]`")
    assert con.sql("SELECT raw FROM rejects").fetchall() == [("...",), ("...",)]


def test_blank_sentinel_of_the_readme_is_skipped_not_stored(con, tmp_path):
    """The README's MEMORY_TEMP reads 9223372036854775794 (DCGM_INT64_NOT_SUPPORTED); on a metric we use it
    must be skipped with its name, never stored as a temperature."""
    text = (TEL / "dcgm-exporter-readme-quickstart.prom").read_text().replace("DCGM_FI_DEV_MEMORY_TEMP",
                                                                               "DCGM_FI_DEV_GPU_TEMP")
    f = tmp_path / "quickstart-gpu-temp.prom"
    f.write_text(text)
    s = dcgm.ingest_path(con, f"{f}@{SCRAPE}", telemetry_store.TelemetryOptions(node="n1"))
    assert s["skip_reasons"]["DCGM blank sentinel (INT64 NOT_SUPPORTED)"] == 1
    assert s["loaded"] == 0 and con.sql("SELECT count(*) FROM gpu_samples").fetchall() == [(0,)]


def test_values_scale_and_every_kind_of_bad_reading(con):
    base = 'gpu="0",Hostname="h1"'
    t = int((at(0) - dt.datetime(1970, 1, 1)).total_seconds())
    lines = [
        f"DCGM_FI_DEV_GPU_UTIL{{{base}}} 87 {t}",                          # percent -> 0.87
        f"DCGM_FI_PROF_SM_ACTIVE{{{base}}} 0.42 {t}",                      # ratio stays
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{base}}} NaN {t}",
        f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{base}}} 140737488355328 {t}",  # FP64 blank
        f"DCGM_FI_DEV_FB_USED{{{base}}} 2147483634 {t}",                   # INT32 not supported
        f"DCGM_FI_DEV_POWER_USAGE{{{base}}} 9223372036854775792 {t}",      # INT64 blank
        f"DCGM_FI_DEV_GPU_TEMP{{{base}}} hot {t}",
        f"DCGM_FI_DEV_GPU_UTIL{{{base}}} 150 {t + 60}",
        f"DCGM_FI_PROF_SM_ACTIVE{{{base}}} +Inf {t + 60}",
        f"DCGM_FI_DEV_GPU_UTIL{{{base}}} 5 {t * 1000}",                    # milliseconds in OpenMetrics
        f"DCGM_FI_DEV_GPU_UTIL{{Hostname=\"h1\"}} 5 {t}",
        f"DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} 5 {t}",
        "# EOF",
    ]
    s = load_readings(con, "\n".join(lines) + "\n")
    assert _counts(s) == (13, 2, 5, 6)
    assert s["skip_reasons"] == {"# EOF marker": 1, "NaN reading (no value)": 1,
                                 "DCGM blank sentinel (FP64 BLANK)": 1, "DCGM blank sentinel (INT32 NOT_SUPPORTED)": 1,
                                 "DCGM blank sentinel (INT64 BLANK)": 1}
    assert con.sql("SELECT gpu_util, sm_active, gr_engine_active, tensor_active, fb_used_mib, power_w FROM gpu_samples"
                   ).fetchall() == [(0.87, 0.42, None, None, None, None)]
    rejects = con.sql("SELECT line_no, field, reason FROM rejects ORDER BY line_no").fetchall()
    assert [(n, f) for n, f, _ in rejects] == [(7, "value"), (8, "value"), (9, "value"), (10, "timestamp"),
                                                (11, "gpu"), (12, "Hostname")]
    assert rejects[1][2] == "out of range for gpu_util [0.0, 100.0]: 150"
    assert "OpenMetrics timestamps are seconds" in rejects[3][2]


def test_text_format_timestamps_are_milliseconds(con):
    ms = int((at(1) - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
    s = load_readings(con, f'DCGM_FI_DEV_GPU_UTIL{{gpu="2",hostname="gpu07.example.org"}} 42 {ms}\n')
    assert s["loaded"] == 1
    assert con.sql("SELECT node, gpu, ts, gpu_util FROM gpu_samples").fetchall() == [("gpu07", "2", at(1), 0.42)]


def test_instance_label_names_the_node_when_there_is_no_hostname(con):
    s = dcgm.ingest_bytes(con, b'DCGM_FI_DEV_GPU_UTIL{gpu="1",instance="gpu09:9400",job="dcgm"} 3\n', "x.prom",
                          telemetry_store.TelemetryOptions(), scrape_time=at(0))
    assert s["loaded"] == 1 and con.sql("SELECT node FROM gpu_samples").fetchall() == [("gpu09",)]


def test_missing_timestamp_without_scrape_time_is_a_clear_error(con):
    with pytest.raises(InputError, match=r"datadog-dcgm-metrics-t4.prom:3: sample has no timestamp"):
        dcgm.ingest_path(con, str(TEL / "datadog-dcgm-metrics-t4.prom"), telemetry_store.TelemetryOptions())


def test_an_nvidia_smi_csv_log_is_named_with_its_reader(con):
    """Every line of it was rejected as "not a metric name"; now one line names the reader, and nothing is written."""
    log = TEL / "utkuozdemir-h200-query-gpu-load.csv"
    with pytest.raises(InputError, match=r"load.csv: this is an `nvidia-smi --query-gpu \.\.\. --format=csv` log: "
                                         r"load it with `gpuledger ingest nvidia-smi`$"):
        dcgm.ingest_path(con, f"{log}@{SCRAPE}", telemetry_store.TelemetryOptions())
    assert con.sql("SELECT count(*) FROM ingest_runs").fetchall() == [(0,)]


def test_file_at_time_and_missing_files(con):
    s = dcgm.ingest_path(con, f"{TEL / 'datadog-dcgm-metrics-t4.prom'}@2026-07-14T10:00:00+02:00",
                         telemetry_store.TelemetryOptions())
    assert s["loaded"] == 6 and con.sql("SELECT ts FROM gpu_samples").fetchall() == [(dt.datetime(2026, 7, 14, 8),)]
    with pytest.raises(InputError, match="no such file"):
        dcgm.ingest_path(con, "/nonexistent.prom@2026-07-14", telemetry_store.TelemetryOptions())
    with pytest.raises(InputError, match="not a time"):
        dcgm.ingest_path(con, f"{TEL / 'datadog-dcgm-metrics-t4.prom'}@yesterday", telemetry_store.TelemetryOptions())


def test_reingest_is_idempotent_and_new_metrics_fill_rows(con):
    util = readings({("n1", 0): {m: 50 for m in range(10)}})
    first = load_readings(con, util)
    again = load_readings(con, util)
    assert (first["inserted"], again["inserted"], again["updated"], again["unchanged"]) == (10, 0, 0, 10)
    sm = readings({("n1", 0): {m: 0.25 for m in range(5)}}, metric="DCGM_FI_PROF_SM_ACTIVE")
    fill = load_readings(con, sm)
    assert (fill["inserted"], fill["updated"], fill["unchanged"]) == (0, 5, 0)
    assert con.sql("SELECT count(*), count(sm_active), avg(gpu_util) FROM gpu_samples").fetchall() == [(10, 5, 0.5)]


def test_sub_minute_readings_fold_into_the_minute(con):
    t = int((at(0) - dt.datetime(1970, 1, 1)).total_seconds())
    text = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="n1"}} {v} {t + 15 * i}\n'
                   for i, v in enumerate([10, 20, 30, 40, 50, 60, 70, 80])) + "# EOF\n"
    s = load_readings(con, text)
    assert s["loaded"] == 8
    assert con.sql("SELECT ts, gpu_util, n_raw, interval_s FROM gpu_samples ORDER BY ts").fetchall() == [
        (at(0), 0.25, 4, 60), (at(1), pytest.approx(0.65), 4, 60)]


def test_rollup_energy_and_coarse_resolution(con):
    load_readings(con, readings({("n1", 0, None, "DCGM_FI_DEV_GPU_UTIL"): {m: 10 * m for m in range(10)},
                                 ("n1", 0, None, "DCGM_FI_DEV_POWER_USAGE"): {m: 100 for m in range(10)}}))
    assert con.sql("""SELECT bucket, covered_s, n_rows, gpu_util_min, gpu_util_mean, gpu_util_max, energy_j
                      FROM gpu_samples_5m ORDER BY bucket""").fetchall() == [
        (at(0), 300, 5, 0.0, pytest.approx(0.2), 0.4, 30000.0), (at(5), 300, 5, 0.5, pytest.approx(0.7), 0.9, 30000.0)]
    # a device read every 10 minutes: each row stands for 10 minutes and fills two buckets
    load_readings(con, readings({("n2", 0): {0: 20, 10: 40, 20: 60}}))
    assert con.sql("SELECT DISTINCT interval_s FROM gpu_samples WHERE node = 'n2'").fetchall() == [(600,)]
    assert con.sql("SELECT count(*), sum(covered_s) FROM gpu_samples_5m WHERE node = 'n2'").fetchall() == [(6, 1800)]


def test_xid_errors_become_events(con):
    load_readings(con, readings({("n1", 3): {0: 0, 1: 0, 2: 79, 3: 79, 4: 0, 5: 48}},
                                metric="DCGM_FI_DEV_XID_ERRORS"))
    assert con.sql("SELECT gpu, ts, kind, code FROM gpu_events ORDER BY ts").fetchall() == [
        ("3", at(2), "xid", 79), ("3", at(5), "xid", 48)]
    # re-reading the same minutes does not duplicate events
    load_readings(con, readings({("n1", 3): {2: 79, 3: 79}}, metric="DCGM_FI_DEV_XID_ERRORS"))
    assert con.sql("SELECT count(*) FROM gpu_events").fetchall() == [(2,)]


def test_shared_gpu_keeps_every_job_label_and_pod_labels(con):
    load_readings(con, readings({("n1", 0, 'hpc_job="102"'): {0: 30}, ("n1", 0, 'hpc_job="101"'): {0: 30},
                                 ("n1", 1, 'pod="trainer-0",namespace="ml",container="main"'): {0: 5}}))
    assert con.sql("SELECT gpu, hpc_jobs, pod, namespace, container FROM gpu_samples ORDER BY gpu").fetchall() == [
        ("0", "101,102", None, None, None), ("1", None, "trainer-0", "ml", "main")]


def test_cli_strict_and_scrape_time(run_cli):
    code, out, err = run_cli("ingest", "dcgm", str(TEL / "dcgm-exporter-readme-quickstart.prom"),
                             "--scrape-time", SCRAPE, "--node", "n1", "--strict", "--no-refresh")
    assert code == 1 and "rejected 2" in err and "quickstart.prom:7: expected" in err
    code, out, err = run_cli("ingest", "dcgm", f"{TEL / 'datadog-dcgm-metrics-t4.prom'}@{SCRAPE}", "--no-refresh")
    assert code == 0 and "loaded 6 into 1 per-minute GPU samples (new 1" in err


LINE_KINDS = {
    "good": 'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",Hostname="h"}} 5 {t}',
    "nan": 'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",Hostname="h"}} NaN {t}',
    "sentinel": 'DCGM_FI_DEV_FB_USED{{gpu="{i}",Hostname="h"}} 9223372036854775794 {t}',
    "unused": 'DCGM_FI_DEV_SM_CLOCK{{gpu="{i}",Hostname="h"}} 1410 {t}',
    "comment": "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
    "blank": "",
    "garbage": "this is not a sample",
    "nogpu": 'DCGM_FI_DEV_GPU_UTIL{{Hostname="h"}} 5 {t}',
    "badvalue": 'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",Hostname="h"}} busy {t}',
}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(LINE_KINDS)), min_size=1, max_size=40))
def test_every_line_is_loaded_skipped_or_rejected(con, kinds):
    t = int((at(0) - dt.datetime(1970, 1, 1)).total_seconds())
    text = "\n".join(LINE_KINDS[k].format(i=i, t=t) for i, k in enumerate(kinds)) + "\n"
    s = dcgm.ingest_bytes(con, text.encode(), "prop.prom", telemetry_store.TelemetryOptions(), fmt="openmetrics")
    assert s["read"] == len(kinds) == s["loaded"] + s["skipped"] + s["rejected"]
    assert s["loaded"] == kinds.count("good")
    assert s["rejected"] == sum(kinds.count(k) for k in ("garbage", "nogpu", "badvalue"))


def test_several_files_load_one_run_each_parsed_ahead(con, tmp_path):
    a, b = tmp_path / "a.om", tmp_path / "b.om"
    a.write_text(readings({("n1", 0): {m: 10 for m in range(5)}}))
    b.write_text(readings({("n2", 0): {m: 20 for m in range(5)}}))
    out = list(dcgm.ingest_paths(con, [str(a), str(b)], telemetry_store.TelemetryOptions()))
    assert [(s["input"], s["loaded"]) for s in out] == [(str(a), 5), (str(b), 5)]
    assert con.sql("SELECT count(DISTINCT run_id) FROM ingest_runs WHERE source = 'dcgm'").fetchall() == [(2,)]
    gen = dcgm.ingest_paths(con, [str(a), str(tmp_path / "missing.om")], telemetry_store.TelemetryOptions())
    assert next(gen)["unchanged"] == 5
    with pytest.raises(InputError, match="missing.om: no such file"):
        next(gen)
