"""`ingest nvidia-smi`: real `--query-gpu` captures (H100, H200, MIG, L40S, Windows RTX 2080) and variants."""
from __future__ import annotations

import datetime as dt
import re

import pytest

from ingest import nvidia_smi, telemetry_store
from ingest.errors import InputError

from conftest import FIXTURES

TEL = FIXTURES / "telemetry"
H100_LOAD = TEL / "utkuozdemir-h100-80gb-hbm3-query-gpu-load.csv"


def _opts(**kw):
    return telemetry_store.TelemetryOptions(**{"node": "gpu01", **kw})


def _row(con):
    return con.sql("SELECT node, gpu, ts, gpu_util, fb_used_mib, power_w, temp_c FROM gpu_samples").fetchall()


@pytest.mark.parametrize("path", sorted(TEL.glob("utkuozdemir-*-query-gpu-*.csv")), ids=lambda p: p.stem)
def test_every_real_capture_loads_its_one_line(con, path):
    s = nvidia_smi.ingest_path(con, str(path), _opts())
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (2, 1, 1, 0)
    assert s["skip_reasons"] == {"header line": 1}
    util = _row(con)[0][3]
    # under MIG, utilization.gpu is [N/A]: no reading, not 0
    assert (util is None) == ("-mig-" in path.name)


def test_h100_load_values_units_and_local_time(con):
    nvidia_smi.ingest_path(con, str(H100_LOAD), _opts(), tz="Europe/Berlin")
    # 2026/07/14 08:12:53.353 in Berlin (UTC+2) is 06:12:53 UTC; 100 % -> 1.0; units stripped
    assert _row(con) == [("gpu01", "0", dt.datetime(2026, 7, 14, 6, 12), 1.0, 19818.0, 631.95, 59.0)]
    assert con.sql("SELECT uuid, model FROM gpu_devices").fetchall() == [
        ("GPU-00000000-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3")]


def test_nounits_noheader_with_fields_gives_the_same_row(con, tmp_path):
    header, line = H100_LOAD.read_text().splitlines()[:2]
    bare = re.sub(r" (%|MiB|W|MHz|us)(?=,|$)", "", line)           # what `--format=csv,noheader,nounits` prints
    f = tmp_path / "nounits.csv"
    f.write_text(bare + "\n")
    fields = ",".join(re.sub(r"\s*\[.*\]$", "", h.strip()) for h in header.split(","))
    with pytest.raises(InputError, match="no header line; give --fields"):
        nvidia_smi.ingest_path(con, str(f), _opts())
    s = nvidia_smi.ingest_path(con, str(f), _opts(), fields=fields, tz="Europe/Berlin")
    assert s["loaded"] == 1
    assert _row(con) == [("gpu01", "0", dt.datetime(2026, 7, 14, 6, 12), 1.0, 19818.0, 631.95, 59.0)]


def test_small_query_log_with_na_bad_cells_and_repeated_headers(con, tmp_path):
    q = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W], temperature.gpu"
    f = tmp_path / "smi.log"
    f.write_text("\n".join([
        q,
        "2026/07/14 10:00:01.100, 0, GPU-a, NVIDIA A100, 35 %, 1000 MiB, 250.00 W, 50",
        "2026/07/14 10:00:01.100, 1, GPU-b, NVIDIA A100, [N/A], [N/A], [N/A], N/A",     # nothing to read
        "2026/07/14 10:00:01.100, 2, GPU-c, NVIDIA A100, lots, 1 MiB, 60.00 W, 40",     # bad cell
        "2026/07/14 10:00:01.100, 3, GPU-d, NVIDIA A100, 5 %",                           # short line
        "",
        q,                                                                                # a second -l run
        "2026/07/14 10:01:01.100, 0, GPU-a, NVIDIA A100, 45 %, 1200 MiB, 260.00 W, 51",
        "14.07.2026 10:02, 0, GPU-a, NVIDIA A100, 45 %, 1200 MiB, 260.00 W, 51",         # bad time
    ]) + "\n")
    s = nvidia_smi.ingest_path(con, str(f), _opts())
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (9, 2, 4, 3)
    assert s["skip_reasons"] == {"blank line": 1, "header line": 2, "no readings ([N/A])": 1}
    assert con.sql("SELECT line_no, field, reason FROM rejects ORDER BY line_no").fetchall() == [
        (4, "utilization.gpu", "not a number: lots"), (5, None, "expected 8 comma-separated fields, found 5"),
        (9, "timestamp", "not a time: 14.07.2026 10:02")]
    assert con.sql("SELECT gpu, ts, gpu_util, fb_used_mib, power_w FROM gpu_samples ORDER BY ts").fetchall() == [
        ("0", dt.datetime(2026, 7, 14, 10, 0), 0.35, 1000.0, 250.0),
        ("0", dt.datetime(2026, 7, 14, 10, 1), 0.45, 1200.0, 260.0)]


@pytest.mark.parametrize("first,what", [
    ("\n==============NVSMI LOG==============\n\nTimestamp : Tue Jul 14 08:12:53 2026", "`nvidia-smi -q` output"),
    ("# gpu    pwr  gtemp     sm\n# Idx      W      C      %\n    0    631     63    100", "`nvidia-smi dmon` output"),
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)", "`nvidia-smi -L` output"),
    ("Tue Jul 14 08:12:53 2026\n+-----------------+\n| NVIDIA-SMI 590.48.01 |", "the `nvidia-smi` summary table"),
    ("timestamp, gpu_name, gpu_bus_id, pid, process_name, used_gpu_memory [MiB]\n2026/07/14 08:12:53.500, H100, "
     "00:09.0, 11327, ./gpu_burn, 2566 MiB", "`--query-compute-apps` output (one line per process)"),
    ("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
     'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 97', "a DCGM exporter's Prometheus text (load it with `gpuledger ingest dcgm`)"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 97', "a DCGM exporter's Prometheus text (load it with `gpuledger ingest dcgm`)")])
def test_other_nvidia_smi_outputs_are_named_not_told_they_lack_a_header(con, tmp_path, first, what):
    f = tmp_path / "smi.txt"
    f.write_text(first + "\n")
    with pytest.raises(InputError, match=re.escape(f"this is {what}; `ingest nvidia-smi` reads")):
        nvidia_smi.ingest_path(con, str(f), _opts())


def test_xml_snapshots_load_one_reading_per_gpu(con, tmp_path):
    """`nvidia-smi -q -x` (Telegraf's captures): the GPU-level readings, local time; an A100 in MIG mode has no
    GPU utilization (N/A: no reading, not 0), and its MIG devices' memory is not the GPU's."""
    s = nvidia_smi.ingest_path(con, str(TEL / "telegraf-tesla-t4.xml"), _opts())
    assert (s["read"], s["read_as"], s["loaded"], s["skipped"], s["rejected"]) == (1, "GPU readings", 1, 0, 0)
    assert _row(con) == [("gpu01", "0", dt.datetime(2023, 4, 24, 16, 22), 0.0, 1032.0, 26.78, 40.0)]
    nvidia_smi.ingest_path(con, str(TEL / "telegraf-a100-sxm4-v12.xml"), _opts(node="gpu02"))
    assert con.sql("SELECT gpu_util, fb_used_mib, power_w, temp_c FROM gpu_samples WHERE node = 'gpu02'"
                   ).fetchall() == [(None, 50.0, 67.03, 27.0)]
    # `-q -x -l 5` concatenates documents: each one is a snapshot, GPUs numbered by their place in it
    t4 = (TEL / "telegraf-tesla-t4.xml").read_text()
    later = t4.replace("Mon Apr 24 16:22:39 2023", "Mon Apr 24 16:27:39 2023").replace("1032 MiB", "2048 MiB")
    f = tmp_path / "smi-l.xml"
    f.write_text(t4 + later)
    s = nvidia_smi.ingest_path(con, str(f), _opts(node="gpu03"))
    assert (s["read"], s["loaded"]) == (2, 2)
    assert con.sql("SELECT ts, fb_used_mib FROM gpu_samples WHERE node = 'gpu03' ORDER BY ts").fetchall() == [
        (dt.datetime(2023, 4, 24, 16, 22), 1032.0), (dt.datetime(2023, 4, 24, 16, 27), 2048.0)]
    with pytest.raises(InputError, match="whose elements name their readings"):
        nvidia_smi.ingest_path(con, str(f), _opts(), fields="timestamp,index")
    f.write_text(t4.replace("Mon Apr 24 16:22:39 2023", "yesterday"))
    with pytest.raises(InputError, match="document 1: <timestamp> 'yesterday' is not nvidia-smi's time"):
        nvidia_smi.ingest_path(con, str(f), _opts())


def test_host_must_be_named_and_zone_defaults_to_the_cluster(con, tmp_path):
    with pytest.raises(InputError, match="does not name the host"):
        nvidia_smi.ingest_path(con, str(H100_LOAD), telemetry_store.TelemetryOptions())
    con.execute("INSERT INTO clusters VALUES ('berlin', 'Europe/Berlin', NULL)")
    nvidia_smi.ingest_path(con, str(H100_LOAD), _opts(cluster="berlin"))
    assert _row(con)[0][2] == dt.datetime(2026, 7, 14, 6, 12)
    with pytest.raises(InputError, match="unknown time zone"):
        nvidia_smi.ingest_path(con, str(H100_LOAD), _opts(), tz="Mars/Olympus")


def test_cli(run_cli):
    code, out, err = run_cli("ingest", "nvidia-smi", str(H100_LOAD), "--node", "gpu01", "--tz", "UTC",
                             "--no-refresh")
    assert code == 0 and "loaded 1 (new 1" in err and "1 header line" in err
