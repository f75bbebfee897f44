"""A tiny, randomly initialised sentence-transformers model built in-process (no download)."""

from __future__ import annotations

from pathlib import Path

WORDS = ["apple", "river", "engine", "violin", "planet", "garden", "castle", "pepper", "about", "info", "what"]


def tiny_model(folder: Path, seed: int = 0) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(folder / "hf")
    tokenizer.save_pretrained(folder / "hf")
    model = SentenceTransformer(
        modules=[models.Transformer(str(folder / "hf"), max_seq_length=32), models.Pooling(32, "mean")], device="cpu"
    )
    model.save(str(folder / "st"))
    return folder / "st"
