"""One object per distinct text.

A training set repeats its passages: the same passage is a negative of thousands of queries and of
every source mined from the same pool, and a JSON parser makes a new string for every occurrence.
Two tools keep one copy instead:

- **Load-time interning** (:func:`intern_text`, :func:`intern_passage`): every loader builds its
  records through ``RecordBuilder.add``, which interns each record's strings and passages. Equal
  strings (queries, passage texts, ids, methods, source names) then share one ``str`` object, and
  equal passages (every field equal, of the same type) share one frozen dataclass instance (a
  :class:`~transferdx.inputs.records.Passage`), across files, sources and loads. The pools are
  process-wide but do not keep texts alive: an entry that nothing but the pool refers to is
  dropped each time a pool has doubled since its last sweep, and :func:`release` drops them all.
  Interning is an optimisation only: a text that misses the pool is an equal copy, never a
  different value.
- :class:`TextTable`: an id table for one computation, ``text → id`` in first-seen order and
  ``id → the one string``; per-item tables then hold integer ids instead of text references, and
  :func:`text_column` makes such a table a pandas column (a categorical over the distinct texts).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
# a frozen dataclass instance (a Passage): this module knows only its fields, never its type
P = TypeVar("P", bound="DataclassInstance")

SWEEP_MIN = 65_536  # a pool is never swept below this many entries


class TextTable:
    """Distinct texts with integer ids in first-seen order; ``texts[i]`` is the one object kept."""

    __slots__ = ("_index", "texts")

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._index: dict[str, int] = {}
        self.texts: list[str] = []
        for text in texts:
            self.add(text)

    def add(self, text: str) -> int:
        """The id of ``text``, adding it when new."""
        index = self._index
        i = index.get(text)
        if i is None:
            i = index[text] = len(self.texts)
            self.texts.append(text)
        return i

    def ids(self, texts: Iterable[str]) -> np.ndarray:
        """Ids (int64) of ``texts``, adding the new ones in first-seen order."""
        texts = texts if isinstance(texts, list) else list(texts)
        index = self._index
        for text in dict.fromkeys(texts):  # the distinct texts, in first-seen order
            if text not in index:
                index[text] = len(self.texts)
                self.texts.append(text)
        return np.fromiter(map(index.__getitem__, texts), dtype=np.int64, count=len(texts))

    def intern(self, text: str) -> str:
        """The table's object for ``text`` (added when new)."""
        return self.texts[self.add(text)]

    def id(self, text: str) -> int:
        """The id of a text already in the table (``KeyError`` otherwise)."""
        return self._index[text]

    def __getitem__(self, i: int) -> str:
        return self.texts[i]

    def __contains__(self, text: object) -> bool:
        return text in self._index

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)


def text_column(texts: Iterable[str | None]) -> pd.Categorical:
    """A pandas column that holds each distinct text once: codes into the distinct texts (first-seen
    order, the string objects themselves, not copies); ``None`` is missing. A plain ``str`` column
    would copy every occurrence (pandas ≥ 3 stores strings in Arrow buffers)."""
    values = list(texts)
    table = TextTable()
    present = [v for v in values if v is not None]
    codes = np.full(len(values), -1, dtype=np.int64)
    if present:
        codes[[i for i, v in enumerate(values) if v is not None]] = table.ids(present)
    categories = pd.Index(np.asarray(table.texts, dtype=object), dtype=object)
    return pd.Categorical.from_codes(codes, categories=categories)


class _Pool(Generic[T]):
    """key → canonical object, swept of entries that only the pool still refers to."""

    def __init__(self, probe: Callable[[], tuple[Hashable, T]]) -> None:
        self.data: dict[Hashable, T] = {}
        self.swept_at = SWEEP_MIN
        self.probe = probe  # a fresh (key, object) pair that nothing else refers to

    def add(self, key: Hashable, obj: T) -> T:
        """The pooled object under ``key``, ``obj`` when there is none yet."""
        obj = self.data.setdefault(key, obj)
        if len(self.data) >= 2 * self.swept_at:
            self.sweep()
        return obj

    def sweep(self) -> None:
        """Drop the entries that nothing but the pool refers to: those with no more references
        than a fresh probe entry, counted by the same expression. An entry dropped while still in
        use only stops being shared with later equal values (CPython reference counts; where there
        are none, the pool is cleared)."""
        refcount = getattr(sys, "getrefcount", None)
        if refcount is None:
            self.data.clear()
        else:
            key, obj = self.probe()
            self.data[key] = obj
            probe = id(obj)
            del key, obj
            counts = [(k, id(v), refcount(v)) for k, v in list(self.data.items())]
            floor = next(n for _, i, n in counts if i == probe)
            for k, _, n in counts:
                if n <= floor:
                    self.data.pop(k, None)
        self.swept_at = max(SWEEP_MIN, len(self.data))


def _text_probe() -> tuple[Hashable, str]:
    text = "".join(["\x00transferdx-probe-", str(id(object()))])  # a new string object
    return text, text


def _passage_probe() -> tuple[Hashable, Any]:
    return ("\x00transferdx-probe", object()), object()


_TEXTS: _Pool[str] = _Pool(_text_probe)
_PASSAGES: _Pool[Any] = _Pool(_passage_probe)  # passage key → Passage
_PLAIN = frozenset({str, int, type(None)})


def intern_text(text: str) -> str:
    """The pool's object equal to ``text`` (exact ``str`` only; a subclass is returned as is)."""
    if type(text) is not str:
        return text
    obj = _TEXTS.data.get(text)
    return _TEXTS.add(text, text) if obj is None else obj


def _exact(value: Any) -> Any:
    """A hashable key equal only for values of the same type and exactly the same value
    (``0.0`` and ``-0.0``, ``1`` and ``True`` and ``1.0`` stay apart)."""
    if value is None or type(value) is str or type(value) is int:
        return value
    if isinstance(value, float):
        return (type(value), float(value).hex())
    return (type(value), repr(value))


_FIELDS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _fields(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """A dataclass's field names and a getter of their values as a tuple. (Not ``vars()``: that
    would give each instance a dict of its own, larger and slower to read than inline attributes.)"""
    got = _FIELDS.get(cls)
    if got is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        getter = attrgetter(*names) if len(names) > 1 else lambda obj: tuple(getattr(obj, n) for n in names)
        got = _FIELDS[cls] = (names, getter)
    return got


def _key(values: tuple[Any, ...]) -> Hashable:
    return values if _PLAIN.issuperset(map(type, values)) else tuple(map(_exact, values))


def intern_passage(passage: P) -> P:
    """The pool's passage equal to ``passage`` in every field (with its strings interned)."""
    names, getter = _fields(type(passage))
    values = getter(passage)
    obj = _PASSAGES.data.get(_key(values))
    if obj is not None:
        return obj
    changes: dict[str, Any] = {k: intern_text(v) for k, v in zip(names, values, strict=True) if type(v) is str}
    obj = dataclasses.replace(passage, **changes)
    return _PASSAGES.add(_key(getter(obj)), obj)


def intern_passages(passages: Iterable[P]) -> tuple[P, ...]:
    """:func:`intern_passage` of each passage."""
    return tuple(map(intern_passage, passages))


def release() -> None:
    """Forget every pooled text and passage (records already loaded keep theirs)."""
    _TEXTS.data.clear()
    _PASSAGES.data.clear()
    _TEXTS.swept_at = _PASSAGES.swept_at = SWEEP_MIN


def pooled() -> tuple[int, int]:
    """(texts, passages) currently pooled."""
    return len(_TEXTS.data), len(_PASSAGES.data)
