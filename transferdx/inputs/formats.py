"""Readers for the input formats negative sources come in (docs/design.md §2), behind one registry.

Every reader validates its input and returns a :class:`~transferdx.inputs.records.LoadResult`; errors
name file, line (or JSON path) and field. ``on_error='skip'`` turns each problem into a counted
exclusion instead, so that every input item (a line, a run's judged query) is in a record or in the
exclusion log. Text is decoded line by line (a bad byte or a truncated ``.gz`` is a located problem
of its line; a BOM is dropped). Lookup tables (collection, queries, topics, qrels, a run's JSON) are
located errors under either policy: a record cannot be built from a broken reference.

Formats (``LOADERS``):
- ``records``: the package's JSONL record format (a file or a folder of ``*.jsonl``).
- ``ntuple``: tables of ``query, positive, negative_1..K`` (TSV with or without header, or JSONL).
- ``msmarco_triples``: MS MARCO ``query<TAB>positive<TAB>negative`` text triples, grouped by query.
- ``flagembedding``: ``{"query", "pos": [...], "neg": [...]}`` JSONL.
- ``st_hard_negatives``: sentence-transformers hard-negative files (``{"qid", "pos": [ids],
  "neg": {system: [ids]}}`` JSONL or .jsonl.gz) with a collection TSV and a queries TSV; each
  system becomes one source.
- ``trec_dl``: TREC-DL runs with graded judgments (the ``msmarco-dl19`` layout); each run becomes
  one source.

``load_beir`` reads a BEIR folder through beir's ``GenericDataLoader`` into a :class:`QuerySet`
(queries, their positives, and the corpus as passage pool); it has no negatives of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transferdx.artifacts import file_hash
from transferdx.inputs.records import (
    FieldProblem,
    InputError,
    LoadResult,
    Passage,
    RecordBuilder,
    check_unicode,
    iter_jsonl,
    iter_lines,
    negative_columns,
    parse_json,
    parse_json_line,
    read_records,
    read_text,
    text_id,
)

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


def _input_descriptor(fmt: str, path: Path) -> dict[str, str]:

    return {"format": fmt, "file": path.name, "sha256": file_hash(path)}


def require_path(path: str | Path, what: str = "file") -> Path:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "<path>", f"no such {what}")
    return path


# ---------------------------------------------------------------------------------------------
# n-tuple tables and MS MARCO triples
# ---------------------------------------------------------------------------------------------


def _ntuple_rows(
    path: Path, builder: RecordBuilder, header: bool | None, fields: int | None = None
) -> Iterator[tuple[int, dict | None]]:
    """Yield (line, {query, positive, negative_1.., [qid]}) from a TSV or JSONL n-tuple table;
    (line, None) for a line that failed (already logged under ``skip``).

    The number of tab-separated fields comes from the format, never from the data's first row:
    ``fields`` when the format fixes it (MS MARCO triples: 3), else the header's columns, else each
    row on its own (``query, positive, negative_1..n``, n ≥ 1). A row with another count is a
    located problem of that row."""
    if path.suffix in (".jsonl", ".json") or path.name.lower().endswith((".jsonl.gz", ".json.gz")):
        for lineno, line in iter_jsonl(path, builder):
            yield lineno, parse_json_line(builder, lineno, line)
        return
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
            looks_like_header = row[:2] == ["query", "positive"] or row[0] == "qid"
            if header or (header is None and looks_like_header):
                columns = row
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


def load_ntuple(
    path: str | Path,
    source: str = "ntuple",
    on_error: str = "raise",
    header: bool | None = None,
    group_by_query: bool = False,
    method: str | None = None,
    kind: str = "genuine",
    fields: int | None = None,
    **_: Any,
) -> LoadResult:
    """Read ``query, positive, negative_1..K`` rows; each row is a record unless ``group_by_query``.

    With ``group_by_query`` rows sharing a query text are merged in file order (positives
    deduplicated by text; negatives in line order), as MS MARCO triples list one negative per line.
    An exact repeat of an earlier line is a counted exclusion (unit ``line``, "duplicate line of
    line N"); a negative repeated within a record is kept and counted in the descriptor
    (``duplicate_negatives_kept``; the audit flags it as a ``duplicate_negative`` suspect). Every
    non-blank line is accounted for in the descriptor's ``lines`` (read = in_records + excluded).
    """
    path = require_path(path)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    groups: dict[str, dict[str, Any]] = {}
    first_line: dict[tuple[str, ...], int] = {}
    n_read = excluded = 0
    for lineno, obj in _ntuple_rows(path, builder, header, fields):
        n_read += 1
        if obj is None:
            excluded += 1
            continue
        try:
            query = builder.text_field(obj, "query")
            positive = builder.text_field(obj, "positive")
            neg_keys = negative_columns(obj)
            if not neg_keys:
                raise FieldProblem("negative_1", "missing (no negative_k column)")
            negatives = [builder.text_field(obj, k) for k in neg_keys]
            qid = builder.id_field(obj, "qid") if "qid" in obj else text_id(query)
        except FieldProblem as p:
            builder.fail(lineno, p.field, p.reason, source=source)
            excluded += 1
            continue
        if group_by_query:
            same = (qid, query, positive, *negatives)
            if same in first_line:
                builder.exclude(
                    lineno,
                    "<line>",
                    f"duplicate line of line {first_line[same]}",
                    source=source,
                    qid=qid,
                    unit="line",
                )
                excluded += 1
                continue
            first_line[same] = lineno
        key = query if group_by_query else f"{lineno}"
        group = groups.setdefault(key, {"line": lineno, "qid": qid, "query": query, "pos": {}, "neg": [], "lines": []})
        group["lines"].append(lineno)
        group["pos"].setdefault(positive, None)
        group["neg"].extend(negatives)
    in_records = 0
    for group in groups.values():
        record = builder.add(
            group["line"],
            qid=group["qid"],
            query=group["query"],
            positives=[Passage(text_id(t), t) for t in group["pos"]],
            negatives=[Passage(text_id(t), t, method) for t in group["neg"]],
            source=source,
            kind=kind,
        )
        if record is not None:
            in_records += len(group["lines"])
            continue
        # the record is excluded (logged at its first line): so is every other line of it
        reason = builder.result.exclusions[-1].reason
        for lineno in group["lines"][1:]:
            builder.exclude(
                lineno,
                "<line>",
                f"line of the record excluded at line {group['line']} ({reason})",
                source=source,
                qid=group["qid"],
                unit="line",
            )
        excluded += len(group["lines"])
    n_read += builder.unreadable
    excluded += builder.unreadable
    builder.result.describe(
        source,
        input=_input_descriptor("ntuple", path),
        mining_method=method or "not recorded (n-tuple table)",
        ranking_rule="column order negative_1..K" + (", rows grouped by query" if group_by_query else ""),
        reference_positive="the row's positive" + (" (first row of the query)" if group_by_query else ""),
        lines={"read": n_read, "in_records": in_records, "excluded": excluded, "records": len(builder.result.records)},
    )
    return builder.result


def load_msmarco_triples(path: str | Path, source: str = "msmarco_triples", **kw: Any) -> LoadResult:
    """MS MARCO ``query<TAB>positive<TAB>negative`` text triples (no header, always 3 fields),
    grouped by query."""
    kw.setdefault("header", False)
    kw.setdefault("group_by_query", True)
    kw.setdefault("fields", 3)
    return load_ntuple(path, source=source, **kw)


# ---------------------------------------------------------------------------------------------
# FlagEmbedding {query, pos, neg}
# ---------------------------------------------------------------------------------------------


def load_flagembedding(
    path: str | Path,
    source: str = "flagembedding",
    on_error: str = "raise",
    k: int | None = None,
    slice_spec: str | Sequence[str] | None = None,
    method: str | None = None,
    kind: str = "genuine",
    **_: Any,
) -> LoadResult:
    """``{"query": str, "pos": [str, ...], "neg": [str, ...]}`` per line; negatives sliced."""
    path = require_path(path)
    window = parse_slice(slice_spec, k)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    n_read = 0
    for lineno, line in iter_jsonl(path, builder):
        n_read += 1
        obj = parse_json_line(builder, lineno, line)
        if obj is None:
            continue
        try:
            query = builder.text_field(obj, "query")
            pos = _text_list(obj, "pos")
            neg = _text_list(obj, "neg")
            qid = builder.id_field(obj, "qid") if "qid" in obj else text_id(query)
        except FieldProblem as p:
            builder.fail(lineno, p.field, p.reason, source=source)
            continue
        builder.add(
            lineno,
            qid=qid,
            query=query,
            positives=[Passage(text_id(t), t) for t in pos],
            negatives=[Passage(text_id(t), t, method, rank=r + 1) for r, t in enumerate(neg)][window],
            source=source,
            kind=kind,
        )
    builder.result.describe(
        source,
        input=_input_descriptor("flagembedding", path),
        mining_method=method or "not recorded (FlagEmbedding file)",
        ranking_rule="order of the neg list",
        slice=slice_text(window),
        reference_positive="pos[0]",
        lines=_lines(n_read + builder.unreadable, builder),
    )
    return builder.result


def _lines(n_read: int, builder: RecordBuilder) -> dict[str, int]:
    """Accounting of a one-record-per-line input: every non-blank line is in a record or excluded."""
    kept = len(builder.result.records)
    return {"read": n_read, "in_records": kept, "excluded": n_read - kept, "records": kept}


def _text_list(obj: dict, key: str) -> list[str]:
    if key not in obj:
        raise FieldProblem(key, "missing")
    items = obj[key]
    if not isinstance(items, list):
        raise FieldProblem(key, f"expected a list of strings, got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise FieldProblem(f"{key}[{i}]", f"expected a string, got {type(item).__name__}")
        if not item.strip():
            raise FieldProblem(f"{key}[{i}]", "empty string")
        check_unicode(item, f"{key}[{i}]")
    return items


# ---------------------------------------------------------------------------------------------
# id → text tables (MS MARCO collection / queries TSV)
# ---------------------------------------------------------------------------------------------


def read_id_text_tsv(path: str | Path, what: str = "text") -> dict[str, str]:
    """``id<TAB>text`` per line (MS MARCO collection.tsv / queries.tsv). A lookup table, so any bad
    line (field count, empty id or text, bad encoding, duplicate id) is a located error under
    either error policy."""
    return _id_text_lines(path, what)[0]


def _id_text_lines(path: str | Path, what: str = "text") -> tuple[dict[str, str], dict[str, int]]:
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


# ---------------------------------------------------------------------------------------------
# sentence-transformers hard negatives
# ---------------------------------------------------------------------------------------------


def load_st_hard_negatives(
    path: str | Path,
    collection: str | Path,
    queries: str | Path,
    on_error: str = "raise",
    systems: list[str] | None = None,
    k: int | None = 8,
    slice_spec: str | Sequence[str] | None = None,
    kind: str = "genuine",
    **_: Any,
) -> LoadResult:
    """``{"qid", "pos": [pid, ...], "neg": {system: [pid, ...]}}`` lines; one source per system.

    Texts come from the collection TSV (``pid<TAB>text``) and queries TSV (``qid<TAB>query``).
    Negatives that are also listed as positives are removed before slicing (counted).
    """
    path = require_path(path)
    passages = read_id_text_tsv(collection, what="text")
    query_text = read_id_text_tsv(queries, what="query")
    window = parse_slice(slice_spec, k)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    wanted = None if systems is None else set(systems)
    for lineno, line in iter_jsonl(path, builder):
        obj = parse_json_line(builder, lineno, line)
        if obj is None:
            continue
        try:
            qid = builder.id_field(obj, "qid")
            if qid not in query_text:
                raise FieldProblem("qid", f"query {qid!r} is not in {Path(queries).name}")
            pos_ids = _id_list(obj, "pos")
            if "neg" not in obj or not isinstance(obj["neg"], dict):
                raise FieldProblem("neg", "expected an object {system: [passage ids]}")
            neg_lists = {str(s): _id_list(obj["neg"], s, prefix="neg.") for s in obj["neg"]}
            if not neg_lists:
                raise FieldProblem("neg", "empty object: no system lists negatives")
            for pid in pos_ids + [p for ids in neg_lists.values() for p in ids]:
                if pid not in passages:
                    raise FieldProblem("pos/neg", f"passage id {pid!r} is not in {Path(collection).name}")
        except FieldProblem as p:
            builder.fail(lineno, p.field, p.reason)
            continue
        positives = [Passage(pid, passages[pid]) for pid in pos_ids]
        pos_set = set(pos_ids)
        for system in sorted(neg_lists):
            if wanted is not None and system not in wanted:
                continue
            kept = []
            for rank, pid in enumerate(neg_lists[system], start=1):
                if pid in pos_set:
                    builder.exclude(
                        lineno,
                        "neg",
                        "negative id is also a positive",
                        source=system,
                        qid=qid,
                        unit="negative",
                        item=pid,
                    )
                    continue
                kept.append(Passage(pid, passages[pid], system, rank=rank))
            builder.add(
                lineno,
                qid=qid,
                query=query_text[qid],
                positives=positives,
                negatives=kept[window],
                source=system,
                kind=kind,
            )
    return builder.result


def _id_list(obj: dict, key: str, prefix: str = "") -> list[str]:
    if key not in obj:
        raise FieldProblem(prefix + key, "missing")
    items = obj[key]
    if not isinstance(items, list):
        raise FieldProblem(prefix + key, f"expected a list of ids, got {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise FieldProblem(f"{prefix}{key}[{i}]", f"expected an id, got {type(item).__name__}")
        if isinstance(item, str):
            check_unicode(item, f"{prefix}{key}[{i}]")
        out.append(str(item))
    return out


# ---------------------------------------------------------------------------------------------
# TREC-DL runs with graded judgments (msmarco-dl19 layout)
# ---------------------------------------------------------------------------------------------


def read_topics(path: str | Path) -> dict[str, str]:
    """``qid<TAB>query`` lines."""
    return read_id_text_tsv(path, what="query")


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """TREC qrels ``qid Q0 pid grade`` (whitespace-separated) → {qid: {pid: grade}}."""
    return _qrels_lines(path)[0]


def _qrels_lines(path: str | Path) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The judgments and the first line of each judged query. A lookup table: any bad line is a
    located error under either error policy."""
    path = require_path(path)
    qrels: dict[str, dict[str, int]] = {}
    first: dict[str, int] = {}
    for lineno, raw in iter_lines(path):
        parts = raw.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise InputError(path, lineno, "<line>", f"expected 4 fields 'qid Q0 pid grade', got {len(parts)}")
        qid, _, pid, grade = parts
        try:
            value = int(grade)
        except ValueError:
            raise InputError(path, lineno, "grade", f"expected an integer, got {grade!r}") from None
        qrels.setdefault(qid, {})[pid] = value
        first.setdefault(qid, lineno)
    return qrels, first


def read_retrieve_results(path: str | Path) -> dict[str, tuple[str, list[tuple[str, int, str]]]]:
    """rank_llm ``retrieve_results`` JSON → {qid: (query, [(docid, rank, content), ...] in rank order)}.
    One JSON document: any problem in it is a located error (JSON path) under either error policy."""
    path = require_path(path)
    try:
        data = parse_json(read_text(path))  # the fields read below reject lone surrogates
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, "<json>", f"malformed JSON ({exc.msg})") from None
    except ValueError as exc:
        raise InputError(path, None, "<json>", f"malformed JSON ({exc})") from None
    if not isinstance(data, list):
        raise InputError(path, None, "<root>", f"expected a list of queries, got {type(data).__name__}")
    out: dict[str, tuple[str, list[tuple[str, int, str]]]] = {}
    for i, entry in enumerate(data):
        where = f"[{i}]"
        if not isinstance(entry, dict):
            raise InputError(path, where, "<entry>", f"expected an object, got {type(entry).__name__}")
        try:
            query = RecordBuilder.text_field(entry, "query")
            hits = entry.get("hits")
            if not isinstance(hits, list):
                raise FieldProblem("hits", "missing or not a list")
            rows = []
            qid = None
            for j, hit in enumerate(hits):
                if not isinstance(hit, dict):
                    raise FieldProblem(f"hits[{j}]", "expected an object")
                try:
                    hit_qid = RecordBuilder.id_field(hit, "qid")
                    docid = RecordBuilder.id_field(hit, "docid")
                    content = RecordBuilder.text_field(hit, "content")
                    rank = hit.get("rank")
                    if isinstance(rank, bool) or not isinstance(rank, int):
                        raise FieldProblem("rank", "expected an integer")
                except FieldProblem as p:
                    raise FieldProblem(f"hits[{j}].{p.field}", p.reason) from None
                if qid is None:
                    qid = hit_qid
                elif hit_qid != qid:
                    raise FieldProblem(f"hits[{j}].qid", f"{hit_qid!r} differs from the entry's qid {qid!r}")
                rows.append((docid, rank, content))
        except FieldProblem as p:
            raise InputError(path, where, p.field, p.reason) from None
        if qid is None:
            continue  # a query with no hits contributes nothing to this run
        if qid in out:
            raise InputError(path, where, "hits[0].qid", f"query {qid!r} has a second entry in this run")
        rows.sort(key=lambda r: r[1])
        out[qid] = (query, rows)
    return out


LABELS = ("all", "single")


def is_numeric_id(pid: str) -> bool:
    """An id of ASCII digits only (``"²"`` is a digit to ``str.isdigit`` but not an integer)."""
    return pid.isascii() and pid.isdigit()


def order_by_grade(ids: Sequence[str], grades: dict[str, int]) -> list[str]:
    """Passage ids by grade (descending), then id: numerically when every id is an integer (MS MARCO
    passage ids are), otherwise as strings (design §3, identity of passages)."""
    if all(is_numeric_id(p) for p in ids):
        return sorted(ids, key=lambda p: (-grades[p], int(p), p))
    return sorted(ids, key=lambda p: (-grades[p], p))


def load_trec_dl(
    root: str | Path,
    runs: list[str] | None = None,
    on_error: str = "raise",
    k: int = 8,
    slice_spec: str | Sequence[str] | None = None,
    relevant_grade: int = 2,
    topics: str = "topics.dl19-passage.txt",
    qrels: str = "qrels.dl19-passage.txt",
    results_name: str = "retrieve_results_dl19.json",
    kind: str = "genuine",
    labels: str = "all",
    **_: Any,
) -> LoadResult:
    """Each run in ``root/runs/<SYSTEM>/`` becomes one source.

    ``labels="single"`` gives the single-label situation a miner is in when only p0 is known:
    positives = [p0], negatives = the run's candidates minus p0, then the slice; judged-relevant
    candidates stay among the negatives with their grade (the real false negatives that
    ``fn_evaluation`` scores the suspicion rule against, design §3.9).

    Positives of a query = passages judged ≥ ``relevant_grade`` whose text appears in some run,
    ordered by grade (desc) then passage id (numerically when all ids are integers, see
    :func:`order_by_grade`); p0 is the first. Relevant passages whose text appears in no run are
    logged as positive exclusions. A passage id has one text, the first seen over the runs (runs in
    name order, hits in rank order); other texts of the same id (whitespace variants) are merged
    into it and counted in the descriptor (``passage_text_variants``). Negatives of source S = S's
    candidates in rank order minus every passage judged ≥ ``relevant_grade``, then ``slice_spec``
    (default ``[0:k]``); each keeps its judgment (0, 1, or None when unjudged) and its rank. One
    record per judged query; a query left with no negatives is a counted exclusion, and so is a
    judged query missing from the topics file, or a topic without judgments (unit ``query``, once
    for all runs).
    """
    parts = _trec_dl_parts(root, runs, topics, qrels, results_name)
    topic_text, judgments, results, texts = parts.topics, parts.qrels, parts.results, parts.texts
    run_dir = parts.run_dir
    names = sorted(results)
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
    window = parse_slice(slice_spec, k)
    result = LoadResult(relevant_grade=relevant_grade)
    root = Path(root)
    judged = [q for q in sorted(judgments, key=_qid_key) if q in topic_text]
    queries = RecordBuilder(root / qrels, on_error, label=qrels)
    for qid in sorted(set(judgments) - set(topic_text), key=_qid_key):
        queries.exclude(
            parts.qrels_line[qid], "qid", f"judged query missing from the topics file {topics}", qid=qid, unit="query"
        )
    unjudged = RecordBuilder(root / topics, on_error, label=topics)
    for qid in sorted(set(topic_text) - set(judgments), key=_qid_key):
        unjudged.exclude(parts.topic_line[qid], "qid", f"topic has no judgments in {qrels}", qid=qid, unit="query")
    for qid in judged:
        grades = judgments[qid]
        for pid in order_by_grade([p for p, g in grades.items() if g >= relevant_grade and p not in texts], grades):
            queries.exclude(
                parts.qrels_line[qid],
                "positives",
                "relevant passage text unknown (in no run)",
                qid=qid,
                unit="positive",
                item=pid,
            )
    result.extend(queries.result).extend(unjudged.result)
    for name in names:
        label = f"runs/{name}/{results_name}"
        builder = RecordBuilder(run_dir / name / results_name, on_error, label=label, note_duplicates=True)
        for qid in judged:
            grades = judgments[qid]
            relevant = [p for p, g in grades.items() if g >= relevant_grade and p in texts]
            positives = [Passage(pid, texts[pid], judgment=grades[pid]) for pid in order_by_grade(relevant, grades)]
            if not positives:
                builder.exclude(None, "positives", "no relevant passage with known text", source=name, qid=qid)
                continue
            if qid not in results[name]:
                builder.exclude(None, "hits", "run has no candidates for this query", source=name, qid=qid)
                continue
            _query, hits = results[name][qid]
            if labels == "single":
                positives = positives[:1]
            candidates = [
                Passage(docid, texts[docid], name, rank=rank, judgment=grades.get(docid))
                for docid, rank, _content in hits
                if (docid != positives[0].id if labels == "single" else grades.get(docid, -1) < relevant_grade)
            ]
            # the single-label situation: only p0 is known, so other relevant passages stay in
            single = [d for d, _r, _c in hits if d != positives[0].id][window]
            n_fn = sum(grades.get(d, -1) >= relevant_grade for d in single)
            builder.result.false_negatives.setdefault(name, []).append((qid, n_fn, len(single)))
            builder.add(
                None,
                qid=qid,
                query=topic_text[qid],
                positives=positives,
                negatives=candidates[window],
                source=name,
                kind=kind,
                empty_reason=f"no negatives in {slice_text(window)} after removing judged-relevant passages",
                empty_is_error=False,
            )
        result.extend(builder.result)
        result.describe(
            name,
            input=_input_descriptor("trec_dl", run_dir / name / results_name),
            mining_method=f"retriever run {name}",
            candidate_pool="the run's retrieved candidates (top-100; REP_LLAMA top-200)",
            ranking_rule=(
                "run rank, p0 removed (single-label: judged-relevant candidates stay)"
                if labels == "single"
                else f"run rank, every passage judged >= {relevant_grade} removed"
            ),
            slice=slice_text(window),
            reference_positive=(
                f"judged >= {relevant_grade}, grade desc then passage id asc (numeric when all ids are integers); "
                "p0 first"
            ),
            labels=labels,
            judgments=qrels,
            passage_text_variants={
                "ids": parts.variants[name],
                "ids_all_runs": parts.n_variants,
                "whitespace_only": parts.n_variants == parts.n_whitespace,
                "rule": "one text per passage id: the first seen over the runs (name order, hits in rank order)",
            },
        )
    return result


@dataclass(frozen=True)
class _TrecDl:
    topics: dict[str, str]
    topic_line: dict[str, int]
    qrels: dict[str, dict[str, int]]
    qrels_line: dict[str, int]
    results: dict[str, Any]
    texts: dict[str, str]  # passage id → its one text (first seen over the runs)
    variants: dict[str, int]  # run → how many of its passage ids came with another text
    n_variants: int  # passage ids with more than one text over all runs
    n_whitespace: int  # ... of which every text differs from the kept one only in whitespace
    run_dir: Path


def _trec_dl_parts(root: str | Path, runs: list[str] | None, topics: str, qrels: str, results_name: str) -> _TrecDl:
    """Topics, qrels, every run's results, passage texts (first seen over runs), and the runs folder."""
    root = require_path(root, "folder")
    topic_text, topic_line = _id_text_lines(root / topics, what="query")
    judgments, qrels_line = _qrels_lines(root / qrels)
    run_dir = require_path(root / "runs", "folder")
    names = sorted(p.name for p in run_dir.iterdir() if (p / results_name).is_file())
    if runs is not None:
        missing = sorted(set(runs) - set(names))
        if missing:
            raise InputError(run_dir, None, "runs", f"unknown runs {missing}; available: {names}")
        names = [n for n in names if n in set(runs)]
    if not names:
        raise InputError(run_dir, None, "runs", f"no run folders with {results_name}")
    results = {name: read_retrieve_results(run_dir / name / results_name) for name in names}
    texts: dict[str, str] = {}
    per_run: dict[str, set[str]] = {name: set() for name in names}
    other_texts: dict[str, set[str]] = {}
    for name in names:
        for _query, hits in results[name].values():
            for docid, _rank, content in hits:
                kept = texts.setdefault(docid, content)
                if content != kept:
                    per_run[name].add(docid)
                    other_texts.setdefault(docid, set()).add(content)
    whitespace = sum(
        all(" ".join(t.split()) == " ".join(texts[d].split()) for t in others) for d, others in other_texts.items()
    )
    return _TrecDl(
        topic_text,
        topic_line,
        judgments,
        qrels_line,
        results,
        texts,
        {name: len(ids) for name, ids in per_run.items()},
        len(other_texts),
        whitespace,
        run_dir,
    )


def load_trec_dl_query_set(
    root: str | Path,
    relevant_grade: int = 2,
    runs: list[str] | None = None,
    topics: str = "topics.dl19-passage.txt",
    qrels: str = "qrels.dl19-passage.txt",
    results_name: str = "retrieve_results_dl19.json",
) -> QuerySet:
    """The TREC-DL layout as a query set for miners: judged queries, positives = judged ≥
    ``relevant_grade`` with known text (grade desc, then id: :func:`order_by_grade`), pool = every
    passage in any run (one text per id), and the graded judgments (deep: a mined negative judged ≥
    ``relevant_grade`` is a verified false negative)."""
    parts = _trec_dl_parts(root, runs, topics, qrels, results_name)
    topic_text, judgments, texts = parts.topics, parts.qrels, parts.texts
    queries, positives = {}, {}
    for qid in sorted(judgments, key=_qid_key):
        grades = judgments[qid]
        rel = order_by_grade([p for p, g in grades.items() if g >= relevant_grade and p in texts], grades)
        if qid in topic_text and rel:
            queries[qid], positives[qid] = topic_text[qid], rel
    pool = {pid: texts[pid] for pid in sorted(texts, key=_qid_key)}
    return QuerySet(Path(root).name, queries, positives, pool, judgments, relevant_grade)


def _qid_key(qid: str) -> tuple[int, int | str]:
    return (0, int(qid)) if is_numeric_id(qid) else (1, qid)


# ---------------------------------------------------------------------------------------------
# BEIR folders
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuerySet:
    """Queries with their positives and a passage pool (no negatives): the input of miners.

    ``judgments`` (qid → passage id → grade), when present, are deep relevance judgments: they let
    a build measure how many mined negatives are in fact relevant (grade ≥ ``relevant_grade``).
    """

    name: str
    queries: dict[str, str]
    positives: dict[str, list[str]]  # qid → positive passage ids, best first
    pool: dict[str, str]  # passage id → text
    judgments: dict[str, dict[str, int]] | None = None
    relevant_grade: int = 1


def beir_passage_text(doc: dict[str, str]) -> str:
    """BEIR convention: ``title + " " + text`` when a title exists."""
    title, text = doc.get("title", "") or "", doc.get("text", "") or ""
    return f"{title} {text}".strip() if title else text


def load_beir(folder: str | Path, split: str = "test", min_score: int = 1) -> QuerySet:
    """A BEIR folder through ``GenericDataLoader``: queries + positives (qrels ≥ ``min_score``) + corpus."""
    folder = require_path(folder, "folder")
    from beir.datasets.data_loader import GenericDataLoader

    for needed in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        require_path(folder / needed)
    corpus, queries, qrels = GenericDataLoader(data_folder=str(folder)).load(split=split)
    pool = {pid: beir_passage_text(doc) for pid, doc in corpus.items()}
    positives = {}
    for qid, docs in qrels.items():
        ids = order_by_grade([d for d, s in docs.items() if s >= min_score], docs)
        missing = [d for d in ids if d not in pool]
        if missing:
            raise InputError(
                folder / f"qrels/{split}.tsv",
                None,
                "corpus-id",
                f"query {qid!r} names passages not in the corpus: {missing[:5]}",
            )
        if ids:
            positives[qid] = ids
    return QuerySet(folder.name, {q: queries[q] for q in positives}, positives, pool)


def load_beir_corpus_texts(folder: str | Path) -> list[str]:
    """Only the corpus of a BEIR folder (for an external IDF corpus), in file order."""
    folder = require_path(folder, "folder")
    from beir.datasets.data_loader import GenericDataLoader

    corpus = GenericDataLoader(corpus_file=str(require_path(folder / "corpus.jsonl"))).load_corpus()
    return [beir_passage_text(doc) for doc in corpus.values()]


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------

LOADERS: dict[str, Callable[..., LoadResult]] = {
    "records": lambda path, on_error="raise", source=None, **_: read_records(path, on_error, source),
    "ntuple": load_ntuple,
    "msmarco_triples": load_msmarco_triples,
    "flagembedding": load_flagembedding,
    "st_hard_negatives": load_st_hard_negatives,
    "trec_dl": load_trec_dl,
}


def load(format: str, **options: Any) -> LoadResult:
    """Dispatch to the reader registered for ``format``; unknown formats raise ``ValueError``."""
    try:
        reader = LOADERS[format]
    except KeyError:
        raise ValueError(f"unknown input format {format!r}; valid: {sorted(LOADERS)}") from None
    return reader(**options)
