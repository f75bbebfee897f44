"""Records: the data model (docs/design.md §2), validation, and the exclusion log.

A :class:`Record` is one training query with its reference positive(s) and the negatives of one
source. Every loader produces records through :class:`RecordBuilder`, which validates each field and
applies the error policy: ``raise`` stops at the first problem with a :class:`InputError` naming the
file, line and field; ``skip`` records an :class:`Exclusion` (file, line, field, reason) and goes on.
Nothing is dropped silently: every input record ends up in the output or in the exclusion log.

Text files are read one line at a time as bytes (:func:`iter_lines`, gunzipped when the name ends in
``.gz``) and each line is decoded on its own, so an invalid UTF-8 byte is a located problem of that
line (field ``<encoding>``), a truncated gzip stream one of the line where it ends, and a UTF-8 BOM
is dropped. Exclusions name their file relative to the input's root (:func:`artifact_name`), so the
same data gives the same exclusion log wherever it lives; errors keep the path as given.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.artifacts import atomic_write_text, canonical_json, file_hash, safe_join
from transferdx.diagnostics.suspicion import passage_key
from transferdx.inputs.texts import intern_passages, intern_text

POLICIES = ("raise", "skip")
KINDS = ("genuine", "control")
# A negative whose text equals one of the record's positives is an error, except when the source
# built it on purpose (the own_positive_mix control marks such negatives with this relation).
OWN_POSITIVE_RELATION = "own_positive"


class InputError(ValueError):
    """Bad input, located: ``file:line: field: message``."""

    def __init__(self, file: str | Path, line: int | str | None, field: str, message: str):
        self.file, self.line, self.field, self.message = str(file), line, field, message
        where = f"{self.file}:{line}" if line is not None else self.file
        super().__init__(f"{where}: field '{field}': {message}")


@dataclass(frozen=True)
class Exclusion:
    """One input item left out of the output, with where it came from and why."""

    file: str
    line: str
    source: str
    qid: str
    # "record", "negative", "positive", "line" (an input line left out, e.g. a duplicate line of a
    # triples file) or "query" (a judged query, for every source at once)
    unit: str
    item: str  # passage id for negative/positive units, "" for records
    field: str
    reason: str


@dataclass(frozen=True)
class Passage:
    """A passage attached to a record. ``rank``/``judgment`` are kept when the input has them;
    ``score`` is the miner's similarity score when the input carries one (e.g. sentence-transformers
    ``mine_hard_negatives(..., output_scores=True)``), left out of ``to_dict`` when absent."""

    id: str
    text: str
    method: str | None = None
    relation: str | None = None
    rank: int | None = None
    judgment: int | None = None
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k in ("method", "relation")}


@dataclass(frozen=True)
class Record:
    """One query of one source: ``positives[0]`` is the reference positive p0."""

    qid: str
    query: str
    positives: tuple[Passage, ...]
    negatives: tuple[Passage, ...]
    source: str
    kind: str = "genuine"

    def to_dict(self) -> dict[str, Any]:
        return {
            "qid": self.qid,
            "query": self.query,
            "positives": [p.to_dict() for p in self.positives],
            "negatives": [n.to_dict() for n in self.negatives],
            "source": self.source,
            "kind": self.kind,
        }


def text_id(text: str) -> str:
    """Content-addressed passage id for inputs that carry text but no id: ``t`` + sha1[:16]."""
    return "t" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


# Descriptor notes that count kept items worth knowing about; summed when results are merged.
DUPLICATE_NEGATIVES_KEPT = "duplicate_negatives_kept"
ADDITIVE_NOTES = (DUPLICATE_NEGATIVES_KEPT,)


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


@dataclass
class LoadResult:
    """Records and exclusions from one or more inputs."""

    records: list[Record] = field(default_factory=list)
    exclusions: list[Exclusion] = field(default_factory=list)
    # source → how its negatives were made (input, mining method, pool, ranking rule, slice, ...)
    descriptors: dict[str, dict[str, Any]] = field(default_factory=dict)
    # source → [(qid, negatives judged relevant, negatives)] of the single-label variant (only p0
    # known), where deep judgments exist: the measured false negatives
    false_negatives: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    # the grade from which a judged passage counts as relevant, where the input has graded judgments
    relevant_grade: int | None = None

    def extend(self, other: LoadResult) -> LoadResult:
        if self.relevant_grade is None:
            self.relevant_grade = other.relevant_grade
        self.records.extend(other.records)
        self.exclusions.extend(other.exclusions)
        for source, rows in other.false_negatives.items():
            self.false_negatives.setdefault(source, []).extend(rows)
        for source, desc in other.descriptors.items():
            mine = self.descriptors.setdefault(source, {})
            added = {k: mine[k] + desc[k] for k in ADDITIVE_NOTES if k in mine and k in desc}
            mine.update(desc, **added)
        return self

    def describe(self, source: str, **fields: Any) -> None:
        """Record how ``source``'s negatives were made (merged into its descriptor)."""
        self.descriptors.setdefault(source, {}).update(fields)

    def note(self, source: str, key: str, n: int) -> None:
        """Add ``n`` to a counted note of ``source``'s descriptor (e.g. duplicate negatives kept)."""
        if n:
            desc = self.descriptors.setdefault(source, {})
            desc[key] = desc.get(key, 0) + n

    @property
    def sources(self) -> list[str]:
        return sorted({r.source for r in self.records} | {e.source for e in self.exclusions if e.source})


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


class FieldProblem(Exception):
    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


# ---------------------------------------------------------------------------------------------
# The records JSONL format
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


_NEGATIVE_COLUMN = re.compile(r"^negative_(\d+)$")


def negative_columns(names: Iterable[str]) -> list[str]:
    """The ``negative_1..n`` columns (n-tuple tables) among ``names``, in numeric order."""
    return sorted((c for c in names if _NEGATIVE_COLUMN.match(c)), key=lambda c: int(c.split("_")[1]))


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


def _passage(obj: Any, where: str, *, default_method: str | None = None) -> Passage:
    if isinstance(obj, str):  # bare text
        if not obj.strip():
            raise FieldProblem(where, "empty string")
        check_unicode(obj, where)
        return Passage(text_id(obj), obj, default_method)
    if not isinstance(obj, dict):
        raise FieldProblem(where, f"expected an object or a string, got {type(obj).__name__}")
    try:
        text = RecordBuilder.text_field(obj, "text")
        pid = RecordBuilder.id_field(obj, "id") if "id" in obj else text_id(text)
    except FieldProblem as p:
        raise FieldProblem(f"{where}.{p.field}", p.reason) from None
    rank, judgment = obj.get("rank"), obj.get("judgment")
    for key, value in (("rank", rank), ("judgment", judgment)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise FieldProblem(f"{where}.{key}", f"expected an integer or null, got {type(value).__name__}")
    method = obj.get("method", default_method)
    relation = obj.get("relation")
    for key, value in (("method", method), ("relation", relation)):
        if value is not None and not isinstance(value, str):
            raise FieldProblem(f"{where}.{key}", f"expected a string or null, got {type(value).__name__}")
    score = obj.get("score")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise FieldProblem(f"{where}.score", f"expected a number or null, got {type(score).__name__}")
        try:
            score = float(score)
        except OverflowError:
            score = math.inf
        if not math.isfinite(score):
            raise FieldProblem(f"{where}.score", "expected a finite number")
    return Passage(pid, text, method, relation, rank, judgment, score)


def _passage_list(obj: Mapping[str, Any], key: str, **kw: Any) -> list[Passage]:
    if key not in obj:
        raise FieldProblem(key, "missing")
    items = obj[key]
    if not isinstance(items, list):
        raise FieldProblem(key, f"expected a list, got {type(items).__name__}")
    return [_passage(item, f"{key}[{i}]", **kw) for i, item in enumerate(items)]


def record_from_obj(
    builder: RecordBuilder, lineno: int, obj: Mapping[str, Any], default_source: str | None = None
) -> Record | None:
    """Validate one records-format object (docs/design.md §2) and hand it to the builder."""
    qid = str(obj.get("qid", ""))
    source = obj.get("source", default_source)
    try:
        qid = builder.id_field(obj, "qid")
        query = builder.text_field(obj, "query")
        if source is None:
            raise FieldProblem("source", "missing (and no default source was given)")
        if not isinstance(source, str) or not source.strip():
            raise FieldProblem("source", "expected a non-empty string")
        kind = obj.get("kind", "genuine")
        positives = _passage_list(obj, "positives")
        negatives = _passage_list(obj, "negatives")
    except FieldProblem as p:
        builder.fail(lineno, p.field, p.reason, source=str(source or ""), qid=qid)
        return None
    return builder.add(lineno, qid=qid, query=query, positives=positives, negatives=negatives, source=source, kind=kind)


def read_records(path: str | Path, on_error: str = "raise", source: str | None = None) -> LoadResult:
    """Read a records JSONL file, or every ``*.jsonl`` file in a folder (sorted by name)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise InputError(path, None, "<path>", "folder contains no *.jsonl files")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(path, None, "<path>", "no such file or folder")

    result = LoadResult()
    seen: set[tuple[str, str]] = set()
    for file in files:
        builder = RecordBuilder(file, on_error, seen, note_duplicates=True)
        for lineno, line in iter_jsonl(file, builder):
            obj = parse_json_line(builder, lineno, line)
            if obj is not None:
                record_from_obj(builder, lineno, obj, default_source=source)
        result.extend(builder.result)
        digest = file_hash(file)
        for name in {r.source for r in builder.result.records}:
            result.describe(
                name,
                input={"format": "records", "file": file.name, "sha256": digest},
                mining_method="as recorded in the file (negatives[].method)",
                reference_positive="positives[0] as given",
            )
    if path.is_dir():
        read_sidecars(path, result)
    return result


SOURCE_NAME = re.compile(r"^[\w.+-]+$")
SIDECARS = {"descriptors": "descriptors.json", "false_negatives": "false_negatives.json"}


def write_source_folder(loaded: LoadResult, folder: str | Path) -> list[Path]:
    """One ``<source>.jsonl`` per source plus ``descriptors.json`` and ``false_negatives.json``
    sidecars, all inside ``folder``; ``read_records(folder)`` reads them back."""

    folder = Path(folder)
    written = []
    for source in loaded.sources:
        if not SOURCE_NAME.match(source):
            raise ValueError(f"source name {source!r} cannot be a file name (letters, digits, . + - _ only)")
        path = safe_join(folder, f"{source}.jsonl")
        write_records([r for r in loaded.records if r.source == source], path)
        written.append(path)
    atomic_write_text(safe_join(folder, SIDECARS["descriptors"]), canonical_json(loaded.descriptors))
    fn = {s: [list(row) for row in rows] for s, rows in loaded.false_negatives.items()}
    atomic_write_text(safe_join(folder, SIDECARS["false_negatives"]), canonical_json(fn))
    return written


def _sidecar_json(path: Path) -> Any:
    try:
        return loads_json(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, "<json>", f"malformed JSON ({exc.msg})") from None
    except ValueError as exc:
        raise InputError(path, None, "<json>", f"malformed JSON ({exc})") from None
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


def write_records(records: Iterable[Record], path: str | Path) -> None:
    """Write records as JSONL (one object per line, keys in a fixed order)."""

    lines = [json.dumps(r.to_dict(), ensure_ascii=False) for r in records]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def sample_queries(loaded: LoadResult, fraction: float, seed: int = 0) -> tuple[LoadResult, int]:
    """A seeded subset of ⌈fraction × #queries⌉ query ids, the same for every source, and the
    records (and measured false negatives) of those queries; ``fraction`` ∈ (0, 1]. Returns the
    sample and how many records it leaves out (reported with the run, never silently)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"sample_fraction must be in (0, 1], got {fraction}")
    if fraction == 1.0:
        return loaded, 0
    qids = sorted({r.qid for r in loaded.records})
    n = int(np.ceil(fraction * len(qids)))
    kept = {qids[i] for i in np.random.default_rng([seed, 0x5A]).choice(len(qids), size=n, replace=False)}
    records = [r for r in loaded.records if r.qid in kept]
    sample = LoadResult(
        records,
        list(loaded.exclusions),
        {k: dict(v) for k, v in loaded.descriptors.items()},
        {s: [row for row in rows if row[0] in kept] for s, rows in loaded.false_negatives.items()},
        loaded.relevant_grade,
    )
    return sample, len(loaded.records) - len(records)
