"""How results read in a notebook: a short ``repr`` (a few lines) and a Markdown display
(``_repr_markdown_``) for :class:`~transferdx.Audit` (the verdict first, then a compact profile),
:class:`~transferdx.LoadResult` (what was read, per source) and :class:`~transferdx.CleanResult`
(what cleaning did). The classes hold thin methods that call these functions. :func:`markdown_html`
renders the Markdown these displays and report.md use as HTML (an audit's ``_repr_html_``, report.html),
every text escaped.

Pure: plain values and frames in, text out. A leaf utility: it imports no other transferdx module,
so every room (``inputs/`` included) may use it. Bounded by construction: a table shows at most
:data:`MAX_ROWS` rows and cells of at most :data:`MAX_CELL` characters, a list at most
:data:`MAX_NAMES` names, and a verdict longer than :data:`MAX_VERDICT` characters is cut (the whole
of it stays in ``.verdict()``).
"""

from __future__ import annotations

import html
import math
import re
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


# ---------------------------------------------------------------------------------------------
# HTML: the Markdown above (and report.md's) rendered; the notebook display and report.html share it
# ---------------------------------------------------------------------------------------------

HTML_CLASS = "transferdx-report"  # the wrapper every rule of HTML_STYLE is scoped to
HTML_STYLE = (
    "<style>"
    f".{HTML_CLASS}{{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1f2328;"
    "max-width:1400px}"
    f".{HTML_CLASS} h1{{font-size:1.6em;margin:.4em 0}}"
    f".{HTML_CLASS} h2{{font-size:1.3em;border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}}"
    f".{HTML_CLASS} h3{{font-size:1.1em;margin-top:1.2em}}"
    f".{HTML_CLASS} li{{margin:.35em 0}}"
    f".{HTML_CLASS} code{{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;"
    "padding:0 .2em;border-radius:3px}"
    f".{HTML_CLASS} pre{{background:#f6f8fa;padding:.6em;overflow:auto;max-height:24em}}"
    f".{HTML_CLASS} pre code{{padding:0}}"
    f".{HTML_CLASS} table{{border-collapse:collapse;margin:.6em 0;font-size:13px;display:block;max-width:100%;"
    "overflow-x:auto}"
    f".{HTML_CLASS} th,.{HTML_CLASS} td{{border:1px solid #d0d7de;padding:.2em .5em;text-align:left;"
    "vertical-align:top;white-space:nowrap}"
    f".{HTML_CLASS} th{{background:#f6f8fa}}"
    f".{HTML_CLASS} img{{max-width:100%;height:auto}}"
    "</style>"
)
_HEADING = re.compile(r"(#{1,6}) +(.*)")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]*)`")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_RULE = re.compile(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?")


def inline_html(text: str) -> str:
    """One line of Markdown as HTML: `` `code` `` and ``**bold**``; everything else escaped as text
    (a user's text stays data, whatever it holds)."""
    codes: list[str] = []

    def hold(m: re.Match[str]) -> str:
        codes.append(f"<code>{html.escape(m[1])}</code>")
        return f"\x00{len(codes) - 1}\x00"

    held = _CODE.sub(hold, text.replace("\x00", ""))
    out = _BOLD.sub(r"<strong>\1</strong>", html.escape(held))
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m[1])], out)


def _cells(line: str) -> list[str]:
    parts = _CELL_SPLIT.split(line.strip())
    parts = parts[1:] if parts and not parts[0].strip() else parts
    parts = parts[:-1] if parts and not parts[-1].strip() else parts
    return [inline_html(p.strip().replace("\\|", "|")) for p in parts]


def _table_html(lines: Sequence[str]) -> str:
    head, body = (lines[0], lines[2:]) if len(lines) > 1 and _RULE.fullmatch(lines[1].strip()) else (None, lines)
    out = ["<table>"]
    if head is not None:
        out.append("<thead><tr>" + "".join(f"<th>{c}</th>" for c in _cells(head)) + "</tr></thead>")
    out.append("<tbody>")
    out += ["<tr>" + "".join(f"<td>{c}</td>" for c in _cells(row)) + "</tr>" for row in body]
    return "\n".join([*out, "</tbody></table>"])


def _starts_block(line: str) -> bool:
    return bool(line.startswith(("```", "|", "- ")) or _HEADING.fullmatch(line) or _IMAGE.fullmatch(line.strip()))


def markdown_html(text: str, images: Mapping[str, str] | None = None) -> str:
    """The Markdown subset of the displays and report.md as HTML: ``#`` headings, paragraphs, ``- ``
    lists (a line indented under an item is a line of it), pipe tables, fenced code, an image alone
    on its line, and inline `` `code` `` and ``**bold**``. Every text is escaped. An image is shown
    only from ``images`` (its file name → a ``data:`` URI), so the HTML never points outside itself;
    any other image shows as its caption."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            code = "\n".join(lines[i + 1 : j])
            out.append(f"<pre><code>{html.escape(code)}</code></pre>")
            i = j + 1
        elif m := _HEADING.fullmatch(line):
            level = len(m[1])
            out.append(f"<h{level}>{inline_html(m[2].strip())}</h{level}>")
            i += 1
        elif m := _IMAGE.fullmatch(line.strip()):
            uri = (images or {}).get(m[2])
            caption = html.escape(m[1])
            if uri is not None and uri.startswith("data:"):
                out.append(f'<figure><img alt="{caption}" src="{html.escape(uri)}"></figure>')
            else:
                out.append(f"<p><em>[plot: {caption} ({html.escape(m[2])})]</em></p>")
            i += 1
        elif line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_table_html(lines[i:j]))
            i = j
        elif line.startswith("- "):
            items: list[list[str]] = []
            while i < len(lines) and (
                lines[i].startswith("- ") or (lines[i].startswith("  ") and lines[i].strip() and items)
            ):
                if lines[i].startswith("- "):
                    items.append([lines[i][2:]])
                else:
                    items[-1].append(lines[i].strip())
                i += 1
            out.append(
                "<ul>\n" + "\n".join("<li>" + "<br>".join(map(inline_html, it)) + "</li>" for it in items) + "\n</ul>"
            )
        else:
            j = i + 1
            while j < len(lines) and lines[j].strip() and not _starts_block(lines[j]):
                j += 1
            out.append("<p>" + inline_html(" ".join(ln.strip() for ln in lines[i:j])) + "</p>")
            i = j
    return "\n".join(out)


def audit_html(verdict: str, profile: Any, n_suspects: int, n_control_suspects: int, n_exclusions: int) -> str:
    """:func:`audit_markdown` as HTML (:func:`markdown_html`), in the style report.html uses: what
    a notebook shows of an audit."""
    body = markdown_html(audit_markdown(verdict, profile, n_suspects, n_control_suspects, n_exclusions))
    return f'<div class="{HTML_CLASS}">{HTML_STYLE}\n{body}\n</div>\n'
