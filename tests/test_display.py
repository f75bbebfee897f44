"""What a notebook shows (short reprs, a Markdown display that opens with the verdict and a compact
profile), the user's own suspects and negatives by default, ``tdx.load`` of several paths, and
bootstrap intervals that depend on the records, not on the file's name."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import transferdx as tdx
from transferdx import display
from transferdx.inputs.records import LoadResult, Passage, Record
from transferdx.inputs.transferdx_records import write_records

REPR_MAX = 2_000
MARKDOWN_MAX = 20_000


@pytest.fixture(scope="module")
def demo_input() -> LoadResult:
    """The demo plus a genuine source that repeats a negative in every record (a lexical suspect, so
    the user's own sources have suspects without an encoder)."""
    loaded = tdx.load("demo")
    repeats = [
        dataclasses.replace(r, source="bm25_repeats", negatives=(*r.negatives, r.negatives[0]))
        for r in loaded.records
        if r.source == "bm25"
    ]
    return LoadResult([*loaded.records, *repeats])


@pytest.fixture(scope="module")
def demo(demo_input) -> tdx.Audit:
    """That input with every control buildable without an encoder (lexical: it runs in seconds)."""
    return tdx.audit(demo_input, encoder=None, resamples=50, controls="all")


def test_audit_repr_is_short_and_names_what_matters(demo):
    text = repr(demo)
    assert len(text) < REPR_MAX and len(text.splitlines()) <= 6
    profile = demo.profile
    flagged = profile.loc[profile["flags"].fillna("") != "", "source"].tolist()
    assert flagged and all(s in text for s in flagged[: display.MAX_NAMES])
    assert f"{len(profile)} sources" in text and f"in your sources: {len(demo.suspects)}" in text


def test_audit_display_opens_with_the_verdict_then_a_compact_profile(demo):
    md = demo._repr_markdown_()
    assert len(md) < MARKDOWN_MAX
    assert md.startswith(demo.verdict().rstrip())
    assert display.markdown_html(demo.verdict()) in demo._repr_html_()  # what a notebook prefers: the same verdict
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == [h for c, h in display.PROFILE_HEADERS.items() if c in demo.profile.columns]
    assert [ln.split("|")[1].strip() for ln in table[1:]] == demo.profile["source"].tolist()


def test_display_is_bounded_however_many_rows_and_however_long_the_text():
    frame = pd.DataFrame({"source": [f"s{i}" for i in range(500)], "text": ["x|y " * 200] * 500})
    table = display.frame_markdown(frame)
    rows = [ln for ln in table.splitlines() if ln.startswith("| ")]
    assert len(rows) == 1 + display.MAX_ROWS and "470 more rows" in table
    assert max(len(c) for ln in rows for c in ln.split(" | ")) <= display.MAX_CELL + 4
    assert "x\\|y" in table  # a pipe in a cell is escaped, not a column break
    long_verdict = "\n".join(f"- line {i} " + "w" * 100 for i in range(1000))
    md = display.audit_markdown(long_verdict, frame[["source"]], 0, 0, 0)
    assert len(md) < MARKDOWN_MAX and "the whole verdict: `.verdict()`" in md


def _records(source: str, n: int, kind: str = "genuine") -> list[Record]:
    return [
        Record(
            qid=f"q{i}",
            query=f"query {i} about topic {i % 7}",
            positives=(Passage(f"p{i}", f"the answer to query {i} on topic {i % 7}"),),
            negatives=tuple(Passage(f"n{i}_{k}", f"another text {k} on topic {(i + k) % 7}") for k in range(3)),
            source=source,
            kind=kind,
        )
        for i in range(n)
    ]


def test_load_result_repr_and_display_are_bounded_with_many_sources():
    loaded = LoadResult([r for s in range(40) for r in _records(f"source_{s:02d}", 30)])
    text = repr(loaded)
    assert len(text) < REPR_MAX and "40 sources, 1,200 records, 3,600 negatives" in text
    assert "… and 32 more sources" in text
    md = loaded._repr_markdown_()
    assert len(md) < MARKDOWN_MAX and md.startswith("**LoadResult: 40 sources")
    assert "… and 10 more rows" in md


def test_demo_load_repr_counts_each_source():
    loaded = tdx.load("demo")
    text = repr(loaded)
    assert len(text) < REPR_MAX
    for name, kind, n_rec, n_neg, _ in display.source_counts(loaded.records, loaded.exclusions):
        assert sum(r.source == name for r in loaded.records) == n_rec
        assert f"{name} ({kind}): {n_rec:,} records, {n_neg:,} negatives" in text


def test_clean_result_repr_and_display(demo_input, demo):
    cleaned = tdx.clean(demo_input, demo)
    text, md = repr(cleaned), cleaned._repr_markdown_()
    assert len(text) < REPR_MAX and len(md) < MARKDOWN_MAX
    first = cleaned.summary().splitlines()[0]
    assert text.startswith("CleanResult: ") and first[:100] in text
    assert md.startswith("### Cleaning") and first[:100] in md


# ---------------------------------------------------------------------------------------------
# the user's own suspects and negatives by default
# ---------------------------------------------------------------------------------------------


def test_suspects_and_negatives_are_the_genuine_sources_by_default(demo, tmp_path):
    kind = demo.profile.set_index("source")["kind"]
    full_neg, full_sus = demo.result.negatives, demo.result.suspects
    for name, of in (("negatives", demo.negatives_of), ("suspects", demo.suspects_of)):
        default, control, every = getattr(demo, name), of("control"), of("all")
        assert set(kind[default["source"]]) == {"genuine"} and set(kind[control["source"]]) == {"control"}
        assert len(default) + len(control) == len(every) == len({"negatives": full_neg, "suspects": full_sus}[name])
        assert len(default) and len(control)  # the demo has both, so the split is tested
    assert {"query", "text"} <= set(demo.negatives_of("control").columns)
    with pytest.raises(ValueError, match="kind must be one of"):
        demo.suspects_of("genuine ")
    # suspects.csv is the Python attribute's rows (the user's sources), the controls' in their own file;
    # negatives.csv still holds every source's rows
    demo.save(tmp_path)
    assert len(pd.read_csv(tmp_path / "suspects.csv")) == len(demo.suspects)
    assert len(pd.read_csv(tmp_path / "control_suspects.csv")) == len(demo.control_suspects)
    assert len(pd.read_csv(tmp_path / "negatives.csv")) == len(demo.negatives_of("all"))


def test_verdict_points_to_the_attribute_in_python_and_to_the_file_in_report(demo, tmp_path):
    assert "suspects.csv" not in demo.verdict() and "`.suspects` lists them" in demo.verdict()
    demo.save(tmp_path)
    assert "suspects.csv lists them" in (tmp_path / "report.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# tdx.load of several paths; clear errors for what it does not take
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def two_files(tmp_path):
    write_records(_records("first", 12), tmp_path / "in" / "first.jsonl")
    write_records(_records("second", 9), tmp_path / "in" / "second.jsonl")
    return tmp_path / "in" / "first.jsonl", tmp_path / "in" / "second.jsonl"


def test_load_takes_a_list_of_paths_as_a_folder_of_them(two_files):
    a, b = two_files
    both = tdx.load([a, str(b)])
    assert both.sources == ["first", "second"] and len(both.records) == 21
    assert both.records == tdx.load(a.parent).records
    assert tdx.load((b, a)).records == tdx.load(b).records + tdx.load(a).records  # in the order given
    assert tdx.audit([a, b], encoder=None, resamples=20, controls="none").profile["source"].tolist() == [
        "first",
        "second",
    ]


def test_load_errors_name_what_it_takes(two_files):
    a, _ = two_files
    for bad in (5, {"a": 1}, [a, 3]):
        with pytest.raises(TypeError, match="load takes a path"):
            tdx.load(bad)
    assert len(tdx.load([]).records) == 0  # no records (the audit of it says so)
    with pytest.raises(ValueError, match="both give source 'first'"):
        tdx.load([a, a])
    with pytest.raises(ValueError, match="source= names the source of one input"):
        tdx.load([a], source="x")


# ---------------------------------------------------------------------------------------------
# bootstrap streams follow the records, not the name
# ---------------------------------------------------------------------------------------------


def _cis(profile: pd.DataFrame, source: str) -> pd.Series:
    row = profile.set_index("source").loc[source]
    return row[[c for c in row.index if c.endswith(("_ci_low", "_ci_high"))]].astype(float)


def test_same_records_under_two_file_names_get_the_same_intervals(tmp_path):
    records = _records("x", 25)
    write_records(records, tmp_path / "alpha.jsonl")
    write_records([dataclasses.replace(r, source="beta") for r in records], tmp_path / "beta.jsonl")
    write_records(_records("other", 30), tmp_path / "other.jsonl")
    paths = [tmp_path / "alpha.jsonl", tmp_path / "beta.jsonl"]
    profile = tdx.audit(paths, encoder=None, resamples=200, controls="none", idf="per_source").profile
    assert _cis(profile, "x")["psi_ci_low"] < _cis(profile, "x")["psi_ci_high"]  # the draws matter
    pd.testing.assert_series_equal(_cis(profile, "x"), _cis(profile, "beta"), check_names=False)
    # adding a source changes no other source's interval (ψ's IDF per source, so only the draws could)
    more = tdx.audit([*paths, tmp_path / "other.jsonl"], encoder=None, resamples=200, controls="none", idf="per_source")
    pd.testing.assert_series_equal(_cis(profile, "x"), _cis(more.profile, "x"))
    # the same texts under other qids are other records: another stream, other intervals
    renamed = [dataclasses.replace(r, source="gamma", qid="r" + r.qid) for r in records]
    alone = tdx.audit(LoadResult(renamed), encoder=None, resamples=200, controls="none", idf="per_source").profile
    assert profile.set_index("source").loc["x", "psi_mean"] == alone.set_index("source").loc["gamma", "psi_mean"]
    assert not _cis(alone, "gamma").equals(_cis(profile, "x"))
