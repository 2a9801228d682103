"""`gpuledger ingest nodes`: the node inventory from `scontrol show node [-o]`, sinfo output with Gres, or a JSON
node list (`ingest/slurm_nodes_json.py`).

Each snapshot updates ``nodes`` (attributes with validity periods, so capacity on any past date is known)
and records every node's reported state in ``node_states``.

Validity rules: a node whose attributes (partitions, GPUs and their types, CPUs, memory, gres) differ from
its current row closes that row at the snapshot time and opens a new one. A node seen for the first time
opens at the snapshot time — except in a cluster's very first snapshot, where it opens at NULL ("since before
our records began"), so that history ingested before the first snapshot has capacity. Snapshots must be
ingested in time order (``--as-of``).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re

import pyarrow as pa
from dataclasses import dataclass, field

from ingest import gpu_shares, plausible, slurm_nodes_json, warehouse
from ingest.errors import InputError
from ingest.hostlist import HostlistError, expand
from ingest.inputs import read_input
from ingest.lines import other_output, text_lines
from ingest.slurm_json import looks_like_json

#: Suffix characters sinfo appends to a state: * not responding, ~ powered off, # powering up, ! pending
#: power down, % powering down, $ maintenance reservation, @ pending reboot, ^ rebooting, - planned.
STATE_SUFFIXES = "*~#!%$@^-"
STATE_ABBREV = {"alloc": "ALLOCATED", "comp": "COMPLETING", "drng": "DRAINING", "drain": "DRAIN",
                "drained": "DRAINED", "fail": "FAIL", "failg": "FAILING", "futr": "FUTURE", "idle": "IDLE",
                "inval": "INVAL", "maint": "MAINT", "mix": "MIXED", "mixed": "MIXED", "npc": "PERFCTRS",
                "plnd": "PLANNED", "pow_dn": "POWERED_DOWN", "pow_up": "POWERING_UP", "resv": "RESERVED",
                "unk": "UNKNOWN", "down": "DOWN", "allocated": "ALLOCATED", "blocked": "BLOCKED",
                "reboot^": "REBOOT", "boot": "REBOOT"}

#: sinfo header titles (and -O field names) -> our fields.
SINFO_HEADERS = {
    "nodelist": "node", "hostnames": "node", "nodehost": "node", "nodename": "node", "node": "node",
    "partition": "partition", "partitionname": "partition",
    "state": "state", "statelong": "state", "statecompact": "state",
    "gres": "gres", "gres_used": "gresused", "gresused": "gresused",
    "cpus": "cpus", "cpus(a/i/o/t)": "cpustate", "cpusstate": "cpustate",
    "memory": "memory", "reason": "reason", "cluster": "cluster", "allocmem": "allocmem",
    "features_act": "features", "active_features": "features", "features": "features",
}
#: the sinfo columns a headerless output must name with --fields: at least the node
NODE_FIELDS = "NodeList, NodeHost or NodeName"


def parse_sinfo_fields(text: str) -> list[str]:
    """``--fields`` of a headerless sinfo output (``sinfo -h -N -O ...``): its -O list as given to sinfo, widths
    and separators allowed ("NodeList:20,Gres:|,StateLong") → our column names ("node", "gres", "state"); a
    field we do not read keeps its name with a leading "_" (it is split off and ignored). NodeAIOT counts
    nodes (allocated/idle/other/total), not CPUs: it is ignored, CPUsState gives the CPUs."""
    names = [f.split(":", 1)[0].strip().lower() for f in text.split(",")]
    if not all(names):
        raise InputError("--fields", f"{text!r}: an empty field name")
    cols = [SINFO_HEADERS.get(n, "_" + n) for n in names]
    if "node" not in cols:
        raise InputError("--fields", f"{text!r}: no node name field ({NODE_FIELDS})")
    return cols


class BadField(ValueError):
    """A value of a node record that cannot be read, with the field it sits in."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass
class NodeRecord:
    line_no: int
    n_lines: int
    node: str
    partitions: set = field(default_factory=set)
    gres: str | None = None
    gpus: int = 0
    gpu_type: str | None = None
    cpus: int | None = None
    mem_bytes: int | None = None
    features: str | None = None
    state: str = "UNKNOWN"
    state_raw: str | None = None
    reason: str | None = None
    gpus_alloc: int | None = None
    cluster: str | None = None
    #: attributes the input does not report (a sinfo listing without a Gres or Memory column): the node keeps
    #: its inventory's values for them, instead of a new validity period with 0 GPUs or no memory
    unreported: frozenset = frozenset()


# ---------------------------------------------------------------- value parsing

def parse_gres(gres: str | None) -> tuple[int, str | None]:
    """(GPU count, '+'-joined sorted GPU types or None) of a Gres string.

    ``gpu:a100:4(S:0-3),nsight:no_consume:1`` -> (4, 'a100'); ``gpu:tesla:2(S:0-1),gpu:kepler:2(S:0-1)`` ->
    (4, 'kepler+tesla'); ``gpu:4,shard:20`` -> (4, None); ``(null)`` -> (0, None). Raises ValueError.
    """
    if gres is None or gres.strip() in ("", "(null)", "N/A"):
        return 0, None
    total, types = 0, set()
    for item in re.split(r",(?![^()]*\))", gres.strip()):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        parts = [p for p in parts[1:] if p != "no_consume"]
        if not parts or not re.fullmatch(r"\d+", parts[-1]):
            raise ValueError(f"cannot read GPU count in gres {item!r}")
        total += int(parts[-1])
        if len(parts) >= 2 and parts[0] not in ("(null)", ""):
            types.add(parts[0])
    return total, ("+".join(sorted(types)) or None)


def parse_gres_used(gres_used: str | None) -> int | None:
    if gres_used is None or gres_used.strip() in ("", "(null)", "N/A"):
        return None
    used = 0
    for item in re.split(r",(?![^()]*\))", gres_used.strip()):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if parts[0] == "gpu" and re.fullmatch(r"\d+", parts[-1] or ""):
            used += int(parts[-1])
    return used


def normalise_state(raw: str) -> str:
    """Availability-oriented state: DOWN, DRAIN, MAINT, FAIL, or the base state (IDLE, MIXED, ALLOCATED...).

    Not responding (``*``) counts as DOWN; a DRAIN/DRAINING/DRAINED base or flag counts as DRAIN.
    """
    s = raw.strip()
    not_responding = "*" in s
    tokens = [t.strip(STATE_SUFFIXES).lower() for t in s.split("+")]
    names = [STATE_ABBREV.get(t, t.upper()) for t in tokens if t]
    if not names:
        return "UNKNOWN"
    if any(n in ("DOWN",) for n in names) or not_responding:
        return "DOWN"
    if any(n in ("DRAIN", "DRAINING", "DRAINED") for n in names):
        return "DRAIN"
    if any(n == "FAIL" or n == "FAILING" for n in names):
        return "FAIL"
    if any(n == "MAINT" for n in names):
        return "MAINT"
    if any(n in ("POWERED_DOWN", "POWER_DOWN") for n in names):
        return "POWERED_DOWN"
    return names[0]


def _mem_mb(value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    m = re.fullmatch(r"(\d+)\+?", value.strip())
    return int(m.group(1)) * 1048576 if m else None


# ---------------------------------------------------------------- scontrol

_KV = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")


def _kv(text: str) -> dict[str, str]:
    """key=value pairs of scontrol output; values may contain spaces (OS=..., Reason=...)."""
    out = {}
    matches = list(_KV.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out[m.group(1)] = text[m.end():end].strip()
    return out


def _scontrol_records(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first line_no, number of lines, text) per node record; blank lines separate multi-line records."""
    recs, start, buf = [], None, []
    for i, line in enumerate(lines, start=1):
        if line.strip().startswith("NodeName="):
            if buf:
                recs.append((start, len(buf), " ".join(buf)))
            start, buf = i, [line]
        elif line.strip() and buf:
            buf.append(line)
        elif not line.strip() and buf:
            recs.append((start, len(buf), " ".join(buf)))
            start, buf = None, []
    if buf:
        recs.append((start, len(buf), " ".join(buf)))
    return recs


def _record_from_scontrol(line_no: int, n_lines: int, text: str) -> NodeRecord:
    kv = _kv(text)
    rec = NodeRecord(line_no=line_no, n_lines=n_lines, node=kv["NodeName"])
    rec.gres = kv.get("Gres")
    rec.gpus, rec.gpu_type = parse_gres(rec.gres)
    cfg = kv.get("CfgTRES", "")
    m = re.search(r"(?:^|,)gres/gpu=(\d+)", cfg)
    if rec.gpus == 0 and m:
        rec.gpus = int(m.group(1))
    if kv.get("Partitions"):
        rec.partitions = {p for p in kv["Partitions"].split(",") if p}
    if kv.get("CPUTot"):
        if not re.fullmatch(r"\d{1,9}", kv["CPUTot"]):
            raise BadField("CPUTot", f"not a CPU count: {kv['CPUTot']}")
        rec.cpus = int(kv["CPUTot"])
    rec.mem_bytes = _mem_mb(kv.get("RealMemory"))
    rec.features = kv.get("ActiveFeatures") or kv.get("AvailableFeatures") or None
    rec.state_raw = kv.get("State", "UNKNOWN")
    rec.state = normalise_state(rec.state_raw)
    rec.reason = kv.get("Reason") or None
    # keys a trimmed record leaves out (scontrol prints them all): the inventory's values stand
    rec.unreported = frozenset(a for key, a in (("CPUTot", "cpus"), ("RealMemory", "mem_bytes")) if key not in kv) | (
        frozenset({"features"}) if "ActiveFeatures" not in kv and "AvailableFeatures" not in kv else frozenset()) | (
        frozenset({"gres", "gpus", "gpu_type"}) if "Gres" not in kv and not m else frozenset())
    used = parse_gres_used(kv.get("GresUsed"))
    alloc = re.search(r"(?:^|,)gres/gpu=(\d+)", kv.get("AllocTRES", ""))
    rec.gpus_alloc = used if used is not None else (int(alloc.group(1)) if alloc else 0 if "AllocTRES" in kv else None)
    _check_counts(rec)
    return rec


# ---------------------------------------------------------------- sinfo

def _split_sinfo(line: str, delim: str | None) -> list[str]:
    if delim:
        parts = line.split(delim)
        return parts[:-1] if parts and parts[-1] == "" else parts
    return line.split()


def _unreported_by_sinfo(cols: list[str]) -> frozenset:
    """The node attributes a sinfo listing with these columns does not report."""
    out = set()
    if "gres" not in cols:
        out |= {"gres", "gpus", "gpu_type"}
    if "partition" not in cols:
        out.add("partitions")
    if "cpustate" not in cols and "cpus" not in cols:
        out.add("cpus")
    if "memory" not in cols:
        out.add("mem_bytes")
    if "features" not in cols:
        out.add("features")
    return frozenset(out)


def _sinfo_records(lines: list[str], fields: list[str] | None) -> tuple[list, list, list]:
    """(records, skipped (line_no, reason), rejected (line_no, field, reason)) of sinfo output; ``fields``
    (:func:`parse_sinfo_fields`) names the columns of an output without a header line."""
    # the first line that is neither blank nor a copied "$ sinfo ..." prompt: the header, or the first node
    first = next((i for i, l in enumerate(lines) if l.strip() and not l.lstrip().startswith("$ ")), None)
    if first is None:   # nothing but blank (and prompt) lines: each one is accounted for, none is a record
        return [], [(i, "blank line" if not l.strip() else "shell prompt line")
                    for i, l in enumerate(lines, start=1)], []
    delim = "|" if "|" in lines[first] else None
    skipped, rejected, recs = [], [], []
    cols = fields
    header = [h.strip().lower() for h in _split_sinfo(lines[first], delim)]
    other_output(lines[first], "sinfo", first + 1, "nodes")     # sacct's names NodeList and State too
    if sum(h in SINFO_HEADERS for h in header) >= 2:
        cols = [SINFO_HEADERS.get(h, "_" + h) for h in header]
        if fields is not None and fields != cols:
            # honoured or refused, never silently ignored (as `ingest nvidia-smi`): the header names the columns
            raise InputError("--fields", "is a header line naming other columns; --fields would apply to no line: "
                                         "drop it (it is for output without a header)", line_no=first + 1)
        skipped.append((first + 1, "header line"))
    elif cols is None:
        raise InputError("sinfo", "no header line naming the columns: give them with --fields (the -O list of "
                                  "`sinfo -h -N -O NodeList,Partition,StateLong,Gres,...`), or --format scontrol")
    unreported = _unreported_by_sinfo(cols)
    for i, line in enumerate(lines, start=1):
        if any(ln == i for ln, _ in skipped):
            continue
        if not line.strip():
            skipped.append((i, "blank line"))
            continue
        if line.lstrip().startswith("$ "):
            skipped.append((i, "shell prompt line"))
            continue
        vals = [v.strip() for v in _split_sinfo(line, delim)]
        if len(vals) != len(cols):
            rejected.append((i, None, f"expected {len(cols)} columns, found {len(vals)}"))
            continue
        row = dict(zip(cols, vals))
        if "node" not in row:
            rejected.append((i, "node", "no node name column"))
            continue
        try:
            hosts = expand(row["node"])
        except HostlistError as exc:
            rejected.append((i, "node", str(exc)))
            continue
        if not hosts:
            rejected.append((i, "node", "no node name"))
            continue
        try:
            gpus, gtype = parse_gres(row.get("gres"))
        except ValueError as exc:
            rejected.append((i, "gres", str(exc)))
            continue
        line_recs = []
        for h in hosts:
            rec = NodeRecord(line_no=i, n_lines=1, node=h, gres=row.get("gres"), gpus=gpus, gpu_type=gtype,
                             unreported=unreported)
            if row.get("partition"):
                rec.partitions = {row["partition"].rstrip("*")}
            if row.get("cpustate") and re.fullmatch(r"\d+/\d+/\d+/\d+", row["cpustate"]):
                rec.cpus = int(row["cpustate"].split("/")[-1])
            elif row.get("cpus", "").isdigit():
                rec.cpus = int(row["cpus"])
            rec.mem_bytes = _mem_mb(row.get("memory"))
            rec.state_raw = row.get("state", "UNKNOWN")
            rec.state = normalise_state(rec.state_raw)
            rec.reason = row.get("reason") if row.get("reason") not in (None, "", "none", "(null)") else None
            rec.gpus_alloc = parse_gres_used(row.get("gresused"))
            rec.features = row.get("features") if row.get("features") not in (None, "", "(null)") else None
            rec.cluster = row.get("cluster") or None
            line_recs.append(rec)
        try:
            _check_counts(line_recs[0])
        except BadField as exc:
            rejected.append((i, exc.field, str(exc)))
            continue
        recs.extend(line_recs)
    return recs, skipped, rejected


def _check_counts(rec: NodeRecord) -> None:
    """BadField when a record's counts cannot be true (ingest/plausible.py): never stored."""
    top = plausible.MAX_COUNTS
    for name, value, hi in (("Gres", rec.gpus, top["gpus"]), ("GresUsed", rec.gpus_alloc, top["gpus"]),
                            ("CPUTot", rec.cpus, top["cpus"]), ("RealMemory", rec.mem_bytes, 1 << 62)):
        if value is not None and not 0 <= value <= hi:
            raise BadField(name, f"{value} is out of the plausible range 0-{hi}")


# ---------------------------------------------------------------- merge into the inventory

def _merge_records(recs: list[NodeRecord]) -> list[NodeRecord]:
    """sinfo -N prints a node once per partition: fold them into one record per node."""
    by_node: dict[tuple, NodeRecord] = {}
    for r in recs:
        key = (r.cluster, r.node)
        if key in by_node:
            by_node[key].partitions |= r.partitions
        else:
            by_node[key] = r
    return list(by_node.values())


def ingest_path(con, path: str, fmt: str = "auto", cluster: str | None = None, as_of: str | None = None,
                retire_missing: bool = False, fields: list[str] | None = None) -> dict:
    data, name = read_input(path)
    return ingest_bytes(con, data, name, fmt=fmt, cluster=cluster, as_of=as_of, retire_missing=retire_missing,
                        fields=fields)


def _parse_as_of(as_of: str | None) -> dt.datetime:
    if as_of is None:
        return warehouse.utcnow().replace(microsecond=0)
    try:
        t = dt.datetime.fromisoformat(as_of.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InputError("--as-of", f"cannot read time {as_of!r} (use ISO 8601, UTC)") from exc
    t = t.astimezone(dt.timezone.utc).replace(tzinfo=None) if t.tzinfo else t
    window = plausible.window()
    if not window.contains(t):
        raise InputError("--as-of", window.reason(as_of))
    return t


def _json_records(lines: list[str | None], bad: dict[int, str]) -> tuple[list[NodeRecord], list[tuple]]:
    """Records of a JSON node list's scontrol lines (``slurm_nodes_json``; None: an unreadable node object, whose
    reason is in ``bad``) and the rejects, line number = the node's position in ``nodes``."""
    recs, rejected = [], [(i, None, reason) for i, reason in bad.items()]
    for i, line in enumerate(lines, start=1):
        try:
            if line is not None:
                recs.append(_record_from_scontrol(i, 1, line))
        except ValueError as exc:
            rejected.append((i, exc.field if isinstance(exc, BadField) else "Gres", f"node record: {exc}"))
    return recs, sorted(rejected)


#: The input formats of a node snapshot (`ingest nodes --format`, the service's nodes ``format``).
FORMATS = ("auto", "scontrol", "sinfo", "json")


def ingest_bytes(con, data: bytes, name: str, fmt: str = "auto", cluster: str | None = None,
                 as_of: str | None = None, retire_missing: bool = False, fields: list[str] | None = None) -> dict:
    """Load one node snapshot in one transaction; returns the run summary. ``fields``: the columns of a
    headerless sinfo output (:func:`parse_sinfo_fields`)."""
    if fmt not in FORMATS:
        raise InputError("--format", f"{fmt!r} is not a node snapshot format ({', '.join(FORMATS)})")
    when = _parse_as_of(as_of)
    if fmt == "auto" and looks_like_json(data):
        fmt = "json"
    json_cluster = None
    if fmt == "json":
        json_lines, json_bad, json_cluster = slurm_nodes_json.to_scontrol_lines(data, name)
        lines = [line or "" for line in json_lines]
    else:
        lines = text_lines(data)
    if fmt == "auto":
        fmt = "scontrol" if any(l.lstrip().startswith("NodeName=") for l in lines[:200]) else "sinfo"
    default_cluster = cluster or json_cluster or warehouse.only_cluster(con)
    skipped: list[tuple[int, str]] = []
    rejected: list[tuple[int, str | None, str]] = []
    if fmt == "json":
        recs, rejected = _json_records(json_lines, json_bad)
        loaded_lines = len(recs)
    elif fmt == "scontrol":
        recs, covered = [], set()
        for start, n, rec_text in _scontrol_records(lines):
            covered.update(range(start, start + n))
            try:
                recs.append(_record_from_scontrol(start, n, rec_text))
            except ValueError as exc:
                field_name = exc.field if isinstance(exc, BadField) else "Gres"
                rejected.extend((ln, field_name, f"node record: {exc}") for ln in range(start, start + n))
        for i, line in enumerate(lines, start=1):
            if i not in covered:
                skipped.append((i, "blank line" if not line.strip() else "not part of a node record"))
        loaded_lines = sum(r.n_lines for r in recs)
    else:
        try:
            recs, skipped, rejected = _sinfo_records(lines, fields)
        except InputError as exc:
            if exc.source == "--fields":
                raise InputError("--fields", f"{name}:{exc.line_no} {exc.message}") from exc
            raise InputError(name, exc.message) from exc
        loaded_lines = len({r.line_no for r in recs})
    if default_cluster is None and any(r.cluster is None for r in recs):
        known = warehouse.known_clusters(con)
        raise InputError("--cluster", f"{name} does not name its cluster and the warehouse knows "
                                      f"{'several: ' + ', '.join(known) if known else 'none yet'}; "
                                      "give --cluster NAME")
    for r in recs:
        r.cluster = r.cluster or default_cluster
    nodes = _merge_records(recs)
    options = {"format": fmt, "as_of": when.isoformat(),
               **({"records": slurm_nodes_json.RECORDS_NOTE, "read_as": "node records"} if fmt == "json" else {})}
    run = warehouse.IngestRun(con, "nodes", name, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data),
                              cluster=default_cluster, options=options, stored_as="nodes")
    with run:
        run.lines_read = len(lines)
        run.mark_lines(lines, skipped, rejected)
        run.loaded = loaded_lines
        run.notes = _apply_snapshot(con, run, nodes, when, retire_missing) + mig_notes(nodes)
        run.notes += shared_gpu_notes(nodes, gpu_shares.resolve_stored(con, run.run_id))
    summary = run.summary()
    summary["reject_examples"] = [f"{name}:{ln}: " + (f"field {f}: " if f else "") + r for ln, f, r in rejected[:10]]
    return summary


#: A GRES type naming a MIG profile (Slurm's MIG management: `1g.5gb`; with AutoDetect=nvml `a100_1g.10gb`)
MIG_TYPE = re.compile(r"(?:^|_)\d+g\.\d+gb$", re.IGNORECASE)


def mig_notes(nodes: list[NodeRecord]) -> list[str]:
    """What a reader must know when GPUs are MIG slices: Slurm counts each slice as a GPU, and so do we (one
    slice = one GPU of its own pool), so those pools' capacity, utilization and charges are in slices."""
    mig = [n for n in nodes if any(MIG_TYPE.search(t) for t in (n.gpu_type or "").split("+"))]
    if not mig:
        return []
    types = sorted({t for n in mig for t in n.gpu_type.split("+") if MIG_TYPE.search(t)})
    return [f"{len(mig)} nodes carry MIG slices ({', '.join(types)}): as in Slurm, each slice counts as one GPU of "
            "its pool, so those pools' capacity, utilization and charges are in slices, not physical GPUs (give "
            "them per-slice rates in the governance file)"]


#: A GRES that shares a GPU among jobs: Slurm's GPU sharding and CUDA MPS (``shard:20``, ``mps:400``)
SHARED_GRES = re.compile(r"(?:^|,)(shard|mps)(?::[^,:()]+)*:\d+", re.IGNORECASE)


def shared_gpu_notes(nodes: list[NodeRecord], resolved: int) -> list[str]:
    """What a reader must know when nodes offer GPU shards or MPS shares: a job holding only those counts the part
    of a GPU they are on its node (ingest/gpu_shares.py), where Slurm's gres/gpu accounting counts none; and how
    many stored jobs this inventory resolved (loaded before their nodes were)."""
    shared = [n for n in nodes if n.gres and SHARED_GRES.search(n.gres)]
    if not shared:
        return [f"{resolved:,} stored jobs on GPU shards or MPS shares resolved from the inventory"] if resolved else []
    kinds = sorted({m.group(1).lower() for n in shared for m in SHARED_GRES.finditer(n.gres)})
    done = f"; {resolved:,} stored job{'s' if resolved > 1 else ''} on them resolved" if resolved else ""
    return [f"{len(shared)} node{'s' if len(shared) > 1 else ''} offer{'' if len(shared) > 1 else 's'} GPUs "
            f"shared among jobs ({', '.join(kinds)}): a job holding only {' or '.join(kinds)} counts its shares "
            f"over the node's shares per GPU (sreport's gres/gpu counts it as 0){done}"]


def _apply_snapshot(con, run, nodes: list[NodeRecord], when: dt.datetime, retire_missing: bool) -> list[str]:
    """Apply one snapshot to ``nodes`` (validity periods) and ``node_states``; returns notes for the summary."""
    for cl in {n.cluster for n in nodes}:
        latest = con.execute("SELECT max(valid_from), max(valid_to) FROM nodes WHERE cluster = ?", [cl]).fetchall()[0]
        newest = max((t for t in latest if t is not None), default=None)
        if newest is not None and when < newest:
            raise InputError(run.input_name, f"snapshot time {when} is older than the inventory's latest change "
                                             f"({newest}) for cluster {cl}; ingest snapshots in time order (--as-of)")
    first = [cl for cl in {n.cluster for n in nodes}
             if not con.execute("SELECT count(*) FROM nodes WHERE cluster = ?", [cl]).fetchall()[0][0]]
    snap = pa.table({
        "cluster": [n.cluster for n in nodes], "node": [n.node for n in nodes],
        "partitions": [",".join(sorted(n.partitions)) or None for n in nodes],
        "gpu_type": [n.gpu_type for n in nodes], "gpus": pa.array([n.gpus for n in nodes], pa.int32()),
        "cpus": pa.array([n.cpus for n in nodes], pa.int32()), "mem_bytes": pa.array([n.mem_bytes for n in nodes], pa.int64()),
        "gres": [n.gres for n in nodes], "features": [n.features for n in nodes], "state": [n.state for n in nodes],
        "state_raw": [n.state_raw for n in nodes], "reason": [n.reason for n in nodes],
        "gpus_alloc": pa.array([n.gpus_alloc for n in nodes], pa.int32()),
        "unreported": pa.array([sorted(n.unreported) for n in nodes], pa.list_(pa.string()))})
    con.register("_snap_in", snap)
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _snap AS SELECT * FROM _snap_in")
    finally:
        con.unregister("_snap_in")
    attrs = ["partitions", "gpu_type", "gpus", "cpus", "mem_bytes", "gres", "features"]
    # what the input does not report is the current row's (a sinfo listing without Gres keeps the node's GPUs)
    kept = ", ".join(f"CASE WHEN list_contains(s.unreported, '{a}') AND n.node IS NOT NULL THEN n.{a} "
                     f"ELSE s.{a} END AS {a}" for a in attrs)
    current = ", ".join(f"n.{a} AS cur_{a}" for a in attrs)
    differs = " OR ".join(f"{a} IS DISTINCT FROM cur_{a}" for a in attrs)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _snap_cmp AS
        WITH k AS (SELECT s.* REPLACE ({kept}), n.node IS NOT NULL AS had_row, {current}
                   FROM _snap s LEFT JOIN nodes n ON n.cluster = s.cluster AND n.node = s.node AND n.valid_to IS NULL)
        SELECT k.* EXCLUDE ({", ".join(f"cur_{a}" for a in attrs)}), had_row AND ({differs}) AS changed FROM k""")
    new, changed, same = con.sql("SELECT count(*) FILTER (NOT had_row), count(*) FILTER (changed), "
                                 "count(*) FILTER (had_row AND NOT changed) FROM _snap_cmp").fetchall()[0]
    run.inserted, run.updated, run.unchanged = new, changed, same
    kept_gpus, new_blind = con.sql("""SELECT count(*) FILTER (had_row), count(*) FILTER (NOT had_row) FROM _snap_cmp
                                      WHERE list_contains(unreported, 'gpus')""").fetchall()[0]
    con.execute("""UPDATE nodes SET valid_to = $when FROM _snap_cmp c
                   WHERE c.changed AND nodes.cluster = c.cluster AND nodes.node = c.node AND nodes.valid_to IS NULL""",
                {"when": when})
    con.execute(f"""INSERT INTO nodes SELECT cluster, node, {", ".join(attrs)},
                       CASE WHEN NOT had_row AND list_contains($first, cluster) THEN NULL ELSE $when END, NULL, $run
                   FROM _snap_cmp WHERE changed OR NOT had_row""", {"when": when, "first": first, "run": run.run_id})
    con.execute("""DELETE FROM node_states WHERE observed_at = $when
                   AND (cluster, node) IN (SELECT (cluster, node) FROM _snap)""", {"when": when})
    con.execute("""INSERT INTO node_states SELECT cluster, node, $when, state, state_raw, reason, gpus_alloc, $run
                   FROM _snap""", {"when": when, "run": run.run_id})
    if retire_missing:
        clusters = sorted({n.cluster for n in nodes})
        run.updated += con.execute("""
            UPDATE nodes SET valid_to = $when
            WHERE valid_to IS NULL AND list_contains($clusters, cluster)
              AND NOT EXISTS (SELECT 1 FROM _snap s WHERE s.cluster = nodes.cluster AND s.node = nodes.node)""",
            {"when": when, "clusters": clusters}).fetchall()[0][0]
    con.execute("DROP TABLE IF EXISTS _snap_cmp")
    con.execute("DROP TABLE IF EXISTS _snap")
    if not kept_gpus + new_blind:
        return []
    return [f"this listing names no GPUs (no Gres column): {kept_gpus} nodes keep the GPUs of the inventory"
            + (f", {new_blind} nodes new to it count 0 GPUs until a listing with Gres" if new_blind else "")]
