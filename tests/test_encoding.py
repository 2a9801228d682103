"""ingest/encoding.py: the encodings every input and config file may come in (UTF-8 with or without its mark,
UTF-16 and UTF-32 with theirs), and the one-line error for any other."""
from __future__ import annotations

import pytest

from ingest import encoding
from ingest.errors import InputError

TEXT = 'name = "zoë"\n[[teams]]\nname = "ml"\n'
WIDE = [(b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"), (b"\xff\xfe\x00\x00", "utf-32-le"),
        (b"\x00\x00\xfe\xff", "utf-32-be")]


@pytest.mark.parametrize("bom, codec", WIDE)
def test_wide_text_with_its_mark_is_utf8_without_it(tmp_path, bom, codec):
    data = bom + TEXT.encode(codec)
    assert encoding.is_wide(data[:8]) and encoding.from_wide(data, "x") == TEXT.encode("utf-8")
    (tmp_path / "c.toml").write_bytes(data)
    assert encoding.read_text(tmp_path / "c.toml") == TEXT


def test_utf8_is_kept_and_its_mark_dropped(tmp_path):
    assert not encoding.is_wide(TEXT.encode()) and encoding.from_wide(TEXT.encode(), "x") == TEXT.encode()
    (tmp_path / "c.toml").write_bytes(encoding.BOM + TEXT.encode())
    assert encoding.read_text(tmp_path / "c.toml") == TEXT


def test_wide_text_broken_after_its_mark_names_the_line():
    data = b"\xff\xfe" + "a\nb\n".encode("utf-16-le") + b"\x00\xd8" + "c".encode("utf-16-le")   # a lone surrogate
    with pytest.raises(InputError, match=r"^f:3: not readable UTF-16 text \(its byte-order mark says it is\)"):
        encoding.from_wide(data, "f")


def test_other_encodings_are_one_line_errors_naming_file_line_and_byte(tmp_path):
    p = tmp_path / "c.toml"
    p.write_bytes('a = 1\nb = "zoë"\n'.encode("latin-1"))       # an editor's "Western" encoding
    with pytest.raises(InputError) as info:
        encoding.read_text(p)
    assert str(info.value).startswith(f"{p}:2: not UTF-8 text (byte 13: ") and "\n" not in str(info.value)


def test_a_missing_or_unreadable_config_is_one_line_naming_it(tmp_path):
    with pytest.raises(InputError, match=r"c\.toml: cannot read: No such file or directory$"):
        encoding.read_text(tmp_path / "c.toml")
    with pytest.raises(InputError, match=r": cannot read: Is a directory$"):
        encoding.read_text(tmp_path)
