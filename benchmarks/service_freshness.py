"""Freshness of the serving view on the 5,000,000-job year (issue 15 part 2): one 15-minute collection cycle
reaches the dashboard in <= 15 s, and publishing does not grow with history (4x the warehouse: <= 1.3x the time).

A cycle, after the year's data (2027-01-05 08:00 on), on a private copy of the year with its marts:

- ``ingest sacct``: 150 ``sacct -P`` lines through the real ingest path: 120 jobs submitted in the 15 minutes
  (60 % ended, 40 % still running) and the 30 still running from the cycle before, now ended;
- ``ingest dcgm``: 15 minutes of 1-minute DCGM readings (GPU util, SM active, FB used, power) for the year's
  2,000 nodes x 8 = 16,000 GPUs (960,000 points, OpenMetrics text) through the real telemetry ingest;
- ``refresh``: the incremental marts (timeline, efficiency, demand, open statements), without publishing;
- ``publish``: ``warehouse.publish_serving`` (the parts that changed, a new manifest);
- ``reader``: a fresh dashboard ``Snapshot`` opens the new manifest and finds the cycle's new jobs.

Prints each step's median over ``--cycles`` cycles and the end-to-end median (target <= 15 s). Then the same
cycles on a warehouse 4x larger (the year and three copies of it shifted back by 1, 2 and 3 whole years, job
uids offset, marts included; built once and cached beside the year) and the ratio of the publish medians
(target <= 1.3). For comparison: the full publish of each (every part written) and the full copy into one
DuckDB file that publishing was before (``old_copy_publish``).

Heavy (the 4x file is ~3 GB): ``flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/service_freshness.py``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from benchmarks._year import CACHE, _log, work_copy, year_warehouse  # noqa: E402
from dashboards.snapshot import Snapshot  # noqa: E402
from ingest import dcgm, sacct, telemetry_store, warehouse  # noqa: E402
from ingest.warehouse import serving  # noqa: E402
from models.marts import timeline  # noqa: E402
from models.pipeline import refresh  # noqa: E402

CYCLE = dt.timedelta(minutes=15)
FMT = "%Y-%m-%dT%H:%M:%S"
HEADER = ("JobID|JobIDRaw|Cluster|Partition|QOS|Account|User|State|ExitCode|Submit|Eligible|Start|End|Elapsed|"
          "Timelimit|NNodes|NCPUS|ReqMem|AllocTRES|ReqTRES|NodeList|JobName")
METRICS = [("DCGM_FI_DEV_GPU_UTIL", "util"), ("DCGM_FI_PROF_SM_ACTIVE", "sm"), ("DCGM_FI_DEV_FB_USED", "fb"),
           ("DCGM_FI_DEV_POWER_USAGE", "power")]
TARGET_CYCLE_S, TARGET_RATIO = 15.0, 1.3


# ---------------------------------------------------------------- the 4x warehouse

def _shift_sql(con, t: str, k: int, uid_step: int, horizon: dt.datetime) -> str:
    """SELECT of table ``t``'s rows as copy ``k``: timestamps k whole years earlier, job uids below the year's.
    A copy's jobs still running or pending at the year's ``horizon`` ended (cancelled) then: history is closed
    (open jobs of past years would run for years, and the refresh re-places every running job)."""
    exprs = []
    for c, ty in con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
                             "AND database_name = current_database() ORDER BY column_index", [t]).fetchall():
        q = f'"{c}"'
        if t == "jobs" and k and c == "end":
            exprs.append(f"coalesce({q}, TIMESTAMP '{horizon}') - INTERVAL {k} YEAR AS {q}")
        elif t == "jobs" and k and c == "state":
            exprs.append(f"CASE WHEN \"end\" IS NULL THEN 'CANCELLED' ELSE {q} END AS {q}")
        elif t == "tl_job_alloc" and k and c == "is_open":
            exprs.append(f"false AS {q}")
        elif ty == "TIMESTAMP":
            exprs.append(f"{q} - INTERVAL {k} YEAR AS {q}")
        elif c == "job_uid":
            exprs.append(f"{q} + {(3 - k) * uid_step} AS {q}")
        else:
            exprs.append(q)
    return f'SELECT {", ".join(exprs)} FROM "{t}"'


def warehouse_4x(year: Path) -> Path:
    """The year and three copies shifted back by whole years, in one cluster: every table with a time or a job
    uid four times over (the others, such as nodes and the small marts keyed by cluster, as they are); the
    year's job uids moved above the copies'. tl_clusters starts at the new first day and tl_node_state is
    rebuilt for it, so an incremental refresh goes on from the year's horizon as on the original."""
    target = CACHE / f"{year.stem}-x4-v2.duckdb"
    if target.exists():
        return target
    _log(f"building {target} (a few minutes)")
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    shutil.copyfile(year, tmp)
    con = warehouse.connect(tmp)
    horizon = con.sql("SELECT max(horizon) FROM tl_clusters").fetchall()[0][0]
    uid_step = -(-con.sql("SELECT max(job_uid) + 1 FROM jobs").fetchall()[0][0] // warehouse.serving.UID_WIDTH) \
        * warehouse.serving.UID_WIDTH
    multiply = [t for (t,) in con.sql("""SELECT DISTINCT table_name FROM duckdb_columns()
                                         WHERE database_name = current_database() AND schema_name = 'main'
                                           AND (data_type = 'TIMESTAMP' OR column_name = 'job_uid')""").fetchall()
                if t not in ("tl_clusters", "tl_node_state", "nodes", "ingest_runs", "mart_state", "watermarks",
                             "governance", "clusters", "rates", "entitlements", "synthetic_builds", "demand_scopes",
                             "gpu_devices", "open_statements", "open_statement_lines", "open_statement_rates",
                             "open_statement_recon", "schema_migrations", "serving_journal")]
    for t in multiply:
        con.execute(f'CREATE TABLE "_x4_{t}" AS SELECT * FROM "{t}" LIMIT 0')
        for k in (3, 2, 1, 0):                      # oldest first: the order a warehouse grows in
            con.execute(f'INSERT INTO "_x4_{t}" {_shift_sql(con, t, k, uid_step, horizon)}')
        con.execute(f'DELETE FROM "{t}"')
        con.execute(f'INSERT INTO "{t}" SELECT * FROM "_x4_{t}"')
        con.execute(f'DROP TABLE "_x4_{t}"')
        _log(f"  {t}: x4")
    con.execute("DROP SEQUENCE seq_job_uid")
    con.execute(f"CREATE SEQUENCE seq_job_uid START {con.sql('SELECT max(job_uid) + 1 FROM jobs').fetchall()[0][0]}")
    for c, ds, hz in con.sql(f"SELECT cluster, data_start, horizon FROM ({timeline.SPANS_SQL})").fetchall():
        con.execute("UPDATE tl_clusters SET data_start = ? WHERE cluster = ?", [ds, c])
        timeline.build_node_state(con, c, ds, hz)
        con.execute("DELETE FROM tl_node_state WHERE cluster = ?", [c])
        con.execute("INSERT INTO tl_node_state SELECT cluster, node, t0, t1, gpus, gpu_type, partitions, avail, "
                    "reason FROM _ns")
    con.execute("DELETE FROM serving_journal")
    con.execute("CHECKPOINT")
    con.close()
    os.replace(tmp, target)
    return target


# ---------------------------------------------------------------- one cycle's inputs

def _templates(con, n: int) -> pl.DataFrame:
    """Recent finished single-node jobs of the year: their partition, account, user, TRES and node."""
    return con.sql(f"""SELECT partition, qos, account, "user", ncpus, alloc_tres, req_tres, nodelist,
                              timelimit_raw FROM jobs
                       WHERE state = 'COMPLETED' AND nnodes = 1 AND ngpus >= 1 AND job_id = job_id_raw
                       ORDER BY submit DESC LIMIT {n}""").pl()


def sacct_lines(tpl: pl.DataFrame, cluster: str, start: dt.datetime, cycle: int,
                first_id: int) -> tuple[list[str], list[str]]:
    """(150 lines of cycle ``cycle``, the ids of its new jobs): 120 new jobs, 30 of the previous cycle ended."""
    w0 = start + cycle * CYCLE
    lines, new_ids = [], []

    def line(i: int, r: dict, submit: dt.datetime, end: dt.datetime | None) -> str:
        start = submit + dt.timedelta(seconds=30)
        state = "COMPLETED" if end else "RUNNING"
        el = int(((end or w0 + CYCLE) - start).total_seconds())
        return "|".join([str(i), str(i), cluster, r["partition"], r["qos"], r["account"], r["user"], state, "0:0",
                         submit.strftime(FMT), submit.strftime(FMT), start.strftime(FMT),
                         end.strftime(FMT) if end else "Unknown", f"{el // 3600:02d}:{el // 60 % 60:02d}:{el % 60:02d}",
                         r["timelimit_raw"], "1", str(r["ncpus"]), "64G", r["alloc_tres"], r["req_tres"],
                         r["nodelist"], f"svc{i}"])
    rows = tpl.to_dicts()
    for j in range(120):
        i = first_id + cycle * 120 + j
        submit = w0 + dt.timedelta(seconds=7 * j)
        end = submit + dt.timedelta(seconds=60 + 3 * j) if j % 5 < 3 else None      # 60 % ended in the cycle
        lines.append(line(i, rows[j % len(rows)], submit, end))
        new_ids.append(str(i))
    if cycle:                                        # last cycle's running jobs: 30 of its 48 end now
        for j in [j for j in range(120) if j % 5 >= 3][:30]:
            i = first_id + (cycle - 1) * 120 + j
            submit = w0 - CYCLE + dt.timedelta(seconds=7 * j)
            lines.append(line(i, rows[j % len(rows)], submit, w0 + dt.timedelta(seconds=20 * (j % 40))))
    return lines, new_ids


def telemetry_file(nodes: list[str], models: list[str], start: dt.datetime, cycle: int, path: Path) -> int:
    """15 minutes of 1-minute readings of 8 GPUs per node, four metrics, as dcgm-exporter text; returns points."""
    w0 = start + cycle * CYCLE
    t0 = int((w0 - dt.datetime(1970, 1, 1)).total_seconds()) * 1000
    g = pl.DataFrame({"node": nodes, "model": models}).join(pl.DataFrame({"gpu": list(range(8))}), how="cross")
    g = g.join(pl.DataFrame({"m": list(range(15))}), how="cross").with_row_index("r")
    with open(path, "w", encoding="utf-8") as out:
        for metric, kind in METRICS:
            vals = {"util": (pl.col("r") * 7919 % 101).cast(pl.String),
                    "sm": ((pl.col("r") * 7919 % 101) / 100).cast(pl.String),
                    "fb": (pl.col("r") * 104729 % 80000).cast(pl.String),
                    "power": (100 + pl.col("r") * 31 % 600).cast(pl.String)}[kind]
            text = g.select(pl.concat_str([
                pl.lit(f'{metric}{{gpu="'), pl.col("gpu").cast(pl.String), pl.lit('",UUID="GPU-'), pl.col("node"),
                pl.lit("-"), pl.col("gpu").cast(pl.String), pl.lit('",device="nvidia'), pl.col("gpu").cast(pl.String),
                pl.lit('",modelName="'), pl.col("model"), pl.lit('",Hostname="'), pl.col("node"), pl.lit('"} '),
                vals, pl.lit(" "), (t0 + pl.col("m") * 60000).cast(pl.String)]).alias("l"))["l"]
            out.write(f"# HELP {metric} DCGM field.\n# TYPE {metric} gauge\n")
            out.write(text.str.join("\n").item() + "\n")
    return g.height * len(METRICS)


# ---------------------------------------------------------------- measuring

def old_copy_publish(con, db: Path) -> float:
    """Seconds of the publish this replaces: every table but raw telemetry copied into one DuckDB file."""
    tmp = db.with_name(db.stem + ".oldcopy.duckdb")
    t = time.perf_counter()
    con.execute(f"ATTACH '{tmp}' AS oldcopy")
    for (name,) in con.sql("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                           "AND schema_name = 'main'").fetchall():
        if name not in ("gpu_samples", "schema_migrations"):
            con.execute(f'CREATE TABLE oldcopy."{name}" AS SELECT * FROM main."{name}"')
    con.execute("DETACH oldcopy")
    took = time.perf_counter() - t
    tmp.unlink()
    return took


class PublishProfile:
    """Per table, the seconds one incremental publish spent on it, its journal bound and the parts it wrote
    (``--profile-publish``: which tables make a cycle's publish grow with history)."""

    def __init__(self):
        self.rows: dict[str, list] = {}

    def __enter__(self):
        self._orig = serving._publish_table, serving._write_part

        def publish_table(con, d, t, cols, prev, since, size, whole=None):
            row = self.rows.setdefault(t, [0.0, since, 0])
            t0 = time.perf_counter()
            out = self._orig[0](con, d, t, cols, prev, since, size, whole)
            row[0] += time.perf_counter() - t0
            return out

        def write_part(con, d, t, key, where, params):
            self.rows.setdefault(t, [0.0, None, 0])[2] += 1
            return self._orig[1](con, d, t, key, where, params)

        serving._publish_table, serving._write_part = publish_table, write_part
        return self

    def __exit__(self, *exc):
        serving._publish_table, serving._write_part = self._orig

    def report(self, label: str, total: float) -> None:
        spent = sum(r[0] for r in self.rows.values())
        _log(f"{label} publish {total:.2f} s: tables {spent:.2f} s, the rest (columns, sizes, unpartitioned "
             f"fingerprints, manifest, garbage) {total - spent:.2f} s; slowest tables:")
        for t, (s, since, parts) in sorted(self.rows.items(), key=lambda kv: -kv[1][0])[:12]:
            _log(f"    {t:<34} {s:6.3f} s  since {since!s:<28} parts written {parts}")


def run_cycles(src: Path, work: Path, cycles: int, label: str, old: bool = True, profile: bool = False) -> dict:
    db = work_copy(src, work)
    con = warehouse.connect(db)
    full = time.perf_counter()
    warehouse.publish_serving(con, db, full=True)
    full = time.perf_counter() - full
    old = old_copy_publish(con, db) if old and not os.environ.get("SKIP_OLD_COPY") else float("nan")
    _log(f"{label}: full publish {full:.1f} s, old full copy {old:.1f} s")
    tpl = _templates(con, 200)
    cluster, last = con.sql("""SELECT any_value(cluster), greatest(max(submit), max(start), max("end"))
                               FROM jobs""").fetchall()[0]
    epoch = dt.datetime(1970, 1, 1)
    start = epoch + dt.timedelta(seconds=(int((last - epoch).total_seconds()) // 900 + 1) * 900)  # next quarter hour
    first_id = int(con.sql("SELECT max(try_cast(job_id_raw AS BIGINT)) FROM jobs").fetchall()[0][0]) + 1000
    nodes = con.sql("""SELECT node, any_value(gpu_type) FROM nodes WHERE valid_to IS NULL AND gpus = 8
                       GROUP BY node ORDER BY node""").fetchall()
    steps: dict[str, list[float]] = {k: [] for k in ("ingest sacct", "ingest dcgm", "refresh", "publish", "reader",
                                                     "end to end")}
    for c in range(cycles):
        lines, new_ids = sacct_lines(tpl, cluster, start, c, first_id)
        (work / "cycle.psv").write_text("\n".join([HEADER, *lines]) + "\n")
        points = telemetry_file([n for n, _ in nodes], [f"NVIDIA {str(m).upper()}" for _, m in nodes], start, c,
                                work / "cycle.prom")
        took = {}
        t = time.perf_counter()
        s = sacct.ingest_path(con, str(work / "cycle.psv"), sacct.SacctOptions())
        took["ingest sacct"] = time.perf_counter() - t
        assert s["error"] is None and s["loaded"] == len(lines), s
        t = time.perf_counter()
        runs = list(dcgm.ingest_paths(con, [str(work / "cycle.prom")], telemetry_store.TelemetryOptions(cluster=cluster)))
        took["ingest dcgm"] = time.perf_counter() - t
        assert runs[0]["error"] is None, runs[0]
        t = time.perf_counter()
        marts = refresh.run(con, db, publish=False)
        took["refresh"] = time.perf_counter() - t
        prof = PublishProfile() if profile else contextlib.nullcontext()
        t = time.perf_counter()
        with prof:
            warehouse.publish_serving(con, db)
        took["publish"] = time.perf_counter() - t
        if profile:
            prof.report(f"{label} cycle {c}", took["publish"])
        t = time.perf_counter()
        reader = Snapshot(db)
        seen = reader.frame("SELECT count(*) AS n FROM jobs WHERE job_id_raw IN (SELECT unnest($ids))",
                            {"ids": new_ids})["n"][0]
        reader.close()
        took["reader"] = time.perf_counter() - t
        assert seen == len(new_ids), (seen, len(new_ids))
        took["end to end"] = sum(took.values())
        for k, v in took.items():
            steps[k].append(v)
        _log(f"{label} cycle {c}: " + ", ".join(f"{k} {v:.2f} s" for k, v in took.items())
             + f" ({len(lines)} sacct lines, {points:,} telemetry points; refresh: "
             + ", ".join(f"{k} {v:.1f} s" for k, v in marts) + ")")
    rows = con.sql("SELECT count(*) FROM jobs").fetchall()[0][0]
    con.close()
    return {"median": {k: statistics.median(v) for k, v in steps.items()}, "full": full, "old": old, "jobs": rows,
            "db": db}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--skip-4x", action="store_true", help="only the cycle on the year")
    ap.add_argument("--old-4x", action="store_true", help="also time the old full copy on the 4x warehouse")
    ap.add_argument("--profile-publish", action="store_true",
                    help="per table: seconds of each incremental publish, its journal bound, parts written")
    ap.add_argument("--db", type=Path, help="another warehouse with marts instead of the year (a quick check)")
    a = ap.parse_args(argv)
    # the synthetic year runs past today's date: let its times (and the cycles after it) through
    os.environ.setdefault("GPULEDGER_TIME_WINDOW", "2020-01-01..2027-03-01")
    year = a.db or year_warehouse(marts=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        one = run_cycles(year, Path(tmp), a.cycles, "1x", profile=a.profile_publish)
        shutil.rmtree(warehouse.serving_dir(one["db"]))
        one["db"].unlink()
        print(f"one 15-minute cycle on the {one['jobs']:,}-job year, median of {a.cycles} cycles:")
        for k, v in one["median"].items():
            print(f"  {k:<13} {v:6.2f} s")
        e2e = one["median"]["end to end"]
        print(f"end to end {e2e:.2f} s (target <= {TARGET_CYCLE_S:.0f} s: {'met' if e2e <= TARGET_CYCLE_S else 'NOT met'})")
        print(f"full publish (every part written) {one['full']:.1f} s; the old full copy into one DuckDB file "
              f"{one['old']:.1f} s; the incremental publish {one['median']['publish']:.2f} s")
        if a.skip_4x:
            return 0
        big = warehouse_4x(year)
        four = run_cycles(big, Path(tmp), a.cycles, "4x", old=a.old_4x, profile=a.profile_publish)
    p1, p4 = one["median"]["publish"], four["median"]["publish"]
    print(f"publish on the 4x warehouse ({four['jobs']:,} jobs): {p4:.2f} s vs {p1:.2f} s on the year: ratio "
          f"{p4 / p1:.2f} (target <= {TARGET_RATIO}: {'met' if p4 / p1 <= TARGET_RATIO else 'NOT met'})")
    print(f"4x: full publish {four['full']:.1f} s; old full copy {four['old']:.1f} s; "
          f"end to end {four['median']['end to end']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
