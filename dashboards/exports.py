"""Finance exports: CSV, Parquet and XLSX writers for named tables (used by the CLI and by download buttons).

Presentation only: the tables arrive computed. Guarantees:

- **Formula injection**: every text cell that leaves the product as CSV or XLSX goes through :func:`neutralise`
  (the one rule; the dashboards' per-table downloads call it too). A cell is prefixed with ``'`` when, after
  folding compatibility forms (NFKC: full-width ``＝`` is ``=``) and skipping leading control, format and space
  characters (NUL, VT, zero-width space, ...), it starts with ``=``, ``+``, ``-``, ``@``, or when that leading run
  holds a tab or carriage return (spreadsheets strip those before evaluating). The original text is kept after
  the ``'``. Numbers stay numbers: only text columns are touched. Parquet keeps values as they are: it is typed
  data, which no spreadsheet evaluates, and audits join it back to the warehouse.
- **Typed cells**: numbers are numeric cells (decimals keep their scale; ``units`` puts a currency or unit in the
  number format, e.g. ``#,##0.00 "EUR"``), counts are integers, timestamps are dates; text is text.
- **Byte-identical re-export**: output depends only on the tables and the ``created`` time passed in (XLSX
  document properties and ZIP entry times use it; nothing reads the clock), so a closed statement exported
  twice gives the same bytes.
- **Speed**: the XLSX writer builds sheet XML with vectorised Polars string expressions and a shared-string
  table (hundreds of thousands of job rows in seconds), instead of a per-cell Python loop.
"""
from __future__ import annotations

import datetime as dt
import io
import re
import struct
import zlib
from pathlib import Path

import polars as pl

try:
    from isal import isal_zlib as _isal
except ImportError:   # plain zlib is slower but gives a valid file (re-exports stay byte-identical per install)
    _isal = None

FORMATS = ("csv", "xlsx", "parquet")
#: a text cell a spreadsheet could evaluate: after leading control/format/space characters, a formula starter
#: (checked on the NFKC-folded text, so full-width forms count)
FORMULA_START = r"^[\p{Cc}\p{Cf}\p{Z}]*[=+\-@\t\r]"
#: characters XML 1.0 cannot hold (an XLSX cell drops them; tab, LF and CR stay)
XML_FORBIDDEN = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x{fffe}\x{ffff}]"
XLSX_MAX_ROWS = 1_048_576
_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"
_DT_STYLE, _HEADER_STYLE, _TEXT_STYLE = 2, 1, 0


# ---------------------------------------------------------------- helpers

def neutralised(col: pl.Expr) -> pl.Expr:
    """The text expression ``col`` with every cell a spreadsheet would evaluate prefixed with ``'``."""
    danger = col.str.normalize("NFKC").str.contains(FORMULA_START)
    return pl.when(danger).then(pl.lit("'") + col).otherwise(col)


def neutralise(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with every text cell a spreadsheet would evaluate as a formula prefixed with ``'``: the one
    neutralising function for text that leaves the product (CSV, XLSX, the dashboards' downloads). Text
    columns (String, Categorical, Enum) come back as String; every other column is returned as it is."""
    text = [c for c, t in df.schema.items() if t == pl.String or isinstance(t, (pl.Categorical, pl.Enum))]
    return df.with_columns([neutralised(pl.col(c).cast(pl.String)).alias(c) for c in text])


def finite(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with NaN and infinite floats as nulls: the one rule for unknown numbers in files that leave the
    product (a spreadsheet reads CSV's "NaN" as text and JSON has no NaN; XLSX writes such a cell empty too)."""
    return df.with_columns(pl.when(pl.col(c).is_finite()).then(pl.col(c)).alias(c)
                           for c, t in df.schema.items() if t.is_float())


def fmt_of(path: str | Path, fmt: str | None = None) -> str:
    f = fmt or Path(path).suffix.lower().lstrip(".")
    if f not in FORMATS:
        raise ValueError(f"{path}: cannot tell the export format; use a .csv, .xlsx or .parquet name")
    return f


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def csv_bytes(df: pl.DataFrame) -> bytes:
    """CSV (UTF-8, header row, times as YYYY-MM-DD HH:MM:SS), text cells neutralised, unknown numbers (NaN, inf)
    empty: every CSV the product writes (CLI reports, finance exports, the dashboards' downloads)."""
    return neutralise(finite(df)).write_csv(datetime_format="%Y-%m-%d %H:%M:%S").encode("utf-8")


def parquet_bytes(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_parquet(buf, statistics=False)
    return buf.getvalue()


def write_tables(tables: dict[str, pl.DataFrame], path: str | Path, fmt: str | None = None, main: str | None = None,
                 title: str = "gpuledger export", created: dt.datetime | None = None,
                 units: dict[str, str] | None = None) -> list[Path]:
    """Write named tables to ``path``: XLSX as one workbook (a sheet per table, in order); CSV and Parquet as
    ``path`` for the ``main`` table (default: the first) and ``<stem>.<table>.<ext>`` beside it for the others.
    ``units`` (XLSX only): column name -> unit or currency shown in its number format. Returns the paths
    written."""
    path = Path(path)
    fmt = fmt_of(path, fmt)
    if fmt == "xlsx":
        path.write_bytes(xlsx_bytes(tables, title=title, created=created, units=units))
        return [path]
    main = main or next(iter(tables))
    out = []
    for name, df in tables.items():
        p = path if name == main else path.with_name(f"{path.stem}.{slug(name)}{path.suffix}")
        p.write_bytes(csv_bytes(df) if fmt == "csv" else parquet_bytes(df))
        out.append(p)
    return out


# ---------------------------------------------------------------- XLSX

def _xml_escape(expr: pl.Expr) -> pl.Expr:
    # Cell text had XML's forbidden characters dropped before it was neutralised (_prepare); headers and sheet
    # names may still hold some: drop them, then escape markup.
    return (expr.str.replace_all(XML_FORBIDDEN, "")
            .str.replace_all("&", "&amp;", literal=True).str.replace_all("<", "&lt;", literal=True)
            .str.replace_all(">", "&gt;", literal=True).str.replace_all("\r", "&#13;", literal=True))


def _excel_serial(expr: pl.Expr) -> pl.Expr:
    """Datetime -> Excel serial day number (1900 date system, naive UTC)."""
    return (expr.dt.epoch("us").cast(pl.Float64) / 86_400_000_000 + 25569).round(9)


class _Strings:
    """The shared-string table, built column by column (an entry may repeat across columns; Excel allows it)."""

    def __init__(self):
        self.parts: list[pl.Series] = []
        self.size = 0

    def add(self, values: pl.Series) -> int:
        """Append ``values``; returns the index of the first."""
        off = self.size
        self.parts.append(values.cast(pl.String))
        self.size += len(values)
        return off


def _text_fragment(col: pl.Expr, s: pl.Series, strings: _Strings) -> pl.Expr:
    """A text column: shared strings when values repeat, inline strings when (almost) all are distinct."""
    uniq = s.drop_nulls().unique(maintain_order=True)
    if len(uniq) > len(s) // 2:
        return pl.format('c t="inlineStr"><is><t xml:space="preserve">{}</t></is></c>', _xml_escape(col))
    off = strings.add(uniq)
    codes = col.replace_strict(uniq, pl.int_range(off, off + len(uniq), eager=True), default=None)
    return pl.format('c t="s"><v>{}</v></c>', codes)


class _Styles:
    """The workbook's cell formats (cellXfs): 0 text, 1 header (bold), 2 timestamp, then one per number format
    code in order of first use (so equal inputs give equal bytes)."""

    def __init__(self):
        self.codes: list[str] = []

    def number(self, code: str) -> int:
        if code not in self.codes:
            self.codes.append(code)
        return 3 + self.codes.index(code)


def number_format(scale: int, unit: str | None = None) -> str:
    """Excel number format: thousands separator, ``scale`` decimals (at most 6), then the unit in quotes."""
    code = "#,##0" + ("." + "0" * min(scale, 6) if scale > 0 else "")
    unit = re.sub(r'["\\]', "", unit or "").strip()
    return f'{code} "{unit}"' if unit else code


def _number(text: pl.Expr, style: int | None) -> pl.Expr:
    return pl.format(f'c s="{style}"><v>{{}}</v></c>' if style else "c><v>{}</v></c>", text)


def _cell_fragment(name: str, dtype, s: pl.Series, strings: _Strings, styles: _Styles,
                   unit: str | None = None) -> pl.Expr:
    """XML of one column's cells without the leading '<' (the row writer supplies it as the separator)."""
    col = pl.col(name)
    if dtype == pl.String:
        return _text_fragment(col, s, strings)
    if dtype == pl.Boolean:
        return pl.format('c t="b"><v>{}</v></c>', col.cast(pl.Int8))
    if isinstance(dtype, pl.Datetime):
        return pl.format(f'c s="{_DT_STYLE}"><v>{{}}</v></c>', _excel_serial(col))
    if dtype == pl.Date:
        return pl.format(f'c s="{_DT_STYLE}"><v>{{}}</v></c>', _excel_serial(col.cast(pl.Datetime("us"))))
    if isinstance(dtype, pl.Decimal):
        return _number(col.cast(pl.String), styles.number(number_format(dtype.scale or 0, unit)))
    style = styles.number(number_format(0 if dtype.is_integer() else 2, unit)) if unit else None
    if dtype.is_float():
        return pl.when(col.is_finite()).then(_number(col.cast(pl.String), style))
    if dtype.is_numeric():
        return _number(col.cast(pl.String), style)
    return pl.lit(None, pl.String)   # columns of nulls only


def _col_letter(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(65 + r) + s
    return s


def _prepare(df: pl.DataFrame) -> pl.DataFrame:
    """Text-like columns as strings as the sheet will hold them (XML's forbidden characters dropped), then
    neutralised: the check sees the final text, so nothing is stripped after it. Other columns keep their type."""
    text = [c for c, t in df.schema.items() if not (t.is_numeric() or t in (pl.Boolean, pl.Date)
                                                     or isinstance(t, (pl.Datetime, pl.Decimal)))]
    return neutralise(df.with_columns([pl.col(c).cast(pl.String).str.replace_all(XML_FORBIDDEN, "")
                                       for c in text]))


def _sheet_xml(df: pl.DataFrame, strings: _Strings, styles: _Styles, selected: bool,
               units: dict[str, str]) -> list[bytes]:
    ncol, nrow = max(df.width, 1), df.height + 1
    ref = f"A1:{_col_letter(ncol - 1)}{nrow}"
    off = strings.add(pl.Series(df.columns, dtype=pl.String))
    header = "".join(f'<c t="s" s="{_HEADER_STYLE}"><v>{off + i}</v></c>' for i in range(df.width))
    cols = "".join(f'<col min="{i + 1}" max="{i + 1}" width="{w}" customWidth="1"/>'
                   for i, w in enumerate(_widths(df)))
    tab = 'tabSelected="1" ' if selected else ""
    cols = f"<cols>{cols}</cols>" if cols else ""
    head = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<worksheet xmlns="{_NS}" xmlns:r="{_REL}">'
            f'<dimension ref="{ref}"/><sheetViews><sheetView {tab}workbookViewId="0">'
            '<pane ySplit="1" topLeftCell="A2" activePane="bottomLeft" state="frozen"/></sheetView></sheetViews>'
            f'<sheetFormatPr defaultRowHeight="15"/>{cols}<sheetData><row>{header}</row>\n')
    body = b""
    if df.height and df.width:
        # Rows are written by the (multithreaded) CSV writer with '<' as the separator: each cell fragment
        # lacks its leading '<', and cells carry no references, so an empty value still needs its <c/>.
        frags = [_cell_fragment(c, t, df.get_column(c), strings, styles, units.get(c)).fill_null("c/>").alias(f"_{i}")
                 for i, (c, t) in enumerate(df.schema.items())]
        buf = io.BytesIO()
        df.select([pl.lit("<row>").alias("_open"), *frags, pl.lit("/row>").alias("_close")]).write_csv(
            buf, separator="<", quote_style="never", include_header=False)
        body = buf.getbuffer()
    tail = f'</sheetData><autoFilter ref="{ref}"/></worksheet>'
    return [head.encode("utf-8"), body, tail.encode("utf-8")]   # chunks: the body is never copied


def _widths(df: pl.DataFrame) -> list[float]:
    sample = df.head(200)
    out = []
    for c, t in df.schema.items():
        if isinstance(t, pl.Datetime):
            n = 19
        else:
            lens = sample.get_column(c).cast(pl.String).str.len_chars()
            n = int(lens.max() or 0)
        out.append(float(min(max(len(c) + 2, n + 2, 8), 60)))
    return out


def _sst_xml(strings: _Strings) -> bytes:
    items = b""
    if strings.parts:
        s = pl.concat(strings.parts).rename("s").to_frame()
        items = s.select(pl.format('<si><t xml:space="preserve">{}</t></si>', _xml_escape(pl.col("s")))).write_csv(
            separator="\x1f", quote_style="never", include_header=False, line_terminator="").encode("utf-8")
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<sst xmlns="{_NS}" count="{strings.size}" '
            f'uniqueCount="{strings.size}">').encode() + items + b"</sst>"


def _sheet_names(names: list[str]) -> list[str]:
    out = []
    for n in names:
        base = re.sub(r"[\[\]:*?/\\]", "-", n)[:31] or "sheet"
        cand, k = base, 2
        while cand.lower() in (o.lower() for o in out):
            cand = f"{base[:27]} ({k})"
            k += 1
        out.append(cand)
    return out


def _split_large(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """A table with more rows than a sheet holds continues on sheets 'name (2)', 'name (3)', ..."""
    out = {}
    per = XLSX_MAX_ROWS - 1
    for name, df in tables.items():
        if df.height <= per:
            out[name] = df
            continue
        for k, off in enumerate(range(0, df.height, per), start=1):
            out[name if k == 1 else f"{name} ({k})"] = df.slice(off, per)
    return out


def xlsx_bytes(tables: dict[str, pl.DataFrame], title: str = "gpuledger export",
               created: dt.datetime | None = None, units: dict[str, str] | None = None) -> bytes:
    """An XLSX workbook with one sheet per table (header row bold and frozen, autofilter, number formats:
    decimals keep their scale, timestamps as dates; ``units`` maps a column name to the currency or unit its
    numbers show, e.g. {"total": "EUR"}). ``created`` (naive UTC, default 1980-01-01) stamps the document
    properties and ZIP entries, so equal inputs give equal bytes."""
    created = (created or dt.datetime(1980, 1, 1)).replace(microsecond=0, tzinfo=None)
    tables = _split_large({k: _prepare(v) for k, v in tables.items()})
    names = _sheet_names(list(tables))
    strings, styles = _Strings(), _Styles()
    sheets = [_sheet_xml(df, strings, styles, i == 0, units or {}) for i, df in enumerate(tables.values())]
    parts = [("[Content_Types].xml", _content_types(len(names))), ("_rels/.rels", _root_rels()),
             ("docProps/app.xml", _app_xml()), ("docProps/core.xml", _core_xml(title, created)),
             ("xl/workbook.xml", _workbook_xml(names, list(tables.values()))),
             ("xl/_rels/workbook.xml.rels", _workbook_rels(len(names))), ("xl/styles.xml", _styles_xml(styles)),
             ("xl/sharedStrings.xml", _sst_xml(strings))]
    parts += [(f"xl/worksheets/sheet{i}.xml", x) for i, x in enumerate(sheets, start=1)]
    return zip_bytes(parts, max(created, dt.datetime(1980, 1, 1)))


def _deflate(chunks: list) -> tuple[bytes, int, int]:
    """Raw DEFLATE, CRC-32 and length of the concatenated ``chunks``: ISA-L (several times faster than zlib on
    sheet XML) when installed."""
    lib = _isal if _isal is not None else zlib
    c, crc, n, out = lib.compressobj(1, lib.DEFLATED, -15), 0, 0, []
    for chunk in chunks:
        out.append(c.compress(chunk))
        crc, n = lib.crc32(chunk, crc), n + len(chunk)
    out.append(c.flush())
    return b"".join(out), crc, n


def zip_bytes(parts: list[tuple[str, bytes | list]], stamp: dt.datetime) -> bytes:
    """A ZIP archive (deflated entries, every timestamp ``stamp``, fixed attributes) of ``parts`` (name, bytes
    or a list of byte chunks) in order. Written by hand because zipfile cannot take data compressed by another
    deflate implementation."""
    t = stamp.hour << 11 | stamp.minute << 5 | stamp.second // 2
    d = (stamp.year - 1980) << 9 | stamp.month << 5 | stamp.day
    out, central = io.BytesIO(), io.BytesIO()
    for name, data in parts:
        comp, crc, size = _deflate(data if isinstance(data, list) else [data])
        if max(len(comp), size, out.tell()) >= 0xFFFFFFFF:
            raise ValueError("export too large for a ZIP without ZIP64 (over 4 GB)")
        fname = name.encode("utf-8")
        common = struct.pack("<HHHHHIIIH", 20, 0, 8, t, d, crc, len(comp), size, len(fname))
        central.write(struct.pack("<IH", 0x02014B50, 0x0314) + common
                      + struct.pack("<HHHHII", 0, 0, 0, 0, 0o600 << 16, out.tell()) + fname)
        out.write(struct.pack("<I", 0x04034B50) + common + struct.pack("<H", 0) + fname)
        out.write(comp)
    start, size = out.tell(), central.tell()
    out.write(central.getvalue())
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(parts), len(parts), size, start, 0))
    return out.getvalue()


def _content_types(n: int) -> bytes:
    sheets = "".join(f'<Override PartName="/xl/worksheets/sheet{i}.xml" ContentType="application/'
                     'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>' for i in range(1, n + 1))
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Types xmlns="http://schemas.openxmlformats.org/'
            'package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-'
            'package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'spreadsheetml.sheet.main+xml"/>' + sheets +
            '<Override PartName="/xl/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'spreadsheetml.styles+xml"/><Override PartName="/xl/sharedStrings.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/><Override PartName="/docProps/'
            'core.xml" ContentType="application/vnd.openxmlformats-package.core-properties+xml"/><Override '
            'PartName="/docProps/app.xml" ContentType="application/vnd.openxmlformats-officedocument.extended-'
            'properties+xml"/></Types>').encode()


def _root_rels() -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships xmlns="{_PKG}">'
            f'<Relationship Id="rId1" Type="{_REL}/officeDocument" Target="xl/workbook.xml"/>'
            '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/package/2006/relationships/metadata/'
            'core-properties" Target="docProps/core.xml"/>'
            f'<Relationship Id="rId3" Type="{_REL}/extended-properties" Target="docProps/app.xml"/>'
            '</Relationships>').encode()


def _app_xml() -> bytes:
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Properties xmlns="http://schemas.'
            'openxmlformats.org/officeDocument/2006/extended-properties"><Application>gpuledger</Application>'
            '</Properties>').encode()


def _core_xml(title: str, created: dt.datetime) -> bytes:
    t = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    esc = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<cp:coreProperties xmlns:cp="http://schemas.'
            'openxmlformats.org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/" '
            'xmlns:dcterms="http://purl.org/dc/terms/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
            f'<dc:title>{esc}</dc:title><dc:creator>gpuledger</dc:creator>'
            f'<dcterms:created xsi:type="dcterms:W3CDTF">{t}</dcterms:created>'
            f'<dcterms:modified xsi:type="dcterms:W3CDTF">{t}</dcterms:modified></cp:coreProperties>').encode()


def _workbook_xml(names: list[str], frames: list[pl.DataFrame]) -> bytes:
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    sheets = "".join(f'<sheet name="{esc(n)}" sheetId="{i}" r:id="rId{i}"/>' for i, n in enumerate(names, 1))
    defined = "".join(
        f'<definedName name="_xlnm._FilterDatabase" localSheetId="{i}" hidden="1">'
        f"'{esc(n).replace(chr(39), chr(39) * 2)}'!$A$1:${_col_letter(max(df.width, 1) - 1)}${df.height + 1}"
        "</definedName>" for i, (n, df) in enumerate(zip(names, frames)))
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<workbook xmlns="{_NS}" xmlns:r="{_REL}">'
            f'<bookViews><workbookView activeTab="0"/></bookViews><sheets>{sheets}</sheets>'
            f'<definedNames>{defined}</definedNames></workbook>').encode()


def _workbook_rels(n: int) -> bytes:
    rels = "".join(f'<Relationship Id="rId{i}" Type="{_REL}/worksheet" Target="worksheets/sheet{i}.xml"/>'
                   for i in range(1, n + 1))
    rels += f'<Relationship Id="rId{n + 1}" Type="{_REL}/styles" Target="styles.xml"/>'
    rels += f'<Relationship Id="rId{n + 2}" Type="{_REL}/sharedStrings" Target="sharedStrings.xml"/>'
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships xmlns="{_PKG}">{rels}'
            '</Relationships>').encode()


def _styles_xml(styles: _Styles) -> bytes:
    esc = lambda s: s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
    fmts = ['<numFmt numFmtId="164" formatCode="yyyy-mm-dd hh:mm:ss"/>']
    fmts += [f'<numFmt numFmtId="{165 + i}" formatCode="{esc(code)}"/>' for i, code in enumerate(styles.codes)]
    xf = '<xf numFmtId="{}" fontId="{}" fillId="0" borderId="0" xfId="0"{}/>'
    xfs = [xf.format(0, 0, ""), xf.format(0, 1, ' applyFont="1"'), xf.format(164, 0, ' applyNumberFormat="1"')]
    xfs += [xf.format(165 + i, 0, ' applyNumberFormat="1"') for i in range(len(styles.codes))]
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<styleSheet xmlns="{_NS}">'
            f'<numFmts count="{len(fmts)}">{"".join(fmts)}</numFmts>'
            '<fonts count="2"><font><sz val="11"/><name val="Calibri"/></font>'
            '<font><b/><sz val="11"/><name val="Calibri"/></font></fonts>'
            '<fills count="2"><fill><patternFill patternType="none"/></fill>'
            '<fill><patternFill patternType="gray125"/></fill></fills>'
            '<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders>'
            '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>'
            f'<cellXfs count="{len(xfs)}">{"".join(xfs)}</cellXfs>'
            '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles>'
            '</styleSheet>').encode()
