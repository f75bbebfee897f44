"""How results read in a notebook: a short ``repr`` (a few lines) and a Markdown display
(``_repr_markdown_``) for :class:`~transferdx.Audit` (the verdict first, then a compact profile),
:class:`~transferdx.LoadResult` (what was read, per source) and :class:`~transferdx.CleanResult`
(what cleaning did). The classes hold thin methods that call these functions.

Pure: plain values and frames in, text out. A leaf utility: it imports no other transferdx module,
so every room (``inputs/`` included) may use it. Bounded by construction: a table shows at most
:data:`MAX_ROWS` rows and cells of at most :data:`MAX_CELL` characters, a list at most
:data:`MAX_NAMES` names, and a verdict longer than :data:`MAX_VERDICT` characters is cut (the whole
of it stays in ``.verdict()``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_ROWS = 30  # rows of a table shown; the rest are counted
MAX_CELL = 80  # characters of a cell shown
MAX_NAMES = 8  # names listed in a repr line; the rest are counted
MAX_VERDICT = 12_000  # characters of the verdict shown in the display

# the compact profile: profile column → header (what the verdict talks about, not the 98 columns)
PROFILE_HEADERS: dict[str, str] = {
    "source": "source",
    "kind": "kind",
    "n_records": "n_records",
    "psi_mean": "ψ",
    "rho_mean": "ρ",
    "eta_mean": "η",
    "inversion_rate": "inversion",
    "fn_suspect_rate": "suspect rate",
    "flags": "flags",
}
AUDIT_ACCESSORS = (".verdict()", ".profile", ".suspects", ".negatives", ".records", ".save(folder)")
LOAD_ACCESSORS = (".records", ".exclusions", ".descriptors", ".sources")
CLEAN_ACCESSORS = (".records", ".removed", ".emptied", ".to_dataset()", ".save(folder)")


# ---------------------------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------------------------


def cell(value: Any, width: int = MAX_CELL) -> str:
    """A value as one table cell: floats to 3 decimals (``–`` for NaN/None), the text on one line,
    ``|`` escaped, cut to ``width`` characters with ``…``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        text = f"{value:.3f}"
    else:
        text = str(value)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], max_rows: int = MAX_ROWS) -> str:
    """A Markdown pipe table of at most ``max_rows`` rows (then a line counting the rest)."""
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    extra = 0
    for i, row in enumerate(rows):
        if i < max_rows:
            lines.append("| " + " | ".join(cell(v) for v in row) + " |")
        else:
            extra += 1
    if extra:
        lines.append(f"\n… and {extra:,} more rows")
    return "\n".join(lines)


def frame_markdown(frame: Any, columns: Mapping[str, str] | None = None, max_rows: int = MAX_ROWS) -> str:
    """A ``pandas.DataFrame`` as :func:`markdown_table`: ``columns`` (name → header) picks and
    renames the columns present, in that order (all columns without it)."""
    chosen = {c: h for c, h in (columns or {c: str(c) for c in frame.columns}).items() if c in frame.columns}
    head = frame.head(max_rows)[list(chosen)]
    rows = [list(r) for r in head.itertuples(index=False)]
    table = markdown_table(list(chosen.values()), rows, max_rows)
    if len(frame) > max_rows:
        table += f"\n\n… and {len(frame) - max_rows:,} more rows"
    return table


def names_line(names: Sequence[str], limit: int = MAX_NAMES) -> str:
    """``a, b, c`` with at most ``limit`` names (each cut to 40 characters), then ``… (+k)``."""
    shown = [cell(n, 40) for n in names[:limit]]
    return ", ".join(shown) + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def accessors_line(accessors: Sequence[str]) -> str:
    return "  " + "  ".join(accessors)


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


# ---------------------------------------------------------------------------------------------
# Audit
# ---------------------------------------------------------------------------------------------


def exclusions_phrase(exclusions: Sequence[Any], unattributed: int = 0) -> str:
    """``N exclusions`` with the expected ones said apart: a negative repeated on another row of its
    query (``Exclusion.merged``) is merged, kept once, not a problem in the file; a query the file
    gives a positive and no negative (``Exclusion.no_negative``) is named with its count."""
    merged = sum(1 for e in exclusions if getattr(e, "merged", False))
    empty = sum(1 for e in exclusions if getattr(e, "no_negative", False))
    text = f"{len(exclusions) - merged} exclusions"
    if empty:
        text += f" ({empty:,} {'query' if empty == 1 else 'queries'} with a positive and no negative)"
    if merged:
        text += f" and {merged} merged repeats (a negative on several rows of one query, kept once)"
    return text + (f" ({unattributed} records of no known source)" if unattributed else "")


def audit_repr(profile: Any, n_suspects: int) -> str:
    """A few lines: sources by kind, records, negatives, the flagged sources, the suspects among the
    user's own (genuine) sources, and what to look at next."""
    kinds = list(profile["kind"]) if "kind" in profile.columns else []
    by_kind = ", ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds)))
    n_records = int(profile["n_records"].sum()) if "n_records" in profile.columns else 0
    n_negatives = int(profile["n_negatives"].sum()) if "n_negatives" in profile.columns else 0
    lines = [
        f"Audit of {_count(len(profile), 'source')} ({by_kind or 'none'}): "
        f"{_count(n_records, 'record')}, {_count(n_negatives, 'negative')}"
    ]
    if "flags" in profile.columns:
        flagged = profile[profile["flags"].fillna("").astype(str) != ""]
        labels = [f"{s} ({k})" for s, k in zip(flagged["source"], flagged["kind"], strict=True)]
        lines.append(f"  flagged: {names_line(labels) if labels else 'none'}")
    lines.append(f"  suspected false negatives in your sources: {n_suspects:,}")
    lines.append(accessors_line(AUDIT_ACCESSORS))
    return "\n".join(lines)


def audit_markdown(verdict: str, profile: Any, n_suspects: int, n_control_suspects: int, n_exclusions: int) -> str:
    """The verdict (cut at :data:`MAX_VERDICT` characters), the compact profile
    (:data:`PROFILE_HEADERS`), and where the rest is."""
    if len(verdict) > MAX_VERDICT:
        verdict = verdict[:MAX_VERDICT].rsplit("\n", 1)[0] + "\n\n… (the whole verdict: `.verdict()`)"
    parts = [
        verdict.rstrip(),
        "",
        "### Profile (compact: every column in `.profile`)",
        "",
        frame_markdown(profile, PROFILE_HEADERS),
        "",
        f"Suspected false negatives in your sources: {n_suspects:,} (`.suspects`, with their text); "
        f"in the controls the audit built: {n_control_suspects:,} (`.control_suspects`). "
        f"Input items excluded: {n_exclusions:,} (`.exclusions`).",
    ]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------
# LoadResult
# ---------------------------------------------------------------------------------------------


def source_counts(records: Iterable[Any], exclusions: Iterable[Any]) -> list[tuple[str, str, int, int, int]]:
    """Per source (sorted by name): (source, kind, records, negatives, excluded items); the kind is
    ``mixed`` when its records disagree, ``–`` when it has none."""
    kinds: dict[str, set[str]] = {}
    counts: dict[str, list[int]] = {}
    for r in records:
        kinds.setdefault(r.source, set()).add(r.kind)
        c = counts.setdefault(r.source, [0, 0, 0])
        c[0] += 1
        c[1] += len(r.negatives)
    for e in exclusions:
        counts.setdefault(e.source or "(no source)", [0, 0, 0])[2] += 1
    out = []
    for name in sorted(counts):
        k = kinds.get(name, set())
        kind = next(iter(k)) if len(k) == 1 else ("mixed" if k else "–")
        n = counts[name]
        out.append((name, kind, n[0], n[1], n[2]))
    return out


def load_repr(counts: Sequence[tuple[str, str, int, int, int]]) -> str:
    """A few lines: totals, then up to :data:`MAX_NAMES` sources with their counts."""
    total = [sum(c[2] for c in counts), sum(c[3] for c in counts), sum(c[4] for c in counts)]
    lines = [
        f"LoadResult: {_count(len(counts), 'source')}, {_count(total[0], 'record')}, "
        f"{_count(total[1], 'negative')}, {_count(total[2], 'exclusion')}"
    ]
    for name, kind, n_rec, n_neg, n_exc in counts[:MAX_NAMES]:
        lines.append(f"  {cell(name, 40)} ({kind}): {n_rec:,} records, {n_neg:,} negatives, {n_exc:,} excluded")
    if len(counts) > MAX_NAMES:
        lines.append(f"  … and {len(counts) - MAX_NAMES} more sources")
    lines.append(accessors_line(LOAD_ACCESSORS))
    return "\n".join(lines)


def load_markdown(counts: Sequence[tuple[str, str, int, int, int]], first_exclusions: Sequence[str]) -> str:
    """The totals, a table per source, and the first exclusions (file:line: field: reason)."""
    head = load_repr(counts).splitlines()[0]
    parts = [f"**{head}**", "", markdown_table(["source", "kind", "records", "negatives", "excluded"], counts)]
    if first_exclusions:
        parts += ["", "First exclusions (all in `.exclusions`):", ""]
        parts += [f"- {cell(x, 200)}" for x in first_exclusions[:5]]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------
# CleanResult
# ---------------------------------------------------------------------------------------------


def clean_repr(summary: str) -> str:
    """The first line of the cleaning summary (what was done), the number of summary lines left
    out, and what to look at next."""
    lines = summary.splitlines() or ["CleanResult"]
    out = [f"CleanResult: {cell(lines[0], 300)}"]
    if len(lines) > 1:
        out.append(f"  (+{len(lines) - 1} lines: print(result.summary()))")
    out.append(accessors_line(CLEAN_ACCESSORS))
    return "\n".join(out)


def clean_markdown(summary: str, removed: Any, columns: Sequence[str] = ()) -> str:
    """The cleaning summary as a list, then the first removed (or relabeled) negatives."""
    lines = [ln for ln in summary.splitlines() if ln.strip()]
    shown = lines[:MAX_ROWS] + ([f"… (+{len(lines) - MAX_ROWS} lines: `.summary()`)"] if len(lines) > MAX_ROWS else [])
    parts = ["### Cleaning", "", *(f"- {cell(ln.strip(), 300)}" for ln in shown)]
    if len(removed):
        picked = {c: c for c in (columns or removed.columns)}
        parts += ["", "Removed or relabeled negatives (all in `.removed`):", "", frame_markdown(removed, picked, 10)]
    return "\n".join(parts) + "\n"
