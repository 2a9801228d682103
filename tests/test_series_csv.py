"""A planner's series file (ingest/series_csv.py) as spreadsheets and archives save it: the same 28 daily values
read alike from a plain CSV, a semicolon CSV with decimal commas, Excel's "Unicode text" (UTF-16 LE, tabs), a
UTF-8 file with a byte-order mark and a gzipped CSV; and one-line errors naming the file, line and field."""
from __future__ import annotations

import datetime as dt
import gzip

import pytest

from ingest import series_csv
from ingest.errors import InputError

DAYS = [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(28)]
VALUES = [10.5 + i for i in range(28)]


def _text(sep: str, decimal: str = ".") -> str:
    return f"date{sep}gpus\n" + "".join(f"{d}{sep}{str(v).replace('.', decimal)}\n" for d, v in zip(DAYS, VALUES))


@pytest.mark.parametrize("name, data", [
    ("plain.csv", _text(",").encode()),
    ("semicolon.csv", _text(";", ",").encode()),
    ("unicode.txt", b"\xff\xfe" + _text("\t", ",").replace("\n", "\r\n").encode("utf-16-le")),
    ("unicode-be.txt", b"\xfe\xff" + _text("\t").encode("utf-16-be")),
    ("bom.csv", b"\xef\xbb\xbf" + _text(",").encode()),
    ("archive.csv.gz", gzip.compress(_text(",").encode())),
])
def test_spreadsheet_and_archive_files_read_as_the_same_series(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    got = series_csv.read_series(p)
    assert got.columns == ["ts", "value"]
    assert got["ts"].to_list() == [dt.datetime(d.year, d.month, d.day) for d in DAYS]
    assert got["value"].to_list() == pytest.approx(VALUES)


def test_the_delimiter_is_the_headers():
    assert series_csv.delimiter(b"date;gpus\n2024-01-01;1,5\n") == ";"
    assert series_csv.delimiter(b"date\tgpus\n") == "\t"
    assert series_csv.delimiter(b'"pool;name",date,value\n') == ","    # a quoted name's semicolon does not count
    assert series_csv.delimiter(b"value\n1\n") == ","


def test_a_comma_csv_keeps_its_quoted_thousands_an_error_and_a_decimal_comma_is_one_only_with_semicolons(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text('date,value\n2024-01-01,"1,234"\n')
    with pytest.raises(InputError) as e:
        series_csv.read_series(p)
    assert str(e.value) == f"{p}:2: field value: '1,234' is not a number"
    p.write_text("date;value\n2024-01-01;1.234,5\n")
    with pytest.raises(InputError) as e:
        series_csv.read_series(p)
    assert str(e.value) == f"{p}:2: field value: '1.234,5' is not a number"


def test_utf16_that_does_not_decode_is_an_error_naming_the_line(tmp_path):
    p = tmp_path / "cut.txt"
    body = "date\tvalue\r\n2024-01-01\t1\r\n2024-01-02\t2\r\n".encode("utf-16-le")
    p.write_bytes(b"\xff\xfe" + body + b"\x00\xd8")      # a high surrogate with nothing after it: a cut file
    with pytest.raises(InputError) as e:
        series_csv.read_series(p)
    assert str(e.value).startswith(f"{p}:4: not readable UTF-16 text (its byte-order mark says it is): ")
