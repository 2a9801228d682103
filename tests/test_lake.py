"""models/pipeline/lake.py: the open lake. Spark (local mode, Debian's OpenJDK) and DuckDB read it and compute
allocated GPU-hours per team and month and March's chargeback lines, equal to gpuledger's own to the GPU-second and
the cent; the export is incremental (only changed parts rewritten), atomic (manifest swap, old parts kept for the
grace period, orphans of a killed export removed) and keeps types (UTC instants, DECIMAL money).

The cluster (real ingest path, tests/cost_helpers.py): h100 nodes h1, h2 (4 GPUs), a100 node a1 (8 GPUs), cluster
c1; jobs with edges at odd seconds, across the Feb/Mar and Mar/Apr month edges and across the h100 rate change
(2.13 until Mar 16 07:00:00, then 2.57; a100 1.07). By hand, March:
  J1 vision 4 h100 Mar 1 03:17:11 - Mar 11 05:02:59: 870,348 s x 4 = 3,481,392 GPU-s = 967.053333 GPU-h x 2.13
  J2 nlp    2 h100 Feb 28 12:00:37 - Mar 2 12:44:01: March part 132,241 s x 2 = 264,482 GPU-s
  J3 zeta   1 a100 Mar 5 00:00:00 - Mar 6 00:00:01 (unmapped): 86,401 GPU-s = 24.000278 GPU-h x 1.07 = 25.68
  J4 nlp    1 h100 Mar 31 23:59:30 - Apr 1 00:00:45: 30 GPU-s in March, 45 in April
  J5 vision 3 h100 Mar 16 06:30:10 - Mar 16 09:10:20: 1,790 s x 3 at 2.13 + 7,820 s x 3 at 2.57
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from decimal import Decimal as D
from pathlib import Path
from urllib.parse import unquote

import duckdb
import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from cost_helpers import Job, add_jobs, build, refresh
from ingest import warehouse
from ingest.warehouse import serving
from models.definitions.labels import ALL, UNMAPPED
from models.metrics import chargeback, utilization
from models.pipeline import lake


def T(month: int, day: int, h: int = 0, m: int = 0, s: int = 0) -> dt.datetime:
    return dt.datetime(2026, month, day, h, m, s)


NODES = [("h1", 4, "h100"), ("h2", 4, "h100"), ("a1", 8, "a100")]
JOBS = [Job(1, "vision", 4, T(3, 1, 3, 17, 11), T(3, 11, 5, 2, 59), node="h1"),
        Job(2, "nlp", 2, T(2, 28, 12, 0, 37), T(3, 2, 12, 44, 1), node="h2"),
        Job(3, "zeta", 1, T(3, 5), T(3, 6, 0, 0, 1), node="a1", gpu_type="a100"),
        Job(4, "nlp", 1, T(3, 31, 23, 59, 30), T(4, 1, 0, 0, 45), node="h2"),
        Job(5, "vision", 3, T(3, 16, 6, 30, 10), T(3, 16, 9, 10, 20), node="h2")]
GOV = """currency = "EUR"
[[cost_centers]]
id = "CC1"
[[teams]]
name = "vision"
cost_center = "CC1"
accounts = ["vision"]
[[teams]]
name = "nlp"
cost_center = "CC1"
accounts = ["nlp"]
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "2.13"
from = 2026-01-01
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "2.57"
from = 2026-03-16T07:00:00
[[rates]]
gpu_type = "a100"
price_per_gpu_hour = "1.07"
from = 2026-01-01
"""

# ---------------------------------------------------------------- the computations, in Spark SQL and DuckDB SQL
# The same text runs in both engines over views named jobs, tl_job_alloc, tl_clusters, rates, open_statement_lines.

#: Allocated GPU-seconds per team and UTC month: each job's allocation rows clipped to the cluster's data span,
#: cut at month edges.
TEAM_MONTH = """
WITH a AS (
  SELECT coalesce(j.team, '{unmapped}') AS team, a.gpus,
         greatest(a.t0, c.data_start) AS t0, least(a.t1, c.horizon) AS t1
  FROM tl_job_alloc a JOIN jobs j ON j.job_uid = a.job_uid JOIN tl_clusters c ON c.cluster = a.cluster),
m AS (
  SELECT team, gpus, t0, t1, explode(sequence(date_trunc('MONTH', t0), date_trunc('MONTH', t1),
                                               INTERVAL 1 MONTH)) AS month
  FROM a WHERE t1 > t0)
SELECT team, month,
       CAST(sum(gpus * (unix_timestamp(least(t1, month + INTERVAL 1 MONTH)) - unix_timestamp(greatest(t0, month))))
            AS BIGINT) AS gpu_s
FROM m WHERE least(t1, month + INTERVAL 1 MONTH) > greatest(t0, month)
GROUP BY team, month
"""

#: March's chargeback lines (GPU-hours basis, pool base rates, idle policy none): allocated GPU-seconds per team
#: (else account) and pool, priced at the rate in force each second, rounded half-even once per line.
MARCH_LINES = """
WITH a AS (
  SELECT j.team, CASE WHEN j.team IS NULL THEN j.account END AS account, a.gpu_type,
         CAST(a.gpus AS DECIMAL(18, 6)) AS gpus, greatest(a.t0, TIMESTAMP '2026-03-01 00:00:00') AS t0,
         least(a.t1, TIMESTAMP '2026-04-01 00:00:00') AS t1
  FROM tl_job_alloc a JOIN jobs j ON j.job_uid = a.job_uid),
p AS (
  SELECT a.team, a.account, a.gpu_type, a.gpus, r.price_per_gpu_hour AS rate,
         CAST(unix_timestamp(least(a.t1, coalesce(r.valid_to, a.t1))) AS BIGINT)
           - CAST(unix_timestamp(greatest(a.t0, r.valid_from)) AS BIGINT) AS s
  FROM a JOIN rates r ON r.gpu_type = a.gpu_type AND r.partition IS NULL AND r.cluster IS NULL
                     AND r.valid_from < a.t1 AND (r.valid_to IS NULL OR r.valid_to > a.t0)
  WHERE a.t1 > a.t0)
SELECT team, account, gpu_type, CAST(sum(gpus * s) AS BIGINT) AS gpu_s,
       CAST(bround(sum(gpus * s * rate) / 3600, 2) AS DECIMAL(18, 2)) AS direct_cost
FROM p WHERE s > 0 GROUP BY team, account, gpu_type
"""

#: The month's statement lines as gpuledger stored them (the open statement refresh writes), totalled per line.
STORED_TOTALS = """
SELECT team, account, gpu_type, sum(total) AS total, sum(gpu_hours) AS gpu_hours FROM open_statement_lines
WHERE month = '2026-03' AND kind = 'charge' GROUP BY team, account, gpu_type
"""
MINIMAL_SERVICE = """[service]
warehouse = "wh.duckdb"
lake = "out/lake"
lake_interval = "15m"
[[clusters]]
name = "alpha"
[clusters.sacct]
"""
TABLES = ("jobs", "tl_job_alloc", "tl_clusters", "rates", "open_statement_lines")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(warehouse path, lake path): the cluster, built and exported once (closed: tests open it themselves)."""
    tmp = tmp_path_factory.mktemp("lake")
    con = warehouse.connect(tmp / "w.duckdb")
    build(con, tmp, JOBS, NODES, GOV)
    lake.export(con, tmp / "lake")
    con.close()
    return tmp / "w.duckdb", tmp / "lake"


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is a dev dependency (pyproject.toml)")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime (Debian openjdk-17-jre-headless, in .ci/run)")
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[1]").appName("gpuledger-lake-test")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
         # a tiny lake: interpreted plans and the quick JIT start faster than generated code
         .config("spark.sql.codegen.wholeStage", "false").config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
         .config("spark.sql.adaptive.enabled", "false")
         .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def spark_views(spark, lake_dir: Path) -> None:
    """Register the lake's tables as Spark views, from the parts the manifest names (not a directory listing)."""
    m = lake.read_manifest(lake_dir)
    for t in TABLES:
        files = lake.part_files(lake_dir, t, m)
        spark.read.option("basePath", str(lake_dir / t)).parquet(*files).createOrReplaceTempView(t)


def duck_views(lake_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    m = lake.read_manifest(lake_dir)
    for t in TABLES:
        files = lake.part_files(lake_dir, t, m)
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet([{listed}], hive_partitioning = true, "
                    "hive_types_autocast = false)")
    return con


# DuckDB spells three Spark functions differently; the queries are otherwise the same text. (DuckDB divides a
# DECIMAL into a DOUBLE: the cents are exact unless a line's amount lies within ~1e-13 of a half cent.)
def duck_sql(sql: str) -> str:
    return (sql.replace("unix_timestamp(", "epoch(").replace("explode(sequence(", "unnest(generate_series(")
            .replace("bround(", "round_even("))


def ours_team_month(db: Path) -> dict:
    with warehouse.connect(db, read_only=True) as con:
        df = utilization.by_bucket(con, None, None, "month", "team").filter(pl.col("team") != ALL)
    return {(r["team"], r["bucket"]): r["allocated_gpu_h"] for r in df.iter_rows(named=True)}


def ours_march(db: Path) -> dict:
    with warehouse.connect(db, read_only=True) as con:
        st = chargeback.compute(con, "2026-03")
    return {(r["team"], r["account"], r["gpu_type"]): r
            for r in st.lines.filter(pl.col("kind") == "charge").iter_rows(named=True)}


def naive(ts) -> dt.datetime:
    """A month start as Spark (aware, UTC session) or DuckDB (aware or naive) returns it, as naive UTC."""
    return ts.astimezone(dt.timezone.utc).replace(tzinfo=None) if ts.tzinfo else ts


def check_team_month(rows, db: Path) -> None:
    got = {(team, naive(month)): gpu_s for team, month, gpu_s in rows}
    ours = ours_team_month(db)
    assert set(got) == set(ours)
    for k, gpu_s in got.items():
        assert abs(gpu_s / 3600 - ours[k]) < 0.5 / 3600, k           # to the GPU-second
    # by hand: J2's February part (Feb 28 12:00:37 - Mar 1 00:00, 2 GPUs) and J4's April part (45 s)
    assert got["nlp", T(2, 1)] == 2 * (11 * 3600 + 59 * 60 + 23)
    assert got["nlp", T(4, 1)] == 45
    assert got[UNMAPPED, T(3, 1)] == 86_401


def check_march(lines, totals, db: Path) -> None:
    ours = ours_march(db)
    got = {(r[0], r[1], r[2]): (r[3], D(r[4])) for r in lines}
    assert set(got) == set(ours)
    for k, (gpu_s, direct) in got.items():
        assert abs(D(gpu_s) / 3600 - ours[k]["gpu_hours"]) < D("0.5") / 3600, k
        assert direct == ours[k]["direct_cost"], k                    # to the cent
    # by hand: vision = J1 at 2.13 + J5 across the rate change
    vision = D(3_481_392 + 1790 * 3) * D("2.13") / 3600 + D(7820 * 3) * D("2.57") / 3600
    assert got["vision", None, "h100"][1] == vision.quantize(D("0.01"))
    assert got[None, "zeta", "a100"] == (86_401, D("25.68"))
    stored = {(r[0], r[1], r[2]): D(r[3]) for r in totals}
    assert stored == {k: r["total"] for k, r in ours.items()}


# ---------------------------------------------------------------- Spark and DuckDB on the lake

@pytest.mark.slow          # a JVM's start and Spark's planning: ~20-45 s on 2 loaded cores
def test_spark_computes_team_months_and_march_chargeback_equal_to_gpuledger(spark, site):
    db, lake_dir = site
    spark_views(spark, lake_dir)
    check_team_month(spark.sql(TEAM_MONTH.format(unmapped=UNMAPPED)).collect(), db)
    check_march(spark.sql(MARCH_LINES).collect(), spark.sql(STORED_TOTALS).collect(), db)


def test_duckdb_reads_the_same_lake_the_same_way(site):
    db, lake_dir = site
    con = duck_views(lake_dir)
    check_team_month(con.execute(duck_sql(TEAM_MONTH.format(unmapped=UNMAPPED))).fetchall(), db)
    check_march(con.execute(duck_sql(MARCH_LINES)).fetchall(), con.execute(STORED_TOTALS).fetchall(), db)


def test_spark_sees_utc_instants_and_decimal_money(spark, site):
    from pyspark.sql import types as T_
    _, lake_dir = site
    spark_views(spark, lake_dir)
    jobs = spark.table("jobs").schema
    assert isinstance(jobs["start"].dataType, T_.TimestampType)       # an instant, not TIMESTAMP_NTZ
    assert spark.table("rates").schema["price_per_gpu_hour"].dataType == T_.DecimalType(18, 6)
    assert spark.table("open_statement_lines").schema["total"].dataType == T_.DecimalType(18, 4)
    row = spark.sql("SELECT CAST(unix_timestamp(start) AS BIGINT) AS s FROM jobs WHERE job_id = '1'").collect()[0]
    assert row.s == int(dt.datetime(2026, 3, 1, 3, 17, 11, tzinfo=dt.timezone.utc).timestamp())


# ---------------------------------------------------------------- the manifest, incrementality, atomicity

def test_manifest_counts_and_hashes_every_part(site):
    db, lake_dir = site
    m = lake.read_manifest(lake_dir)
    with warehouse.connect(db, read_only=True) as con:
        assert m["schema_version"] == con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        for t in ("jobs", "tl_job_alloc", "tl_hourly", "open_statement_lines", "rates"):
            n = con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
            assert m["tables"][t]["rows"] == sum(p["rows"] for p in m["tables"][t]["parts"].values()) == n
    for e in m["tables"].values():
        for p in e["parts"].values():
            f = lake_dir / p["file"]
            assert hashlib.sha256(f.read_bytes()).hexdigest() == p["sha256"]
            # a private connection, fully fetched: the module-level default one is shared by every test in the process
            with duckdb.connect() as own:
                assert own.execute("SELECT count(*) FROM read_parquet(?)", [str(f)]).fetchall()[0][0] == p["rows"]
    jobs = m["tables"]["jobs"]
    assert jobs["partition_by"] == ["cluster", "month"] and jobs["month_from"] == "submit"
    assert {p["file"].rsplit("/", 1)[0] for p in jobs["parts"].values()} == {
        "jobs/cluster=c1/month=2026-02", "jobs/cluster=c1/month=2026-03"}
    assert dict((c, ty) for c, _, ty in jobs["columns"])["start"] == "TIMESTAMP WITH TIME ZONE (UTC)"


def test_export_rewrites_only_changed_parts_and_swaps_the_manifest(site, tmp_path, monkeypatch):
    db0, lake0 = site
    db, lake_dir = tmp_path / "w.duckdb", tmp_path / "lake"
    shutil.copyfile(db0, db)
    shutil.copytree(lake0, lake_dir)
    before = lake.read_manifest(lake_dir)
    con = warehouse.connect(db)
    try:
        s = lake.export(con, lake_dir)                                   # nothing changed
        assert s["written"] == 0 and s["kept"] > 0
        assert lake.read_manifest(lake_dir)["version"] == before["version"]
        add_jobs(con, tmp_path, [Job(9, "nlp", 1, T(4, 1, 0, 10, 3), T(4, 1, 2, 0, 0), node="h1")], "late.psv")
        refresh(con, tmp_path)
        monkeypatch.setenv(lake.ENV_GRACE, "3600")
        s = lake.export(con, lake_dir)
    finally:
        con.close()
    after = lake.read_manifest(lake_dir)
    assert after["version"] == before["version"] + 1
    old_jobs, new_jobs = before["tables"]["jobs"]["parts"], after["tables"]["jobs"]["parts"]
    april = json.dumps(["c1", "2026-04"]).replace(" ", "")
    assert set(new_jobs) == set(old_jobs) | {april} and new_jobs[april]["rows"] == 1
    for k in old_jobs:                                                   # Feb and March jobs untouched
        assert new_jobs[k]["file"] == old_jobs[k]["file"]
    rewritten = [p["file"] for t, e in before["tables"].items() for k, p in e["parts"].items()
                 if after["tables"][t]["parts"].get(k, {}).get("file") != p["file"]]
    assert 0 < len(rewritten) == s["retired"] and s["written"] > s["retired"]
    assert set(rewritten) == set(after["retired"])
    assert all((lake_dir / f).exists() for f in rewritten)               # a reader on the old manifest still reads
    monkeypatch.setenv(lake.ENV_GRACE, "0")
    lake.collect_garbage(lake_dir)
    assert not any((lake_dir / f).exists() for f in rewritten) and lake.read_manifest(lake_dir)["retired"] == {}


def _parts(lake_dir: Path) -> dict:
    """{table: {part key: (rows, fingerprint)}} as a lake's manifest lists them."""
    m = lake.read_manifest(lake_dir)
    return {t: {k: (p["rows"], p["fp"]) for k, p in e["parts"].items()} for t, e in m["tables"].items()}


def test_change_detection_follows_the_published_serving_view(site, tmp_path):
    """Published serving view: an unchanged export fingerprints no part, a change only the parts it may have
    touched. Published or not, the lake then lists what a full export of the same warehouse lists."""
    db = tmp_path / "w.duckdb"
    shutil.copyfile(site[0], db)
    con = warehouse.connect(db)
    try:
        warehouse.publish_serving(con, db)
        first = lake.export(con, tmp_path / "lake")
        assert first["fingerprinted"] == first["written"] > 0
        same = lake.export(con, tmp_path / "lake")
        assert same["written"] == same["fingerprinted"] == 0 and same["kept"] == first["written"]
        # a new job in April, and J2 (February's only job) deleted as a writer deletes (a retention purge:
        # the rows and a serving_journal note in one transaction). No row of the changed serving partition is in
        # February's part any more: the parts' recorded serving partitions find it
        add_jobs(con, tmp_path, [Job(9, "nlp", 1, T(4, 1, 0, 10, 3), T(4, 1, 2, 0, 0), node="h1")], "late.psv")
        con.execute("BEGIN")
        con.execute("DELETE FROM jobs WHERE job_id = '2'")
        serving.note_changed(con, "jobs")
        con.execute("COMMIT")
        warehouse.publish_serving(con, db)
        inc = lake.export(con, tmp_path / "lake")
        assert set(_parts(tmp_path / "lake")["jobs"]) == {'["c1","2026-03"]', '["c1","2026-04"]'}
        assert 0 < inc["written"] <= inc["fingerprinted"] < first["written"]
        assert _parts(tmp_path / "lake") == _parts_of_full(con, tmp_path / "full1")
        # changed and not yet published: the serving view vouches for nothing the journal names
        add_jobs(con, tmp_path, [Job(10, "vision", 2, T(3, 20, 1, 2, 3), T(3, 20, 4, 0, 7), node="h2")], "l2.psv")
        refresh(con, tmp_path)
        late = lake.export(con, tmp_path / "lake")
        assert late["written"] > 0
        assert _parts(tmp_path / "lake") == _parts_of_full(con, tmp_path / "full2")
    finally:
        con.close()


def _parts_of_full(con, d: Path) -> dict:
    lake.export(con, d, full=True)
    return _parts(d)


def test_a_killed_export_leaves_the_old_lake_and_its_debris_is_removed(site, tmp_path):
    db0, lake0 = site
    lake_dir = tmp_path / "lake"
    shutil.copytree(lake0, lake_dir)
    before = (lake_dir / lake.MANIFEST).read_bytes()
    debris = [lake_dir / "jobs/cluster=c1/month=2026-03/part-deadbeefdeadbeef.parquet",
              lake_dir / f"{lake.MANIFEST}.tmp999999"]
    shutil.copyfile(next((lake_dir / "jobs/cluster=c1/month=2026-03").glob("*.parquet")), debris[0])
    debris[1].write_text("{half")
    # a reader meanwhile sees the old manifest's parts only
    assert len(lake.part_files(lake_dir, "jobs")) == 2
    with warehouse.connect(db0, read_only=True) as con:
        s = lake.export(con, lake_dir)
    assert s["written"] == 0 and not any(p.exists() for p in debris)
    assert (lake_dir / lake.MANIFEST).read_bytes() == before


def test_a_directory_that_is_not_a_lake_is_refused(site, tmp_path):
    db0, _ = site
    (tmp_path / "notes.txt").write_text("mine")
    with warehouse.connect(db0, read_only=True) as con, pytest.raises(lake.LakeError, match="not a gpuledger lake"):
        lake.export(con, tmp_path)


def test_cli_exports_and_the_service_option_parses(site, tmp_path, run_cli):
    from models.service import config
    db0, lake0 = site
    shutil.copyfile(db0, tmp_path / "cli.duckdb")
    code, out, err = run_cli("--db", str(tmp_path / "cli.duckdb"), "export", "lake", str(tmp_path / "lake"))
    assert code == 0 and "parts written" in err
    assert lake.read_manifest(tmp_path / "lake")["tables"].keys() == lake.read_manifest(lake0)["tables"].keys()
    cfg = config.parse(MINIMAL_SERVICE, str(tmp_path / "svc.toml"))
    assert cfg.lake == tmp_path / "out" / "lake" and cfg.lake_interval_s == 900


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.none(), st.text(min_size=1)))
def test_partition_values_round_trip_through_hive_escaping(value):
    path = lake._escape(value)
    assert "/" not in path and "=" not in path
    assert (None if path == lake.NULL_PART else unquote(path)) == value or value == lake.NULL_PART


def test_exporting_leaves_a_read_only_warehouse_byte_identical(site, tmp_path, capsys):
    import gpuledger
    import os
    import stat
    db = tmp_path / "ro.duckdb"
    shutil.copyfile(site[0], db)
    os.chmod(db, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    try:
        assert gpuledger.main(["--db", str(db), "export", "lake", str(tmp_path / "lake")]) == 0, capsys.readouterr()
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before
        assert not db.with_name(db.name + ".wal").exists()
    finally:
        os.chmod(db, stat.S_IRUSR | stat.S_IWUSR)


def test_the_service_exports_the_lake_after_a_refresh_at_most_every_interval(site, tmp_path):
    import threading
    from models.service import config, loop
    shutil.copyfile(site[0], tmp_path / "wh.duckdb")
    (tmp_path / "governance.toml").write_text(GOV)
    cfg = config.parse('[service]\nwarehouse = "wh.duckdb"\nlake = "lake"\nlake_interval = "1h"\n'
                       '[governance]\npath = "governance.toml"\n', str(tmp_path / "svc.toml"))
    c = loop.Collector(cfg)
    assert c.cycle(threading.Event())                      # first cycle: refresh, then the lake
    first = lake.read_manifest(tmp_path / "lake")
    assert first["tables"]["jobs"]["rows"] == len(JOBS) and "lake" in c.timings
    c.need_refresh = True
    assert c.cycle(threading.Event())                      # within the hour: refreshed, not exported
    assert "lake" not in c.timings and lake.read_manifest(tmp_path / "lake") == first
