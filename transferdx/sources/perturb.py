"""Structured perturbations of a positive (no model): edits that keep its topic words but change
what it says. Each rule returns the edited text and the tokens it was allowed to change, or None
when it cannot apply (the caller skips and counts it; nothing is faked).

Rules (``PERTURBATIONS``), applied to the first sentence where they fit:
- ``negation``: insert "not" after the first auxiliary verb ("is" → "is not"), or remove an
  existing "not"/"no".
- ``entity_swap``: swap the first two distinct capitalised names that are not sentence-initial.
- ``number_swap``: swap the first two distinct numbers; with one number, change it (×2 or +1).
- ``role_reversal``: swap the subject and object phrases around a relational verb
  ("A increases B" → "B increases A").
- ``predicate_swap``: replace a relational word by its antonym (increases ↔ decreases, higher ↔
  lower, before ↔ after, ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable

Edit = tuple[str, frozenset[str]] | None

_SENTENCE = re.compile(r".+?(?:[.!?](?=\s|$)|$)", re.DOTALL)  # a "." inside 2.5 does not end it
_AUX = re.compile(
    r"\b(is|are|was|were|can|could|does|do|did|has|have|had|will|would|should|may|might|must)\b(\s+not\b)?",
    re.IGNORECASE,
)
_NEGATED = re.compile(r"\b(not|no)\s+", re.IGNORECASE)
_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*)")
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w]|[.,]\d)")
ANTONYMS = {
    "increases": "decreases",
    "increase": "decrease",
    "increased": "decreased",
    "higher": "lower",
    "more": "less",
    "larger": "smaller",
    "greater": "smaller",
    "before": "after",
    "activates": "inhibits",
    "activate": "inhibit",
    "promotes": "suppresses",
    "positive": "negative",
    "above": "below",
    "faster": "slower",
    "longer": "shorter",
    "rises": "falls",
    "raises": "lowers",
    "improves": "worsens",
    "gains": "loses",
    "first": "last",
    "early": "late",
    "hot": "cold",
    "warmer": "cooler",
}
ANTONYMS.update({v: k for k, v in list(ANTONYMS.items()) if v not in ANTONYMS})
_RELATIONAL = sorted(
    {w for w in ANTONYMS if w.endswith("s") and len(w) > 4}
    | {
        "causes",
        "contains",
        "produces",
        "regulates",
        "binds",
        "precedes",
        "follows",
        "requires",
        "controls",
        "reduces",
        "prevents",
        "replaced",
        "defeated",
        "influences",
        "affects",
        "protects",
        "attacks",
    }
)
_ROLE = re.compile(
    r"^(?P<pre>\s*)(?P<subj>[\w\- ]+?)\s+(?P<verb>"
    + "|".join(_RELATIONAL)
    + r")\s+(?P<obj>[\w\- ]+?)(?P<post>\s*[,.;!?]|\s*$)",
    re.IGNORECASE,
)
_ANTONYM = re.compile(r"\b(" + "|".join(sorted(ANTONYMS, key=len, reverse=True)) + r")\b", re.IGNORECASE)


def _tokens(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[^\W_]+", text.lower()))


def _first(text: str, edit: Callable[[str], tuple[str, frozenset[str]] | None]) -> Edit:
    """Apply ``edit`` to the first sentence it fits; the rest of the text is unchanged."""
    for match in _SENTENCE.finditer(text):
        out = edit(match.group(0))
        if out is not None:
            new, changed = out
            return text[: match.start()] + new + text[match.end() :], changed
    return None


def negation(text: str) -> Edit:
    def edit(sentence: str):
        neg = _NEGATED.search(sentence)
        if neg:
            return sentence[: neg.start()] + sentence[neg.end() :], frozenset({"not", "no"})
        aux = _AUX.search(sentence)
        if aux and not aux.group(2):
            return sentence[: aux.end(1)] + " not" + sentence[aux.end(1) :], frozenset({"not"})
        return None

    return _first(text, edit)


def entity_swap(text: str) -> Edit:
    def edit(sentence: str):
        found, seen = [], set()
        for m in _ENTITY.finditer(sentence):
            if m.start() == len(sentence) - len(sentence.lstrip()):
                continue  # sentence-initial capital is not a name signal
            if m.group(1) not in seen:
                seen.add(m.group(1))
                found.append(m)
            if len(found) == 2:
                break
        if len(found) < 2:
            return None
        a, b = found
        new = sentence[: a.start()] + b.group(1) + sentence[a.end() : b.start()] + a.group(1) + sentence[b.end() :]
        return new, frozenset()

    return _first(text, edit)


def number_swap(text: str) -> Edit:
    def edit(sentence: str):
        nums, seen = [], set()
        for m in _NUMBER.finditer(sentence):
            if m.group(1) not in seen:
                seen.add(m.group(1))
                nums.append(m)
        if not nums:
            return None
        if len(nums) >= 2:
            a, b = nums[:2]
            new = sentence[: a.start()] + b.group(1) + sentence[a.end() : b.start()] + a.group(1) + sentence[b.end() :]
            return new, frozenset()
        m = nums[0]
        value = m.group(1)
        number = float(value.replace(",", ""))
        changed = "1" if number == 0 else f"{number * 2:,g}" if "," in value else f"{number * 2:g}"
        return sentence[: m.start()] + changed + sentence[m.end() :], _tokens(value) | _tokens(changed)

    return _first(text, edit)


def role_reversal(text: str) -> Edit:
    def edit(sentence: str):
        m = _ROLE.search(sentence)
        if not m:
            return None
        subj, obj = m.group("subj").strip(), m.group("obj").strip()
        if not subj or not obj or subj.lower() == obj.lower():
            return None
        swapped = f"{obj[0].upper() + obj[1:]} {m.group('verb')} {subj[0].lower() + subj[1:]}"
        new = f"{m.group('pre')}{swapped}{m.group('post')}"
        return sentence[: m.start()] + new + sentence[m.end() :], frozenset()

    return _first(text, edit)


def predicate_swap(text: str) -> Edit:
    def edit(sentence: str):
        m = _ANTONYM.search(sentence)
        if not m:
            return None
        word = m.group(1)
        swap = ANTONYMS[word.lower()]
        swap = swap.capitalize() if word[0].isupper() else swap
        return sentence[: m.start()] + swap + sentence[m.end() :], frozenset({word.lower(), swap.lower()})

    return _first(text, edit)


PERTURBATIONS: dict[str, Callable[[str], Edit]] = {
    "negation": negation,
    "entity_swap": entity_swap,
    "number_swap": number_swap,
    "role_reversal": role_reversal,
    "predicate_swap": predicate_swap,
}


def perturb(text: str, relation: str) -> Edit:
    """Apply the perturbation registered under ``relation``; None when it cannot apply."""
    try:
        rule = PERTURBATIONS[relation]
    except KeyError:
        raise ValueError(f"unknown perturbation {relation!r}; valid: {sorted(PERTURBATIONS)}") from None
    out = rule(text)
    if out is None or out[0] == text:
        return None
    return out
