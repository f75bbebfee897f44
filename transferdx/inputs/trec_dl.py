"""TREC-DL: retriever runs with graded judgments (the ``msmarco-dl19`` layout).

``root/topics.dl19-passage.txt`` (``qid<TAB>query``), ``root/qrels.dl19-passage.txt`` (TREC qrels
``qid Q0 pid grade``) and one rank_llm ``retrieve_results`` JSON per run in ``root/runs/<SYSTEM>/``.
As records (:func:`load_trec_dl`, ``format="trec_dl"``) each run becomes one source; as a query set
(:func:`load_trec_dl_query_set`, ``format="trec_dl_pool"``, a folder with ``topics*``) the judged
queries, their positives and every passage of any run are the pool miners draw from. Topics, qrels
and the runs' JSON are lookup tables: a bad line or value in them is a located error under either
error policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transferdx.inputs.reading import (
    FieldProblem,
    RecordBuilder,
    input_descriptor,
    parse_slice,
    require_path,
    slice_text,
)
from transferdx.inputs.records import (
    InputError,
    KeptTable,
    LoadResult,
    Passage,
    Plan,
    QuerySet,
    Table,
    is_numeric_id,
    order_by_grade,
)
from transferdx.inputs.registry import Format, register
from transferdx.inputs.textforms import id_text_lines, iter_lines, read_id_text_tsv, read_json_document
from transferdx.inputs.writing import RELABEL_UNWRITTEN, Cleaning, Rewritten, RowChange


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
    return _retrieve_results(path)[0]


def _retrieve_results(path: str | Path) -> tuple[dict[str, tuple[str, list[tuple[str, int, str]]]], list[Any]]:
    """:func:`read_retrieve_results` and the document as read (kept for the clean verb's copy)."""
    path = require_path(path)
    data = read_json_document(path)  # the fields read below reject lone surrogates
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
    return out, data


LABELS = ("all", "single")


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
    keep_tables: bool = False,
    **_: Any,
) -> LoadResult:
    """Each run in ``root/runs/<SYSTEM>/`` becomes one source.

    ``keep_tables``: keep each run's document for the clean verb, which writes the folder back
    (topics and judgments as they are; each run without the candidates cleaning removed, so a
    re-read takes the next ones into the slice).

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
            input=input_descriptor("trec_dl", run_dir / name / results_name),
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
        if keep_tables:
            rows = parts.documents[name]
            table = Table(
                str(run_dir / name / results_name), "json", ["query", "hits"], rows, list(range(1, len(rows) + 1))
            )
            companions = {f: (root / f).read_bytes() for f in (topics, qrels)} if name == names[0] else {}
            kept = KeptTable(table, _write_run, {}, name, "json", label, label, run_dir / name / results_name)
            result.tables.append(dataclasses.replace(kept, companions=companions))
    return result


def _write_run(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """A run's ``retrieve_results`` document without the candidates cleaning removed from (or
    relabeled in) the run's record of each query; judgments are the collection's and stay as they are,
    so a relabeled candidate is not a positive of the copy (listed:
    :data:`~transferdx.inputs.writing.RELABEL_UNWRITTEN`)."""
    out: list[dict[str, Any]] = []
    changes: list[RowChange] = []
    for line, entry in zip(table.lines, table.rows, strict=True):
        hits = entry.get("hits") or []
        qid = str(hits[0].get("qid")) if hits else ""
        gone = cleaning.dropped.get((str(source), qid), frozenset())
        if not gone:
            out.append(dict(entry))
            continue
        kept = [h for h in hits if str(h.get("docid")) not in gone]
        out.append(dict(entry) | {"hits": kept})
        changes.append(RowChange(line, qid, "trimmed", len(hits) - len(kept)))
        query = cleaning.by_qid.get((str(source), qid))
        why = "not in the copy: a TREC-DL folder's positives are its judgments (qrels), which stay as they are"
        moved = query.added if query is not None else ()
        changes += [RowChange(None, qid, RELABEL_UNWRITTEN, 0, f"relabeled positive {p.id} {why}") for p in moved]
    return Rewritten(list(table.columns), out, changes)


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
    documents: dict[str, list[Any]]  # run → its retrieve_results document as read


def _trec_dl_parts(root: str | Path, runs: list[str] | None, topics: str, qrels: str, results_name: str) -> _TrecDl:
    """Topics, qrels, every run's results, passage texts (first seen over runs), and the runs folder."""
    root = require_path(root, "folder")
    topic_text, topic_line = id_text_lines(root / topics, what="query")
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
    documents = {name: _retrieve_results(run_dir / name / results_name) for name in names}
    results = {name: parsed for name, (parsed, _doc) in documents.items()}
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
        {name: doc for name, (_parsed, doc) in documents.items()},
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


def trec_dl_pool(root: str | Path, relevant_grade: int = 2, **_: Any) -> QuerySet:
    """``format="trec_dl_pool"``: :func:`load_trec_dl_query_set` with the layout's file names."""
    return load_trec_dl_query_set(root, relevant_grade=relevant_grade)


def _is_layout(root: Path) -> bool:
    return any(root.glob("topics*"))


register(Format("trec_dl", read=load_trec_dl))
register(Format("trec_dl_pool", query_set=trec_dl_pool, recognises=_is_layout))
