"""ingest/lines.py: the one definition of a line, shared by every text ingestor (sacct's splitter included)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ingest import lines, textsplit


@pytest.mark.parametrize("data, expected", [
    (b"", []), (b"\n", [""]), (b"a", ["a"]), (b"a\n", ["a"]), (b"a\n\n\nb", ["a", "", "", "b"]),
    (b"a\r\nb\r\n", ["a", "b"]),                                   # CRLF tolerated
    (b"\xef\xbb\xbfa|b\nc", ["a|b", "c"]), (b"\xef\xbb\xbf", []), (b"\xef\xbb\xbf\n", [""]),   # BOM stripped
    (b"x\x0cy\n\xe2\x80\xa8z\nq\rr\n", ["x\x0cy", "\u2028z", "q\rr"]),   # form feed, U+2028, lone CR: inside a line
    (b"a\xc2\x85b\x0bc\x1cd\n", ["a\x85b\x0bc\x1cd"]),               # NEL, vertical tab, file separator too
    (b"a\r\r\nb\r", ["a\r", "b"]),                                   # only the CR of a CRLF goes
    (b"bad\xff\xfe\nok\n", ["bad\ufffd\ufffd", "ok"]),               # invalid UTF-8 shown as U+FFFD
])
def test_lines_by_hand(data, expected):
    assert lines.text_lines(data) == expected
    assert lines.count(data) == len(expected)
    assert lines.arrow_lines(data).to_pylist() == expected


def _reference_count(data: bytes) -> int:
    """wc -l, plus an unterminated last line; a leading BOM is not a line of its own."""
    body = data[3:] if data.startswith(lines.BOM) else data
    return body.count(b"\n") + (1 if body and not body.endswith(b"\n") else 0)


pieces = st.sampled_from([b"a", b"|", b"\n", b"\r", b"\r\n", b"\x0c", "\u2028".encode(), "\u0085".encode(), b"\xff",
                          b"\x00", lines.BOM, "é".encode(), b" "])


@settings(max_examples=150, deadline=None)
@given(st.lists(pieces, max_size=40).map(b"".join))
def test_every_splitter_counts_the_same_lines(data):
    n = _reference_count(data)
    assert lines.count(data) == len(lines.text_lines(data)) == n
    utf8, _ = textsplit.to_utf8(data)          # sacct re-encodes invalid UTF-8 first, then splits
    assert len(textsplit.split_lines(utf8)) == n
    assert all("\n" not in ln for ln in lines.text_lines(data))


def test_large_input_keeps_memory_shared_when_nothing_is_trimmed():
    data = b"x" * 10
    assert lines.arrow_lines(data).to_pylist() == ["x" * 10]
