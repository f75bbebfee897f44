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

import os
import re
from collections.abc import Iterable, Mapping, Sequence
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

# a record with no negative: an input error (under on_error=raise) unless its reader says otherwise
EMPTY_RECORD = "record has no negatives"


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


# The longest text (query or passage) a record may hold, in characters: past it the record is
# excluded with its reason (or, under on_error=raise, a located error), so that one pathological
# line cannot take the machine (a 50 MB passage needed 6.5 GB in the encoder's tokenizer). An
# encoder reads at most its max_seq_length tokens (256 for MiniLM, about 1,500 characters) anyway.
# TRANSFERDX_MAX_TEXT_CHARS overrides it.
MAX_TEXT_CHARS = 1_000_000


def max_text_chars() -> int:
    """:data:`MAX_TEXT_CHARS`, or ``$TRANSFERDX_MAX_TEXT_CHARS`` when set to a positive integer."""
    value = os.environ.get("TRANSFERDX_MAX_TEXT_CHARS", "")
    return int(value) if value.isdigit() and int(value) > 0 else MAX_TEXT_CHARS


def text_value(value: Any, where: str) -> str:
    """``value`` if it is a non-empty string of valid Unicode of at most :func:`max_text_chars`
    characters, else ``FieldProblem(where, …)``."""
    if not isinstance(value, str):
        raise FieldProblem(where, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise FieldProblem(where, "empty string")
    limit = max_text_chars()
    if len(value) > limit:
        raise FieldProblem(
            where, f"text of {len(value):,} characters, longer than the limit of {limit:,} (TRANSFERDX_MAX_TEXT_CHARS)"
        )
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
        empty_reason: str = EMPTY_RECORD,
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
        if line is not None:
            self.result.origins[(source, qid)] = f"{self.label}:{line}"
        if self.note_duplicates:
            keys = [passage_key(n.id, n.text) for n in kept]
            self.result.note(source, DUPLICATE_NEGATIVES_KEPT, len(keys) - len(set(keys)))
        return record


# ---------------------------------------------------------------------------------------------
# Lines, whole texts, JSON
# ---------------------------------------------------------------------------------------------


def check_unicode(value: str, where: str) -> None:
    """A string from JSON may hold a lone surrogate (``"\\ud800"``), which is not text: no
    UTF-8 encoding exists, so hashing or writing it would fail far from the input."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FieldProblem(where, f"lone surrogate U+{ord(value[exc.start]):04X}: not valid Unicode text") from None


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
