"""One passage, one identity (design §3 "Identity of passages"; issue "Reliability", group 8).

On TREC-DL19, 464 passage ids arrive from different runs as whitespace variants of one text
(REP_LLAMA 448, SPLADE 16). The loader keeps one text per id (the first seen over the runs in name
order, hits in rank order) and counts the variants; the pooled IDF corpus counts a passage once by
its identity (normalised text), not once per exact string; positives are ordered by grade, then by
passage id as an integer (MS MARCO ids are integers), so p0 is the numerically smallest id among
the best-graded passages. Values below are recomputed by hand from the raw files."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import replace

import pytest

from transferdx.diagnostics.lexical import negative_residuality, passage_identity
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import Passage, Record, order_by_grade
from transferdx.inputs.trec_dl import load_trec_dl

RUNS = ["BM25", "BM25_RM3", "D_BERT_KD_TASB", "OPEN_AI_ADA2", "REP_LLAMA", "SPLADE_P_P_ENSEMBLE_DISTIL"]
TOKEN = re.compile(r"[^\W_]+")


@pytest.fixture(scope="module")
def dl19(data):
    return load_trec_dl(data / "msmarco-dl19")


@pytest.fixture(scope="module")
def raw(data):
    """The raw files: grades {(qid, pid): grade}, topics, and each run's hits in rank order."""
    root = data / "msmarco-dl19"
    grades = {}
    for line in (root / "qrels.dl19-passage.txt").read_text(encoding="utf-8").splitlines():
        qid, _, pid, grade = line.split()
        grades[(qid, pid)] = int(grade)
    topics = dict(line.split("\t") for line in (root / "topics.dl19-passage.txt").read_text().splitlines())
    hits = {}
    for run in RUNS:
        entries = json.loads((root / "runs" / run / "retrieve_results_dl19.json").read_text(encoding="utf-8"))
        hits[run] = {
            str(e["hits"][0]["qid"]): [
                (str(h["docid"]), h["content"]) for h in sorted(e["hits"], key=lambda h: h["rank"])
            ]
            for e in entries
            if e["hits"]
        }
    return grades, topics, hits


def rank(hit: dict) -> int:
    return hit["rank"]


def identity(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def test_dl19_p0_numeric_order(dl19, raw):
    """p0 = the numerically smallest id among the best-graded passages (string order chose another
    p0 for 14 of 43 queries, 82 records)."""
    grades, _, hits = raw
    # by hand, from the qrels: (qid) → p0 under the numeric rule, and under the old string rule
    pinned = {
        "489204": ("320073", "1051498"),
        "104861": ("146169", "1017092"),
        "1133167": ("190804", "1824479"),
        "168216": ("13499", "1183706"),
        "19335": ("3175481", "3175481"),  # one best-graded passage: both rules agree
    }
    p0 = {(r.source, r.qid): r.positives[0].id for r in dl19.records}
    known = {pid for run in hits.values() for ranked in run.values() for pid, _ in ranked}  # text in some run
    for qid, (numeric, string) in pinned.items():
        assert {p0[(s, q)] for s, q in p0 if q == qid} == {numeric}, qid
        top = max(g for (q, p), g in grades.items() if q == qid and p in known)
        best = [p for (q, p), g in grades.items() if q == qid and g == top and p in known]
        assert min(best, key=int) == numeric and min(best) == string
    top_grade = {r: [p.id for p in r.positives if p.judgment == r.positives[0].judgment] for r in dl19.records}
    assert all(r.positives[0].id == min(ids, key=int) for r, ids in top_grade.items())
    by_string = [r for r, ids in top_grade.items() if r.positives[0].id != min(ids)]
    assert len(by_string) == 82 and len({r.qid for r in by_string}) == 14
    for r in dl19.records:  # the whole positive order: grade desc, then id as an integer
        assert [p.id for p in r.positives] == sorted(
            (p.id for p in r.positives), key=lambda p: (-grades[(r.qid, p)], int(p))
        )
    assert order_by_grade(["10", "9", "b"], {"10": 1, "9": 1, "b": 1}) == ["10", "9", "b"]  # not all integers


def test_dl19_whitespace_variants_one_text(dl19, raw):
    """Every passage id has one text in every record of every run; the variants are counted."""
    _, _, hits = raw
    first: dict[str, str] = {}
    variants: dict[str, set[str]] = {run: set() for run in RUNS}
    for run in RUNS:  # by hand: runs in name order, queries in file order, hits in rank order
        for ranked in hits[run].values():
            for pid, text in ranked:
                if first.setdefault(pid, text) != text:
                    variants[run].add(pid)
    assert {run: len(ids) for run, ids in variants.items() if ids} == {
        "REP_LLAMA": 448,
        "SPLADE_P_P_ENSEMBLE_DISTIL": 16,
    }
    texts: dict[str, set[str]] = {}
    for r in dl19.records:
        for p in (*r.positives, *r.negatives):
            texts.setdefault(p.id, set()).add(p.text)
            assert p.text == first[p.id]
    assert all(len(t) == 1 for t in texts.values())
    for run in RUNS:
        desc = dl19.descriptors[run]["passage_text_variants"]
        assert desc["ids"] == len(variants[run]) and desc["ids_all_runs"] == 464 and desc["whitespace_only"] is True


def _hand_psi(records: list[Record], key=identity) -> dict[tuple[str, str], float]:
    """Record ψ with the pooled IDF over the audited passages, one per ``key`` (by hand)."""
    corpus = {key(t): t for r in records for t in (p.text for p in (*r.positives, *r.negatives))}
    token_sets = [set(TOKEN.findall(t.lower())) for t in corpus.values()]
    n_docs = len(token_sets)

    def idf(token: str) -> float:
        df = sum(token in s for s in token_sets)
        return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))

    out = {}
    for r in records:
        q = set(TOKEN.findall(r.query.lower()))
        total = sum(idf(t) for t in q)
        psi = [sum(idf(t) for t in q - set(TOKEN.findall(n.text.lower()))) / total for n in r.negatives]
        out[(r.source, r.qid)] = sum(psi) / len(psi)
    return out


def test_dl19_psi_pinned_by_hand(dl19, raw):
    """ψ of a few DL19 queries, all six runs: the package's pooled IDF equals the hand computation
    over passage identities, and the literals pin it (REP_LLAMA's negatives of 527433 include six
    whitespace variants, now read as the one text of their id)."""
    chosen = [r for r in dl19.records if r.qid in ("527433", "489204", "104861")]
    assert len(chosen) == 18
    frame = negative_residuality(chosen, alnum)
    package = frame.groupby(["source", "qid"])["psi"].mean().to_dict()
    hand = _hand_psi(chosen)
    assert package.keys() == hand.keys()
    for key in hand:
        assert package[key] == pytest.approx(hand[key], abs=1e-12), key
    pinned = {
        ("REP_LLAMA", "527433"): 0.3901969529,
        ("BM25", "527433"): 0.3578252353,
        ("BM25", "489204"): 0.1971490707,
        ("SPLADE_P_P_ENSEMBLE_DISTIL", "104861"): 0.6369604050,
    }
    for key, value in pinned.items():
        assert hand[key] == pytest.approx(value, abs=1e-9), key
    # before: REP_LLAMA's negatives kept the run's own variant, and the corpus deduplicated exact
    # strings, so those six passages counted twice and ψ of every source on 527433 moved
    _, _, hits = raw
    own = {pid: text for ranked in hits["REP_LLAMA"].values() for pid, text in ranked}
    before = [
        replace(r, negatives=tuple(replace(n, text=own[n.id]) for n in r.negatives)) if r.source == "REP_LLAMA" else r
        for r in chosen
    ]
    assert (
        sum(own[n.id] != n.text for r in chosen if r.source == "REP_LLAMA" and r.qid == "527433" for n in r.negatives)
        == 6
    )
    assert _hand_psi(before, key=identity) == pytest.approx(hand, abs=1e-12)  # identity absorbs the variants
    exact = _hand_psi(before, key=lambda t: t)
    assert abs(exact[("BM25", "527433")] - hand[("BM25", "527433")]) > 0.01


def test_pooled_idf_whitespace_variants_once():
    """Whitespace variants of one passage (as different runs deliver them) count once in the pooled
    IDF corpus: N = 3 passages here, not 4, and ψ follows."""

    def rec(source: str, neg: str) -> Record:
        return Record("1", "alpha beta gamma", (Passage("p", "alpha delta"),), (Passage("n", neg),), source)

    records = [rec("a", "beta  gamma\n"), rec("b", "beta gamma"), rec("c", "gamma epsilon")]
    assert passage_identity(["beta  gamma\n", "beta gamma", "Beta Gamma", "gamma"]).tolist() == [0, 0, 0, 3]
    psi = negative_residuality(records, alnum).set_index("source")["psi"]

    def idf(df: int, n: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    # passages: "alpha delta", "beta gamma" (twice as strings, once as a passage), "gamma epsilon"
    n = 3
    alpha, beta, gamma = idf(1, n), idf(1, n), idf(2, n)
    assert psi["a"] == pytest.approx(alpha / (alpha + beta + gamma))
    assert psi["b"] == pytest.approx(psi["a"])
    assert psi["c"] == pytest.approx((alpha + beta) / (alpha + beta + gamma))
    # counted twice (N = 4, df(beta) = 2, df(gamma) = 3) ψ would differ
    n4 = 4
    wrong = idf(1, n4) / (idf(1, n4) + idf(2, n4) + idf(3, n4))
    assert abs(psi["a"] - wrong) > 1e-3


def test_per_source_idf_whitespace_variants_once():
    """Within one source's IDF corpus too, whitespace and case variants of a passage count once:
    source a holds "beta gamma" twice as strings (N = 2 passages, not 3)."""
    recs = [
        Record("1", "alpha beta gamma", (Passage("p", "alpha delta"),), (Passage("n1", "beta  gamma\n"),), "a"),
        Record("2", "alpha beta gamma", (Passage("p", "alpha delta"),), (Passage("n2", "Beta Gamma"),), "a"),
    ]
    psi = negative_residuality(recs, alnum, "per_source")["psi"].tolist()

    def idf(df: int, n: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    n = 2  # "alpha delta" and one "beta gamma"
    alpha, beta, gamma = idf(1, n), idf(1, n), idf(1, n)
    assert psi == pytest.approx([alpha / (alpha + beta + gamma)] * 2)


def test_identity_of_text_ids_in_hand_data(raw):
    """The raw data behind the pins: 464 ids with variants, all whitespace-only (so the identity,
    which also folds case and NFKC, merges nothing the loader keeps apart)."""
    _, _, hits = raw
    texts: dict[str, set[str]] = {}
    for run in RUNS:
        for ranked in hits[run].values():
            for pid, text in ranked:
                texts.setdefault(pid, set()).add(text)
    multi = {p: t for p, t in texts.items() if len(t) > 1}
    assert len(multi) == 464
    assert all(len({" ".join(t.split()) for t in ts}) == 1 for ts in multi.values())


def test_beir_positives_in_numeric_id_order(data):
    """SciFact corpus ids are integers: positives of one grade are ordered numerically (design §3),
    so p0 of a query judged relevant for "12" and "100" is "12" (string order would pick "100")."""
    import csv

    from transferdx.inputs.beir import load_beir

    qrels: dict[str, dict[str, int]] = {}
    with open(data / "beir" / "scifact" / "qrels" / "train.tsv", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    differs = {
        q: min(d, key=lambda p: (-d[p], int(p)))
        for q, d in qrels.items()
        if min(d, key=lambda p: (-d[p], int(p))) != min(d, key=lambda p: (-d[p], p))
    }
    assert differs, "SciFact train has queries whose numeric and string p0 differ"
    query_set = load_beir(data / "beir" / "scifact", split="train")
    for qid, p0 in differs.items():
        assert query_set.positives[qid][0] == p0
