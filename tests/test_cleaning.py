"""``transferdx.clean`` / ``transferdx-clean`` (design §3.9, cleaning): suspected false negatives
removed or relabeled as positives, the removed and emptied tables, the copy's format, re-audits at a
zero suspect rate, byte-stable output; and α, δ from the Hydra config."""

from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir

import transferdx as tdx
from transferdx import config
from transferdx.auditing.audit import audit_records as core_audit
from transferdx.auditing.result import Audit
from transferdx.diagnostics.suspicion import SuspicionSettings
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import LoadResult, Passage, Record
from transferdx.inputs.transferdx_records import read_records, write_records
from transferdx.inputs.writing import BORROWED_RELATION
from transferdx.pipeline.cleaning.core import CONTEXT_COLUMNS, RELABELED_RELATION, clean_records
from transferdx.presets import config_dir

from .conftest import run_cli
from .fakes import FixedEncoder, vec


def rec(qid: str, negatives: list[tuple[str, str]], positive: str = "the answer", source: str = "s") -> Record:
    return Record(qid, f"query {qid}", (Passage("p", positive),), tuple(Passage(i, t) for i, t in negatives), source)


# q2 comes first: the copy keeps the input's order, not the audit's (source, qid) order.
RECORDS = [
    rec("q2", [("a", "alpha"), ("b", "  THE   answer "), ("c", "gamma"), ("a", "alpha"), ("d", "delta")]),
    rec("q1", [("e", "The Answer")]),  # only negative copies p: emptied
    rec("q3", [("f", "fine"), ("g", "good")]),  # nothing suspected
]


TEXT = ["duplicate_positive", "duplicate_negative"]
ENC = ["positive_aware", "duplicate_positive", "near_duplicate_positive", "duplicate_negative"]


def lexical(records):
    return tdx.audit(records, encoder=None, resamples=20, controls="none")


def test_remove_text_reasons_counts_order_and_emptied():
    """Kills: removing the first occurrence of a repeated negative instead of the repeat, reordering
    the kept negatives or the records (to the audit's sorted order), dropping an emptied record
    without listing it, and counting the emptied record's negative as relabeled."""
    plain = tdx.clean(RECORDS, lexical(RECORDS), action="remove", reasons=TEXT)  # nothing invented
    assert [r.qid for r in plain.records] == ["q2", "q3"] and plain.emptied["qid"].tolist() == ["q1"]
    assert "dropped" in plain.emptied["fallback"].iloc[0] and plain.descriptor["n_borrowed"] == 0
    done = tdx.clean(RECORDS, lexical(RECORDS), action="remove", reasons=TEXT, fill="borrow")
    assert [r.qid for r in done.records] == ["q2", "q1", "q3"]  # q1 kept, borrowing q3's negatives
    assert done.records[1].negatives == tuple(
        dataclasses.replace(n, relation=BORROWED_RELATION, method="borrowed from q3") for n in RECORDS[2].negatives
    )
    q2 = done.records[0]
    assert [(n.id, n.text) for n in q2.negatives] == [("a", "alpha"), ("c", "gamma"), ("d", "delta")]
    assert q2.positives == RECORDS[0].positives
    assert done.records[2] == RECORDS[2]
    assert done.removed[["qid", "neg_index", "neg_id", "reasons", "action"]].values.tolist() == [
        ["q2", 1, "b", "duplicate_positive", "removed"],
        ["q2", 3, "a", "duplicate_negative", "removed"],
        ["q1", 0, "e", "duplicate_positive", "removed"],
    ]
    assert done.removed["negative"].tolist() == ["  THE   answer ", "alpha", "The Answer"]
    assert done.emptied.drop(columns=CONTEXT_COLUMNS).values.tolist()[0][:5] == ["s", "q1", 1, 1, 0]
    assert "borrowed 2 negatives (borrowed from q3)" in done.emptied["fallback"].iloc[0]
    d = done.descriptor
    assert (d["n_removed"], d["n_relabeled"], d["n_emptied"], d["n_records_out"], d["n_borrowed"]) == (3, 0, 1, 3, 1)
    assert "1 records left without negatives" in done.summary() and "emptied: q1 (s): query q1" in done.summary()


def test_reasons_subset_and_what_cannot_be_cleaned():
    """Kills: ignoring ``reasons`` (acting on every reason), treating an unchecked encoder reason as
    'nothing to remove' instead of an error, accepting an unknown action, and cleaning with an
    audit of other records (a sampled audit)."""
    result = lexical(RECORDS)
    done = tdx.clean(RECORDS, result, reasons=["duplicate_negative"])
    assert done.removed["neg_id"].tolist() == ["a"] and done.emptied.empty
    with pytest.raises(ValueError, match="not checked"):
        tdx.clean(RECORDS, result, reasons=["positive_aware"])
    with pytest.raises(ValueError, match="unknown suspicion reason"):
        tdx.clean(RECORDS, result, reasons=["nope"])
    with pytest.raises(ValueError, match="action"):
        tdx.clean(RECORDS, result, action="drop")
    with pytest.raises(ValueError, match="does not cover"):
        tdx.clean(RECORDS, lexical(RECORDS[:2]))


def test_text_reasons_need_no_encoder_and_reaudit_is_clean():
    """Kills: a copy that still holds a suspected negative for a reason it cleaned (re-audit rate
    must be 0 where it was > 0), and cleaning text reasons loading the encoder (a bogus encoder name
    would raise)."""
    before = lexical(RECORDS).profile.iloc[0]
    assert before["duplicate_positive_rate"] > 0 and before["duplicate_negative_rate"] > 0
    done = tdx.clean(
        RECORDS, reasons=["duplicate_positive", "duplicate_negative"], encoder="no-such-encoder", resamples=20
    )
    after = lexical(done.records).profile.iloc[0]
    assert after["duplicate_positive_rate"] == 0 and after["duplicate_negative_rate"] == 0
    assert after["fn_suspect_rate"] == 0


# ---------------------------------------------------------------------------------------------
# The encoder reasons, with a fixed fake encoder: s(q, x) = x[0]


# s(q,p) = 0.8 everywhere, so positive_aware ⇔ s(q,n) ≥ 0.76
SCORES = {"the answer": vec(0.8, 1), "low": vec(0.1, 2), "Close": vec(0.1, 2), "close": vec(0.9, 2)}
SCORES |= {"mid": vec(0.5, 2), "high": vec(0.99, 2), "THE ANSWER": vec(0.8, 1)}
ENC_RECORDS = [
    # "Close" (kept, s=0.1) has the normalised text of "close" (relabeled): removed after relabel
    rec("q1", [("n0", "Close"), ("n1", "low"), ("n2", "close"), ("n3", "mid"), ("n4", "THE ANSWER")]),
    rec("q2", [("n5", "high"), ("n6", "high")]),  # same text, other ids: the 2nd cannot be a 2nd positive
    rec("q3", [("m", "mid"), ("m", "mid")]),  # a repeat only (duplicate_negative): removed, never relabeled
]


def fake_audit(records):
    return Audit(core_audit(LoadResult(list(records)), alnum, encoder=FixedEncoder(SCORES), resamples=20))


def test_relabel_moves_answering_negatives_after_p0():
    """Kills: relabeling a copy of p or a repeated negative (a duplicate positive), putting the moved
    negative before p0, forgetting the relation mark, and keeping a negative that now copies a
    relabeled one."""
    done = tdx.clean(ENC_RECORDS, fake_audit(ENC_RECORDS), action="relabel", reasons=ENC, fill="borrow")
    q1 = done.records[0]
    assert [p.id for p in q1.positives] == ["p", "n2"]
    assert q1.positives[1] == Passage("n2", "close", relation=RELABELED_RELATION)
    assert [n.id for n in q1.negatives] == ["n1", "n3"]
    assert done.removed[["qid", "neg_index", "reasons", "action"]].values.tolist() == [
        ["q1", 0, "duplicate_positive", "removed"],
        ["q1", 2, "positive_aware", "relabeled"],
        ["q1", 4, "positive_aware;duplicate_positive;near_duplicate_positive", "removed"],
        ["q2", 0, "positive_aware", "relabeled"],
        ["q2", 1, "positive_aware", "removed"],
        ["q3", 1, "duplicate_negative", "removed"],
    ]
    assert [p.id for p in done.records[1].positives] == ["p", "n5"]  # q2 kept: borrows q3's negative
    assert [(n.id, n.relation) for n in done.records[1].negatives] == [("m", BORROWED_RELATION)]
    assert [n.id for n in done.records[2].negatives] == ["m"] and len(done.records[2].positives) == 1
    assert done.emptied.drop(columns=CONTEXT_COLUMNS).values.tolist()[0][:5] == ["s", "q2", 2, 1, 1]
    assert (done.descriptor["n_relabeled"], done.descriptor["n_removed"]) == (2, 4)


@pytest.mark.parametrize("action", ["remove", "relabel", "both"])
def test_reaudit_with_the_encoder_is_clean(action):
    """Kills: leaving positive_aware / near_duplicate_positive suspects in the copy, and a relabel
    that changes p0 (which would move every s(q,p) and so the rule's bar)."""
    done = tdx.clean(ENC_RECORDS, fake_audit(ENC_RECORDS), action=action, reasons=ENC)
    profile = fake_audit(done.records).profile.iloc[0]
    for rate in ("fn_suspect_rate", "positive_aware_rate", "near_duplicate_positive_rate", "duplicate_positive_rate"):
        assert profile[rate] == 0, rate
    assert all(r.positives[0] == Passage("p", "the answer") for r in done.records)


def test_core_takes_the_negatives_csv_frame(tmp_path):
    """Kills: a core that needs the Audit object (negatives.csv reads ``fn_reasons`` as NaN when
    empty and the encoder reasons as missing)."""
    import pandas as pd

    result = lexical(RECORDS)
    result.save(tmp_path)
    frame = pd.read_csv(tmp_path / "negatives.csv")
    cleaned, removed, emptied = clean_records(RECORDS, frame, action="remove", reasons=TEXT)
    again = tdx.clean(RECORDS, result, reasons=TEXT)
    assert [q.fill for q in cleaned if q.fill] == [r.negatives for r in again.records]
    assert removed.equals(again.removed.drop(columns=CONTEXT_COLUMNS))
    assert emptied.equals(again.emptied.drop(columns=CONTEXT_COLUMNS))


# ---------------------------------------------------------------------------------------------
# Files: the copy's format, bytes, the CLI


def test_copy_keeps_a_records_file_and_says_when_it_cannot(tmp_path):
    """Kills: writing a records file input as something else (another name or a folder), a copy the
    reader cannot read back, output bytes that vary between runs, and an in-memory input claimed as
    written back in its own format."""
    path = tmp_path / "mined.jsonl"
    write_records(RECORDS, path)
    a = tdx.clean(path, encoder=None, resamples=20, out=tmp_path / "a", reasons=TEXT)
    b = tdx.clean(path, encoder=None, resamples=20, out=tmp_path / "b", reasons=TEXT)
    names = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert names == [
        ".transferdx-complete",  # written last: the folder is finished (docs/outputs.md)
        "clean.json",
        "cleaned/mined.jsonl",
        "emptied.csv",
        "exclusions.csv",
        "removed.csv",
        "review.csv",
        "rows.csv",
    ]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert tdx.load(tmp_path / "a" / "cleaned").records == a.records == b.records
    assert a.descriptor["faithful"] is True and "note:" not in a.summary()
    mem = tdx.clean(RECORDS, encoder=None, resamples=20, out=tmp_path / "m")
    assert mem.descriptor["faithful"] is False and "cannot be written back" in mem.summary()
    assert read_records(tmp_path / "m" / "cleaned").records == mem.records
    flag = tmp_path / "flag.jsonl"  # FlagEmbedding {query, pos, neg}: written back as FlagEmbedding
    flag.write_text('{"query": "q", "pos": ["the answer"], "neg": ["x", "THE answer"], "id": 7}\n', encoding="utf-8")
    other = tdx.clean(flag, encoder=None, resamples=20, out=tmp_path / "f")
    assert other.descriptor["faithful"] is True
    written = (tmp_path / "f" / "cleaned" / "flag.jsonl").read_text(encoding="utf-8")
    assert written == '{"query": "q", "pos": ["the answer"], "neg": ["x"], "id": 7}\n'
    assert other.rows[["change", "n_lost"]].values.tolist() == [["trimmed", 1]]


def compose_clean(*items: str):
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="clean", overrides=list(items))


def test_alpha_delta_from_the_config():
    """Kills: ``diagnostics.suspicion`` not passed to the settings (α fixed at 0.95), and defaults
    other than the library's (which would change existing audit outputs)."""
    cfg = compose_clean("diagnostics.suspicion.alpha=0.9", "diagnostics.suspicion.delta=0.8")
    assert config.semantic_settings(cfg).suspicion == SuspicionSettings(alpha=0.9, delta=0.8)
    assert config.semantic_settings(compose_clean()).suspicion == SuspicionSettings()
    call = config.clean_call(compose_clean("input=x.jsonl", "clean.reasons=[duplicate_negative]", "output_dir=o"))
    assert call["encoder"] is None and call["options"].semantic is None and call["reasons"] == ["duplicate_negative"]


def test_cli_end_to_end(tmp_path):
    """Kills: a console script that writes other bytes than the library, loses the summary's emptied
    count, or exits 0 on a bad action."""
    path = tmp_path / "mined.jsonl"
    write_records(RECORDS, path)
    out = tmp_path / "cli"
    proc = run_cli(
        "clean",
        f"input={path}",
        f"output_dir={out}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "diagnostics=lexical",
        "clean.reasons=[duplicate_positive,duplicate_negative]",
    )
    assert "1 records left without negatives" in proc.stdout and "3 negatives removed" in proc.stdout
    lib = tdx.clean(path, encoder=None, out=tmp_path / "lib", reasons=TEXT)
    for name in ("cleaned/mined.jsonl", "removed.csv", "emptied.csv"):
        assert (out / name).read_bytes() == (tmp_path / "lib" / name).read_bytes(), name
    assert lib.descriptor["n_removed"] == 3
    bad = run_cli(
        "clean", f"input={path}", f"output_dir={out}", "clean.action=drop", "diagnostics=lexical", check=False
    )
    assert bad.returncode == 2 and "action" in bad.stderr


def test_default_acts_on_high_precision_reasons_only_and_lists_the_rest():
    """Kills: default cleaning removing positive_aware suspects (measured precision near the base
    rate), dropping them from view instead of listing them for review, and a summary that says the
    encoder did not run when it did (combined is unchecked because the rule is positive_aware)."""
    done = tdx.clean(ENC_RECORDS, fake_audit(ENC_RECORDS), min_probability=None)
    assert done.descriptor["reasons"] == ["duplicate_positive", "near_duplicate_positive"]
    acted = {r for joined in done.removed["reasons"] for r in joined.split(";")}
    assert acted == {"duplicate_positive", "near_duplicate_positive"} and len(done.removed) == 1
    assert set(done.review["neg_id"]) == {"n2", "n5", "n6", "m"}  # positive_aware / duplicate_negative only
    summary = done.summary()
    assert "not checked: combined (the audit's score rule is positive_aware)" in summary
    assert "no encoder" not in summary and "4 other suspects listed for review" in summary


def test_min_probability_uses_the_column_only_when_present():
    """Kills: ignoring ``fn_probability`` when asked, acting on it when not asked, failing when the
    column is absent, and an out-of-range threshold accepted."""
    import numpy as np

    frame = fake_audit(ENC_RECORDS).result.negatives.drop(columns=["fn_probability"], errors="ignore")
    plain = tdx.clean(ENC_RECORDS, frame, min_probability=0.5)
    assert not plain.descriptor["probability_used"]
    frame["fn_probability"] = np.where(frame["neg_index"].eq(1) & frame["qid"].eq("q1"), 0.9, 0.1)
    done = tdx.clean(ENC_RECORDS, frame, min_probability=0.5)
    assert ["q1", 1, "fn_probability", "removed"] in done.removed[
        ["qid", "neg_index", "reasons", "action"]
    ].values.tolist()
    assert "fn_probability ≥ 0.5" in done.summary()
    unused = tdx.clean(ENC_RECORDS, frame, min_probability=None)
    assert "fn_probability" not in set(unused.removed["reasons"])
    # auto: the calibrated 0.80 with the default reasons (0.9 ≥ 0.8 is acted on), none with reasons given
    auto = tdx.clean(ENC_RECORDS, frame)
    assert auto.descriptor["min_probability"] == 0.8 and "fn_probability" in set(auto.removed["reasons"])
    given = tdx.clean(ENC_RECORDS, frame, reasons=["duplicate_positive"])
    assert given.descriptor["min_probability"] is None
    with pytest.raises(ValueError, match="min_probability"):
        tdx.clean(ENC_RECORDS, frame, min_probability=1.5)


def test_composite_ci_size_limit_from_the_config():
    """Kills: ``diagnostics.composite.max_negatives`` not passed on, ``null`` not read as no limit,
    and a YAML default other than the library's."""
    from transferdx.diagnostics.composite import CompositeSettings

    assert config.semantic_settings(compose_clean()).composite == CompositeSettings()
    cfg = compose_clean("diagnostics.composite.max_negatives=12")
    assert config.semantic_settings(cfg).composite.max_negatives == 12
    cfg = compose_clean("diagnostics.composite.max_negatives=null")
    assert config.semantic_settings(cfg).composite.max_negatives is None
