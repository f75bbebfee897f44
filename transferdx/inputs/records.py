"""Records: the data model (docs/design.md §2), validation, and the exclusion log.

A :class:`Record` is one training query with its reference positive(s) and the negatives of one
source. Every loader produces records through :class:`RecordBuilder`, which validates each field and
applies the error policy: ``raise`` stops at the first problem with a :class:`InputError` naming the
file, line and field; ``skip`` records an :class:`Exclusion` (file, line, field, reason) and goes on.
Nothing is dropped silently: every input record ends up in the output or in the exclusion log.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.artifacts import atomic_write_text, canonical_json, file_hash, safe_join

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
    unit: str  # "record", "negative" or "positive"
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
            self.descriptors.setdefault(source, {}).update(desc)
        return self

    def describe(self, source: str, **fields: Any) -> None:
        """Record how ``source``'s negatives were made (merged into its descriptor)."""
        self.descriptors.setdefault(source, {}).update(fields)

    @property
    def sources(self) -> list[str]:
        return sorted({r.source for r in self.records} | {e.source for e in self.exclusions if e.source})


class RecordBuilder:
    """Validates fields and applies the error policy for one input file."""

    def __init__(self, file: str | Path, on_error: str = "raise", seen: set[tuple[str, str]] | None = None):
        if on_error not in POLICIES:
            raise ValueError(f"on_error must be one of {POLICIES}, got {on_error!r}")
        self.file = str(file)
        self.on_error = on_error
        self.result = LoadResult()
        # (source, qid) pairs already kept; shared between the files of one input so that a query
        # appears at most once per source.
        self.seen: set[tuple[str, str]] = set() if seen is None else seen

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
            Exclusion(self.file, "" if line is None else str(line), source, qid, unit, item, field, reason)
        )

    # -- validation helpers ---------------------------------------------------------------------
    @staticmethod
    def text_field(obj: Mapping[str, Any], key: str) -> str:
        """Return a non-empty string field or raise ``FieldProblem``."""
        if key not in obj:
            raise FieldProblem(key, "missing")
        value = obj[key]
        if not isinstance(value, str):
            raise FieldProblem(key, f"expected a string, got {type(value).__name__}")
        if not value.strip():
            raise FieldProblem(key, "empty string")
        return value

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
        record = Record(qid, query, positives, tuple(kept), source, kind)
        self.seen.add((source, qid))
        self.result.records.append(record)
        return record


class FieldProblem(Exception):
    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


# ---------------------------------------------------------------------------------------------
# The records JSONL format
# ---------------------------------------------------------------------------------------------


def open_text(path: Path) -> Any:
    """A text file for reading as UTF-8, gunzipped when its name ends in ``.gz``."""
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


_NEGATIVE_COLUMN = re.compile(r"^negative_(\d+)$")


def negative_columns(names: Iterable[str]) -> list[str]:
    """The ``negative_1..n`` columns (n-tuple tables) among ``names``, in numeric order."""
    return sorted((c for c in names if _NEGATIVE_COLUMN.match(c)), key=lambda c: int(c.split("_")[1]))


def iter_jsonl(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, stripped line) for non-blank lines."""
    with open(path, encoding="utf-8") as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.strip()
            if line:
                yield lineno, line


def parse_json_line(builder: RecordBuilder, lineno: int, line: str) -> dict[str, Any] | None:
    """Parse one JSONL line into an object, or fail with a located error."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        builder.fail(lineno, "<line>", f"malformed JSON ({exc.msg} at column {exc.colno})")
        return None
    if not isinstance(obj, dict):
        builder.fail(lineno, "<line>", f"expected a JSON object, got {type(obj).__name__}")
        return None
    return obj


def _passage(obj: Any, where: str, *, default_method: str | None = None) -> Passage:
    if isinstance(obj, str):  # bare text
        if not obj.strip():
            raise FieldProblem(where, "empty string")
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
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        raise FieldProblem(f"{where}.score", f"expected a number or null, got {type(score).__name__}")
    return Passage(pid, text, method, relation, rank, judgment, None if score is None else float(score))


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
        builder = RecordBuilder(file, on_error, seen)
        for lineno, line in iter_jsonl(file):
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


def read_sidecars(folder: Path, result: LoadResult) -> None:
    """Descriptors and false-negative counts written next to the records (plain JSON, validated)."""
    path = folder / SIDECARS["descriptors"]
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise InputError(path, None, "<root>", "expected an object {source: {descriptor}}")
        for source, desc in data.items():
            result.describe(source, **desc)
    path = folder / SIDECARS["false_negatives"]
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
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
    )
    return sample, len(loaded.records) - len(records)
