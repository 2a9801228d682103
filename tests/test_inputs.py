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


def test_gzipped_and_utf16_sacct_dumps_load_as_the_plain_one(tmp_path):
    """End to end through the CLI (sacct's own fast path reads a plain file without copying: a compressed or
    UTF-16 one takes the decoding reader): the same lines loaded, nothing rejected. UTF-16 with CRLF is what
    Windows PowerShell 5's `ssh login sacct ... > dump.txt` writes; before, its every line was quarantined."""
    plain = Path(__file__).parent / "fixtures" / "dashboard" / "sacct.psv"
    packed, wide = tmp_path / "sacct.psv.gz", tmp_path / "sacct-utf16.txt"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    wide.write_bytes(b"\xff\xfe" + plain.read_text(encoding="utf-8").replace("\n", "\r\n").encode("utf-16-le"))
    counts = []
    for src in (plain, packed, wide):
        db = tmp_path / f"{src.name}.duckdb"
        assert gpuledger.main(["-q", "--db", str(db), "ingest", "sacct", str(src), "--no-refresh"]) == 0
        with duckdb.connect(str(db), read_only=True) as con:
            counts.append(con.sql("SELECT count(*), sum(ngpus), (SELECT count(*) FROM rejects) FROM jobs").fetchall())
    assert counts[0] == counts[1] == counts[2] and counts[0][0][0] > 700 and counts[0][0][2] == 0


@pytest.mark.parametrize("bom, codec", [(b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"),
                                        (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be")])
def test_utf16_and_utf32_text_is_read_as_utf8_without_its_mark(tmp_path, monkeypatch, bom, codec):
    text = "JobID|User\n1|zoë\n"
    f = tmp_path / "wide.psv"
    f.write_bytes(bom + text.encode(codec))
    assert inputs.read_file(f) == text.encode("utf-8")
    f.write_bytes(gzip.compress(bom + text.encode(codec)))          # decompressed first, then decoded
    assert inputs.read_file(f) == text.encode("utf-8") and inputs.needs_decoding(bom, "x.psv")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(bom + text.encode(codec))))
    assert inputs.read_input("-") == (text.encode("utf-8"), "<stdin>")


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
