"""Text forms: every input stored as text is read here, line by line — lines with their numbers
(gzip, a byte-order mark, bad bytes and broken streams as located problems), JSON lines and JSON
documents (lone surrogates refused), CSV/TSV with a header row, MS MARCO style tab-separated lines
(no quoting, a header optional) and ``id<TAB>text`` files. A bad line is a located problem of that
line (a counted exclusion under ``skip``), never a reason to drop the rest of the file.
:mod:`transferdx.inputs.tables` dispatches on the form; the binary forms (Parquet, Arrow,
``save_to_disk``) are read there.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.artifacts import file_hash
from transferdx.inputs.reading import FieldProblem, RecordBuilder, require_path
from transferdx.inputs.records import ANCHORS, InputError, Table


def is_gzip(path: str | Path) -> bool:
    return str(path).lower().endswith(".gz")


BOM = b"\xef\xbb\xbf"


# what reading a truncated or corrupt gzip stream raises (BadGzipFile is an OSError)
GZIP_ERRORS = (EOFError, OSError, zlib.error)


def _undecodable(byte: int, column: int) -> str:
    return f"not valid UTF-8: byte 0x{byte:02x} at byte {column} of the line"


def _stream_error(exc: BaseException) -> str:
    kind = "truncated" if isinstance(exc, EOFError) else "corrupt"
    return f"{kind} gzip stream ({exc}); the rest of the file cannot be read"


def iter_lines(path: str | Path, builder: RecordBuilder | None = None) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without its line end) for every line of a text file.

    Lines are split on ``\\n`` (a trailing ``\\r`` dropped) and decoded as UTF-8 one at a time, so
    numbers match ``sed -n Np``; a BOM before line 1 is dropped; ``.gz`` names are gunzipped. A line
    that is not valid UTF-8, or the point where a gzip stream breaks off, goes through
    ``builder.fail`` (field ``<encoding>``: a located error under ``raise``, a counted exclusion
    under ``skip``, also counted in ``builder.unreadable``); without a builder it raises
    :class:`InputError`. Blank lines are yielded too (readers skip them).
    """
    path = Path(path)

    def bad(lineno: int, reason: str) -> None:
        if builder is None:
            raise InputError(path, lineno, "<encoding>", reason)
        builder.fail(lineno, "<encoding>", reason)
        builder.unreadable += 1

    lineno = 0
    with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as handle:
        lines = iter(handle)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except GZIP_ERRORS as exc:
                bad(lineno + 1, _stream_error(exc))
                return
            lineno += 1
            if lineno == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad(lineno, _undecodable(raw[exc.start], exc.start + 1))
                continue
            yield lineno, text


def read_text(path: str | Path) -> str:
    """A whole text file (a JSON document) as UTF-8, a BOM dropped, gunzipped for ``.gz``; a bad
    byte or a broken gzip stream is an :class:`InputError` naming the line."""
    path = Path(path)
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as handle:
            data = handle.read()
    except GZIP_ERRORS as exc:
        raise InputError(path, None, "<encoding>", _stream_error(exc)) from None
    if data.startswith(BOM):
        data = data[len(BOM) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise InputError(path, line, "<encoding>", _undecodable(data[exc.start], column)) from None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(obj: Any, where: str = "") -> str | None:
    """The JSON path (``negatives[0].text``) of the first string or key holding a lone surrogate."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return where or "<line>"
        return None
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            found = lone_surrogate(item, f"{where}[{i}]")
            if found:
                return found
    if isinstance(obj, dict):
        for key, value in obj.items():
            inner = f"{where}.{key}" if where else str(key)
            if lone_surrogate(key) is not None:
                return f"{where}.<key>" if where else "<key>"
            found = lone_surrogate(value, inner)
            if found:
                return found
    return None


def parse_json(text: str) -> Any:
    """``json.loads`` whose every failure is a ``ValueError`` (JSONDecodeError, numbers past the
    integer-digit limit, nesting past the recursion limit)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def read_json_document(path: str | Path, loads: Callable[[str], Any] = parse_json) -> Any:
    """A whole JSON file (:func:`read_text`) parsed by ``loads``; any failure to read or parse it is
    an :class:`InputError` naming the file, and the line where the parser knows it."""
    try:
        return loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, "<json>", f"malformed JSON ({json_problem(exc)})") from None
    except ValueError as exc:
        raise InputError(path, None, "<json>", f"malformed JSON ({exc})") from None


def json_problem(exc: json.JSONDecodeError) -> str:
    """The parser's complaint and its column, e.g. "invalid control character at column 25: a tab,
    newline or other control character inside a string must be escaped (\\t, \\n, \\u0001)"."""
    msg = exc.msg.removesuffix(" at").strip()
    text = f"{msg[:1].lower()}{msg[1:]} at column {exc.colno}"
    if msg.startswith("Invalid control character"):
        text += r": a tab, newline or other control character inside a string must be escaped (\t, \n, \u0001)"
    return text


def surrogate_problem(obj: Any) -> FieldProblem | None:
    """The located problem of a parsed JSON value holding a lone surrogate, if any."""
    try:
        where = lone_surrogate(obj)
    except RecursionError:
        return FieldProblem("<json>", "JSON nested too deeply")
    return None if where is None else FieldProblem(where, "lone surrogate: not valid Unicode text")


def loads_json(text: str) -> Any:
    """:func:`parse_json`, and a string or key holding a lone surrogate a ``FieldProblem``."""
    obj = parse_json(text)
    if _SURROGATE_ESCAPE.search(text):
        try:
            where = lone_surrogate(obj)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if where is not None:
            raise FieldProblem(where, "lone surrogate: not valid Unicode text")
    return obj


def iter_jsonl(path: Path, builder: RecordBuilder | None = None) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, stripped line) for non-blank lines (see :func:`iter_lines`)."""
    for lineno, raw in iter_lines(path, builder):
        line = raw.strip()
        if line:
            yield lineno, line


def parse_json_line(builder: RecordBuilder, lineno: int, line: str) -> dict[str, Any] | None:
    """Parse one JSONL line into an object, or fail with a located error."""
    try:
        obj = loads_json(line)
    except json.JSONDecodeError as exc:
        builder.fail(lineno, "<line>", f"malformed JSON ({json_problem(exc)})")
        return None
    except ValueError as exc:
        builder.fail(lineno, "<line>", f"malformed JSON ({exc})")
        return None
    except FieldProblem as p:
        builder.fail(lineno, p.field, p.reason)
        return None
    if not isinstance(obj, dict):
        builder.fail(lineno, "<line>", f"expected a JSON object, got {type(obj).__name__}")
        return None
    return obj


def read_id_text_tsv(path: str | Path, what: str = "text") -> dict[str, str]:
    """``id<TAB>text`` per line (MS MARCO collection.tsv / queries.tsv). A lookup table, so any bad
    line (field count, empty id or text, bad encoding, duplicate id) is a located error under
    either error policy."""
    return id_text_lines(path, what)[0]


def id_text_lines(path: str | Path, what: str = "text") -> tuple[dict[str, str], dict[str, int]]:
    """The table and the line of each id."""
    path = require_path(path)
    table: dict[str, str] = {}
    lines: dict[str, int] = {}
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise InputError(path, lineno, "<line>", f"expected 2 tab-separated fields (id, {what}), got {len(parts)}")
        pid, text = parts[0].strip(), parts[1]
        if not pid:
            raise InputError(path, lineno, "id", "empty id")
        if not text.strip():
            raise InputError(path, lineno, what, "empty string")
        if pid in table:
            raise InputError(path, lineno, "id", f"duplicate id {pid!r} (also line {lines[pid]})")
        table[pid] = text
        lines[pid] = lineno
    return table, lines


csv.field_size_limit(sys.maxsize)


def _columns_of(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def read_json_lines(
    path: Path,
    builder: RecordBuilder,
    each: Callable[[int, dict[str, Any]], Any] | None = None,
    keep_rows: bool = True,
) -> Table:
    """JSON lines as a table; ``each(line, object)`` is called as each object is parsed (the records
    reader builds its records so, its exclusions in line order). ``keep_rows=False``: the objects
    are handed to ``each`` and not kept (the table's ``rows`` and ``lines`` stay empty, its columns
    are still every key seen) — the records reader's rows cost ~270 bytes a negative beside the
    records built from them, kept only when the clean verb needs the table."""
    rows, lines, bad = [], [], 0
    columns: dict[str, None] = {}
    for lineno, text in iter_jsonl(path, builder):
        obj = parse_json_line(builder, lineno, text)
        if obj is None:
            bad += 1
            continue
        columns.update(dict.fromkeys(map(str, obj)))
        if keep_rows:
            rows.append(obj)
            lines.append(lineno)
        if each is not None:
            each(lineno, obj)
    bad += builder.unreadable
    return Table(str(path), "jsonl", list(columns), rows, lines, n_unreadable=bad)


def _read_delimited(path: Path, form: str, builder: RecordBuilder) -> Table:
    """A CSV/TSV with a header row, read row by row: each row keeps its first physical line; a
    row that cannot be read, or whose field count differs from the header's, is a located problem
    (a counted exclusion under ``skip``)."""
    consumed: list[int] = []  # physical line of each line handed to the csv reader

    def physical() -> Iterator[str]:
        for lineno, text in iter_lines(path, builder):
            consumed.append(lineno)
            yield text + "\n"

    reader = csv.reader(physical(), delimiter="," if form == "csv" else "\t")
    header: list[str] | None = None
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    bad = 0
    while True:
        start = len(consumed)
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            line = consumed[start] if start < len(consumed) else (consumed[-1] if consumed else 1)
            builder.fail(line, "<line>", f"cannot read this {form.upper()} row ({exc})")
            bad += 1
            continue
        line = consumed[start]
        if not row or all(not c.strip() for c in row):
            continue
        if header is None:
            if builder.unreadable:  # skip: an unreadable line stood where the header is
                raise InputError(path, line, "<columns>", "the header row cannot be read (see the lines before)")
            header = _unique_columns(row)
            continue
        if len(row) != len(header):
            builder.fail(line, "<line>", f"expected {len(header)} fields (the header's), got {len(row)}")
            bad += 1
            continue
        rows.append(dict(zip(header, row, strict=True)))
        lines.append(line)
    if header is None:
        raise InputError(path, None, "<table>", f"cannot read {form.upper()}: no header row")
    bad += builder.unreadable
    return Table(str(path), form, header, rows, lines, True, n_unreadable=bad)


def _unique_columns(names: list[str]) -> list[str]:
    """Header names made unique as pandas does (``a``, ``a.1``, ...)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            seen[name] += 1
            name = f"{name}.{seen[name]}"
        seen.setdefault(name, 0)
        out.append(name)
    return out


def _first_char(path: Path) -> str:
    """The first non-blank character (sniffing only: undecodable bytes read as U+FFFD)."""
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as handle:
            head = handle.read(4096)
    except (EOFError, OSError, zlib.error):
        return ""
    if head.startswith(BOM):
        head = head[len(BOM) :]
    stripped = head.decode("utf-8", errors="replace").lstrip()
    return stripped[0] if stripped else ""


def iter_tab_lines(
    path: Path,
    builder: RecordBuilder,
    header: bool | None = None,
    fields: int | None = None,
    header_at: list[int] | None = None,
) -> Iterator[tuple[int, dict[str, str] | None]]:
    """Plain tab-separated lines (no quoting: MS MARCO style) as (line, ``{query, positive,
    negative_1..}``, or the header's names) in file order; (line, None) for a line that failed
    (already logged under ``skip``).

    ``header``: True (the first line names the columns), False (it is data) or None (it names the
    columns when it looks like a header: ``query|anchor|question, positive, ...`` or ``qid, ...``).
    The number of tab-separated fields comes from the format, never from the data's first row:
    ``fields`` when the format fixes it (MS MARCO triples: 3), else the header's columns, else each
    row on its own (``query, positive, negative_1..n``, n ≥ 1, so rows may differ in n). A row with
    another count is a located problem of that row. ``header_at`` (a list) gets the header's line."""
    columns: list[str] | None = None
    first = True
    for lineno, line in iter_lines(path, builder):
        if not line.strip():
            continue
        row = line.split("\t")
        if first:
            first = False
            if header and builder.unreadable:  # skip: the header line itself was unreadable
                raise InputError(path, lineno, "<columns>", "the header row cannot be read (see the line before)")
            looks_like_header = (row[0] in ANCHORS and row[1:2] == ["positive"]) or row[0] == "qid"
            if header or (header is None and looks_like_header):
                columns = row
                if header_at is not None:
                    header_at.append(lineno)
                continue
        if columns is not None:
            names, what = columns, "the header's columns"
        elif fields is not None:
            names = ["query", "positive"] + [f"negative_{i}" for i in range(1, fields - 1)]
            what = ", ".join(("query", "positive", "negative") if fields == 3 else names)
        else:
            names = ["query", "positive"] + [f"negative_{i}" for i in range(1, len(row) - 1)]
            what = "query, positive, negative_1.."
            if len(row) < 3:
                builder.fail(lineno, "<line>", f"expected at least 3 tab-separated fields ({what}), got {len(row)}")
                yield lineno, None
                continue
        if len(row) != len(names):
            builder.fail(lineno, "<line>", f"expected {len(names)} tab-separated fields ({what}), got {len(row)}")
            yield lineno, None
            continue
        yield lineno, dict(zip(names, row, strict=True))


def read_tab_lines(path: Path, builder: RecordBuilder, header: bool | None = None, fields: int | None = None) -> Table:
    """:func:`iter_tab_lines` as a :class:`Table` (form ``tsv``, cells are text); its columns are
    those of the widest row (the header's, when there is one)."""
    rows: list[dict[str, str]] = []
    lines: list[int] = []
    bad = 0
    header_at: list[int] = []
    for lineno, row in iter_tab_lines(path, builder, header, fields, header_at):
        if row is None:
            bad += 1
            continue
        rows.append(row)
        lines.append(lineno)
    bad += builder.unreadable
    columns = max((list(r) for r in rows), key=len, default=["query", "positive", "negative_1"])
    return Table(str(path), "tsv", columns, rows, lines, True, file_hash(path), bad, bool(header_at))


def read_text_table(path: Path, form: str, builder: RecordBuilder) -> Table:
    """A table stored as text: JSON lines (also a ``.json`` that does not open with ``[``: datasets'
    ``to_json`` writes JSON lines), a JSON document (a list of objects; row i is "line" i + 1), or a
    CSV/TSV with a header row."""
    if form == "jsonl" or (form == "json" and _first_char(path) != "["):
        return read_json_lines(path, builder)  # datasets' to_json writes JSON lines, also to *.json
    elif form == "json":
        data = read_json_document(path)
        if not isinstance(data, list):
            raise InputError(path, None, "<root>", f"expected a list of objects, got {type(data).__name__}")
        rows, lines, bad = [], [], 0
        for i, row in enumerate(data):  # row i is "line" i + 1
            problem = surrogate_problem(row)
            if not isinstance(row, dict):
                builder.fail(i + 1, "<row>", f"expected a JSON object, got {type(row).__name__}")
            elif problem is not None:
                builder.fail(i + 1, problem.field, problem.reason)
            else:
                rows.append(row)
                lines.append(i + 1)
                continue
            bad += 1
        return Table(str(path), "json", _columns_of(rows), rows, lines, n_unreadable=bad)
    return _read_delimited(path, form, builder)
