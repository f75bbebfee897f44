"""MS MARCO: text triples, and sentence-transformers' MS MARCO hard-negative id files.

- ``msmarco_triples`` (:func:`load_msmarco_triples`): ``query<TAB>positive<TAB>negative`` per line
  (no header, always 3 fields), grouped by query (positives deduplicated by text; negatives in line
  order, one per line). A ``.tsv`` / ``.tsv.gz`` is recognised as such by its shape, without
  ``format=`` (:func:`looks_like_text_triples`: MS MARCO's ``triples.train.small.tsv``), its source
  named after the file; a file of ids (``qid<TAB>pid<TAB>pid``, qrels) or with a header row is not.
  An exact repeat of an earlier line is a counted exclusion (unit ``line``,
  "duplicate line of line N"); a negative repeated within a query's record (two lines with
  different positives) is kept and counted in the descriptor (``duplicate_negatives_kept``; the
  audit flags it as a ``duplicate_negative`` suspect). Every non-blank line is accounted for in the
  descriptor's ``lines`` (read = in_records + excluded).
- ``st_hard_negatives`` (:func:`load_st_hard_negatives`): ``{"qid", "pos": [pid, ...], "neg":
  {system: [pid, ...]}}`` JSONL (or .jsonl.gz) with a collection TSV (``pid<TAB>text``) and a
  queries TSV (``qid<TAB>query``); each system becomes one source.
- ``tsv``: the collection TSV itself as an external IDF corpus (its passage texts).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from transferdx.artifacts import file_hash
from transferdx.inputs.reading import (
    FieldProblem,
    RecordBuilder,
    artifact_name,
    check_unicode,
    input_descriptor,
    parse_slice,
    require_path,
)
from transferdx.inputs.records import ANCHORS, LoadResult, Passage, Plan, Table, text_id
from transferdx.inputs.registry import Format, keep, register
from transferdx.inputs.sentence_transformers import keep_rows, write_slots
from transferdx.inputs.tables import form_of, negative_columns, source_stem
from transferdx.inputs.textforms import (
    BOM,
    GZIP_ERRORS,
    is_gzip,
    iter_jsonl,
    iter_tab_lines,
    parse_json_line,
    read_id_text_tsv,
)
from transferdx.inputs.writing import Cleaning, Rewritten, RowChange

# ---------------------------------------------------------------------------------------------
# Text triples
# ---------------------------------------------------------------------------------------------


def _is_json_lines(path: Path) -> bool:
    return path.suffix in (".jsonl", ".json") or path.name.lower().endswith((".jsonl.gz", ".json.gz"))


def _rows(
    path: Path, builder: RecordBuilder, header: bool | None, fields: int | None, header_at: list[int]
) -> Iterator[tuple[int, dict | None]]:
    """(line, {query, positive, negative_1.., [qid]}) from tab-separated lines
    (:func:`~transferdx.inputs.textforms.iter_tab_lines`) or, for a ``.jsonl``/``.json`` name, JSON
    lines; (line, None) for a line that failed (already logged under ``skip``)."""
    if _is_json_lines(path):
        for lineno, line in iter_jsonl(path, builder):
            yield lineno, parse_json_line(builder, lineno, line)
        return
    yield from iter_tab_lines(path, builder, header, fields, header_at)


def load_msmarco_triples(
    path: str | Path,
    source: str | None = "msmarco_triples",
    on_error: str = "raise",
    header: bool | None = False,
    group_by_query: bool = True,
    method: str | None = None,
    kind: str = "genuine",
    fields: int | None = 3,
    keep_tables: bool = False,
    **_: Any,
) -> LoadResult:
    """MS MARCO ``query<TAB>positive<TAB>negative`` text triples (see the module docstring); with
    ``group_by_query=False`` each line is a record of its own. ``keep_tables``: keep the lines read
    (as an n-tuple table) for the clean verb, which writes them back in their own form. ``source``:
    the source's name; None names it after the file (as for a file recognised by its shape)."""
    path = require_path(path)
    source = source_stem(path) if source is None else source
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    groups: dict[str, dict[str, Any]] = {}
    first_line: dict[tuple[str, ...], int] = {}
    n_read = excluded = 0
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    header_at: list[int] = []
    for lineno, obj in _rows(path, builder, header, fields, header_at):
        n_read += 1
        if obj is None:
            excluded += 1
            continue
        rows.append(obj)
        lines.append(lineno)
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
        input=input_descriptor(f"msmarco_triples ({'jsonl' if _is_json_lines(path) else 'tsv'})", path),
        mining_method=method or "not recorded (n-tuple table)",
        ranking_rule="column order negative_1..K" + (", rows grouped by query" if group_by_query else ""),
        reference_positive="the row's positive" + (" (first row of the query)" if group_by_query else ""),
        lines={"read": n_read, "in_records": in_records, "excluded": excluded, "records": len(builder.result.records)},
    )
    if keep_tables:
        columns = max((list(r) for r in rows), key=len, default=["query", "positive", "negative_1"])
        table = Table(
            str(path), "tsv", columns, rows, lines, True, file_hash(path), builder.unreadable, bool(header_at)
        )
        if _is_json_lines(path):
            table.form, table.cells_are_text = "jsonl", False
        plan = {"anchor": "query", "positive": "positive", "scores": False, "qid": "qid" in columns}
        keep_rows(builder.result, table, path, source, plan, write_slots(negative_columns), group_by_query)
    return builder.result


SNIFF_LINES = 20  # the non-blank lines a file is recognised by
SNIFF_BYTES = 1 << 20  # at most this much of the file (decompressed) is read to find them
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d*)?")


def sample_lines(path: Path, n: int = SNIFF_LINES, limit: int = SNIFF_BYTES) -> list[str]:
    """The first ``n`` non-blank whole lines of a text file, for sniffing only: gunzipped for
    ``.gz``, a BOM dropped, undecodable bytes read as U+FFFD; a line cut off by ``limit`` or by a
    broken gzip stream is left out, and a file that cannot be opened gives none (its reader then
    reports the problem where it is)."""
    data = b""
    whole = False
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as handle:
            while len(data) < limit and data.count(b"\n") < 4 * n:
                # read1: a broken gzip stream still gives what came before the break
                chunk = handle.read1(min(1 << 16, limit - len(data)))
                if not chunk:
                    whole = True
                    break
                data += chunk
    except GZIP_ERRORS:
        whole = False
    if not whole:
        data = data[: data.rfind(b"\n") + 1]
    if data.startswith(BOM):
        data = data[len(BOM) :]
    lines = (line.rstrip("\r") for line in data.decode("utf-8", errors="replace").split("\n"))
    return [line for line in lines if line.strip()][:n]


def _is_text_triple(fields: Sequence[str]) -> bool:
    """``query, positive, negative`` as text: 3 fields, the query not a bare number (an id) and each
    passage at least two words (a passage id, a grade or a column name is one)."""
    return (
        len(fields) == 3
        and _NUMBER.fullmatch(fields[0].strip()) is None
        and all(len(passage.split()) > 1 for passage in fields[1:])
    )


def looks_like_text_triples(path: Path) -> bool:
    """Whether ``path`` is MS MARCO text triples by its shape (read whole by
    :func:`load_msmarco_triples`, the source named after the file): a ``.tsv`` or ``.tsv.gz`` file
    whose first :data:`SNIFF_LINES` non-blank lines (:func:`sample_lines`) are each 3 tab-separated
    fields of text (:func:`_is_text_triple`), the first of them no header by
    :func:`~transferdx.inputs.textforms.iter_tab_lines`' rule (``anchor|query|question, positive``
    or ``qid, ...``). So ``qid<TAB>pid<TAB>pid`` id triples, qrels and a file with a header row
    (read by its columns) are not claimed."""
    if not path.is_file() or form_of(path) != "tsv":
        return False
    rows = [line.split("\t") for line in sample_lines(path)]
    if not rows:
        return False
    first = rows[0]
    if (first[0] in ANCHORS and first[1:2] == ["positive"]) or first[0] == "qid":
        return False
    return all(_is_text_triple(row) for row in rows)


# ---------------------------------------------------------------------------------------------
# sentence-transformers hard negatives (ids, with collection and queries TSVs)
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
    keep_tables: bool = False,
    **_: Any,
) -> LoadResult:
    """``{"qid", "pos": [pid, ...], "neg": {system: [pid, ...]}}`` lines; one source per system.

    Texts come from the collection TSV (``pid<TAB>text``) and queries TSV (``qid<TAB>query``).
    Negatives that are also listed as positives are removed before slicing (counted).
    ``keep_tables``: keep the lines for the clean verb, which writes the id file back (the
    collection and queries files are the user's, unchanged: the copy names the same ids).
    """
    path = require_path(path)
    passages = read_id_text_tsv(collection, what="text")
    query_text = read_id_text_tsv(queries, what="query")
    window = parse_slice(slice_spec, k)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    wanted = None if systems is None else set(systems)
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for lineno, line in iter_jsonl(path, builder):
        obj = parse_json_line(builder, lineno, line)
        if obj is None:
            continue
        rows.append(obj)
        lines.append(lineno)
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
    if keep_tables:
        table = Table(str(path), "jsonl", ["qid", "pos", "neg"], rows, lines, sha256=file_hash(path))
        table.n_unreadable = builder.unreadable
        storage = "jsonl.gz" if is_gzip(path) else "jsonl"
        keep(builder.result, table, None, storage, path.name, artifact_name(path), path, plan={}, write=_write_ids)
    return builder.result


def _write_ids(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """Each line with every system's list less the ids cleaning removed from that system's record
    (the candidates after the audited window stay, so a re-read takes the next ones); an id
    relabeled as a positive joins ``pos`` (a re-read then excludes it from the negatives, counted)."""
    out: list[dict[str, Any]] = []
    changes: list[RowChange] = []
    skipped = 0
    for line, row in zip(table.lines, table.rows, strict=True):
        if line in cleaning.skip_lines or not isinstance(row.get("neg"), dict):
            skipped += 1  # excluded on reading: in the exclusion log
            continue
        qid = str(row.get("qid"))
        pos = [str(p) for p in row.get("pos", [])]
        new_neg: dict[str, Any] = {}
        added: list[Any] = []
        for system, ids in row["neg"].items():
            query = cleaning.by_qid.get((str(system), qid))
            if query is None:
                new_neg[system] = ids
                continue
            moved = {p.id for p in query.added}
            gone = cleaning.dropped.get((str(system), qid), frozenset())
            new_neg[system] = [p for p in ids if str(p) not in gone]
            added += [p for p in ids if str(p) in moved and p not in added and str(p) not in pos]
            n_lost = len(ids) - len(new_neg[system])
            if n_lost:
                change = "relabeled" if gone & moved else "trimmed"
                changes.append(RowChange(line, qid, change, n_lost, str(system)))
        if new_neg == row["neg"] and not added:
            out.append(dict(row))
            continue
        out.append(dict(row) | {"pos": list(row.get("pos", [])) + added, "neg": new_neg})
    return Rewritten(list(table.columns), out, changes, skipped)


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


def _collection_texts(path: str) -> list[str]:
    """A ``pid<TAB>text`` collection's passage texts, in file order."""
    return list(read_id_text_tsv(path).values())


register(Format("msmarco_triples", read=load_msmarco_triples, claims=looks_like_text_triples))
register(Format("st_hard_negatives", read=load_st_hard_negatives))
register(Format("tsv", corpus=_collection_texts))
