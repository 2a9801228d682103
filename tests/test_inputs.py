"""ingest/inputs.py: the one reader of an ingestor's input file, and its one-line errors."""
from __future__ import annotations

import io
import sys

import pytest

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
