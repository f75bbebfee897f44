"""The cleaned copy trains as it is (design §3.9, cleaning; issue 23 item 3): for each shape and file
format, ``transferdx.clean`` writes the input's own columns, in order, in its own form; a user loads
it with ``datasets`` and trains two steps of ``SentenceTransformerTrainer`` +
``MultipleNegativesRankingLoss`` on it without any conversion. Rows are accounted for: read =
written + excluded on reading + dropped − added, and every row that lost a negative is counted; a
query left without negatives is kept, never dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.records import normalise_text
from transferdx.inputs.writing import filled_width

from .tiny import tiny_model

# Four queries; copies of a positive (case / spacing only: duplicate_positive, a text reason) are the
# negatives the default cleaning removes. "river" loses every negative (emptied).
QUERIES = [
    ("apple engine", "apple engine info", ["APPLE  engine info", "violin planet", "garden castle"]),
    ("river about", "river about what", ["River About What", "river   ABOUT what"]),
    ("violin what", "violin what info", ["pepper castle", "planet garden", "Violin what INFO"]),
    ("castle info", "castle info about", ["engine apple", "about river", "what violin"]),
]


def triplet_rows() -> list[dict]:
    return [{"anchor": q, "positive": p, "negative": n} for q, p, negs in QUERIES for n in negs]


def ntuple_rows() -> list[dict]:
    rows = []
    for q, p, negs in QUERIES:
        padded = (negs * 3)[:3] if len(negs) < 3 else negs
        rows.append({"anchor": q, "positive": p, **{f"negative_{i}": n for i, n in enumerate(padded, 1)}})
    return rows


def labeled_pair_rows() -> list[dict]:
    rows = []
    for q, p, negs in QUERIES:
        rows.append({"anchor": q, "positive": p, "label": 1})
        rows += [{"anchor": q, "positive": n, "label": 0} for n in negs]
    return rows


def flag_rows() -> list[dict]:
    return [{"query": q, "pos": [p], "neg": list(negs)} for q, p, negs in QUERIES]


def records_rows() -> list[dict]:
    return [
        {
            "qid": f"q{i}",
            "query": q,
            "positives": [{"id": f"p{i}", "text": p}],
            "negatives": list(negs),
            "source": "mined",
        }
        for i, (q, p, negs) in enumerate(QUERIES)
    ]


SHAPES = {
    "triplet": triplet_rows,
    "ntuple": ntuple_rows,
    "labeled_pair": labeled_pair_rows,
    "flagembedding": flag_rows,
    "records": records_rows,
}
ST_SHAPES = ("triplet", "ntuple", "labeled_pair")
FORMS = ("jsonl", "jsonl.gz", "csv", "parquet", "save_to_disk")


def write_input(rows: list[dict], folder: Path, form: str) -> Path:
    frame = pd.DataFrame(rows)
    if form == "save_to_disk":
        import datasets

        path = folder / "mined"
        datasets.Dataset.from_pandas(frame, preserve_index=False).save_to_disk(str(path))
        return path
    path = folder / f"mined.{form}"
    if form.startswith("jsonl"):
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    elif form == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return path


def load_as_user(path: Path, form: str, cache: Path):
    """How a user reads the copy: ``load_dataset`` / ``load_from_disk``, nothing else."""
    import datasets

    if form == "save_to_disk":
        return datasets.load_from_disk(str(path))
    builder = {"jsonl": "json", "jsonl.gz": "json", "csv": "csv", "parquet": "parquet"}[form]
    return datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=str(cache))


def input_columns(path: Path, form: str, cache: Path) -> list[str]:
    return list(load_as_user(path, form, cache).column_names)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("tiny"))


def train_two_steps(model_dir: Path, dataset, out: Path) -> list[float]:
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    model = SentenceTransformer(str(model_dir), device="cpu")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out),
        max_steps=2,
        per_device_train_batch_size=2,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        use_cpu=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=dataset, loss=MultipleNegativesRankingLoss(model)
    )
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def copy_path(out: Path, src: Path) -> Path:
    return out / "cleaned" / src.name


def negatives_of(shape: str, row: dict) -> list[str]:
    if shape == "triplet":
        return [row["negative"]]
    if shape == "ntuple":
        return [v for k, v in row.items() if k.startswith("negative_")]
    if shape == "labeled_pair":
        return [row["positive"]] if int(row["label"]) == 0 else []
    if shape == "flagembedding":
        return list(row["neg"])
    return [n if isinstance(n, str) else n["text"] for n in row["negatives"]]


POSITIVE = {normalise_text(q): normalise_text(p) for q, p, _ in QUERIES}


def anchor_of(shape: str, row: dict) -> str:
    return row["query"] if shape in ("flagembedding", "records") else row["anchor"]


def copies_positive(shape: str, row: dict) -> bool:
    target = POSITIVE[normalise_text(anchor_of(shape, row))]
    return any(normalise_text(n) == target for n in negatives_of(shape, row))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shape", ST_SHAPES)
def test_st_shapes_clean_and_train_as_they_are(tmp_path, model_dir, shape, form):
    """Kills: a copy in another shape or form than the input (records JSONL), columns reordered
    (``qid`` as the anchor), a copy still holding a copy of a positive, a negative the input did not
    give the query (a borrowed one: nothing is invented by default), a repeat other than the default
    fill's (a short n-tuple row's own negatives again, in order), a dropped row not listed, rows
    unaccounted for, and a copy the trainer rejects."""
    rows = SHAPES[shape]()
    src = write_input(rows, tmp_path, form)
    done = tdx.clean(src, encoder=None, resamples=20, out=tmp_path / "out")
    dest = copy_path(tmp_path / "out", src)
    assert dest.exists() and done.descriptor["faithful"]
    cache = tmp_path / "hf"
    copy = load_as_user(dest, form, cache)
    assert list(copy.column_names) == input_columns(src, form, cache)
    out_rows = copy.to_list()
    assert not any(copies_positive(shape, r) for r in out_rows)
    given = {normalise_text(q): {normalise_text(n) for n in negs} for q, _, negs in QUERIES}
    for r in out_rows:  # every negative written is one the input gave that query, once a row or filled in order
        written = [normalise_text(n) for n in negatives_of(shape, r)]
        assert set(written) <= given[normalise_text(anchor_of(shape, r))] and filled_width(written) == len(set(written))
    dropped = set(done.rows.loc[done.rows["change"].isin(["dropped", "unwritable"]), "qid"])
    kept_anchors = {normalise_text(anchor_of(shape, r)) for r in out_rows}
    queries = {normalise_text(rec.query): rec.qid for rec in tdx.load(src).records}
    assert {q for q, qid in queries.items() if q not in kept_anchors} <= {
        q for q, qid in queries.items() if qid in dropped
    }
    expected_lost = sum(copies_positive(shape, r) for r in rows)
    acc = done.descriptor["rows"]
    assert acc["read"] == len(rows) and acc["lost_negatives"] == expected_lost > 0
    assert acc["read"] == len(out_rows) + acc["excluded_on_read"] + acc["dropped"] - acc["added"]
    assert len(done.rows[done.rows["n_lost"] > 0]) == expected_lost
    assert list(done.to_dataset().column_names) == list(copy.column_names)
    assert len(done.to_dataset()) == len(copy)
    losses = train_two_steps(model_dir, copy, tmp_path / "train")
    assert len(losses) == 2 and all(loss == loss for loss in losses)  # two finite steps ran


# mine_hard_negatives keeps the names of the dataset it mined: natural-questions and gooaq pairs come
# as (query, answer) and (question, answer), an STS-style pair set as (sentence1, sentence2)
RENAMED = {
    "query-answer": {"anchor": "query", "positive": "answer"},
    "sentence1-sentence2": {"anchor": "sentence1", "positive": "sentence2"},
}


@pytest.mark.parametrize("names", list(RENAMED))
@pytest.mark.parametrize("shape", ST_SHAPES)
def test_st_shapes_under_the_datasets_own_column_names(tmp_path, model_dir, shape, names):
    """Kills: a table under the mined dataset's own names refused as an unrecognised shape, read as
    other records than the same rows under ``anchor, positive``, cleaned into other rows, or written
    back under other names (the copy must train as the user's file did)."""
    rename = RENAMED[names]
    rows = SHAPES[shape]()
    (tmp_path / "plain").mkdir()
    (tmp_path / "named").mkdir()
    plain = write_input(rows, tmp_path / "plain", "parquet")
    named = write_input([{rename.get(k, k): v for k, v in r.items()} for r in rows], tmp_path / "named", "parquet")
    assert [r.to_dict() for r in tdx.load(named).records] == [r.to_dict() for r in tdx.load(plain).records]
    copies = []
    for src in (plain, named):
        tdx.clean(src, encoder=None, resamples=20, out=src.parent / "out")
        copies.append(load_as_user(copy_path(src.parent / "out", src), "parquet", tmp_path / "hf"))
    assert list(copies[1].column_names) == [rename.get(c, c) for c in input_columns(plain, "parquet", tmp_path / "hf")]
    assert copies[1].to_list() == [{rename.get(k, k): v for k, v in r.items()} for r in copies[0].to_list()]
    losses = train_two_steps(model_dir, copies[1], tmp_path / "train")
    assert len(losses) == 2 and all(loss == loss for loss in losses)


@pytest.mark.parametrize("fill", ["none", "borrow"])
@pytest.mark.parametrize("form", ["jsonl", "parquet"])
@pytest.mark.parametrize("shape", ["flagembedding", "records"])
def test_list_shapes_keep_their_shape(tmp_path, shape, form, fill):
    """Kills: FlagEmbedding or records tables rewritten into another shape, a line left with an empty
    ``neg`` list (FlagEmbedding samples from it), a borrowed negative nobody asked for (the emptied
    query's line is dropped and listed), and, with ``fill="borrow"``, the emptied query missing."""
    rows = SHAPES[shape]()
    src = write_input(rows, tmp_path, form)
    done = tdx.clean(src, encoder=None, resamples=20, out=tmp_path / "out", fill=fill)
    dest = copy_path(tmp_path / "out", src)
    copy = load_as_user(dest, form, tmp_path / "hf")
    assert list(copy.column_names) == input_columns(src, form, tmp_path / "hf")
    out_rows = copy.to_list()
    borrowing = fill == "borrow"
    assert len(out_rows) == len(rows) - (not borrowing) and all(negatives_of(shape, r) for r in out_rows)
    assert not any(copies_positive(shape, r) for r in out_rows)
    assert done.descriptor["n_emptied"] == 1 and done.descriptor["n_borrowed"] == borrowing
    changes = dict(zip(done.rows["qid"], done.rows["change"], strict=True))
    emptied_qid = done.emptied["qid"].iloc[0]
    assert changes[emptied_qid] == ("borrowed" if borrowing else "dropped")
    again = tdx.load(dest)  # the copy is read back by the package too
    assert len(again.records) == len(QUERIES) - (not borrowing) and not again.exclusions


def test_relabel_keeps_every_query_and_labels_pairs(tmp_path):
    """Kills: relabel dropping the queries whose negatives all moved (the 31-of-149 bug), and a
    labeled pair whose relabeled negative is not turned into label 1."""
    from .fakes import FixedEncoder, vec

    rows = [
        {"anchor": "apple", "positive": "the answer", "label": 1},
        {"anchor": "apple", "positive": "close", "label": 0},
        {"anchor": "river", "positive": "the answer two", "label": 1},
        {"anchor": "river", "positive": "low", "label": 0},
    ]
    src = write_input(rows, tmp_path, "jsonl")
    vectors = {"the answer": vec(0.8, 1), "the answer two": vec(0.8, 1), "close": vec(0.99, 2), "low": vec(0.1, 2)}
    from transferdx.auditing.audit import audit_records as core_audit
    from transferdx.auditing.result import Audit
    from transferdx.diagnostics.tokens import alnum

    loaded = tdx.load(src)
    result = Audit(core_audit(loaded, alnum, encoder=FixedEncoder(vectors), resamples=20))
    done = tdx.clean(src, result, action="relabel", reasons=["positive_aware"], out=tmp_path / "out")
    out_rows = [json.loads(line) for line in (tmp_path / "out" / "cleaned" / src.name).read_text().splitlines()]
    assert out_rows == [rows[0], rows[1] | {"label": 1}, rows[2], rows[3]]
    assert done.descriptor["n_relabeled"] == 1 and done.descriptor["n_emptied"] == 1
    assert done.descriptor["rows"]["by_change"] == {"relabeled": 1}


def test_review_files_carry_text_and_the_users_own_ids(tmp_path):
    """Kills: removed.csv / emptied.csv without the query, positive and negative texts, and a hashed
    qid where the user's file had no ids (the row's file:line is given instead) or had its own."""
    src = write_input(ntuple_rows(), tmp_path, "parquet")
    done = tdx.clean(src, encoder=None, resamples=20, out=tmp_path / "out")
    removed = pd.read_csv(tmp_path / "out" / "removed.csv", keep_default_na=False)
    assert {"input_id", "query", "positive", "negative"} <= set(removed.columns)
    row = removed.iloc[0]
    line = next(i for i, (q, _, _) in enumerate(QUERIES, 1) if q == row["query"])
    assert row["input_id"] == f"{src.name}:{line}" and row["positive"] == QUERIES[line - 1][1]
    emptied = pd.read_csv(tmp_path / "out" / "emptied.csv", keep_default_na=False)
    assert emptied["query"].tolist() == ["river about"] and emptied["input_id"].tolist() == [f"{src.name}:2"]
    with_ids = tdx.clean(pd.DataFrame(records_rows()), encoder=None, resamples=20)  # records carry their own qids
    assert set(with_ids.removed["input_id"]) <= {f"q{i}" for i in range(len(QUERIES))}
    assert len(done.removed) == len(removed)


# Two queries for relabel / both, under the fixed encoder (s(q,p) = 0.8, p on axis 1): "close" sits
# by the positive (near_duplicate_positive, the reason acted on: relabeled); "hot" outscores it on
# another axis (positive_aware only: on the review list, removed by ``both`` alone).
ANSWERS = [
    ("apple", "the answer", ["close", "hot", "low", "far"]),
    ("river", "the answer two", ["near", "warm", "low two", "far two"]),
]
ANSWER_VECTORS = {"the answer": (0.8, 1), "the answer two": (0.8, 1), "close": (0.79, 1), "near": (0.79, 1)}
ANSWER_VECTORS |= {"hot": (0.9, 2), "warm": (0.9, 2)}


def answer_rows(shape: str) -> list[dict]:
    rows: list[dict] = []
    for i, (q, p, negs) in enumerate(ANSWERS):
        if shape == "triplet":
            rows += [{"anchor": q, "positive": p, "negative": n} for n in negs]
        elif shape == "ntuple":
            rows.append({"anchor": q, "positive": p, **{f"negative_{j}": n for j, n in enumerate(negs, 1)}})
        elif shape == "labeled_pair":
            rows += [
                {"anchor": q, "positive": p, "label": 1},
                *({"anchor": q, "positive": n, "label": 0} for n in negs),
            ]
        elif shape == "flagembedding":
            rows.append({"query": q, "pos": [p], "neg": list(negs)})
        else:
            rows.append(
                {
                    "qid": f"q{i}",
                    "query": q,
                    "positives": [{"id": f"p{i}", "text": p}],
                    "negatives": list(negs),
                    "source": "mined",
                }
            )
    return rows


def positives_of(shape: str, row: dict) -> list[str]:
    if shape in ("triplet", "ntuple"):
        return [row["positive"]]
    if shape == "labeled_pair":
        return [row["positive"]] if int(row["label"]) == 1 else []
    if shape == "flagembedding":
        return list(row["pos"])
    return [p if isinstance(p, str) else p["text"] for p in row["positives"]]


@pytest.mark.parametrize("action", ["relabel", "both"])
@pytest.mark.parametrize("shape", [*ST_SHAPES, "flagembedding", "records"])
def test_relabel_and_both_on_every_shape(tmp_path, model_dir, shape, action):
    """Kills: a relabeled passage left among the negatives or missing from the positives of the
    user's shape (an extra row for fixed-slot shapes, label 1 for pairs, ``pos`` / ``positives`` for
    lists), ``both`` not removing the review list or relabeling it, ``relabel`` removing it,
    rows unaccounted for, and a copy the trainer rejects (two steps, as it is)."""
    from transferdx.auditing.audit import audit_records as core_audit
    from transferdx.auditing.result import Audit
    from transferdx.diagnostics.tokens import alnum

    from .fakes import FixedEncoder, vec

    rows = answer_rows(shape)
    src = write_input(rows, tmp_path, "jsonl")
    texts = {t for _, p, negs in ANSWERS for t in (p, *negs)}
    vectors = {t: vec(*ANSWER_VECTORS.get(t, (0.1, 3))) for t in texts}
    result = Audit(core_audit(tdx.load(src), alnum, encoder=FixedEncoder(vectors), resamples=20))
    keep = 2 if shape == "ntuple" else None  # four slots → two: what is left after ``both`` (nothing invented)
    done = tdx.clean(src, result, action=action, reasons=["near_duplicate_positive"], keep=keep, out=tmp_path / "out")
    copy = load_as_user(copy_path(tmp_path / "out", src), "jsonl", tmp_path / "hf")
    out_rows = copy.to_list()
    negatives = [n for r in out_rows for n in negatives_of(shape, r)]
    positives = {p for r in out_rows for p in positives_of(shape, r)}
    assert done.descriptor["n_relabeled"] == 2 and {"close", "near"} <= positives
    assert not {"close", "near"} & set(negatives)
    reviewed = {"hot", "warm"}
    if action == "both":
        gone = done.removed[done.removed["action"] == "removed"]
        assert set(gone["negative"]) == reviewed and len(done.review) == 0
        assert not reviewed & set(negatives)
    else:
        assert set(done.review["negative"]) == reviewed and reviewed <= set(negatives)
    acc = done.descriptor["rows"]
    assert acc["read"] == len(out_rows) + acc["excluded_on_read"] + acc["dropped"] - acc["added"]
    if shape in ST_SHAPES:
        losses = train_two_steps(model_dir, copy, tmp_path / "train")
        assert len(losses) == 2 and all(loss == loss for loss in losses)
