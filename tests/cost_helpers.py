"""Small real clusters for the governance, cost, chargeback and fairness tests.

Everything goes through the real ingestors (sacct text, `scontrol show node -o` text, the governance TOML) and
the real timeline refresh, so the tests exercise the same path as `gpuledger` does.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

SACCT_HEADER = ("Cluster|JobID|JobIDRaw|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|"
                "Elapsed|Timelimit|NNodes|NCPUS|AllocTRES|ReqTRES|NodeList")


@dataclass
class Job:
    """One job allocation. Times are naive UTC; ``end`` None = still running (or pending if ``start`` is None)."""
    id: int
    account: str
    gpus: int
    start: dt.datetime | None
    end: dt.datetime | None
    node: str = "h1"
    gpu_type: str = "h100"
    user: str = "u1"
    partition: str = "gpu"
    qos: str = "normal"
    submit: dt.datetime | None = None
    cpus: int | None = None
    billing: int | None = None
    cluster: str = "c1"
    req_gpus: int | None = None
    state: str | None = None      # overrides the state implied by start/end (e.g. CANCELLED while pending)


def _ts(t: dt.datetime | None) -> str:
    return "Unknown" if t is None else t.strftime("%Y-%m-%dT%H:%M:%S")


def _elapsed(s: int) -> str:
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def sacct_line(j: Job) -> str:
    submit = j.submit or (j.start if j.start else dt.datetime(2026, 1, 1))
    if j.start is None:
        state, elapsed = "PENDING", 0
    elif j.end is None:
        state, elapsed = "RUNNING", 0
    else:
        state, elapsed = "COMPLETED", int((j.end - j.start).total_seconds())
    state = j.state or state
    cpus = j.cpus if j.cpus is not None else 4 * max(j.gpus, 1)
    billing = j.billing if j.billing is not None else cpus
    req = j.req_gpus if j.req_gpus is not None else j.gpus
    tres = f"billing={billing},cpu={cpus},gres/gpu:{j.gpu_type}={j.gpus},gres/gpu={j.gpus},mem=64G,node=1"
    rtres = f"billing={billing},cpu={cpus},gres/gpu={req},mem=64G,node=1"
    alloc = "" if j.start is None else tres
    nodes = "None assigned" if j.start is None else j.node
    return "|".join([j.cluster, str(j.id), str(j.id), j.user, j.account, j.partition, j.qos, state, "0:0",
                     _ts(submit), _ts(submit), _ts(j.start), _ts(j.end), _elapsed(elapsed), "7-00:00:00",
                     "1", str(cpus), alloc, rtres, nodes])


def node_line(name: str, gpus: int, gpu_type: str, partitions: str = "gpu") -> str:
    return (f"NodeName={name} Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 CPUTot=64 Gres=gpu:{gpu_type}:{gpus} "
            f"NodeAddr={name} NodeHostName={name} RealMemory=512000 State=IDLE Partitions={partitions}")


def build(con, tmp: Path, jobs: list[Job], nodes: list[tuple], governance: str | None = None,
          cluster: str = "c1") -> None:
    """Ingest ``nodes`` ((name, gpus, gpu_type[, partitions])) and ``jobs`` into ``con``, load ``governance``
    (TOML text) if given, and build the timeline marts."""
    from ingest import slurm_nodes
    from models.pipeline import refresh
    tmp.mkdir(parents=True, exist_ok=True)
    nf = tmp / "nodes.txt"
    nf.write_text("\n".join(node_line(*n) for n in nodes) + "\n")
    slurm_nodes.ingest_path(con, str(nf), cluster=cluster, as_of="2025-01-01T00:00:00")
    add_jobs(con, tmp, jobs)
    if governance is not None:
        load_governance(con, tmp, governance)
    refresh.run(con, tmp / "unused.duckdb", publish=False)


def add_jobs(con, tmp: Path, jobs: list[Job], name: str = "sacct.psv") -> None:
    from ingest import sacct
    f = tmp / name
    f.write_text(SACCT_HEADER + "\n" + "\n".join(sacct_line(j) for j in jobs) + "\n")
    sacct.ingest_path(con, str(f), sacct.SacctOptions(tz="UTC"))


def load_governance(con, tmp: Path, text: str) -> dict:
    from ingest import governance
    f = tmp / "governance.toml"
    f.write_text(text)
    return governance.ingest_path(con, f)


def refresh(con, tmp: Path) -> None:
    from models.pipeline import refresh as r
    r.run(con, tmp / "unused.duckdb", publish=False)


def T(day: int, hour: int = 0, month: int = 3, year: int = 2026) -> dt.datetime:
    return dt.datetime(year, month, day, hour)


def template(tmp: Path, jobs: list[Job], nodes: list[tuple], cluster: str = "c1") -> Path:
    """Build a warehouse with ``jobs`` and ``nodes`` (timeline included, no governance) once, closed, for
    :func:`clone`: tests that differ only in governance share the expensive part."""
    from ingest import warehouse
    path = tmp / "template.duckdb"
    con = warehouse.connect(path)
    try:
        build(con, tmp, jobs, nodes, None, cluster)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path


def clone(template_path: Path, dest: Path, governance: str | None = None):
    """A connection to a private copy of a template warehouse, with ``governance`` loaded if given."""
    import shutil
    from ingest import warehouse
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template_path, dest / "warehouse.duckdb")
    con = warehouse.connect(dest / "warehouse.duckdb")
    if governance is not None:
        load_governance(con, dest, governance)
    return con
