"""docs/SCHEMA.md against the warehouse the migrations create: every table and every column of it is documented,
and nothing documented is gone (the way test_cli_docs.py holds docs/CLI.md to the CLI).

How the document names columns: a section (`##` or `###`) names its tables in backticks in its heading; the first
cell of each row of its column tables names columns, several separated by commas, each either plain (a column of
the heading's tables) or `table.column` (and the plain names after it in the same cell are that table's); a row
`table.*` whose meaning names another table in backticks says the table has that one's columns.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingest import warehouse

SCHEMA_MD = Path(__file__).resolve().parents[1] / "docs" / "SCHEMA.md"
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _documented(text: str, tables: set[str]) -> dict[str, set[str]]:
    """{table: columns} as the document names them; heading tables without a column table map to no columns."""
    out: dict[str, set[str]] = {}
    same: dict[str, str] = {}
    for section in re.split(r"^(?=#{2,3} )", text, flags=re.M):
        heading, _, body = section.partition("\n")
        named = [n for n in re.findall(r"`([^`]+)`", heading) if n in tables]
        for n in named:
            out.setdefault(n, set())
        for row, rest in re.findall(r"^\|([^|\n]*)\|(.*)$", body, flags=re.M):
            cell = row.replace("`", "").strip()
            if not cell or set(cell) <= set("-: ") or cell.lower() in ("column", "table.column"):
                continue
            if cell.endswith(".*"):        # `copy.*` | the columns of `table`
                same[cell[:-2]] = re.search(r"`([a-z_0-9]+)`", rest).group(1)
                continue
            owner = None
            for item in (x.strip() for x in cell.split(",")):
                if "." in item:
                    owner, item = item.split(".", 1)
                assert _NAME.fullmatch(item), f"SCHEMA.md: {item!r} in row {cell!r} is not a column name"
                for t in [owner] if owner else named or ["(no table)"]:
                    out.setdefault(t, set()).add(item)
    for copy, table in same.items():
        out.setdefault(copy, set()).update(out.get(table, set()))
    return out


@pytest.fixture(scope="module")
def schema() -> dict[str, list[str]]:
    con = warehouse.connect(":memory:")
    try:
        rows = con.sql("""SELECT table_name, column_name FROM duckdb_columns()
                          WHERE NOT internal AND schema_name = 'main' ORDER BY table_name, column_index""").fetchall()
    finally:
        con.close()
    out: dict[str, list[str]] = {}
    for t, c in rows:
        out.setdefault(t, []).append(c)
    return out


def test_every_table_and_column_of_the_warehouse_is_documented(schema):
    doc = _documented(SCHEMA_MD.read_text(encoding="utf-8"), set(schema))
    assert sorted(set(schema) - set(doc)) == [], "tables SCHEMA.md does not name in a heading or a row"
    missing = {t: [c for c in cols if c not in doc[t]] for t, cols in schema.items()}
    assert {t: m for t, m in missing.items() if m} == {}


def test_nothing_documented_is_gone(schema):
    """A documented column of a section naming several tables exists in at least one of them."""
    text = SCHEMA_MD.read_text(encoding="utf-8")
    doc = _documented(text, set(schema))
    assert sorted(set(doc) - set(schema)) == [], "rows naming a table the warehouse does not have"
    for section in re.split(r"^(?=#{2,3} )", text, flags=re.M):
        one = _documented(section, set(schema))
        group = set().union(*(schema.get(t, []) for t in one)) if one else set()
        stale = {t: sorted(c for c in cols if c not in schema.get(t, []) and c not in group) for t, cols in one.items()}
        assert {t: s for t, s in stale.items() if s} == {}, section.partition("\n")[0]


def test_the_parser_reads_prefixes_groups_and_plain_rows():
    text = ("### `a`, `b`\n| column | type |\n|---|---|\n| x, y | INT |\n| b.z, w | |\n"
            "## Other\n| table.column | meaning |\n|---|---|\n| c.q | |\n| d.* | as `c` |\n")
    assert _documented(text, {"a", "b", "c", "d"}) == {"a": {"x", "y"}, "b": {"x", "y", "z", "w"}, "c": {"q"},
                                                       "d": {"q"}}


def _typed_rows(text: str, tables: set[str]):
    """(table, column, documented type) for every row of a column table with a `type` column whose type cell
    is not empty: one type for all the row's columns, or one per column."""
    for section in re.split(r"^(?=#{2,3} )", text, flags=re.M):
        heading, _, body = section.partition("\n")
        named = [n for n in re.findall(r"`([^`]+)`", heading) if n in tables]
        header = None
        for line in body.splitlines():
            if not line.startswith("|"):
                header = None if not line.strip() else header
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0].lower() in ("column", "table.column"):
                header = [c.lower() for c in cells]
                continue
            if header is None or "type" not in header or set(cells[0]) <= set("-: ") or cells[0].endswith(".*"):
                continue
            types = [t.strip() for t in re.split(r",\s*(?![^()]*\))", cells[header.index("type")]) if t.strip()]
            owner, names = None, []
            for item in (x.strip() for x in cells[0].replace("`", "").split(",")):
                if "." in item:
                    owner, item = item.split(".", 1)
                names.append((owner, item))
            if not types:
                continue
            assert len(types) in (1, len(names)), f"SCHEMA.md row {cells[0]!r}: {len(types)} types for {len(names)}"
            for (owner, name), ty in zip(names, types * len(names) if len(types) == 1 else types):
                for t in [owner] if owner else named:
                    yield t, name, ty


def test_documented_types_are_the_columns_types():
    con = warehouse.connect(":memory:")
    try:
        actual = {(t, c): ty for t, c, ty in con.sql("""SELECT table_name, column_name, data_type FROM duckdb_columns()
                                                        WHERE NOT internal AND schema_name = 'main'""").fetchall()}
    finally:
        con.close()
    rows = list(_typed_rows(SCHEMA_MD.read_text(encoding="utf-8"), {t for t, _ in actual}))
    assert len(rows) > 300
    wrong = [(t, c, ty, actual[t, c]) for t, c, ty in rows
             if (t, c) in actual and ty.replace(" ", "").upper() != actual[t, c].replace(" ", "").upper()]
    assert wrong == []
