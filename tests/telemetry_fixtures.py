"""Small builders for telemetry tests: Slurm jobs through the real sacct ingestor, DCGM readings as
OpenMetrics text through the real dcgm ingestor (so tests exercise the same path as users)."""
from __future__ import annotations

import datetime as dt

from ingest import dcgm, sacct, telemetry_store

T0 = dt.datetime(2026, 7, 14, 10, 0)
HEADER = "JobID|JobIDRaw|Cluster|Partition|Account|User|Submit|Start|End|State|NNodes|NCPUS|AllocTRES|NodeList\n"


def at(minute: float) -> dt.datetime:
    """T0 + minutes."""
    return T0 + dt.timedelta(minutes=minute)


def add_jobs(con, tmp_path, jobs: list[dict], name: str = "jobs.psv") -> dict:
    """Load jobs through `ingest sacct`. Each dict: id, start/end (minutes after T0; end None = running),
    gpus, nodes (Slurm nodelist), optional user, account, partition, state, cluster, nnodes."""
    lines = [HEADER]
    for j in jobs:
        start, end = at(j["start"]), (at(j["end"]) if j.get("end") is not None else None)
        state = j.get("state", "COMPLETED" if end else "RUNNING")
        tres = f"cpu=4,gres/gpu={j['gpus']},node={j.get('nnodes', 1)}"
        lines.append(f"{j['id']}|{j['id']}|{j.get('cluster', 'c1')}|{j.get('partition', 'gpu')}|"
                     f"{j.get('account', 'acct')}|{j.get('user', 'alice')}|{(start - dt.timedelta(minutes=5)):%Y-%m-%dT%H:%M:%S}|"
                     f"{start:%Y-%m-%dT%H:%M:%S}|{f'{end:%Y-%m-%dT%H:%M:%S}' if end else 'Unknown'}|{state}|"
                     f"{j.get('nnodes', 1)}|4|{tres}|{j['nodes']}\n")
    f = tmp_path / name
    f.write_text("".join(lines))
    return sacct.ingest_path(con, str(f), sacct.SacctOptions())


def readings(series: dict, metric: str = "DCGM_FI_DEV_GPU_UTIL") -> str:
    """OpenMetrics text. ``series``: {(host, gpu[, extra label text]): {minute: value}} for ``metric``, or
    {(host, gpu[, extra], metric): {...}} to mix metrics."""
    fams: dict[str, list[str]] = {}
    for key, points in series.items():
        host, gpu, *rest = key
        extra = rest[0] if rest else None
        name = rest[1] if len(rest) > 1 else metric
        labels = f'gpu="{gpu}",UUID="GPU-{host}-{gpu}",modelName="NVIDIA A100-SXM4-80GB",Hostname="{host}"' + \
            (f",{extra}" if extra else "")
        for minute, v in sorted(points.items()):
            t = (at(minute) - dt.datetime(1970, 1, 1)).total_seconds()
            fams.setdefault(name, []).append(f"{name}{{{labels}}} {v} {t:.0f}\n")
    return "".join(f"# TYPE {n} gauge\n" + "".join(lines) for n, lines in fams.items()) + "# EOF\n"


def load_readings(con, text: str, name: str = "readings.om", **opts) -> dict:
    return dcgm.ingest_bytes(con, text.encode(), name, telemetry_store.TelemetryOptions(**opts))


def busy(minutes: range | list, value: float) -> dict:
    return {m: value for m in minutes}
