"""A tiny, randomly initialised sentence-transformers model built in-process (no download)."""

from __future__ import annotations

from pathlib import Path

WORDS = ["apple", "river", "engine", "violin", "planet", "garden", "castle", "pepper", "about", "info", "what"]
# Common words of biomedical abstracts (written here, not taken from any data set): with them a tiny
# model tells SciFact passages apart instead of reading nearly all of them as [UNK] (ties everywhere).
SCIENCE_WORDS = (
    "cell cells cancer protein proteins gene genes expression patients risk disease clinical study "
    "studies treatment tumor tumour mice human blood increased reduced associated activity levels "
    "effect effects response immune infection virus dna rna mutation mutations receptor signaling "
    "pathway growth death brain heart liver kidney lung breast bone muscle insulin glucose diabetes "
    "obesity age women men children mortality survival therapy drug dose trial trials vaccine "
    "antibiotic bacteria resistance inflammation stem tissue mouse model models analysis data "
    "association higher lower rate rates function role induced mechanism inhibition binding "
    "vitamin pregnancy birth sleep exercise diet smoking alcohol stress memory neurons t b "
    "high low new not no is are was were with without in of the and or to for by on"
).split()


def tiny_model(folder: Path, seed: int = 0, words: list[str] | tuple[str, ...] = ()) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys([*WORDS, *words])]
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


def tiny_backbones(root: Path) -> Path:
    """A config folder ``root/conf`` for Hydra's search path with two tiny local backbones, ``tiny_a``
    and ``tiny_b`` (seeds 0 and 1, the science words); returns ``root``."""
    conf = root / "conf" / "backbone"
    conf.mkdir(parents=True)
    for name, seed in (("tiny_a", 0), ("tiny_b", 1)):
        model = tiny_model(root / name, seed=seed, words=SCIENCE_WORDS)
        (conf / f"{name}.yaml").write_text(f"name: {name}\nmodel: {model}\nsource: path\nbatch_size: 8\n")
    return root
