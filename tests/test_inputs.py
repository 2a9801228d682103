"""ingest/inputs.py: the one reader of an ingestor's input file, and its one-line errors."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import sys
from pathlib import Path

import duckdb
import pytest

import gpuledger
from ingest import inputs
from ingest.errors import InputError
from ingest.traces import common


def test_a_file_is_read_whole_and_named(tmp_path):
    f = tmp_path / "sacct.psv"
    f.write_bytes(b"JobID|State\n1|COMPLETED\n")
    assert inputs.read_file(f) == b"JobID|State\n1|COMPLETED\n"
    assert inputs.read_input(str(f)) == (b"JobID|State\n1|COMPLETED\n", str(f))


def test_a_dash_reads_standard_input(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"1|RUNNING\n")))
    assert inputs.read_input("-") == (b"1|RUNNING\n", "<stdin>")


def test_missing_file_and_directory_are_one_line_errors_naming_the_path(tmp_path):
    with pytest.raises(InputError) as missing:
        inputs.read_input(str(tmp_path / "nope.psv"))
    assert str(missing.value) == f"{tmp_path / 'nope.psv'}: no such file"
    with pytest.raises(InputError) as directory:
        inputs.read_file(tmp_path, "an nvidia-smi CSV file")
    assert str(directory.value) == f"{tmp_path}: is a directory, expected an nvidia-smi CSV file"
    with pytest.raises(InputError, match="is a directory, expected a file$"):
        inputs.read_input(str(tmp_path))


def test_trace_files_share_the_reader_and_gzip_is_checked(tmp_path):
    with pytest.raises(InputError, match="is a directory, expected a trace file$"):
        common.read_bytes(tmp_path)
    bad = tmp_path / "pods.csv.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match=r"pods\.csv\.gz: not a readable gzip file"):
        common.read_bytes(bad)


SACCT = b"JobID|State\n1|COMPLETED\n"


@pytest.mark.parametrize("name, pack", [("sacct.psv.gz", gzip.compress), ("sacct.psv.bz2", bz2.compress),
                                        ("sacct.psv.xz", lzma.compress), ("sacct-archive", gzip.compress)])
def test_gzip_bzip2_and_xz_inputs_are_read_as_their_text_whatever_their_name(tmp_path, monkeypatch, name, pack):
    """Sites keep sacct dumps and scrapes as `... | gzip` archives: read by their first bytes (a name without the
    suffix, and standard input, too). Before, a .gz sacct dump put 72 lines of binary into quarantine."""
    f = tmp_path / name
    f.write_bytes(pack(SACCT))
    assert inputs.read_file(f) == SACCT and inputs.read_input(str(f)) == (SACCT, str(f))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(pack(SACCT))))
    assert inputs.read_input("-") == (SACCT, "<stdin>")


def test_compressed_inputs_it_cannot_read_are_one_line_errors_naming_the_file(tmp_path):
    cases = {"a.psv.zst": (b"\x28\xb5\x2f\xfd" + b"\0" * 20, "zstd data: unpack it first (`zstd -dc FILE | "
                                                               "gpuledger ingest ... -`)"),
             "a.zip": (b"PK\x03\x04" + b"\0" * 20,
                       "zip data: unpack it first (`unzip -p FILE | gpuledger ingest ... -`)"),
             "cut.psv.gz": (gzip.compress(SACCT * 100)[:30], "not a readable gzip file: Compressed file ended before "
                                                            "the end-of-stream marker was reached"),
             "plain.psv.xz": (SACCT, "not a readable xz file: its data does not start as xz data does")}
    for name, (data, why) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError) as err:
            inputs.read_file(tmp_path / name)
        assert str(err.value) == f"{tmp_path / name}: {why}"


def test_a_gzipped_sacct_dump_loads_as_the_plain_one(tmp_path):
    """End to end through the CLI (sacct's own fast path reads a plain file without copying: a compressed one
    takes the decompressing reader): the same lines loaded, nothing rejected."""
    plain = Path(__file__).parent / "fixtures" / "dashboard" / "sacct.psv"
    packed = tmp_path / "sacct.psv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for src, db in ((plain, "plain.duckdb"), (packed, "packed.duckdb")):
        assert gpuledger.main(["-q", "--db", str(tmp_path / db), "ingest", "sacct", str(src), "--no-refresh"]) == 0
    counts = []
    for db in ("plain.duckdb", "packed.duckdb"):
        with duckdb.connect(str(tmp_path / db), read_only=True) as con:
            counts.append(con.sql("SELECT count(*), sum(ngpus), (SELECT count(*) FROM rejects) FROM jobs").fetchall())
    assert counts[0] == counts[1] and counts[0][0][0] > 700 and counts[0][0][2] == 0


def test_an_unreadable_file_is_a_permission_error(tmp_path, monkeypatch):
    """The suite runs as root, who reads any file; the OS's refusal is what a non-root collector sees."""
    f = tmp_path / "locked.psv"
    f.write_bytes(b"x")

    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(f), "read_bytes", refuse)
    with pytest.raises(InputError) as err:
        inputs.read_file(f)
    assert str(err.value) == f"{f}: permission denied"
