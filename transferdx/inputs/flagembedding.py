"""FlagEmbedding training data: ``{"query": str, "pos": [str, ...], "neg": [str, ...]}`` per line,
optionally with ``pos_scores`` / ``neg_scores`` (a reranker's scores, for distillation) and ``qid``.

One reader for both ways in: a file recognised by its columns (``query, pos, neg``; any form, as
the source named after the file) and :func:`load_flagembedding` (``format="flagembedding"``, the
``data=flagembedding_toy`` config; JSON lines whatever the file's name, or any table form). Rows
become records as every row format's do (:mod:`transferdx.inputs.rows`): ``pos[0]`` is the
reference positive, negatives keep the order of the ``neg`` list (``rank`` = position in it, before
any slice); a negative repeated within one line is kept and counted (``duplicate_negatives_kept``;
FlagEmbedding's trainer samples from that list, so it may draw the same passage twice), one that an
earlier line of the same query already gave is a counted exclusion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.inputs.reading import FieldProblem, RecordBuilder, parse_slice, require_path
from transferdx.inputs.records import LoadResult, Passage, Plan, Table
from transferdx.inputs.registry import Format, Shape, register
from transferdx.inputs.rows import Row, RowReader, cell_list, cell_scores, cell_text, cell_texts
from transferdx.inputs.tables import read_table
from transferdx.inputs.writing import RELABEL_UNWRITTEN, Cleaning, Rewritten, RowChange, kept_cells, rows_with_queries


def _plan(columns: Sequence[str]) -> Plan:
    return {"scores": {"pos_scores", "neg_scores"} <= set(columns), "qid": "qid" in columns}


def _detect(columns: Sequence[str]) -> Plan | None:
    return _plan(columns) if {"query", "pos", "neg"} <= set(columns) else None


def _texts(row: Mapping[str, Any], key: str, text_cells: bool) -> list[str]:
    """``pos`` / ``neg``: a list of texts. A plain string is refused with why it matters:
    FlagEmbedding's trainer samples from the value (``random.choice`` / ``random.sample``), so a
    string would train on its characters, one passage each."""
    value = row.get(key)
    if isinstance(value, str) and not (text_cells and value.strip().startswith("[")):
        raise FieldProblem(
            key,
            f"expected a list of texts, got a string: FlagEmbedding itself would split it into characters "
            f'(one passage each), so write "{key}": ["…"]',
        )
    return cell_texts(row, key, text_cells)


def _row(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = cell_text(row, "query")
    pos, neg = _texts(row, "pos", text_cells), _texts(row, "neg", text_cells)
    pos_s: list[float | None] = [None] * len(pos)
    neg_s: list[float | None] = [None] * len(neg)
    if plan["scores"]:
        pos_s = list(cell_scores(row, "pos_scores", text_cells, len(pos)))
        neg_s = list(cell_scores(row, "neg_scores", text_cells, len(neg)))
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, list(zip(pos, pos_s, strict=True)), list(zip(neg, neg_s, strict=True)), qid)


FLAGEMBEDDING = RowReader(
    "flagembedding",
    _row,
    "not recorded (FlagEmbedding table)",
    "order of the neg list",
    "pos[0] of the query's first row",
    per_row={"reference_positive": "pos[0]"},
)


def load_flagembedding(
    path: str | Path,
    source: str = "flagembedding",
    on_error: str = "raise",
    k: int | None = None,
    slice_spec: str | Sequence[str] | None = None,
    method: str | None = None,
    kind: str = "genuine",
    group_by_query: bool = False,
    **_: Any,
) -> LoadResult:
    """``format="flagembedding"``: one record per line (``group_by_query``: lines of one query are
    one record); negatives sliced by ``slice_spec`` (``"[a:b]"``, default ``[0:k]``; all when both
    are None, and then the descriptor has no ``slice``); ``method`` names how they were made."""
    path = require_path(path)
    window = None if k is None and slice_spec is None else parse_slice(slice_spec, k)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    table = read_table(path, builder, fallback="jsonl")
    return FLAGEMBEDDING.read(
        table,
        builder,
        source,
        _plan(table.columns),
        group_by_query=group_by_query,
        window=window,
        method=method,
        kind=kind,
    )


def _write(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """A line's ``neg`` keeps the negatives the cleaned record still holds (``trimmed`` when some
    went); a relabeled negative moves to the end of ``pos`` (its score to ``pos_scores``); a line
    left with no negative (FlagEmbedding samples from ``neg``, so it needs one) is dropped, or with
    ``clean.fill`` takes the query's other kept negatives, or the next query's (``refilled`` /
    ``borrowed``); ``clean.keep`` keeps the first accepted ones. A relabeled negative of a dropped
    line joins the ``pos`` of the query's next line written (else its last one); when no line of its
    query is written it is listed (:data:`~transferdx.inputs.writing.RELABEL_UNWRITTEN`), not in the
    copy."""
    out: list[dict[str, Any]] = []
    changes: list[RowChange] = []
    text_cells = table.cells_are_text
    moved_done: set[tuple[str, str]] = set()
    waiting: dict[str, list[Passage]] = {}  # relabeled negatives of a dropped line, by query
    last: dict[str, tuple[int, int]] = {}  # the query's last line written: (index in out, its line)
    shaped, skipped = rows_with_queries(
        table, cleaning, lambda r: cleaning.by_query.get((str(source), str(r.get("query"))))
    )
    for line, row, query in shaped:
        qid = query.record.qid
        neg = cell_texts(row, "neg", text_cells)
        keep = kept_cells(neg, query.record.negatives)
        n_lost = keep.count(False)
        held = [p for p in waiting.get(qid, []) if (qid, p.text) not in moved_done]
        if n_lost == 0 and not held and (cleaning.keep is None or len(neg) <= cleaning.keep):
            last[qid] = (len(out), line)
            out.append(dict(row))
            continue
        new = dict(row)
        neg_s = cell_list(row, "neg_scores", text_cells) if plan["scores"] else [None] * len(neg)
        own = dict(zip(neg, neg_s, strict=False))
        moved = [p for p in query.added if p.text in neg and (qid, p.text) not in moved_done]
        moved += [p for p in held if p not in moved]
        kept = [(t, own.get(t)) for t, k in zip(neg, keep, strict=True) if k][: cleaning.keep]
        change = "relabeled" if moved else "trimmed"
        if not kept:  # FlagEmbedding samples from neg: a line needs one
            if cleaning.fill == "none":
                changes.append(RowChange(line, qid, "dropped", n_lost, "no negative left (clean.fill=repeat keeps it)"))
                waiting.setdefault(qid, []).extend(p for p in moved if p not in waiting.get(qid, []))
                continue
            fill = query.fill
            change = "borrowed" if query.borrowed and not query.record.negatives else "refilled"
            kept = [(p.text, own.get(p.text, p.score)) for p in fill]
            if not kept:
                changes.append(RowChange(line, qid, "unwritable", n_lost))
                waiting.setdefault(qid, []).extend(p for p in moved if p not in waiting.get(qid, []))
                continue
        moved_done.update((qid, p.text) for p in moved)
        if moved:
            new["pos"] = [*cell_texts(row, "pos", text_cells), *(p.text for p in moved)]
            if plan["scores"]:
                scores = (own.get(p.text, p.score) for p in moved)
                new["pos_scores"] = [*cell_list(row, "pos_scores", text_cells), *scores]
        new["neg"] = [t for t, _ in kept]
        if plan["scores"]:
            new["neg_scores"] = [s for _, s in kept]
        last[qid] = (len(out), line)
        out.append(new)
        changes.append(RowChange(line, qid, change, n_lost))
    for qid, passages in waiting.items():  # no later line of the query written: its last written line, or none
        for p in (p for p in passages if (qid, p.text) not in moved_done):
            if qid in last:
                at, at_line = last[qid]
                row = dict(out[at])
                row["pos"] = [*cell_texts(row, "pos", text_cells), p.text]
                if plan["scores"]:
                    row["pos_scores"] = [*cell_list(row, "pos_scores", text_cells), p.score]
                out[at] = row
                changes.append(RowChange(at_line, qid, "relabeled", 0, f"relabeled positive {p.id} of a dropped line"))
                continue
            why = f"relabeled positive {p.id} not in the copy: no line of its query keeps a negative"
            lend = " (clean.fill=borrow lends the next query's)" if cleaning.fill != "borrow" else ""
            changes.append(RowChange(None, qid, RELABEL_UNWRITTEN, 0, why + lend))
    return Rewritten(list(table.columns), out, changes, skipped)


register(
    Format(
        "flagembedding",
        read=load_flagembedding,
        write=_write,
        shape=Shape("query, pos, neg (lists of texts) [, pos_scores, neg_scores]", _detect, FLAGEMBEDDING.read),
    )
)
