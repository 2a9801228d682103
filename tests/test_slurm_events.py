"""`gpuledger ingest events`: sacctmgr show event -P into node_events."""
import datetime as dt

from ingest import slurm_events

EVENTS = ("Cluster|Cluster Nodes|Node Name|Time Start|Time End|State|Reason|User\n"
          "lab|gpu[01-03]||2026-12-02T10:36:50|Unknown||Cluster Registered TRES|slurm(64030)\n"
          "lab||gpu02|2026-12-02T10:37:42|2026-12-02T10:37:47|DOWN|fake XID 79: GPU fell off the bus|root(0)\n"
          "lab||gpu03|2026-12-02T10:39:01|2026-12-02T10:39:03|IDLE+DRAIN|fake: ECC|root(0)\n"
          "lab||gpu0[1-2]|2026-12-02T11:00:00|Unknown|DOWN*|rack power|root(0)\n"
          "lab||gpu04|garbage|Unknown|DOWN|x|root(0)\n")


def test_events_load_expand_and_skip_cluster_rows(con):
    s = slurm_events.ingest_bytes(con, EVENTS.encode(), "ev.psv")
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"], s["inserted"]) == (6, 3, 2, 1, 4)
    assert s["skip_reasons"] == {"header line": 1, "cluster-level event (no node)": 1}
    assert s["reject_examples"] == ["ev.psv:6: field Start: cannot read time 'garbage'"]
    assert con.sql('SELECT node, state, start, "end" FROM node_events ORDER BY start, node').fetchall() == [
        ("gpu02", "DOWN", dt.datetime(2026, 12, 2, 10, 37, 42), dt.datetime(2026, 12, 2, 10, 37, 47)),
        ("gpu03", "DRAIN", dt.datetime(2026, 12, 2, 10, 39, 1), dt.datetime(2026, 12, 2, 10, 39, 3)),
        ("gpu01", "DOWN", dt.datetime(2026, 12, 2, 11, 0), None),
        ("gpu02", "DOWN", dt.datetime(2026, 12, 2, 11, 0), None)]


def test_a_later_export_closes_open_events_and_reingest_is_a_no_op(con):
    slurm_events.ingest_bytes(con, EVENTS.encode(), "a")
    closed = EVENTS.replace("2026-12-02T11:00:00|Unknown", "2026-12-02T11:00:00|2026-12-02T12:30:00")
    s = slurm_events.ingest_bytes(con, closed.encode(), "b")
    assert (s["inserted"], s["updated"], s["unchanged"]) == (0, 2, 2)
    assert con.sql('SELECT count(*) FROM node_events WHERE "end" IS NULL').fetchall() == [(0,)]
    s = slurm_events.ingest_bytes(con, closed.encode(), "b")
    assert (s["inserted"], s["updated"], s["unchanged"]) == (0, 0, 4)


def test_local_times_in_the_given_zone(con):
    slurm_events.ingest_bytes(con, EVENTS.encode(), "a", tz="America/New_York")
    assert con.sql("SELECT min(start) FROM node_events").fetchall() == [(dt.datetime(2026, 12, 2, 15, 37, 42),)]


def test_data_without_header_is_rejected_with_reason(con):
    s = slurm_events.ingest_bytes(con, b"lab||gpu02|2026-12-02T10:37:42|Unknown|DOWN|x|root\n", "noheader")
    assert s["rejected"] == 1 and "no header line" in s["reject_examples"][0]
