"""Which text encodings gpuledger reads, for every input and config file: UTF-8, with or without a byte-order mark,
and UTF-16 or UTF-32 with one (Excel's "Unicode text", PowerShell 5's `>`, Notepad's "Unicode"), transcoded to
UTF-8. Bytes in, UTF-8 out; no format is parsed here, so the dashboards read their config through it too.
"""
from __future__ import annotations

from pathlib import Path

from ingest.errors import InputError

#: UTF-8's byte-order mark: dropped wherever a file starts with it.
BOM = b"\xef\xbb\xbf"

#: Text that is not UTF-8, by its byte-order mark (longest first: UTF-32 LE's starts as UTF-16 LE's does).
WIDE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
             (b"\xfe\xff", "utf-16-be"))


def is_wide(head: bytes) -> bool:
    """Whether data starting with ``head`` is UTF-16 or UTF-32 text by its byte-order mark."""
    return any(head.startswith(bom) for bom, _ in WIDE_BOMS)


def from_wide(data: bytes, name: str) -> bytes:
    """``data`` itself, or as UTF-8 (without the mark) when it starts with a UTF-16 or UTF-32 byte-order mark;
    text that does not decode as its mark says is an InputError naming ``name`` and the line."""
    codec = next((c for bom, c in WIDE_BOMS if data.startswith(bom)), None)
    if codec is None:
        return data
    width = 4 if "32" in codec else 2
    body = data[width:]
    try:
        return body.decode(codec).encode("utf-8")
    except UnicodeDecodeError as exc:
        line = body[:exc.start - exc.start % width].decode(codec, "replace").count("\n") + 1
        raise InputError(name, f"not readable {codec.upper()[:6]} text (its byte-order mark says it is): "
                               f"{exc.reason}", line) from None


def text(data: bytes, name: str) -> str:
    """The text of a file read whole (TOML, JSON): ``data`` as UTF-8 without a UTF-8 byte-order mark (transcode
    UTF-16 first: :func:`from_wide`); bytes that are not UTF-8 are an InputError naming ``name``, the line and the
    byte."""
    try:
        return data.removeprefix(BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(name, f"not UTF-8 text (byte {exc.start}: {exc.reason})", line) from None


def read_text(path: str | Path) -> str:
    """The text of a config file at ``path`` (the service's TOML): UTF-8 or, by their mark, UTF-16 or UTF-32;
    a file that cannot be read is an InputError naming it."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(str(p), f"cannot read: {exc.strerror or exc}") from None
    return text(from_wide(data, str(p)), str(p))
