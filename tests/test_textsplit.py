"""The zero-copy splitter must agree with Python's own str.split on every input."""
import numpy as np
from hypothesis import given, settings, strategies as st

from ingest import textsplit


def _python_split(line: str, delim: str, ncols: int, free_at):
    parts = line.split(delim)
    if len(parts) == ncols:
        return parts
    if free_at is not None and len(parts) > ncols:
        extra = len(parts) - ncols
        return parts[:free_at] + [delim.join(parts[free_at:free_at + extra + 1])] + parts[free_at + extra + 1:]
    return [""] * ncols


def test_lines_handle_crlf_blank_and_missing_final_newline():
    lines = textsplit.split_lines(b"a|b\r\n\r\nc")
    assert lines.text().to_pylist() == ["a|b", "", "c"]
    assert textsplit.split_lines(b"").text().to_pylist() == []
    assert textsplit.split_lines(b"\n").text().to_pylist() == [""]


def test_non_utf8_bytes_become_replacement_characters():
    data, bad = textsplit.to_utf8(b"job\xff|x")
    assert bad == 1 and data.decode() == "job\ufffd|x"


def test_views_across_several_data_buffers(monkeypatch):
    monkeypatch.setattr(textsplit, "VIEW_WINDOW", 8)
    data = b"0123456789abcdefghij\nshort\nanother long line here\nz"
    assert textsplit.split_lines(data).text().to_pylist() == ["0123456789abcdefghij", "short", "another long line here", "z"]


def test_trailing_delimiter_of_parsable_output_is_dropped():
    lines = textsplit.split_lines(b"a^|^b^|^c^|^\nx^|^y^|^z^|^w^|^\n")
    f = textsplit.split_fields(lines, np.arange(2), b"^|^", 3, 2, True)
    assert [c.to_pylist() for c in f.columns] == [["a", "x"], ["b", "y"], ["c", "z^|^w"]]
    assert f.nfields.tolist() == [3, 4]


fields = st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(fields, min_size=1, max_size=7), min_size=1, max_size=30), st.sampled_from(["|", "^|^"]),
       st.integers(1, 6), st.one_of(st.none(), st.integers(0, 5)), st.integers(1, 7))
def test_split_matches_python(rows, delim, ncols, free_at, chunk):
    if free_at is not None and free_at >= ncols:
        free_at = ncols - 1
    rows = [[f.replace(delim, "") if delim != "|" else f for f in r] for r in rows]
    text = "\n".join(delim.join(r) for r in rows)
    lines = textsplit.split_lines(text.encode())
    textsplit.CHUNK_LINES, old = chunk, textsplit.CHUNK_LINES
    try:
        f = textsplit.split_fields(lines, np.arange(len(lines)), delim.encode(), ncols, free_at, False)
    finally:
        textsplit.CHUNK_LINES = old
    expected_lines = text.split("\n")
    if expected_lines[-1] == "":  # a final newline ends the last line rather than starting an empty one
        expected_lines.pop()
    got = [[f.columns[k][i].as_py() for k in range(ncols)] for i in range(len(lines))]
    assert got == [_python_split(line, delim, ncols, free_at) for line in expected_lines]
    assert f.nfields.tolist() == [len(line.split(delim)) for line in expected_lines]
    # any one column split alone (a subset of the lines, as the step filter does) is that column of the full split
    sub = np.arange(0, len(lines), 2)
    for k in range(ncols):
        one = textsplit.split_fields(lines, sub, delim.encode(), ncols, free_at, False, only=[k])
        assert one.columns[0].to_pylist() == [got[i][k] for i in sub]
        assert one.nfields.tolist() == f.nfields[sub].tolist()
