"""Reading an ingestor's input: a file, standard input for '-', or the output of a Slurm client command."""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb

from ingest.errors import InputError
from ingest.encoding import from_wide, is_wide


def check_zone(con, tz: str, option: str = "--tz") -> None:
    """An InputError naming ``option`` unless DuckDB knows the time zone ``tz`` (it reads the local times)."""
    try:
        con.execute("SELECT timezone(?, TIMESTAMP '2000-01-01')", [tz]).fetchall()
    except duckdb.Error:
        raise InputError(option, f"unknown time zone {tz!r} (use an IANA name like Europe/Berlin)") from None


#: Compressed inputs (sites keep their sacct dumps, scrapes and traces as ``sacct ... | gzip`` archives): the
#: format's name, file suffix, first bytes, and how to decompress it (None: refused, naming the tool that does).
COMPRESSED = (("gzip", ".gz", b"\x1f\x8b", gzip.decompress), ("bzip2", ".bz2", b"BZh", bz2.decompress),
              ("xz", ".xz", b"\xfd7zXZ\x00", lzma.decompress), ("zstd", ".zst", b"\x28\xb5\x2f\xfd", None),
              ("zip", ".zip", b"PK\x03\x04", None))
_UNPACK = {"zstd": "zstd -dc FILE", "zip": "unzip -p FILE"}


def needs_decoding(head: bytes, name: str | Path) -> bool:
    """Whether an input that starts with ``head`` (its first 8 bytes suffice) or is named ``name`` is compressed,
    or is UTF-16 or UTF-32 text: either way not the bytes a reader takes as they are (:func:`decoded`)."""
    suffix = Path(name).suffix.lower()
    return any(head.startswith(magic) or suffix == ext for _, ext, magic, _ in COMPRESSED) or is_wide(head)


def decoded(data: bytes, name: str) -> bytes:
    """An input's bytes as every reader takes them: decompressed (:func:`decompressed`), then as UTF-8
    (:func:`ingest.encoding.from_wide`)."""
    return from_wide(decompressed(data, name), name)


def decompressed(data: bytes, name: str) -> bytes:
    """``data`` itself, or decompressed when its first bytes are gzip, bzip2 or xz, whatever its name (standard
    input too). A name ending in one of those suffixes whose data is not that format, damaged data, and zstd or zip
    (which need their own tool) are an InputError naming ``name``. Line numbers count the decompressed lines."""
    suffix = Path(name).suffix.lower()
    for kind, ext, magic, unpack in COMPRESSED:
        if data.startswith(magic):
            if unpack is None:
                raise InputError(name, f"{kind} data: unpack it first (`{_UNPACK[kind]} | gpuledger ingest ... -`)")
            try:
                return unpack(data)
            except (OSError, EOFError, ValueError, lzma.LZMAError) as exc:
                raise InputError(name, f"not a readable {kind} file: {exc}") from exc
        if suffix == ext:
            raise InputError(name, f"not a readable {kind} file: its data does not start as {kind} data does")
    return data


def read_input(path: str) -> tuple[bytes, str]:
    """(bytes, display name) of a file or of stdin for '-', decompressed and as UTF-8 (:func:`decoded`); a missing
    or unreadable file is an InputError."""
    if path == "-":
        return decoded(sys.stdin.buffer.read(), "<stdin>"), "<stdin>"
    return read_file(path), str(Path(path))


def read_file(path: str | Path, expected: str = "a file") -> bytes:
    """The bytes of a file, decompressed and as UTF-8 (:func:`decoded`); a missing one, a directory (where
    ``expected`` was wanted) or one this user may not read is an InputError naming it."""
    p = Path(path)
    try:
        return decoded(p.read_bytes(), str(p))
    except FileNotFoundError as exc:
        raise InputError(str(p), "no such file") from exc
    except IsADirectoryError as exc:
        raise InputError(str(p), f"is a directory, expected {expected}") from exc
    except PermissionError as exc:
        raise InputError(str(p), "permission denied") from exc


def run_command(cmd: list[str], timeout_s: int, source: str, tool: str = "", hint: str = "",
                env: dict[str, str] | None = None) -> bytes:
    """stdout of a command run with TZ=UTC (and ``env``); a missing command, a timeout or a non-zero exit is an
    InputError of ``source`` (a missing command: of ``cmd[0]``) whose message starts with ``tool``, with the first
    line of its stderr."""
    lead = f"{tool} " if tool else ""
    try:
        proc = subprocess.run(cmd, capture_output=True, env=dict(os.environ, TZ="UTC", **(env or {})),
                              timeout=timeout_s)
    except FileNotFoundError:
        raise InputError(cmd[0], f"{lead}not found on PATH{hint}") from None
    except subprocess.TimeoutExpired:
        raise InputError(source, f"{lead}did not answer within {timeout_s} s") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InputError(source, f"{lead}exited {proc.returncode}: {err[0] if err else 'no message'}")
    return proc.stdout


def slurm_cluster_name(timeout_s: int = 30) -> str | None:
    """The ClusterName of the Slurm the client talks to (``scontrol show config``), for a live listing that does not
    name its cluster (``scontrol show reservation``, ``scontrol show job``); None when scontrol cannot say."""
    try:
        out = run_slurm(["scontrol", "show", "config"], timeout_s).decode("utf-8", "replace")
    except InputError:
        return None
    m = re.search(r"^ClusterName\s*=\s*(\S+)", out, re.M)
    return m.group(1) if m else None


def run_slurm(cmd: list[str], timeout_s: int, tool: str | None = None) -> bytes:
    """stdout of a Slurm client command (``tool``, default ``cmd[0]``: the name its messages give) run with TZ=UTC
    and standard time formats; errors as :func:`run_command`'s, of ``cmd[0]``."""
    return run_command(cmd, timeout_s, cmd[0], tool or cmd[0], " (is slurm-client installed?)",
                       {"SLURM_TIME_FORMAT": "standard"})
