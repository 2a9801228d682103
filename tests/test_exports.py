"""dashboards/exports.py: CSV/Parquet/XLSX writers; formula neutralisation; deterministic bytes; typed cells."""
from __future__ import annotations

import datetime as dt
import io
import zipfile
from decimal import Decimal as D

import openpyxl
import polars as pl
import pytest

from dashboards import exports


def frame() -> pl.DataFrame:
    return pl.DataFrame({
        "name": ["=cmd|' /C calc'!A0", "ok & <b>", None, "-2+3", "@SUM(A1)", "+1", "\tTAB", "plain"],
        "n": [1, 2, None, 4, 5, 6, 7, 8],
        "x": [1.5, float("nan"), 2.25, None, 1e-7, -3.0, 0.0, float("inf")],
        "money": [D("1.50"), None, D("-3.25"), D("0"), D("12345.67"), D("-0.01"), D("2"), D("3")],
        "t": [dt.datetime(2026, 3, 1, 12), None, dt.datetime(1999, 1, 1), dt.datetime(2026, 3, 31, 23, 59, 59),
              dt.datetime(2026, 1, 1), None, None, None],
        "ok": [True, False, None, True, True, False, True, False],
    }, schema_overrides={"money": pl.Decimal(18, 2)})


def test_neutralise_prefixes_formula_starts_only():
    out = exports.neutralise(frame())["name"].to_list()
    assert out == ["'=cmd|' /C calc'!A0", "ok & <b>", None, "'-2+3", "'@SUM(A1)", "'+1", "'\tTAB", "plain"]


def test_csv_is_neutralised_and_parquet_keeps_values():
    text = exports.csv_bytes(frame()).decode()
    assert "\n'=cmd" in text and "\n=cmd" not in text and "'@SUM(A1)" in text
    assert "2026-03-01 12:00:00" in text
    back = pl.read_parquet(io.BytesIO(exports.parquet_bytes(frame())))
    assert back["name"][0] == "=cmd|' /C calc'!A0" and back["money"].dtype == pl.Decimal(18, 2)


def test_xlsx_cells_keep_types_formats_and_positions(tmp_path):
    p = tmp_path / "t.xlsx"
    p.write_bytes(exports.xlsx_bytes({"data": frame(), "empty": frame().head(0)}, title="T & <x>",
                                     created=dt.datetime(2026, 4, 2, 8, 30)))
    wb = openpyxl.load_workbook(p)
    assert wb.sheetnames == ["data", "empty"] and wb.properties.created == dt.datetime(2026, 4, 2, 8, 30)
    rows = list(wb["data"].iter_rows(values_only=True))
    assert rows[0] == ("name", "n", "x", "money", "t", "ok")
    assert rows[1] == ("'=cmd|' /C calc'!A0", 1, 1.5, 1.5, dt.datetime(2026, 3, 1, 12), True)
    assert rows[2] == ("ok & <b>", 2, None, None, None, False)         # NaN and nulls are empty cells
    assert rows[3] == (None, None, 2.25, -3.25, dt.datetime(1999, 1, 1), None)
    assert rows[8][2] is None                                          # inf is not a number Excel can hold
    ws = wb["data"]
    assert ws["D2"].number_format == "#,##0.00" and ws["E2"].number_format == "yyyy-mm-dd hh:mm:ss"
    assert ws["A1"].font.b and ws.freeze_panes == "A2" and ws.auto_filter.ref == "A1:F9"
    assert list(wb["empty"].iter_rows(values_only=True)) == [("name", "n", "x", "money", "t", "ok")]


def test_xlsx_bytes_depend_only_on_content_and_created():
    a = exports.xlsx_bytes({"s": frame()}, created=dt.datetime(2026, 4, 2))
    assert a == exports.xlsx_bytes({"s": frame()}, created=dt.datetime(2026, 4, 2))
    assert a != exports.xlsx_bytes({"s": frame()}, created=dt.datetime(2026, 4, 3))
    stamps = {i.date_time for i in zipfile.ZipFile(io.BytesIO(a)).infolist()}
    assert stamps == {(2026, 4, 2, 0, 0, 0)}


def test_many_distinct_strings_are_written_inline_and_read_back(tmp_path):
    df = pl.DataFrame({"id": [f"job<{i}>&" for i in range(1000)], "v": list(range(1000))})
    p = tmp_path / "ids.xlsx"
    p.write_bytes(exports.xlsx_bytes({"ids": df}))
    rows = list(openpyxl.load_workbook(p)["ids"].iter_rows(values_only=True))
    assert rows[1] == ("job<0>&", 0) and rows[-1] == ("job<999>&", 999)


def test_a_table_longer_than_a_sheet_continues_on_the_next(monkeypatch, tmp_path):
    monkeypatch.setattr(exports, "XLSX_MAX_ROWS", 4)
    p = tmp_path / "long.xlsx"
    p.write_bytes(exports.xlsx_bytes({"jobs": pl.DataFrame({"i": list(range(7))})}))
    wb = openpyxl.load_workbook(p)
    assert wb.sheetnames == ["jobs", "jobs (2)", "jobs (3)"]
    got = [r[0] for name in wb.sheetnames for r in wb[name].iter_rows(min_row=2, values_only=True)]
    assert got == list(range(7))


def test_sheet_names_are_made_valid_and_unique():
    assert exports._sheet_names(["a/b", "x" * 40, "A/B", "by team"]) == ["a-b", "x" * 31, "A-B (2)", "by team"]


def test_write_tables_names_siblings_after_the_main_file(tmp_path):
    tables = {"summary": pl.DataFrame({"k": ["a"]}), "by team": pl.DataFrame({"t": ["x"]})}
    written = exports.write_tables(tables, tmp_path / "chargeback-2026-03.csv", main="by team")
    assert [p.name for p in written] == ["chargeback-2026-03.summary.csv", "chargeback-2026-03.csv"]
    assert (tmp_path / "chargeback-2026-03.csv").read_text() == "t\nx\n"
    with pytest.raises(ValueError, match="cannot tell the export format"):
        exports.write_tables(tables, tmp_path / "x.txt")
