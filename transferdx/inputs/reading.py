"""The reading machinery every format family uses: located problems, the error policy, lines.

Every reader builds its records through :class:`RecordBuilder`, which validates each field and
applies the error policy: ``raise`` stops at the first problem with an
:class:`~transferdx.inputs.records.InputError` naming the file, line and field; ``skip`` records an
:class:`~transferdx.inputs.records.Exclusion` (file, line, field, reason) and goes on. Nothing is
dropped silently: every input item ends up in the output or in the exclusion log. A field check
that fails raises :class:`FieldProblem` (field, reason), which the reader turns into one of them.

Text files are read one line at a time as bytes (:func:`iter_lines`, gunzipped when the name ends in
``.gz``) and each line is decoded on its own, so an invalid UTF-8 byte is a located problem of that
line (field ``<encoding>``), a truncated gzip stream one of the line where it ends, and a UTF-8 BOM
is dropped. JSON is parsed so that every failure is a located ``ValueError`` and a lone surrogate a
located problem (:func:`parse_json_line`). Exclusions name their file relative to the input's root
(:func:`artifact_name`), so the same data gives the same exclusion log wherever it lives; errors
keep the path as given. Lookup tables (``id<TAB>text``, sidecars next to records) are located errors
under either policy: a record cannot be built from a broken reference.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.artifacts import file_hash
from transferdx.inputs.records import (
    DUPLICATE_NEGATIVES_KEPT,
    KINDS,
    OWN_POSITIVE_RELATION,
    POLICIES,
    Exclusion,
    InputError,
    LoadResult,
    Passage,
    Record,
    passage_key,
)
from transferdx.inputs.texts import intern_passages, intern_text


class FieldProblem(Exception):
    """A field that fails its check: the reader turns it into a located error or an exclusion."""

    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


def artifact_name(file: str | Path, root: str | Path | None = None) -> str:
    """How an input file is named in artifacts (the exclusion log): relative to the input's root
    (``root``, a folder the user gave), else its file name; ``<...>`` origins stay as they are."""
    text = str(file)
    if text.startswith("<"):
        return text
    if root is not None:
        try:
            return Path(file).relative_to(root).as_posix()
        except ValueError:
            pass
    return Path(text).name


def text_value(value: Any, where: str) -> str:
    """``value`` if it is a non-empty string of valid Unicode, else ``FieldProblem(where, …)``."""
    if not isinstance(value, str):
        raise FieldProblem(where, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise FieldProblem(where, "empty string")
    check_unicode(value, where)
    return value


class RecordBuilder:
    """Validates fields and applies the error policy for one input file."""

    def __init__(
        self,
        file: str | Path,
        on_error: str = "raise",
        seen: set[tuple[str, str]] | None = None,
        *,
        label: str | None = None,
        note_duplicates: bool = False,
    ):
        if on_error not in POLICIES:
            raise ValueError(f"on_error must be one of {POLICIES}, got {on_error!r}")
        self.file = str(file)  # as given: located errors name it
        self.label = artifact_name(file) if label is None else label  # the exclusion log names this
        self.on_error = on_error
        self.result = LoadResult()
        # (source, qid) pairs already kept; shared between the files of one input so that a query
        # appears at most once per source.
        self.seen: set[tuple[str, str]] = set() if seen is None else seen
        # input readers count negatives repeated within a kept record (kept: the audit flags them
        # as duplicate_negative suspects) in the source's descriptor, DUPLICATE_NEGATIVES_KEPT
        self.note_duplicates = note_duplicates
        # lines that could not be read at all (bad encoding, truncated gzip), each a counted exclusion
        self.unreadable = 0

    # -- policy ---------------------------------------------------------------------------------
    def fail(
        self,
        line: int | str | None,
        field: str,
        reason: str,
        *,
        source: str = "",
        qid: str = "",
        unit: str = "record",
        item: str = "",
    ) -> None:
        """Raise under ``raise``; log an exclusion under ``skip``."""
        if self.on_error == "raise":
            raise InputError(self.file, line, field, reason)
        self.exclude(line, field, reason, source=source, qid=qid, unit=unit, item=item)

    def exclude(
        self,
        line: int | str | None,
        field: str,
        reason: str,
        *,
        source: str = "",
        qid: str = "",
        unit: str = "record",
        item: str = "",
    ) -> None:
        """Always-counted exclusion that is legitimate data, not an input error (e.g. K = 0 in a run)."""
        self.result.exclusions.append(
            Exclusion(self.label, "" if line is None else str(line), source, qid, unit, item, field, reason)
        )

    # -- validation helpers ---------------------------------------------------------------------
    @staticmethod
    def text_field(obj: Mapping[str, Any], key: str) -> str:
        """Return a non-empty string field or raise ``FieldProblem``."""
        if key not in obj:
            raise FieldProblem(key, "missing")
        return text_value(obj[key], key)

    @staticmethod
    def id_field(obj: Mapping[str, Any], key: str) -> str:
        if key not in obj:
            raise FieldProblem(key, "missing")
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise FieldProblem(key, f"expected a string or integer id, got {type(value).__name__}")
        value = str(value)
        if not value.strip():
            raise FieldProblem(key, "empty id")
        check_unicode(value, key)
        return value

    # -- assembly -------------------------------------------------------------------------------
    def add(
        self,
        line: int | str | None,
        *,
        qid: str,
        query: str,
        positives: Iterable[Passage],
        negatives: Iterable[Passage],
        source: str,
        kind: str = "genuine",
        empty_reason: str = "record has no negatives",
        empty_is_error: bool = True,
    ) -> Record | None:
        """Validate record-level invariants and keep the record, or fail/exclude it."""
        positives = tuple(positives)
        if (source, qid) in self.seen:
            self.fail(line, "qid", f"duplicate query {qid!r} in source {source!r}", source=source, qid=qid)
            return None
        if kind not in KINDS:
            self.fail(line, "kind", f"must be one of {KINDS}, got {kind!r}", source=source, qid=qid)
            return None
        if not positives:
            self.fail(line, "positives", "record has no positive", source=source, qid=qid)
            return None
        pos_texts = {p.text for p in positives}
        kept: list[Passage] = []
        for neg in negatives:
            if neg.text in pos_texts and neg.relation != OWN_POSITIVE_RELATION:
                self.fail(
                    line,
                    "negatives",
                    f"negative {neg.id!r} is identical to a positive",
                    source=source,
                    qid=qid,
                    unit="negative",
                    item=neg.id,
                )
                continue
            kept.append(neg)
        if not kept:
            if empty_is_error:
                self.fail(line, "negatives", empty_reason, source=source, qid=qid)
            else:
                self.exclude(line, "negatives", empty_reason, source=source, qid=qid)
            return None
        # one object per distinct text and passage, shared across records, files and sources
        record = Record(
            intern_text(qid),
            intern_text(query),
            intern_passages(positives),
            intern_passages(kept),
            intern_text(source),
            kind,
        )
        self.seen.add((source, qid))
        self.result.records.append(record)
        if self.note_duplicates:
            keys = [passage_key(n.id, n.text) for n in kept]
            self.result.note(source, DUPLICATE_NEGATIVES_KEPT, len(keys) - len(set(keys)))
        return record


# ---------------------------------------------------------------------------------------------
# Lines, whole texts, JSON
# ---------------------------------------------------------------------------------------------


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


def check_unicode(value: str, where: str) -> None:
    """A string from JSON may hold a lone surrogate (``"\\ud800"``), which is not text: no
    UTF-8 encoding exists, so hashing or writing it would fail far from the input."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FieldProblem(where, f"lone surrogate U+{ord(value[exc.start]):04X}: not valid Unicode text") from None


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
        raise InputError(path, exc.lineno, "<json>", f"malformed JSON ({exc.msg})") from None
    except ValueError as exc:
        raise InputError(path, None, "<json>", f"malformed JSON ({exc})") from None


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
        builder.fail(lineno, "<line>", f"malformed JSON ({exc.msg} at column {exc.colno})")
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


# ---------------------------------------------------------------------------------------------
# Paths, slices, descriptors
# ---------------------------------------------------------------------------------------------


def require_path(path: str | Path, what: str = "file") -> Path:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "<path>", f"no such {what}")
    return path


def input_descriptor(fmt: str, path: Path) -> dict[str, str]:
    """The ``input`` entry of a source's descriptor: format, file name and the file's sha256."""
    return {"format": fmt, "file": path.name, "sha256": file_hash(path)}


_SLICE = re.compile(r"^\[\s*(\d*)\s*:\s*(\d*)\s*\]$")


def parse_slice(spec: str | Sequence[str] | None, k: int | None = None) -> slice:
    """``"[a:b]"`` → ``slice(a, b)``; ``None`` → ``[0:k]`` (all when ``k`` is None). A one-item list
    ``["a:b"]`` is read as ``"[a:b]"``: that is what Hydra makes of ``slice='[2:10]'`` typed in bash."""
    if spec is None or spec == "":
        return slice(0, k)
    if not isinstance(spec, str):
        items = list(spec)
        if len(items) != 1 or not isinstance(items[0], str):
            raise ValueError(f"negative slice must look like '[0:8]' or '[2:10]', got {items!r}")
        spec = f"[{items[0]}]"
    match = _SLICE.match(str(spec))
    if not match:
        raise ValueError(f"negative slice must look like '[0:8]' or '[2:10]', got {spec!r}")
    start = int(match.group(1)) if match.group(1) else 0
    stop = int(match.group(2)) if match.group(2) else None
    if stop is not None and stop < start:
        raise ValueError(f"negative slice {spec!r} is empty (stop < start)")
    return slice(start, stop)


def slice_text(s: slice) -> str:
    return f"[{s.start or 0}:{'' if s.stop is None else s.stop}]"


# ---------------------------------------------------------------------------------------------
# Lookup tables: id → text TSVs (MS MARCO collection / queries, TREC topics), sidecars
# ---------------------------------------------------------------------------------------------


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


SIDECARS = {"descriptors": "descriptors.json", "false_negatives": "false_negatives.json"}


def _sidecar_json(path: Path) -> Any:
    try:
        return read_json_document(path, loads_json)
    except FieldProblem as p:
        raise InputError(path, None, p.field, p.reason) from None


def read_sidecars(folder: Path, result: LoadResult) -> None:
    """Descriptors and false-negative counts written next to the records (plain JSON, validated)."""
    path = folder / SIDECARS["descriptors"]
    if path.is_file():
        data = _sidecar_json(path)
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise InputError(path, None, "<root>", "expected an object {source: {descriptor}}")
        for source, desc in data.items():
            result.describe(source, **desc)
    path = folder / SIDECARS["false_negatives"]
    if path.is_file():
        data = _sidecar_json(path)
        if not isinstance(data, dict):
            raise InputError(path, None, "<root>", "expected an object {source: [[qid, n_relevant, n]]}")
        for source, rows in data.items():
            ok = isinstance(rows, list) and all(
                isinstance(r, list) and len(r) == 3 and isinstance(r[1], int) and isinstance(r[2], int) for r in rows
            )
            if not ok:
                raise InputError(path, None, source, "expected a list of [qid, n_relevant, n_negatives]")
            result.false_negatives[source] = [(str(q), a, b) for q, a, b in rows]
