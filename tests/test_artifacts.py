"""Atomic writes and output-directory confinement."""

from __future__ import annotations

import pytest

from transferdx.artifacts import atomic_write_text, content_hash, safe_join


def test_safe_join_refuses_escapes(tmp_path):
    assert safe_join(tmp_path, "profile.csv") == (tmp_path / "profile.csv").resolve()
    for bad in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ValueError, match="escapes the output directory"):
            safe_join(tmp_path, bad)


def test_atomic_write_leaves_no_temporary(tmp_path):
    path = atomic_write_text(tmp_path / "sub" / "f.txt", "hello")
    assert path.read_text() == "hello"
    assert [p.name for p in path.parent.iterdir()] == ["f.txt"]


def test_content_hash_is_order_insensitive_for_mappings():
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})
    assert content_hash("a", "b") != content_hash("ab")
