"""MS MARCO's own training file recognised by its shape (issue 33, item 6): a headerless ``.tsv`` /
``.tsv.gz`` of ``query<TAB>positive<TAB>negative`` text lines loads as ``msmarco_triples`` without
``format=``, its source named after the file; id triples, qrels-like files and headered TSVs keep
their former reading; the clean verb writes the copy back as the same headerless lines."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.msmarco import SNIFF_LINES, looks_like_text_triples
from transferdx.inputs.records import InputError, LoadResult

LINES = [
    ("what is a cat", "a cat is a small furry animal", "a dog is a loyal animal"),
    ("what is a cat", "a cat is a small furry animal", "the moon orbits the earth"),
    ("how tall is everest", "mount everest is 8849 metres tall", "k2 is 8611 metres tall"),
    ("diabetes", "diabetes is a disease of blood sugar", "insulin was discovered in 1921"),
]
TEXT = "".join("\t".join(line) + "\n" for line in LINES)
TOY = "msmarco-toy/splade_toy/triplets/raw.tsv"


def _write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _shape_of(loaded: LoadResult, source: str) -> str:
    return str(loaded.descriptors[source]["input"]["format"])


def _without_source(loaded: LoadResult) -> list[dict]:
    return [{k: v for k, v in r.to_dict().items() if k != "source"} for r in loaded.records]


@pytest.mark.parametrize("name", ["triples.train.small.tsv", "triples.tsv.gz"])
def test_text_triples_are_recognised_by_shape(name: str, tmp_path: Path) -> None:
    path = _write(tmp_path / name, TEXT)
    assert looks_like_text_triples(path)
    loaded = tdx.load(path)
    stem = "triples.train.small" if name.endswith(".tsv") else "triples"
    assert loaded.sources == [stem]
    assert [(r.query, [n.text for n in r.negatives]) for r in loaded.records] == [
        ("what is a cat", ["a dog is a loyal animal", "the moon orbits the earth"]),
        ("how tall is everest", ["k2 is 8611 metres tall"]),
        ("diabetes", ["insulin was discovered in 1921"]),
    ]
    assert _shape_of(loaded, stem) == "msmarco_triples (tsv)"
    assert loaded.descriptors[stem]["lines"] == {"read": 4, "in_records": 4, "excluded": 0, "records": 3}


def test_source_given_wins_and_format_keeps_its_default(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.tsv", TEXT)
    assert tdx.load(path, source="mine").sources == ["mine"]
    assert tdx.load(path, format="msmarco_triples").sources == ["msmarco_triples"]
    # a config's options still reach the reader chosen by name
    headered = _write(tmp_path / "h.tsv", "query\tpositive\tnegative_1\n" + TEXT)
    assert len(tdx.load(headered, format="msmarco_triples", header=True).records) == 3
    one_each = tdx.load(path, format="msmarco_triples", group_by_query=False, on_error="skip", keep_tables=True)
    assert one_each.unwritable == ["t.tsv: each row read as its own record (group_by_query=false)"]


def test_blank_lines_and_bom_do_not_hide_the_shape(tmp_path: Path) -> None:
    path = tmp_path / "t.tsv"
    path.write_bytes(b"\xef\xbb\xbf\n\r\n" + TEXT.replace("\n", "\r\n").encode())
    assert looks_like_text_triples(path)
    assert tdx.load(path).records[0].query == "what is a cat"


@pytest.mark.parametrize(
    "text",
    [
        "1185869\t0\t8841823\n1185868\t16\t7067032\n597651\t136823\t3212345\n",  # MS MARCO id triples
        "19335\t0\t1017759\t0\n",  # qrels with tabs (4 fields)
        "1\t0\t1\n2\t0\t0\n",  # qrels-like, 3 fields
    ],
)
def test_id_files_stay_unrecognised(text: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "ids.tsv", text)
    assert not looks_like_text_triples(path)
    with pytest.raises(InputError, match="unrecognised shape") as err:
        tdx.load(path)
    assert Path(err.value.file) == path
    assert "give format='ntuple' or 'msmarco_triples'" in str(err.value)


def test_id_and_text_file_is_not_claimed(tmp_path: Path) -> None:
    """``pid<TAB>title<TAB>text`` has prose in its last two fields, but its first is an id."""
    path = _write(tmp_path / "collection.tsv", "17\tThe Manhattan Project\tThe project built the bomb\n")
    assert not looks_like_text_triples(path)
    with pytest.raises(InputError, match="unrecognised shape"):
        tdx.load(path)


@pytest.mark.parametrize(
    ("header", "shape"),
    [("query\tpositive\tnegative", "triplet (tsv)"), ("anchor\tpositive\tnegative_1", "ntuple (tsv)")],
)
def test_headered_tsv_keeps_its_reading(header: str, shape: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "mined.tsv", header + "\n" + TEXT)
    assert not looks_like_text_triples(path)
    loaded = tdx.load(path)
    assert loaded.sources == ["mined"]
    assert _shape_of(loaded, "mined") == shape
    assert len(loaded.records) == 3


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("t.csv", TEXT),  # tabs in a CSV: not a TSV
        ("t.txt", TEXT),  # no recognised form
        ("t.tsv", TEXT + "a line\twith two fields\n"),  # every sampled line has 3 fields
        ("t.tsv", "q\tpassage\tpassage with words\n"),  # each passage has two words or more
        ("t.tsv", "qid\tfirst query text\tsecond query text\n"),  # a header by iter_tab_lines' rule
        ("t.tsv", ""),  # nothing to recognise
    ],
)
def test_other_files_are_not_claimed(name: str, text: str, tmp_path: Path) -> None:
    assert not looks_like_text_triples(_write(tmp_path / name, text))


def test_only_the_sample_decides(tmp_path: Path) -> None:
    """A bad line after the first :data:`SNIFF_LINES` is the reader's located problem."""
    path = _write(tmp_path / "t.tsv", TEXT * SNIFF_LINES + "a bad line\n")
    assert looks_like_text_triples(path)
    with pytest.raises(InputError, match="expected 3 tab-separated fields") as err:
        tdx.load(path)
    assert err.value.line == 4 * SNIFF_LINES + 1
    skipped = tdx.load(path, on_error="skip")
    assert skipped.descriptors["t"]["lines"]["excluded"] == 4 * SNIFF_LINES - len(LINES) + 1  # repeats, bad line


def test_truncated_gzip_is_claimed_and_located(data: Path, tmp_path: Path) -> None:
    whole = gzip.compress((data / TOY).read_bytes(), mtime=0)
    path = tmp_path / "t.tsv.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    assert looks_like_text_triples(path)
    with pytest.raises(InputError, match="gzip stream") as err:
        tdx.load(path)
    assert err.value.field == "<encoding>"


def test_real_toy_triples_by_shape(data: Path) -> None:
    path = data / TOY
    assert looks_like_text_triples(path)
    by_shape = tdx.load(path)
    by_name = tdx.load(path, format="msmarco_triples")
    assert by_shape.sources == ["raw"] and by_name.sources == ["msmarco_triples"]
    assert len(by_shape.records) == 100
    assert _without_source(by_shape) == _without_source(by_name)
    assert by_shape.descriptors["raw"] == by_name.descriptors["msmarco_triples"]


def test_folder_of_triples_and_parquet(tmp_path: Path) -> None:
    folder = tmp_path / "inputs"
    folder.mkdir()
    _write(folder / "triples.tsv", TEXT)
    pd.DataFrame([{"anchor": "a query", "positive": "its passage", "negative": "another passage"}]).to_parquet(
        folder / "mined.parquet"
    )
    loaded = tdx.load(folder)
    assert loaded.sources == ["mined", "triples"]
    assert _shape_of(loaded, "triples") == "msmarco_triples (tsv)"
    assert _shape_of(loaded, "mined") == "triplet (parquet)"


@pytest.mark.parametrize("name", ["raw.tsv", "raw.tsv.gz"])
def test_clean_writes_the_same_headerless_lines(name: str, data: Path, tmp_path: Path) -> None:
    text = (data / TOY).read_text(encoding="utf-8")
    path = _write(tmp_path / name, text)
    result = tdx.clean(path, reasons=["duplicate_positive"], encoder=None, out=tmp_path / "out")
    assert result.descriptor["faithful"], result.descriptor["note"]
    copy = tmp_path / "out" / "cleaned" / name
    written = gzip.decompress(copy.read_bytes()) if name.endswith(".gz") else copy.read_bytes()
    assert written == text.encode("utf-8")  # nothing to remove: the same bytes, no header added


def test_clean_drops_the_line_of_a_removed_negative(tmp_path: Path) -> None:
    lines = [*LINES[:2], ("what is a cat", "a cat is a small furry animal", "A Cat is a small  furry animal")]
    path = _write(tmp_path / "triples.tsv", "".join("\t".join(line) + "\n" for line in lines + LINES[2:]))
    result = tdx.clean(path, reasons=["duplicate_positive"], encoder=None, out=tmp_path / "out")
    assert result.descriptor["faithful"], result.descriptor["note"]
    assert list(result.removed["negative"]) == ["A Cat is a small  furry animal"]
    copy = tmp_path / "out" / "cleaned" / "triples.tsv"
    assert copy.read_text(encoding="utf-8") == TEXT
    assert tdx.load(copy).sources == ["triples"]
