"""Property-based test over every loader (issue "Reliability": every input line accounted for).

Each loader gets a small good input built from real lines of the data directory, which hypothesis
then damages: random truncation, byte flips, inserted bytes (invalid UTF-8, encoded surrogates,
NUL, CR, tabs, quotes, a BOM), dropped and duplicated lines, JSON fields replaced by values of the
wrong type (lone surrogate escapes, huge numbers, nesting), odd column counts, gzip streams cut
short. The properties, for every case:

- no traceback ever: a loader returns, or raises :class:`InputError` (the CLI's exit 2);
- under ``raise`` that error names the file, the line and the field (only problems of a whole file
  such as "no header row" or "not a JSON list" may lack a line);
- under ``skip`` input items = kept + excluded, exactly, by an independent count of the items
  (non-blank lines, minus a header), and everything kept can be written (UTF-8) without error.
  ``skip`` may still raise for a whole-file problem or a bad line of a lookup table (collection,
  queries, topics, qrels, a run's JSON): those are located errors under both policies.

Settings: ``derandomize=True`` (the same cases on every run, for CI), ``deadline=None``, and a
fixed number of examples per loader; the total case count is printed by the last test."""

from __future__ import annotations

import gzip
import json
import random
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import data_dir
from transferdx.auditing.report import exclusions_frame
from transferdx.inputs.flagembedding import load_flagembedding
from transferdx.inputs.msmarco import load_msmarco_triples, load_st_hard_negatives
from transferdx.inputs.records import InputError, LoadResult
from transferdx.inputs.registry import load_path
from transferdx.inputs.sentence_transformers import load_ntuple
from transferdx.inputs.transferdx_records import read_records, write_records
from transferdx.inputs.trec_dl import load_trec_dl

DATA = data_dir()
pytestmark = pytest.mark.skipif(not (DATA / "msmarco-dl19").is_dir(), reason=f"real data not found at {DATA}")

EXAMPLES = 100
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BOM = b"\xef\xbb\xbf"
# fields of whole-file problems: the file (or its header) cannot be read at all
WHOLE_FILE = frozenset({"<table>", "<columns>", "<root>", "<path>"})
RECORD_UNITS = {"record", "line", "query"}
CASES: dict[str, int] = {}  # loader → cases run (both policies each)
SEED = st.integers(0, 2**32 - 1)

NASTY = [
    b"\xff",
    b"\xc3",  # a lead byte without its continuation
    b"\xed\xa0\x80",  # an encoded surrogate (not valid UTF-8)
    b"\x00",
    b"\r",
    b"\n",
    b"\t",
    b"\t\t",
    b'"',
    b",",
    b"\\ud800",  # a lone surrogate once inside a JSON string
    b"{",
    b"]",
    BOM,
    b"\xe2\x80\xa8",  # U+2028, a line separator to str.splitlines
    b"\xc2\x85",  # U+0085, whitespace to str.strip
]
WRONG: list[Any] = [
    None,
    True,
    0,
    -7,
    10**30,
    1.5,
    float("nan"),
    float("inf"),
    "",
    "   ",
    "\ud800",  # lone surrogates: json.dumps writes them as escapes
    "x\udfffy",
    "\u2028",
    "\x00",
    [],
    {},
    [1, None],
    ["ok", "\ud800"],
    ["ok", ""],
    [{"id": "a"}],
    [{"id": "a", "text": "t", "rank": "1"}],
    [{"id": "a", "text": "t", "score": 1e400}],
    {"text": "\udc80"},
    [[[[[[[[["deep"]]]]]]]]],
    "9" * 5000,
]
OPS = {"truncate": 1, "flip": 2, "insert": 3, "dup_line": 2, "drop_line": 1}


# ---------------------------------------------------------------------------------------------
# Damage
# ---------------------------------------------------------------------------------------------


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _at(n: int, frac: float) -> int:
    return min(int(frac * n), max(n - 1, 0))


@st.composite
def damage(draw: Any, json_lines: bool = False, tsv: bool = False) -> list[tuple]:
    """A list of 1–3 operations on a file's bytes. Hypothesis draws a seed and a PRNG draws the
    operations from it, so they spread evenly (hypothesis alone prefers 0.0 and the first choice)
    and stay reproducible (``derandomize``: the same seeds on every run)."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    weights = {**OPS, **({"json_field": 5} if json_lines else {}), **({"tabs": 4} if tsv else {})}
    ops: list[tuple] = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choices(list(weights), list(weights.values()))[0]
        frac = rng.random()
        if kind == "flip":
            ops.append((kind, frac, rng.randrange(256)))
        elif kind == "insert":
            ops.append((kind, frac, rng.choice(NASTY)))
        elif kind == "json_field":
            ops.append((kind, frac, rng.random(), json.loads(json.dumps(rng.choice(WRONG)))))
        elif kind == "tabs":
            ops.append((kind, frac, rng.choice([-1, 1, 2])))
        else:
            ops.append((kind, frac))
    return ops


def apply(data: bytes, ops: list[tuple]) -> bytes:
    for op in ops:
        kind, frac = op[0], op[1]
        if kind == "truncate":
            data = data[: int(frac * len(data))]
        elif kind == "flip" and data:
            i = _at(len(data), frac)
            data = data[:i] + bytes([op[2]]) + data[i + 1 :]
        elif kind == "insert":
            i = int(frac * len(data))
            data = data[:i] + op[2] + data[i:]
        elif kind in ("dup_line", "drop_line", "json_field", "tabs"):
            lines = _lines(data)
            i = _at(len(lines), frac)
            if kind == "dup_line":
                lines.insert(i, lines[i])
            elif kind == "drop_line":
                del lines[i]
            elif kind == "json_field":
                lines[i] = _wrong_field(lines[i], op[2], op[3])
            else:
                cells = lines[i].split(b"\t")
                lines[i] = b"\t".join(cells[:-1]) if op[2] < 0 and len(cells) > 1 else lines[i] + b"\tx" * op[2]
            data = b"\n".join(lines)
    return data


def _wrong_field(line: bytes, frac: float, value: Any) -> bytes:
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict) or not obj:
        return line
    keys = sorted(obj)
    key = keys[_at(len(keys), frac)]
    target = obj[key]
    if isinstance(target, list) and target and frac > 0.5:  # sometimes a list item instead
        target[_at(len(target), frac)] = value
    else:
        obj[key] = value
    return json.dumps(obj).encode()  # ensure_ascii: a lone surrogate becomes a "\ud800" escape


# ---------------------------------------------------------------------------------------------
# Independent counts
# ---------------------------------------------------------------------------------------------

Line = tuple[int, str, bool]  # (line number, text, decodes as UTF-8)


def nonblank(data: bytes) -> list[Line]:
    """The non-blank lines, as a reader sees them: split on \\n, a trailing \\r and a leading BOM
    dropped; undecodable bytes shown as U+FFFD (such a line is an item too, excluded)."""
    if data.startswith(BOM):
        data = data[len(BOM) :]
    out = []
    for i, raw in enumerate(data.split(b"\n"), 1):
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        try:
            text, valid = raw.decode("utf-8"), True
        except UnicodeDecodeError:
            text, valid = raw.decode("utf-8", errors="replace"), False
        if text.strip():
            out.append((i, text, valid))
    return out


def gunzip_prefix(data: bytes) -> tuple[bytes, bool]:
    """What a gzip stream yields before it breaks (one byte at a time, so as much as can be had: fed
    in larger pieces, the output of the piece that fails — e.g. the trailer's CRC check — is lost),
    and whether it is whole."""
    try:
        return gzip.decompress(data), True
    except (EOFError, OSError, zlib.error):
        pass
    d = zlib.decompressobj(wbits=31)
    out = []
    try:
        for i in range(len(data)):
            out.append(d.decompress(data[i : i + 1]))
    except zlib.error:
        pass
    return b"".join(out), False


def gz_lines(written: bytes, result: LoadResult) -> list[Line]:
    """The items of a gzip file: its lines when whole; when broken, the lines before the break
    (as far as the stream can be decompressed) plus the break itself, one excluded item."""
    content, whole = gunzip_prefix(written)
    breaks = [e for e in result.exclusions if e.field == "<encoding>" and "gzip stream" in e.reason]
    if whole:
        assert not breaks
        return nonblank(content)
    (brk,) = breaks
    line = int(brk.line)
    before = content.split(b"\n")[: line - 1]
    assert len(before) == line - 1  # the reader saw no more than the stream holds
    return [*nonblank(b"\n".join(before)), (line, "", False)]


def record_excluded(result: LoadResult) -> list:
    return [e for e in result.exclusions if e.unit in RECORD_UNITS]


def writable(result: LoadResult) -> None:
    """Everything kept can be written as UTF-8 (records JSONL, exclusions.csv, descriptors)."""
    json.dumps([r.to_dict() for r in result.records], ensure_ascii=False).encode("utf-8")
    exclusions_frame(tuple(result.exclusions)).to_csv(index=False).encode("utf-8")
    json.dumps(result.descriptors, ensure_ascii=False, default=str).encode("utf-8")


def one_per_line(header: bool = False) -> Callable[[list[Line], LoadResult], None]:
    """One record per non-blank line (after a header): lines = records + record exclusions."""

    def count(lines: list[Line], result: LoadResult) -> None:
        valid = [text for _, text, ok in lines if ok]
        items = len(lines) - (1 if header and valid and _looks_like_header(valid[0]) else 0)
        assert items == len(result.records) + len(record_excluded(result))
        for desc in result.descriptors.values():
            d = desc.get("lines", desc.get("rows"))  # the triples reader counts lines, row formats rows
            if d is not None:
                assert d["read"] == items == d["in_records"] + d["excluded"]
                assert d["records"] == d["in_records"] == len(result.records)

    return count


def _looks_like_header(text: str) -> bool:
    row = text.split("\t")
    return row[:2] == ["query", "positive"] or row[0] == "qid"


def triples_count(lines: list[Line], result: LoadResult) -> None:
    """Lines grouped by query: each line is in a kept record (one negative each: kept, or logged
    as a negative exclusion of that record) or excluded."""
    d = result.descriptors["msmarco_triples"]["lines"]
    assert d["read"] == len(lines) == d["in_records"] + d["excluded"]
    assert d["excluded"] == len(record_excluded(result))
    kept = {r.qid for r in result.records}
    negative_notes = [e for e in result.exclusions if e.unit == "negative" and e.qid in kept]
    assert d["in_records"] == sum(len(r.negatives) for r in result.records) + len(negative_notes)


def shapes_count(lines: list[Line] | None, result: LoadResult) -> None:
    """A shaped table: rows read = rows in records + rows excluded, each excluded row logged once;
    for JSON lines also rows read = non-blank lines."""
    if not result.descriptors and lines is not None:  # records-shaped lines: the records reader
        one_per_line()(lines, result)
        return
    for desc in result.descriptors.values():
        rows = desc["rows"] if "rows" in desc else desc["lines"]  # headerless text triples count lines
        assert rows["read"] == rows["in_records"] + rows["excluded"]
        assert rows["excluded"] == len(record_excluded(result))
        assert rows["records"] == len(result.records)
        if lines is not None:
            assert rows["read"] == len(lines)


def shapes_table_count(lines: list[Line], result: LoadResult) -> None:
    """CSV rows may span lines and a JSON list is one document: no independent count of rows."""
    shapes_count(None, result)


def st_count(lines: list[Line], result: LoadResult) -> None:
    """Items: a line that fails as a whole (one exclusion, no source), or each of its systems'
    lists (a record, or a record exclusion of that system)."""
    whole = [e.line for e in result.exclusions if e.source == "" and e.unit in RECORD_UNITS]
    assert len(whole) == len(set(whole)) and set(whole) <= {str(n) for n, _, _ in lines}
    systems = sum(len(json.loads(text)["neg"]) for n, text, _ in lines if str(n) not in whole)
    per_system = [e for e in result.exclusions if e.source != "" and e.unit in RECORD_UNITS]
    assert systems == len(result.records) + len(per_system)


# ---------------------------------------------------------------------------------------------
# Cases: a good input, how to load it, how to count its items
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    filename: str
    base: bytes
    load: Callable[[Path, str], LoadResult]
    count: Callable[[list[Line], LoadResult], None]  # asserts items = kept + excluded under skip
    json_lines: bool = False
    tsv: bool = False
    gz: bool = False
    extra: dict[str, bytes] = field(default_factory=dict)  # lookup files written beside it
    whole_file: frozenset[str] = WHOLE_FILE  # fields of problems that stop even skip


def _real(rel: str, n: int) -> list[bytes]:
    return (DATA / rel).read_bytes().splitlines(keepends=True)[:n]


def _flag_base() -> bytes:
    out = []
    for raw in _real("msmarco-toy/flagembedding_msmarco.jsonl", 4):
        obj = json.loads(raw)
        out.append(json.dumps({"query": obj["query"], "pos": obj["pos"][:1], "neg": obj["neg"][:3]}) + "\n")
    return "".join(out).encode()


def _records_base() -> bytes:
    loaded = load_flagembedding(DATA / "msmarco-toy/flagembedding_msmarco.jsonl", k=3)
    with tempfile.TemporaryDirectory() as tmp:
        write_records(loaded.records[:4], Path(tmp) / "r.jsonl")
        return (Path(tmp) / "r.jsonl").read_bytes()


def _st_extra() -> dict[str, bytes]:
    collection = b"".join(_real("msmarco-toy/splade_toy/full_collection/raw.tsv", 12))
    return {"collection.tsv": collection, "queries.tsv": b"100\tfirst query\n200\tsecond query\n300\tthird\n"}


ST_BASE = b"".join(
    json.dumps(x).encode() + b"\n"
    for x in [
        {"qid": 100, "pos": [0], "neg": {"bm25": [1, 2, 0, 3], "tasb": [5, 6]}},
        {"qid": "200", "pos": [1, 2], "neg": {"bm25": [3], "tasb": [4, 1]}},
        {"qid": 300, "pos": [7], "neg": {"bm25": [8, 9, 10], "tasb": [11, 8]}},
    ]
)


def _cases() -> list[Case]:
    if not DATA.is_dir():
        return []
    flag, records = _flag_base(), _records_base()
    triples = b"".join(_real("msmarco-toy/splade_toy/triplets/raw.tsv", 6))
    rows = [line.rstrip(b"\n").split(b"\t") for line in triples.splitlines(True)]
    ntuple_tsv = b"query\tpositive\tnegative_1\tnegative_2\n" + b"".join(
        b"\t".join([*row, b"extra negative %d" % i]) + b"\n" for i, row in enumerate(rows)
    )
    names = ["query", "positive", "negative_1"]
    ntuple_jsonl = b"".join(
        json.dumps(dict(zip(names, map(bytes.decode, row), strict=True))).encode() + b"\n" for row in rows
    )
    shaped_tsv = b"anchor\tpositive\tnegative\n" + triples
    shaped_csv = b"anchor,positive,negative\n" + b"".join(
        b",".join(b'"' + c.replace(b'"', b'""') + b'"' for c in row) + b"\n" for row in rows
    )
    json_array = b"[\n" + b",\n".join(line for line in flag.splitlines() if line) + b"\n]\n"

    def st_load(p: Path, e: str) -> LoadResult:
        return load_st_hard_negatives(p, p.parent / "collection.tsv", p.parent / "queries.tsv", on_error=e)

    return [
        Case("records", "r.jsonl", records, lambda p, e: read_records(p, on_error=e), one_per_line(), json_lines=True),
        Case("flagembedding", "f.jsonl", flag, lambda p, e: load_flagembedding(p, on_error=e), one_per_line(), True),
        Case(
            "flagembedding_gz",
            "f.jsonl.gz",
            flag,
            lambda p, e: load_flagembedding(p, on_error=e),
            one_per_line(),
            True,
            gz=True,
        ),
        Case(
            "msmarco_triples",
            "t.tsv",
            triples,
            lambda p, e: load_msmarco_triples(p, on_error=e),
            triples_count,
            tsv=True,
        ),
        Case("ntuple_tsv", "n.tsv", ntuple_tsv, lambda p, e: load_ntuple(p, on_error=e), one_per_line(True), tsv=True),
        Case("ntuple_jsonl", "n.jsonl", ntuple_jsonl, lambda p, e: load_ntuple(p, on_error=e), one_per_line(), True),
        Case("st_hard_negatives", "h.jsonl", ST_BASE, st_load, st_count, True, extra=_st_extra()),
        Case("shapes_jsonl", "mined.jsonl", flag, lambda p, e: load_path(p, on_error=e), shapes_count, True),
        Case(
            "shapes_jsonl_gz",
            "mined.jsonl.gz",
            flag,
            lambda p, e: load_path(p, on_error=e),
            shapes_count,
            True,
            gz=True,
        ),
        Case(
            "shapes_tsv", "mined.tsv", shaped_tsv, lambda p, e: load_path(p, on_error=e), shapes_table_count, tsv=True
        ),
        Case("shapes_csv", "mined.csv", shaped_csv, lambda p, e: load_path(p, on_error=e), shapes_table_count),
        Case(
            "shapes_json",
            "mined.json",
            json_array,
            lambda p, e: load_path(p, on_error=e),
            shapes_table_count,
            True,
            whole_file=WHOLE_FILE | {"<json>", "<encoding>"},  # one JSON document
        ),
    ]


CASE_LIST = _cases()


def _outcome(case: Case, path: Path, policy: str) -> LoadResult | InputError:
    try:
        return case.load(path, policy)
    except InputError as err:
        return err


def check(case: Case, written: bytes, folder: Path) -> None:
    """Both policies on one damaged input, and the same input behind a BOM."""
    path = folder / case.filename
    path.write_bytes(written)
    for name, content in case.extra.items():
        (folder / name).write_bytes(content)
    content, whole = gunzip_prefix(written) if case.gz else (written, True)
    undecodable = not whole or any(not ok for _, _, ok in nonblank(content))
    outcomes = {}
    for policy in ("raise", "skip"):
        result = outcomes[policy] = _outcome(case, path, policy)
        if isinstance(result, InputError):
            err = result
            assert err.file and err.field, err
            assert err.line is not None or err.field in case.whole_file, err
            if policy == "skip":
                lookup = Path(err.file).name in case.extra
                assert lookup or err.field in case.whole_file, f"skip raised for an item: {err}"
            continue
        writable(result)
        if policy == "raise":
            assert not undecodable, "an undecodable line passed under raise"
            continue
        lines = gz_lines(written, result) if case.gz else nonblank(written)
        case.count(lines, result)
        # every undecodable line (and a broken gzip stream) is a located <encoding> exclusion
        bad = {str(n) for n, _, ok in lines if not ok}
        assert bad == {e.line for e in result.exclusions if e.field == "<encoding>"}
    if not case.gz and not written.startswith(BOM):  # a BOM changes nothing
        path.write_bytes(BOM + written)
        again, before = _outcome(case, path, "skip"), outcomes["skip"]
        if isinstance(before, InputError):
            assert isinstance(again, InputError) and (again.line, again.field) == (before.line, before.field)
        else:
            assert not isinstance(again, InputError), again
            assert again.records == before.records and again.exclusions == before.exclusions
    CASES[case.name] = CASES.get(case.name, 0) + 1


@pytest.mark.parametrize("case", CASE_LIST, ids=[c.name for c in CASE_LIST])
def test_loader_survives_damage(case: Case) -> None:
    @FUZZ
    @given(ops=damage(json_lines=case.json_lines, tsv=case.tsv), seed=SEED)
    def run(ops: list[tuple], seed: int) -> None:
        written = apply(case.base, ops)
        if case.gz:  # and, two times in three, damage the compressed stream too
            written = gzip.compress(written, mtime=0)
            rng = random.Random(seed)
            kind = rng.choice(["none", "truncate", "flip"])
            if kind == "truncate":
                written = written[: rng.randrange(len(written))]
            elif kind == "flip":
                written = apply(written, [("flip", rng.random(), rng.randrange(256))])
        with tempfile.TemporaryDirectory() as tmp:
            check(case, written, Path(tmp))

    run()


# ---------------------------------------------------------------------------------------------
# TREC-DL: a tiny layout from real lines (three queries, two runs)
# ---------------------------------------------------------------------------------------------


@dataclass
class DL:
    topics: list[str]
    qrels: list[str]
    runs: dict[str, list[dict]]


def _dl_base() -> DL:
    root = DATA / "msmarco-dl19"
    qids = {"19335", "1124210", "1133167"}
    topics = [t for t in (root / "topics.dl19-passage.txt").read_text().splitlines(True) if t.split("\t")[0] in qids]
    qrels = [q for q in (root / "qrels.dl19-passage.txt").read_text().splitlines(True) if q.split()[0] in qids]
    runs = {}
    for run in ("BM25", "D_BERT_KD_TASB"):
        entries = json.loads((root / "runs" / run / "retrieve_results_dl19.json").read_text())
        chosen = [e for e in entries if e["hits"] and str(e["hits"][0]["qid"]) in qids]
        runs[run] = [dict(e, hits=sorted(e["hits"], key=lambda h: h["rank"])[:12]) for e in chosen]
    retrieved = {(str(h["qid"]), str(h["docid"])) for r in runs.values() for e in r for h in e["hits"]}
    # keep the judgments of retrieved passages and a few others (relevant ones whose text is unknown)
    qrels = [q for q in qrels if (q.split()[0], q.split()[2]) in retrieved] + qrels[:20]
    return DL(topics, sorted(set(qrels)), runs)


DL_BASE = _dl_base() if DATA.is_dir() else None
STRUCTURE = ["drop_topic", "unknown_qrel", "drop_entry", "no_hits", "bad_hit", "dup_hit", "blank_text", "dup_entry"]


@st.composite
def dl_damage(draw: Any) -> tuple:
    rng = random.Random(draw(SEED))
    target = rng.choice(["topics", "qrels", "run", "structure", "structure"])
    if target == "structure":
        return target, rng.sample(STRUCTURE, rng.randint(1, 3)), rng.random()
    return target, draw(damage(json_lines=target == "run", tsv=target == "topics")), 0.0


def _dl_write(folder: Path, dl: DL, damage_: tuple) -> Path:
    target, ops, frac = damage_
    topics, qrels = list(dl.topics), list(dl.qrels)
    runs = {name: json.loads(json.dumps(entries)) for name, entries in dl.runs.items()}
    entries = runs["BM25"]
    for op in ops if target == "structure" else []:
        if op == "drop_topic" and topics:
            del topics[_at(len(topics), frac)]
        elif op == "unknown_qrel":
            qrels.append("4242 Q0 8635981 3\n")
        elif op == "drop_entry" and entries:
            del entries[_at(len(entries), frac)]
        elif op == "dup_entry" and entries:
            entries.append(entries[0])
        elif op == "no_hits" and entries:
            entries[_at(len(entries), frac)]["hits"] = []
        elif op == "bad_hit" and entries and entries[0]["hits"]:
            entries[0]["hits"][_at(len(entries[0]["hits"]), frac)]["docid"] = None
        elif op == "dup_hit" and entries and entries[-1]["hits"]:
            entries[-1]["hits"].append(dict(entries[-1]["hits"][0], rank=999))
        elif op == "blank_text" and entries and entries[0]["hits"]:
            entries[0]["hits"][0]["content"] = "   "
    root = folder / "dl"
    for name, run_entries in runs.items():
        (root / "runs" / name).mkdir(parents=True)
        text = ("[\n" + ",\n".join(json.dumps(e) for e in run_entries) + "\n]\n").encode()
        if target == "run" and name == "BM25":
            text = apply(text, ops)
        (root / "runs" / name / "retrieve_results_dl19.json").write_bytes(text)
    topics_b, qrels_b = "".join(topics).encode(), "".join(qrels).encode()
    (root / "topics.dl19-passage.txt").write_bytes(apply(topics_b, ops) if target == "topics" else topics_b)
    (root / "qrels.dl19-passage.txt").write_bytes(apply(qrels_b, ops) if target == "qrels" else qrels_b)
    return root


def dl_count(root: Path, result: LoadResult) -> None:
    """(judged query with a topic) × run = records + record exclusions; every judged query without
    a topic and every topic without judgments is one query exclusion."""
    topics = {text.split("\t")[0].strip() for _, text, _ in nonblank((root / "topics.dl19-passage.txt").read_bytes())}
    judged = {text.split()[0] for _, text, _ in nonblank((root / "qrels.dl19-passage.txt").read_bytes())}
    runs = [p.name for p in (root / "runs").iterdir()]
    per_run = [e for e in result.exclusions if e.unit in RECORD_UNITS and e.source]
    assert len(judged & topics) * len(runs) == len(result.records) + len(per_run)
    queries = sorted(e.qid for e in result.exclusions if e.unit == "query")
    assert queries == sorted((judged - topics) | (topics - judged))


def test_trec_dl_survives_damage() -> None:
    """Topics, qrels and the runs' JSON are lookup tables: a bad line or value in them is a located
    error under both policies; whatever loads is accounted for query by query."""
    assert DL_BASE is not None
    base = DL_BASE

    @FUZZ
    @given(damage_=dl_damage())
    def run(damage_: tuple) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = _dl_write(Path(tmp), base, damage_)
            for policy in ("raise", "skip"):
                try:
                    result = load_trec_dl(root, on_error=policy)
                except InputError as err:
                    assert err.file and err.field, err
                    assert err.line is not None or err.field in WHOLE_FILE | {"<json>", "<encoding>", "runs"}, err
                    continue
                writable(result)
                if policy == "skip":
                    dl_count(root, result)
        CASES["trec_dl"] = CASES.get("trec_dl", 0) + 1

    run()


def test_fuzz_case_count() -> None:
    """The total, printed (``pytest -s``) and checked: every loader ran its examples."""
    total = sum(CASES.values())
    print(f"\nfuzz cases (each under raise and skip): {total} = {dict(sorted(CASES.items()))}")
    if len(CASES) == len(CASE_LIST) + 1:  # the whole module ran
        assert all(n >= EXAMPLES // 2 for n in CASES.values()), CASES
