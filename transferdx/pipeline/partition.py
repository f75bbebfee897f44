"""Which shard a string belongs to: the one stable partition that the sharded audit's map tasks
(texts) and stat tasks (query ids) both use."""

from __future__ import annotations

from transferdx.embed.cache import text_key


def shard_of(key: str, shards: int) -> int:
    """The shard (0 … shards − 1) of the string ``key`` (a text, or a query id): the first 8 bytes
    of SHA-256(key as UTF-8), big-endian, modulo ``shards`` — for a text, the first 8 bytes of its
    cache key (:func:`~transferdx.embed.cache.text_key`). Stable across runs, machines and Python
    versions."""
    if shards < 1:
        raise ValueError(f"shards must be ≥ 1, got {shards}")
    return shard_of_key(text_key(str(key)), shards)


def shard_of_key(key: bytes, shards: int) -> int:
    """:func:`shard_of` from the text's cache key (SHA-256 digest)."""
    return int.from_bytes(key[:8], "big") % shards
