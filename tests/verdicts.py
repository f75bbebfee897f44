"""Reading the verdict back (auditing/verdict.py) in tests: its decision lines, each source's
evidence and what it says once for every source."""

from __future__ import annotations

import re

BOTTOM = re.compile(r"^- \*\*(?P<source>[^*]+)\*\* \((?P<n>\d+) records?\) — \*\*bottom line: (?P<action>[^.]+)\.\*\* ")


def decisions(verdict: str) -> dict[str, tuple[int, str, str]]:
    """source → (records, action, the whole decision line)."""
    out = {}
    for line in verdict.splitlines():
        if m := BOTTOM.match(line):
            out[m["source"]] = (int(m["n"]), m["action"], line)
    return out


def block(verdict: str, heading: str) -> list[str]:
    """The facts listed under ``**heading**`` (a source's name, or ``Every source``), ``- `` cut."""
    lines = verdict.splitlines()
    at = lines.index(f"**{heading}**")
    out = []
    for line in lines[at + 1 :]:
        if not line.startswith("- "):
            break
        out.append(line[2:])
    return out


def every(verdict: str) -> list[str]:
    return block(verdict, "Every source")


RE_MINE = re.compile(r"^(\d\.\d+) > (\d(?:\.\d+)?) of negatives (score at least as high|are another query's positive)")
CLEAN = re.compile(r"^(\d+) of \d+ negatives \([^)]*\) are probable false negatives$")
CHECK_MEAN = re.compile(r"^(\d+) suspects?, yet mean fn_probability (\d\.\d+) \(≥ (\d\.\d+)\)$")
CHECK_SHARE = re.compile(
    r"^\d+ suspects?; its share of false negatives is not estimated \(fits no mix: estimate on [01],"
)
CHECK_SAME = re.compile(
    r"^\d+ suspects?; the miner's scores rank the negatives as this encoder does \(Spearman (-?\d\.\d+) ≥ (\d\.\d+)\)$"
)
REVIEW = re.compile(
    r"^(\d+) of \d+ negatives \([^)]*\) are suspects[^;]*; (?:(\d+\.\d+) expected false at TREC-DL's share"
    r" \(≥ (\d+)\)|how many are false is not scored here)$"
)
USE = re.compile(
    r"^(\d+) suspects? in \d+ negatives(?:; (\d+\.\d+) expected false at TREC-DL's share \(under (\d+)\))?$"
)
MARGIN = re.compile(r"^mined with a margin under this encoder: every negative ≤ ")


def derived_action(line: str) -> str:
    """The action a decision line's own number calls for, read from the line alone: a number beyond
    its printed threshold as printed. Fails on a line whose number does not decide its action."""
    m = BOTTOM.match(line)
    assert m, line
    number = line[m.end() :].removesuffix(".")
    if (x := RE_MINE.match(number)) and float(x[1]) > float(x[2]):
        return "re-mine"
    if (x := CLEAN.match(number)) and int(x[1]) > 0:
        return "clean"
    if (x := CHECK_MEAN.match(number)) and int(x[1]) == 0 and float(x[2]) >= float(x[3]):
        return "check with a second encoder"
    if CHECK_SHARE.match(number):
        return "check with a second encoder"
    if (x := CHECK_SAME.match(number)) and float(x[1]) >= float(x[2]):
        return "check with a second encoder"
    if (x := REVIEW.match(number)) and int(x[1]) > 0 and (x[2] is None or float(x[2]) >= float(x[3])):
        return "review the listed suspects"
    if (x := USE.match(number)) and (int(x[1]) == 0 if x[2] is None else float(x[2]) < float(x[3])):
        return "use as is"
    if MARGIN.match(number):
        return "use as is"
    raise AssertionError(f"no action follows from the number on: {line}")


def assert_actions_follow_their_numbers(verdict: str) -> dict[str, str]:
    """Every decision line's action is the one its printed number calls for (issue 56); returns them."""
    out = {}
    for name, (_, action, line) in decisions(verdict).items():
        assert derived_action(line) == action, line
        out[name] = action
    assert out
    return out
