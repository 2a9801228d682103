"""Small clusters written as real Slurm text (sacct -P, scontrol show node -o, sacctmgr show event -P) and
ingested through the real ingestors: the test warehouses of the timeline, utilization and fragmentation tests."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st

from ingest import jobs_store, sacct, slurm_events, slurm_nodes
from models.marts import timeline as timeline_mart

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SACCT_HEADER = ("JobID|JobIDRaw|Cluster|Partition|Account|User|State|Submit|Eligible|Start|End|Elapsed|NNodes|NCPUS|"
                "ReqTRES|AllocTRES|NodeList")


def T(s: str) -> dt.datetime:
    """'03-01 12:00' -> 2024-03-01 12:00 (tests live in March 2024); full ISO strings pass through."""
    return dt.datetime.fromisoformat(s if len(s) > 11 else f"2024-{s}")


@dataclass
class Job:
    id: int
    user: str
    account: str
    partition: str
    gpus: int
    nodes: list[str] = field(default_factory=list)     # empty: pending
    submit: dt.datetime | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None                     # None with a start: RUNNING
    eligible: dt.datetime | None = None                # None: = submit
    gpu_type: str | None = None                        # typed request (gres/gpu:TYPE=N)
    state: str | None = None
    nnodes: int | None = None

    def line(self, cluster: str) -> str:
        sub = self.submit or self.start
        elig = self.eligible or sub
        state = self.state or ("PENDING" if self.start is None else "RUNNING" if self.end is None else "COMPLETED")
        typed = f"gres/gpu:{self.gpu_type}={self.gpus}," if self.gpu_type else ""
        nn = self.nnodes or max(1, len(self.nodes))
        req = f"billing={self.gpus},cpu={4 * self.gpus},{typed}gres/gpu={self.gpus},mem=16G,node={nn}"
        alloc = req if self.start is not None else ""
        elapsed = (self.end - self.start) if self.start and self.end else dt.timedelta(0)
        nodelist = ",".join(self.nodes) if self.nodes else "None assigned"
        return "|".join([str(self.id), str(self.id), cluster, self.partition, self.account, self.user, state,
                         _ts(sub), _ts(elig), _ts(self.start), _ts(self.end), _dur(elapsed), str(nn),
                         str(4 * self.gpus), req, alloc, nodelist])


def _ts(t: dt.datetime | None) -> str:
    return "Unknown" if t is None else t.strftime("%Y-%m-%dT%H:%M:%S")


def _dur(d: dt.timedelta) -> str:
    s = int(d.total_seconds())
    days, rest = divmod(s, 86400)
    hms = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{hms}" if days else hms


def sacct_text(jobs: list[Job], cluster: str) -> str:
    return "\n".join([SACCT_HEADER, *(j.line(cluster) for j in jobs)]) + "\n"


def scontrol_text(nodes: list[tuple[str, int, str, str]]) -> str:
    """nodes: (name, gpus, gpu_type, partitions) -> `scontrol show node -o` lines."""
    return "".join(
        f"NodeName={n} Arch=x86_64 CoresPerSocket=16 CPUAlloc=0 CPUTot=64 CPULoad=0.01 "
        f"AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:{t}:{g} NodeAddr=127.0.0.1 NodeHostName=localhost "
        f"RealMemory=512000 AllocMem=0 FreeMem=500000 Sockets=4 Boards=1 State=IDLE ThreadsPerCore=1 "
        f"Partitions={p} CfgTRES=cpu=64,mem=500G,billing=64,gres/gpu={g} AllocTRES=\n"
        for n, g, t, p in nodes)


def events_text(events: list[tuple[str, dt.datetime, dt.datetime | None, str, str]], cluster: str) -> str:
    """events: (node, start, end or None=open, state, reason) -> `sacctmgr -P show event` output."""
    rows = ["Cluster|Cluster Nodes|Node Name|Time Start|Time End|State|Reason|User"]
    rows += [f"{cluster}||{n}|{_ts(s)}|{_ts(e) if e else 'Unknown'}|{st}|{r}|root(0)" for n, s, e, st, r in events]
    return "\n".join(rows) + "\n"


def load(con, cluster: str, jobs: list[Job], nodes=(), events=(), team_map=(), as_of: str = "2024-01-01T00:00:00",
         refresh: bool = True) -> None:
    """Ingest the cluster through the real ingestors, map teams, build the timeline."""
    if jobs:
        s = sacct.ingest_bytes(con, sacct_text(jobs, cluster).encode(), "jobs.psv", sacct.SacctOptions(cluster=cluster))
        assert s["rejected"] == 0, s
    if nodes:
        s = slurm_nodes.ingest_bytes(con, scontrol_text(list(nodes)).encode(), "nodes.txt", fmt="scontrol",
                                     cluster=cluster, as_of=as_of)
        assert s["rejected"] == 0, s
    if events:
        s = slurm_events.ingest_bytes(con, events_text(list(events), cluster).encode(), "events.psv", cluster=cluster)
        assert s["rejected"] == 0, s
    for team, account in team_map:
        con.execute("INSERT INTO team_map (team, account_pattern, priority) VALUES (?, ?, 100)", [team, account])
    if team_map:
        jobs_store.assign_teams(con)
    if refresh:
        from models.metrics import timeline
        timeline_mart.build(con)


# ---------------------------------------------------------------- the hand-computed cluster

NODES = [("gpu01", 8, "a100", "a100,all"), ("gpu02", 8, "a100", "a100,all"), ("gpu03", 4, "h100", "all,h100")]
JOBS = [
    Job(1, "alice", "ml", "a100", 8, ["gpu01"], start=T("03-01 00:00"), end=T("03-01 12:00")),
    Job(2, "bob", "cv", "a100", 4, ["gpu02"], start=T("03-01 20:00"), end=T("03-02 04:00")),   # crosses midnight
    Job(3, "carol", "ml", "h100", 2, ["gpu03"], start=T("03-01 06:00")),                       # still running
    Job(4, "dave", "cv", "a100", 16, ["gpu01", "gpu02"], submit=T("03-01 10:00"),              # waits 22 h
        start=T("03-02 08:00"), end=T("03-02 10:00")),
    Job(5, "erin", "ml", "h100", 4, submit=T("03-02 22:00"), gpu_type="h100"),                # still pending
    Job(6, "frank", "ops", "a100", 1, ["gpu01"], start=T("03-02 23:00"), end=T("03-03 00:00")),
]
EVENTS = [("gpu02", T("03-01 12:00"), T("03-01 18:00"), "DRAIN", "disk swap"),
          ("gpu03", T("03-02 12:00"), T("03-02 14:00"), "MAINT", "firmware")]
TEAMS = [("research", "ml"), ("product", "cv")]


def load_hand_cluster(con) -> None:
    load(con, "tc", JOBS, NODES, EVENTS, TEAMS)


# ---------------------------------------------------------------- random clusters (hypothesis)

@st.composite
def clusters(draw):
    """A random small cluster whose jobs fit their nodes (at most 3 nodes, 12 jobs, 2 days, 15-min grid)."""
    base = dt.datetime(2024, 3, 1)
    slot = dt.timedelta(minutes=15)
    n_nodes = draw(st.integers(1, 3))
    nodes = [(f"n{i}", draw(st.sampled_from([4, 8])), draw(st.sampled_from(["a100", "h100"])),
              draw(st.sampled_from(["p1", "p1,p2", "p2"]))) for i in range(n_nodes)]
    busy = {n[0]: [] for n in nodes}   # (start, end or None, gpus)

    def free(node, s, e):
        gpus = dict((n[0], n[1]) for n in nodes)[node]
        pts = {s} | {a for a, b, g in busy[node] if s <= a < e}
        return min(gpus - sum(g for a, b, g in busy[node] if a <= p and (b is None or p < b)) for p in pts)

    jobs = []
    for i in range(draw(st.integers(0, 12))):
        s = base + slot * draw(st.integers(0, 180))
        running = draw(st.booleans()) and i % 4 == 0
        e = None if running else s + slot * draw(st.integers(1, 30))
        node = draw(st.sampled_from([n[0] for n in nodes]))
        room = free(node, s, e or s + dt.timedelta(days=30))
        if room <= 0:
            continue
        g = draw(st.integers(1, room))
        busy[node].append((s, e, g))
        wait = slot * draw(st.integers(0, 8))
        part = dict((n[0], n[3]) for n in nodes)[node].split(",")[0]
        jobs.append(Job(i + 1, f"u{i % 3}", f"acct{i % 2}", part, g, [node], submit=s - wait, start=s, end=e))
    if draw(st.booleans()):
        jobs.append(Job(99, "u9", "acct9", "p1", 2, submit=base + slot * draw(st.integers(0, 150))))
    events = []
    if draw(st.booleans()):
        s = base + slot * draw(st.integers(0, 150))
        events.append((nodes[0][0], s, s + slot * draw(st.integers(1, 40)), draw(st.sampled_from(["DRAIN", "MAINT", "DOWN"])), "x"))
    return nodes, jobs, events
