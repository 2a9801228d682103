"""alibaba-genai: per-pod GPU duty cycle and memory into gpu_samples through the telemetry writer."""
from conftest import FIXTURES, shared_path
from ingest import traces

T = FIXTURES / "traces" / "genai"


def test_excerpt_becomes_gpu_samples(con):
    duty, mem = traces.ingest(con, "alibaba-genai", T)
    assert duty["loaded"] == 2000 and mem["loaded"] == 2000 and duty["rejected"] == mem["rejected"] == 0
    # first line: value 0.0 at 1662858720 for pod 23b8eba9...; memory 33879490560 bytes for the same pod
    row = con.sql("""SELECT node, gpu, gpu_util, fb_used_mib FROM gpu_samples
                     WHERE node = 'pod-23b8eba99c14' AND ts = make_timestamp(1662858720000000)""").fetchall()
    assert row == [("pod-23b8eba99c14", "0", 0.0, 33879490560 / 2**20)]
    top = con.sql("SELECT max(gpu_util) FROM gpu_samples").fetchall()[0][0]
    assert 0 < top <= 1.0                      # percent stored as a fraction


def test_real_files_load_completely(con):
    d = shared_path("traces", "alibaba-v2026-genai-telemetry")
    duty, mem = traces.ingest(con, "alibaba-genai", d)
    # the README publishes no counts; these are the files' own: 157,417 and 161,413 samples of 143 and 144 pods
    assert (duty["loaded"], duty["rejected"], duty["pods"]) == (157417, 0, 143)
    assert (mem["loaded"], mem["rejected"], mem["pods"]) == (161413, 0, 144)
    assert con.sql("SELECT count(DISTINCT node) FROM gpu_samples").fetchall()[0][0] == 144
