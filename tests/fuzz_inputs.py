"""Mutated ingest inputs for the end-to-end fuzz (tests/test_fuzz_ingest.py, benchmarks/fuzz_ingest.py).

Each text ingestor has a small valid input in its real format; a case is one of them with a few mutations:
a field replaced by a hostile value, bytes inserted or deleted, a line duplicated, the file cut short. A case
goes through the ingestor the CLI runs and must end as exit 0 or 1 with one line of error, never another
exception, and with the ingest invariants kept (:func:`check_case`); what it loaded must then survive refresh
and every report.
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from ingest import lines, plausible

SACCT = "\n".join([
    "JobID|JobIDRaw|Cluster|Partition|QOS|Account|User|State|ExitCode|Submit|Eligible|Start|End|Elapsed|Timelimit|"
    "NNodes|NCPUS|ReqMem|AllocTRES|ReqTRES|NodeList|JobName",
    "101|101|lab|gpu|normal|nlp|alice|COMPLETED|0:0|2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T08:05:00|"
    "2026-10-01T12:05:00|04:00:00|1-00:00:00|1|16|64G|billing=16,cpu=16,gres/gpu:h100=4,gres/gpu=4,mem=64G,node=1|"
    "billing=16,cpu=16,gres/gpu=4,mem=64G,node=1|h100-01|train",
    "101.batch|101.batch|lab||||alice|COMPLETED|0:0|2026-10-01T08:05:00|2026-10-01T08:05:00|2026-10-01T08:05:00|"
    "2026-10-01T12:05:00|04:00:00||1|16||cpu=16,mem=64G,node=1||h100-01|batch",
    "102_3|102|lab|gpu|normal|vision|bob|RUNNING|0:0|2026-10-02T09:00:00|2026-10-02T09:00:00|2026-10-02T09:30:00|"
    "Unknown|02:00:00|UNLIMITED|2|32|4000Mc|billing=32,cpu=32,gres/gpu:a100=8,gres/gpu=8,mem=128G,node=2|"
    "billing=32,cpu=32,gres/gpu=8,mem=128G,node=2|a100-0[1-2]|sweep|x",
    "103_[5-9]|103|lab|gpu|normal|guest|carol|PENDING|0:0|2026-10-03T10:00:00|2026-10-03T10:00:00|Unknown|Unknown|"
    "00:00:00|08:00:00|1|8|32G||billing=8,cpu=8,gres/gpu=2,mem=32G,node=1|None assigned|arr",
    "104+0|104|lab|gpu|normal|infra|dave|CANCELLED by 1000|0:15|2026-10-04T11:00:00|2026-10-04T11:00:00|"
    "2026-10-04T11:10:00|2026-10-04T11:40:00|00:30:00|04:00:00|1|8|16G|billing=8,cpu=8,gres/gpu=1,mem=16G,node=1|"
    "billing=8,cpu=8,gres/gpu=1,mem=16G,node=1|a100-03|het",
]) + "\n"
EVENTS = "\n".join([
    "Cluster|Cluster Nodes|Node Name|Time Start|Time End|State|Reason|User",
    "lab|h100-0[1-2]||2026-09-21T00:00:00|Unknown||Cluster Registered TRES|slurm(64030)",
    "lab||a100-02|2026-10-05T08:00:00|2026-10-06T20:00:00|DRAIN|replace fan|root(0)",
    "lab||h100-0[1-2]|2026-10-07T01:00:00|Unknown|DOWN*|rack power|root(0)",
]) + "\n"
NODES = "\n".join([
    "NodeName=h100-01 Arch=x86_64 CPUTot=64 RealMemory=1024000 Gres=gpu:h100:8(S:0-1) State=MIXED Partitions=gpu,long "
    "CfgTRES=cpu=64,mem=1000G,billing=64,gres/gpu=8 AllocTRES=cpu=16,gres/gpu=4 GresUsed=gpu:h100:4(IDX:0-3)",
    "NodeName=a100-01 Arch=x86_64 CPUTot=64 RealMemory=512000 Gres=gpu:a100:4 State=IDLE+DRAIN Partitions=gpu "
    "Reason=fan [root@2026-10-05T08:00:00]",
    "NodeName=a100-02 Arch=x86_64 CPUTot=64 RealMemory=512000 Gres=gpu:a100:4 State=DOWN* Partitions=gpu",
]) + "\n"
DCGM = "\n".join([
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100",Hostname="h100-01"} 87 1790000000000',
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100",Hostname="h100-01"} 12 1790000000000',
    'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100",Hostname="h100-01"} 0.61 1790000060000',
    'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100",Hostname="h100-01"} 40000 1790000060000',
    'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100",Hostname="h100-01"} 79 1790000060000',
]) + "\n"
BASE = {"sacct": SACCT.encode(), "events": EVENTS.encode(), "nodes": NODES.encode(), "dcgm": DCGM.encode()}
#: How each format separates fields (mutations replace one field).
SEPARATOR = {"sacct": "|", "events": "|", "nodes": " ", "dcgm": " "}

HOSTILE = ["", "9999-12-31T23:59:59", "0001-01-01T00:00:00", "1999-12-31T23:59:59", "2100-01-01T00:00:00",
           "99999999999", "253402300799000", "1790000000", "-1", "-0", "1e300", "-1e300", "inf", "nan", "NaN",
           "99999999999999999999999", "1.2.3", "\x00", "\u2028", "\u2029", "\x0c", "\r", "\x85", "\ufeff", "|", "^|^",
           "Unknown", "None", "(null)", "gpu[01-", "gpu[1-999999]", "r[1-100000]n[1-100000]", "a" * 300, "=", "==",
           "gres/gpu=-1", "gres/gpu:h100=1e20", "-5-00:00:00", "24:60:60", "999999999:59:59", "2026-02-30T00:00:00",
           "2026-13-01T00:00:00", "2026-10-01T10:00:00+99:00", "2026-10-01T10:00:00Z", "\U0001f642", "'", '"', "\\",
           "{", "}", "{}", 'x="', "CPUTot=-4", "Gres=gpu:a100:99999999999", "RealMemory=99999999999999999",
           "State=", "NodeName=", "1-", "00:00:00", "PENDING", "CANCELLED by -1", "4000Mc", "99999999999Tc"]


def _field(data: bytes, sep: str, line_i: int, field_i: int, value: str) -> bytes:
    text = data.decode("utf-8", "replace").split("\n")
    i = line_i % len(text)
    parts = text[i].split(sep)
    parts[field_i % len(parts)] = value
    text[i] = sep.join(parts)
    return "\n".join(text).encode("utf-8", "surrogatepass")


def mutate(ingestor: str, data: bytes, ops: list[tuple]) -> bytes:
    for op in ops:
        kind = op[0]
        if kind == "field":
            data = _field(data, SEPARATOR[ingestor], op[1], op[2], op[3])
        elif kind == "insert":
            pos = op[1] % (len(data) + 1)
            data = data[:pos] + op[2] + data[pos:]
        elif kind == "delete":
            pos = op[1] % (len(data) + 1)
            data = data[:pos] + data[pos + op[2]:]
        elif kind == "dup":
            rows = data.split(b"\n")
            i = op[1] % len(rows)
            data = b"\n".join(rows[:i + 1] + rows[i:])
        elif kind == "truncate":
            data = data[:op[1] % (len(data) + 1)]
    return data


_ops = st.one_of(
    st.tuples(st.just("field"), st.integers(1, 50),   # the header mostly intact
              st.integers(0, 30), st.sampled_from(HOSTILE)),
    st.tuples(st.just("insert"), st.integers(0, 5000), st.sampled_from(
        [b"\n", b"\r", b"\r\n", b"\x0c", b"\x00", b"\xff", b"\xef\xbb\xbf", "\u2028".encode(), b"|", b" ", b"\n\n"])),
    st.tuples(st.just("delete"), st.integers(0, 5000), st.integers(1, 40)),
    st.tuples(st.just("dup"), st.integers(0, 50)),
    st.tuples(st.just("truncate"), st.integers(0, 5000)),
)
cases = st.sampled_from(sorted(BASE)).flatmap(
    lambda ing: st.lists(_ops, min_size=1, max_size=6).map(lambda ops: (ing, mutate(ing, BASE[ing], ops))))


def ingest(con, ingestor: str, path: Path) -> tuple[int, str | None]:
    """The ingest the CLI runs, through the library (no argparse, no second open per case): (exit status the CLI
    gives, its one-line error). tests/test_bad_inputs.py checks the CLI's own mapping on the corpus."""
    from ingest import dcgm, sacct, slurm_events, slurm_nodes, telemetry_store
    from ingest.errors import InputError
    try:
        if ingestor == "sacct":
            s = sacct.ingest_path(con, str(path), sacct.SacctOptions())
        elif ingestor == "events":
            s = slurm_events.ingest_path(con, str(path))
        elif ingestor == "nodes":
            s = slurm_nodes.ingest_path(con, str(path), cluster="lab", as_of="2026-10-08T00:00:00")
        else:
            s = dcgm.ingest_path(con, str(path), telemetry_store.TelemetryOptions(cluster="lab"))
    except InputError as exc:
        assert "\n" not in str(exc)
        return 1, str(exc)
    assert s["error"] is None or "\n" not in s["error"]
    return (1, s["error"]) if s["error"] else (0, None)


def check_case(con, ingestor: str, data: bytes, path: Path) -> int:
    """Ingest one case and check the invariants; returns the exit status the CLI would give."""
    path.write_bytes(data)
    before = con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs").fetchall()[0][0]
    code, error = ingest(con, ingestor, path)
    run = con.execute("""SELECT run_id, lines_read, loaded, skipped, rejected FROM ingest_runs
                         WHERE run_id > ? AND status = 'ok'""", [before]).fetchall()
    assert len(run) <= 1
    if run:
        run_id, read, loaded, skipped, rejected = run[0]
        assert read == lines.count(data) == loaded + skipped + rejected, (read, lines.count(data), run[0])
        assert con.execute("SELECT count(*) FROM rejects WHERE run_id = ? AND coalesce(reason, '') <> ''",
                           [run_id]).fetchall()[0][0] == rejected, "every reject has a reason"
        assert code == 0 or (loaded == 0 and "nothing loaded" in error), error
    stored_inside_window(con)
    return code


TIMES = {"jobs": ("submit", "eligible", "start", '"end"'), "node_events": ("start", '"end"'), "gpu_samples": ("ts",),
         "nodes": ("valid_from", "valid_to"), "node_states": ("observed_at",)}


def stored_inside_window(con) -> None:
    """Nothing stored lies outside the plausibility window; no count is negative."""
    w = plausible.window()
    for table, cols in TIMES.items():
        for c in cols:
            lo, hi = con.sql(f"SELECT min({c}), max({c}) FROM {table}").fetchall()[0]
            assert lo is None or (w.lo <= lo and hi <= w.hi), f"{table}.{c}: {lo}..{hi} outside {w.describe()}"
    bad = con.sql("""SELECT count(*) FROM jobs WHERE ngpus < 0 OR nnodes < 0 OR ncpus < 0 OR elapsed_s < 0
                     OR "end" < start OR NOT isfinite(ngpus)""").fetchall()[0][0]
    assert bad == 0
    assert con.sql('SELECT count(*) FROM node_events WHERE "end" < start').fetchall()[0][0] == 0
