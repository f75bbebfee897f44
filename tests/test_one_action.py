"""One action per source (issue 33): the bottom line is the first of re-mine, clean, review, use as is
that finds something, the milder findings follow as facts (``Also:``), never as a second command; the
one command said names the input the audit read and runs as printed; one suspects table
(``Audit.suspects`` = suspects.csv, the controls' apart) behind every count the verdict states, and
``fn_probability`` ≥ the cleaning cut makes a suspect by itself."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

import transferdx as tdx
from transferdx.auditing.audit import audit_records
from transferdx.auditing.commands import clean_command
from transferdx.auditing.facts import SourceFacts
from transferdx.auditing.result import Audit
from transferdx.auditing.values import SemanticSettings
from transferdx.auditing.verdict import ADVICE, BOTTOM_LINE_ACTIONS, Context, judge, verdict_lines
from transferdx.diagnostics.suspicion import ACT_REASONS, MIN_PROBABILITY, PROBABILITY_REASON, SuspicionSettings
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import LoadResult, Passage, Record

from .conftest import REPO
from .fakes import FixedEncoder
from .verdicts import assert_actions_follow_their_numbers, block, decisions, every

ORDER = ("re-mine", "clean", "check with a second encoder", "review the listed suspects", "use as is")
COMMAND = re.compile(r"`(transferdx-\w+ [^`]*|transferdx\.clean\([^`]*\))`")


def blocks(verdict: str) -> dict[str, tuple[str, list[str]]]:
    """source → (action, the lines said of it: its decision line first, then its evidence)."""
    return {name: (action, [line, *block(verdict, name)]) for name, (_, action, line) in decisions(verdict).items()}


def assert_one_action(verdict: str) -> dict[str, tuple[str, list[str]]]:
    """Each source: one decision line with no command, its command (if any) only in the instruction
    said first below it, no other line with a command."""
    found = blocks(verdict)
    assert found
    for name, (action, lines) in found.items():
        assert action in BOTTOM_LINE_ACTIONS, name
        assert not COMMAND.search(lines[0]), lines[0]
        for line in lines[2:]:
            assert not COMMAND.search(line), line
        assert len(COMMAND.findall(lines[1] if len(lines) > 1 else "")) <= 1
    return found


# ---------------------------------------------------------------------------------------------
# The order, and the findings below the bottom line
# ---------------------------------------------------------------------------------------------


def test_the_order_is_the_registry_and_the_readme_says_it():
    assert BOTTOM_LINE_ACTIONS == ORDER == tuple(a for a, _ in ADVICE)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Bottom line", 1)[1].split("\n### ", 1)[0]
    at = [section.index(f"**{a}**") for a in ORDER]
    said = " ".join(section.split())
    assert at == sorted(at) and "re-mine beats clean beats check beats review beats use as is" in said


ROW = {"source": "s", "kind": "genuine", "n_records": 100, "n_negatives": 400, "inversion_rate": 0.9, "flags": ""}
INVERTED = {"absolute_flags": "mostly_inverted", "absolute_flag_reasons": "0.795 > 0.5 of negatives score ..."}
FACTS = {
    "review": SourceFacts(400, n_suspects=40, n_act=0, n_copies=0, n_near_copies=0, n_probable=0),
    # near-copies and fn_probability ≥ 0.80 alone: their precision on the file is unknown, so review
    "probable": SourceFacts(400, n_suspects=60, n_act=20, n_copies=0, n_near_copies=5, n_probable=16),
    "both": SourceFacts(400, n_suspects=60, n_act=20, n_copies=4, n_near_copies=5, n_probable=11),
    "none": SourceFacts(400, n_suspects=0, n_act=0, n_copies=0, n_near_copies=0, n_probable=0),
}


@pytest.mark.parametrize(
    ("inverted", "facts", "action", "also", "command"),
    [
        (True, "both", "re-mine", 3, False),  # the source: three findings, one action
        (True, "none", "re-mine", 0, False),
        (False, "both", "clean", 1, True),
        (False, "probable", "review the listed suspects", 0, True),
        (False, "review", "review the listed suspects", 0, False),
        (False, "none", "use as is", 0, False),
    ],
)
def test_the_most_severe_finding_is_the_one_action(inverted, facts, action, also, command):
    row = {**ROW, **(INVERTED if inverted else {})}
    ctx = Context(FACTS[facts], "envelope", {"data": "mined.parquet"}, "/data/mined.parquet")
    j = judge(row, ctx)
    assert j.action == action and len(j.support) == also
    lines = verdict_lines([row], {}, {"data": "mined.parquet"}, facts={"s": FACTS[facts]}, input_path=ctx.input_path)
    (said,) = assert_one_action("\n".join(lines)).values()
    assert said[0] == action
    commands = [c for line in said[1] for c in COMMAND.findall(line)]
    assert commands == (["transferdx-clean input=/data/mined.parquet"] if command else [])
    if facts == "probable":  # what cleaning would remove is said, with what was measured of it on mined files
        assert "default cleaning would remove 20 of them: 0 copy a positive" in "\n".join(said[1])
        assert "files mined the way users mine" in "\n".join(every("\n".join(lines)))
    if inverted and facts == "both":  # what the user read as three actions: now facts
        assert j.support[0] == "20 of 400 negatives (5.0%) are probable false negatives"
        assert j.support[1].startswith("default cleaning removes them: 4 copy a positive")
        assert j.support[2].startswith("40 of 400 negatives (10.0%) are suspects default cleaning leaves in place")


def test_a_file_with_three_findings_gets_one_action(tmp_path):
    """Lexical and in seconds: most negatives are other queries' positives (re-mine), some copy the
    record's own positive (clean) and some repeat (review). One action, two facts, no command."""
    n = 40
    rows = []
    for i in range(n):
        others = [{"id": f"p{(i + k) % n}", "text": f"answer {(i + k) % n} topic{(i + k) % n}"} for k in (1, 2, 3)]
        negatives = [*others, {"id": f"n{i}", "text": f"other words {i}"}]
        if i % 4 == 0:
            negatives.append({"id": f"c{i}", "text": f"ANSWER {i}  topic{i}"})  # a copy of its positive
        if i % 5 == 0:
            negatives.append({"id": f"n{i}", "text": f"other words {i}"})  # the same passage again
        rows.append(
            {
                "qid": f"q{i}",
                "query": f"question topic{i}",
                "positives": [{"id": f"p{i}", "text": f"answer {i} topic{i}"}],
                "negatives": negatives,
                "source": "three",
            }
        )
    path = tmp_path / "three.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = tdx.audit(path, encoder=None, resamples=20, controls="none")
    found = assert_one_action(result.verdict())
    action, lines = found["three"]
    assert action == "re-mine", lines
    assert any("probable false negatives" in x for x in lines[1:])
    assert any("default cleaning leaves in place" in x for x in lines[1:])
    assert "transferdx-clean" not in result.verdict()


# ---------------------------------------------------------------------------------------------
# The command: the input the audit read, as it runs in bash
# ---------------------------------------------------------------------------------------------


def as_run(command: str) -> dict[str, str]:
    """The overrides ``command`` (between backticks) gives ``transferdx-clean``, split as bash splits
    it and read as Hydra reads each one."""
    argv = shlex.split(COMMAND.search(command)[1])
    assert argv[0] == "transferdx-clean"
    parser = OverridesParser.create()
    return {(o := parser.parse_override(a)).key_or_group: str(o.value()) for a in argv[1:]}


@pytest.mark.parametrize(
    "path",
    ["/data/mined.parquet", "/my data/mined (1).parquet", "/a,b/it's.parquet", '/q/"x".jsonl', "/é/ü.csv"],
)
def test_the_command_names_the_input_and_parses_as_printed(path):
    assert as_run(clean_command({"data": "mined.parquet"}, path)) == {"input": path}
    assert as_run(clean_command({"data": Path(path).name})) == {"input": Path(path).name}


def test_the_command_for_a_bundled_set_memory_and_a_lexical_audit():
    assert as_run(clean_command({"data": "demo"})) == {"data": "demo"}
    assert as_run(clean_command({"data": "mined.parquet"}, None, lexical=True)) == {
        "input": "mined.parquet",
        "diagnostics": "lexical",
    }
    assert clean_command({"data": "(in memory)"}) == "`transferdx.clean(records, audit)`"


def test_the_verdict_names_the_copy_it_audited_not_the_original(tmp_path):
    """A re-audit of a copy named like the original (transferdx-clean writes cleaned/<name>) names
    the copy's path; report.md names the input by its file name (the same bytes wherever it lives)."""
    rows = [json.loads(x) for x in (Path(tdx.__file__).parent / "demo" / "handwritten.jsonl").read_text().splitlines()]
    for r in rows[:8]:
        r["negatives"].append({"id": "copy", "text": r["positives"][0]["text"].upper()})
    copy = tmp_path / "cleaned dir" / "mined.jsonl"
    copy.parent.mkdir()
    copy.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = tdx.audit(copy, encoder=None, resamples=20, controls="none")
    result = dataclasses.replace(result, input_path=str(copy))
    ((action, lines),) = blocks(result.verdict()).values()
    assert action == "clean"
    assert as_run(lines[1]) == {"input": str(copy.resolve()), "diagnostics": "lexical"}
    result.save(tmp_path / "out")
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "`transferdx-clean input=mined.jsonl diagnostics=lexical`" in report and str(tmp_path) not in report


# ---------------------------------------------------------------------------------------------
# One suspects table behind every count
# ---------------------------------------------------------------------------------------------

NUMBERS = {  # what the verdict states about suspects → the count over Audit.suspects it must equal
    "act": r"(\d+) of \d+ negatives \([^)]*\) are probable false negatives",
    "copies": r"removes them: (\d+) copy a positive",
    "review": r"(\d+) of \d+ negatives \([^)]*\) are suspects default cleaning leaves in place",
    "suspected": r"(\d+) of \d+ negatives \([^)]*\) are suspects;",
    "would": r"default cleaning would remove (\d+) of them",
    "suspects": r"suspects: (\d+) of \d+ negatives",
    "use": r"(\d+) suspects? in \d+ negatives",
    "probable": r"(\d+) have fn_probability ≥ " + f"{MIN_PROBABILITY:.2f}",
    "near": r"(\d+) are near-copies of one",
}
SUMS = {  # the expected false negatives the verdict states → Σ fn_probability over which suspects
    "sigma": r"Σ fn_probability (\d+\.\d)",
    "use_expected": r"suspects? in \d+ negatives; (\d+\.\d) expected false",
}


def table_counts(suspects: pd.DataFrame, source: str) -> dict[str, int]:
    held = suspects.loc[suspects["source"] == source, "reasons"].str.split(";").map(set)
    act = int(held.map(lambda x: bool(x & set(ACT_REASONS))).sum())
    return {
        "suspects": len(held),
        "suspected": len(held),
        "would": act,
        "use": len(held),
        "act": act,
        "review": len(held) - act,
        "probable": int(held.map(lambda x: PROBABILITY_REASON in x).sum()),
        "near": int(held.map(lambda x: "near_duplicate_positive" in x).sum()),
        "copies": int(held.map(lambda x: "duplicate_positive" in x).sum()),
        "sigma": round(float(suspects.loc[suspects["source"] == source, "fn_probability"].sum()), 1),
        "use_expected": round(float(suspects.loc[suspects["source"] == source, "fn_probability"].sum()), 1),
    }


def assert_counts_from_the_table(result: tdx.Audit) -> int:
    """Every number the verdict states about a source's suspects equals its count over
    ``result.suspects``; returns how many numbers were checked."""
    checked = 0
    for name, (_, lines) in assert_one_action(result.verdict()).items():
        text = " ".join(lines)
        expected = table_counts(result.suspects, name)
        for key, pattern in NUMBERS.items():
            for m in re.finditer(pattern, text):
                assert int(m[1]) == expected[key], (name, key, m[0])
                checked += 1
        for key, pattern in SUMS.items():
            for m in re.finditer(pattern, text):
                assert float(m[1]) == pytest.approx(expected[key], abs=0.051), (name, key, m[0])
                checked += 1
    return checked


def assert_high_probability_is_a_suspect(result: tdx.Audit) -> None:
    neg = result.negatives_of("all")
    high = neg[neg["fn_probability"].to_numpy(dtype=float) >= MIN_PROBABILITY]
    table = result.suspects_of("all").set_index(["source", "qid", "neg_index"])["reasons"]
    for key in zip(high["source"], high["qid"], high["neg_index"], strict=True):
        assert PROBABILITY_REASON in table[key].split(";"), key


@pytest.fixture(scope="module")
def demo() -> tdx.Audit:
    return tdx.audit("demo", resamples=50)


@pytest.fixture(scope="module")
def mined(tmp_path_factory) -> tdx.Audit:
    """A file shaped like sentence-transformers' ``mine_hard_negatives`` n-tuple output (anchor,
    positive, negative_1..5; Parquet) from the demo's bm25 records, three of them with an upper-cased
    copy of the positive as negative_5; audited with the controls built from it."""
    rows = []
    records = [r for r in tdx.load("demo").records if r.source == "bm25" and len(r.negatives) >= 5]
    for i, r in enumerate(records):
        negatives = [n.text for n in r.negatives[:5]]
        if i < 3:
            negatives[4] = r.positives[0].text.upper()
        rows.append(
            {"anchor": r.query, "positive": r.positives[0].text}
            | {f"negative_{k}": t for k, t in enumerate(negatives, 1)}
        )
    path = tmp_path_factory.mktemp("st") / "mined.parquet"
    pd.DataFrame(rows).to_parquet(path, index=False)
    return dataclasses.replace(tdx.audit(path, resamples=50), input_path=str(path))


def assert_cleaner_counts_from_the_table(result: tdx.Audit, records) -> None:
    """The cleaner removes exactly the suspects the verdict calls probable false negatives and lists
    the rest of the table (the user's sources') for review."""
    counts = [table_counts(result.suspects, s) for s in result.suspects["source"].unique()]
    cleaned = tdx.clean(records, result)
    assert cleaned.descriptor["n_removed"] == len(cleaned.removed) == sum(c["act"] for c in counts)
    assert len(cleaned.review) == sum(c["review"] for c in counts)


def test_demo_counts_come_from_the_one_table(demo):
    assert assert_counts_from_the_table(demo) >= 4
    assert_high_probability_is_a_suspect(demo)
    assert_cleaner_counts_from_the_table(demo, "demo")


def test_mined_file_counts_files_and_attributes_agree(mined, tmp_path):
    """The verdict's numbers are counts over ``Audit.suspects``; suspects.csv holds those rows (the
    file's own), control_suspects.csv the controls' (``Audit.control_suspects``)."""
    assert assert_counts_from_the_table(mined) >= 5
    assert_high_probability_is_a_suspect(mined)
    assert_cleaner_counts_from_the_table(mined, mined.input_path)
    action, lines = blocks(mined.verdict())["mined"]
    assert action == "clean" and lines[1].startswith("run: `transferdx-clean")
    assert_actions_follow_their_numbers(mined.verdict())
    # what the verdict says the clean keeps, before it runs, is what it keeps (issue 56)
    (keeps,) = [
        re.match(r"cleaning keeps (\d+) of (\d+) queries and (\d+) of (\d+) rows", x) for x in lines if "keeps" in x
    ]
    cleaned = tdx.clean(mined.input_path, mined)
    queries = {r.qid for r in cleaned.records}
    n_queries = int((mined.records["source"] == "mined").sum())
    assert (int(keeps[1]), int(keeps[2])) == (len(queries), n_queries) and int(keeps[1]) == int(keeps[3])
    assert as_run(lines[1]) == {"input": mined.input_path}
    mined.save(tmp_path)
    key = ["source", "qid", "neg_index"]
    own = pd.read_csv(tmp_path / "suspects.csv", keep_default_na=False, dtype={"qid": str})
    controls = pd.read_csv(tmp_path / "control_suspects.csv", keep_default_na=False, dtype={"qid": str})
    assert own[key].values.tolist() == mined.suspects[key].values.tolist()
    assert controls[key].values.tolist() == mined.control_suspects[key].values.tolist()
    assert set(own["source"]) == {"mined"} and len(controls) and set(controls["kind"]) == {"control"}
    assert len(own) + len(controls) == len(mined.suspects_of("all"))


def test_a_negative_at_the_cut_without_another_reason_is_listed_and_counted():
    """The issue's 0.81 negative with no reason: with α = 0.99 and δ = 0.99 no rule fires on negatives
    close to the positive (s(q,n) = 0.88 < 0.99·0.9, s(p0,n) = 0.95), but their fn_probability passes
    the cut: they are suspects (reason fn_probability), in the table and in the verdict's counts."""
    p = np.array([0.9, np.sqrt(1 - 0.81), 0.0, 0.0])

    def close(s_qn: float, s_pn: float) -> np.ndarray:
        b = (s_pn - 0.9 * s_qn) / p[1]
        return np.array([s_qn, b, 0.0, np.sqrt(1 - s_qn**2 - b**2)])

    vectors, records = {}, []
    for i in range(12):
        texts = (f"answer text {i}", f"close passage {i}", f"unrelated passage {i}")
        vectors |= dict(zip(texts, (p, close(0.88, 0.95), close(0.1, 0.09)), strict=True))
        records.append(
            Record(
                f"q{i}", f"query words {i}", (Passage(f"p{i}", texts[0]),), tuple(Passage(t, t) for t in texts[1:]), "s"
            )
        )
    semantic = SemanticSettings(suspicion=SuspicionSettings(alpha=0.99, delta=0.99))
    core = audit_records(LoadResult(records), alnum, encoder=FixedEncoder(vectors), semantic=semantic, resamples=20)
    result = Audit(core, {"data": "s.jsonl"})
    neg = result.negatives
    high = neg["fn_probability"].to_numpy(dtype=float) >= MIN_PROBABILITY
    assert high.sum() == 12 and not neg.loc[high, "fn_positive_aware"].any()
    assert not neg.loc[high, "fn_near_duplicate_positive"].any()
    assert result.suspects["reasons"].tolist() == ["fn_probability"] * 12
    assert result.profile.set_index("source").loc["s", "fn_suspect_rate"] == pytest.approx(0.5)
    assert_high_probability_is_a_suspect(result)
    assert assert_counts_from_the_table(result) >= 3
    action, lines = blocks(result.verdict())["s"]
    # fn_probability alone does not decide "clean" (its precision depends on how the file was mined):
    # the suspects are for review, with the command that removes them
    assert action == "review the listed suspects" and any("12 have fn_probability ≥ 0.80" in x for x in lines)
    assert "default cleaning would remove 12 of them" in "\n".join(lines) and "transferdx-clean" in lines[1]


@pytest.mark.slow
def test_scifact_counts_agree_across_verdict_cleaner_and_files(data, tmp_path):
    """SciFact (train, first 120 queries): BM25 top-8 and perturbations of the positive, audited with
    the default encoder. The verdict's numbers are counts over ``Audit.suspects``; the cleaner removes
    exactly the suspects the verdict calls probable false negatives (``act``) and lists the others for
    review; suspects.csv holds the same rows."""
    qs = tdx.load_query_set(data / "beir" / "scifact", format="beir", split="train")
    first = list(qs.queries)[:120]
    qs = dataclasses.replace(
        qs, queries={q: qs.queries[q] for q in first}, positives={q: qs.positives[q] for q in first}
    )
    records = tdx.build_sources(qs, ["bm25", "perturb"], k=8)
    result = tdx.audit(records, resamples=20, controls="none")
    assert assert_counts_from_the_table(result) >= 6
    assert_high_probability_is_a_suspect(result)
    assert table_counts(result.suspects, "perturb")["act"] > 0  # perturbations carry the answer
    assert_actions_follow_their_numbers(result.verdict())
    assert_cleaner_counts_from_the_table(result, records)
    result.save(tmp_path)
    own = pd.read_csv(tmp_path / "suspects.csv", keep_default_na=False, dtype={"qid": str})
    key = ["source", "qid", "neg_index"]
    assert own[key].values.tolist() == result.suspects[key].values.tolist()
