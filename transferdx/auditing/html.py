"""report.html: report.md as one page to share. Self-contained (the plots inline as ``data:`` URIs, the
style and a few lines of script inline, a Content-Security-Policy that lets the page load nothing from
anywhere else), every text from the user's file escaped, the same bytes for the same audit.

Order: the verdict (report.md's own verdict section, its first, rendered by :func:`~transferdx.display.markdown_html`,
which the notebook display shares), the profile, the suspects of the user's own sources in a table a
reader can sort (click a header) and filter (a text box), then the rest of report.md in its order. The
suspects table replaces report.md's top-:data:`~transferdx.auditing.report.SUSPECTS_SHOWN` tables: it
holds the rows of suspects.csv, read back from the file just written (no suspect's texts read a second
time), the first :data:`MAX_SUSPECTS` of them (most probable first), each text cut at :data:`TEXT_CHARS`
characters; suspects.csv has them all, whole."""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pandas as pd

from transferdx.artifacts import atomic_file
from transferdx.display import HTML_CLASS, HTML_STYLE, markdown_html

MAX_SUSPECTS = 500  # rows of the suspects table in report.html (a page to read, not the whole CSV)
CHUNK_ROWS = 100  # rows of suspects.csv read at a time
TEXT_CHARS = 1_000  # characters of a query, positive or negative text shown in the table
# suspects.csv column → header of the table in report.html, in this order (a column absent is left out)
SUSPECT_HEADERS = {
    "source": "source",
    "qid": "qid",
    "neg_index": "rank",
    "s_qp": "s(q,p)",
    "s_qn": "s(q,n)",
    "fn_probability": "p(FN)",
    "reasons": "reasons",
    "query": "query",
    "positive": "positive",
    "negative": "negative",
}
# report.md's sections shown right after its first (the verdict, whatever its heading), in this order
FIRST_SECTIONS = ("Audit profile", "Suspected false negatives")
SUSPECTS_SECTION = "Suspected false negatives"
# nothing is fetched: images only from data: URIs, style and script only inline
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
PAGE_STYLE = (
    "<style>"
    "body{margin:1.5em}"
    f".{HTML_CLASS} #tdx-suspects th{{cursor:pointer;user-select:none;white-space:nowrap}}"
    f".{HTML_CLASS} #tdx-suspects th[aria-sort=ascending]::after{{content:' \\25B2'}}"
    f".{HTML_CLASS} #tdx-suspects th[aria-sort=descending]::after{{content:' \\25BC'}}"
    f".{HTML_CLASS} #tdx-suspects td.text{{min-width:16em;max-width:32em;white-space:normal}}"
    f".{HTML_CLASS} #tdx-filter{{width:24em;padding:.2em}}"
    "</style>"
)
# sort on a header's click (numbers by data-v, else by text; again: the other way), filter on input
SCRIPT = """<script>
(function () {
  var table = document.getElementById("tdx-suspects");
  if (!table) return;
  var body = table.tBodies[0], heads = table.tHead.rows[0].cells;
  var filter = document.getElementById("tdx-filter"), shown = document.getElementById("tdx-shown");
  function key(cell) {
    var v = cell.getAttribute("data-v");
    if (v === null) return cell.textContent;
    var x = parseFloat(v);
    return isNaN(x) ? -Infinity : x;
  }
  Array.prototype.forEach.call(heads, function (th, i) {
    th.title = "sort by " + th.textContent;
    th.addEventListener("click", function () {
      var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a.cells[i]), y = key(b.cells[i]);
        return dir * (typeof x === "number" ? x - y : String(x).localeCompare(String(y)));
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  filter.addEventListener("input", function () {
    var words = filter.value.toLowerCase(), n = 0;
    Array.prototype.forEach.call(body.rows, function (r) {
      r.hidden = r.textContent.toLowerCase().indexOf(words) < 0;
      if (!r.hidden) n++;
    });
    shown.textContent = n.toLocaleString("en");
  });
})();
</script>"""


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def split_sections(markdown: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """report.md as (the lines before its first ``## `` heading, [(title, lines)] per ``## `` section);
    a ``## `` inside a fenced block is not a heading."""
    head: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    fenced = False
    for line in markdown.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            sections.append((line[3:].strip(), [line]))
        else:
            (sections[-1][1] if sections else head).append(line)
    return head, sections


def _before_subsections(lines: Sequence[str]) -> list[str]:
    """A section's lines up to its first ``### `` heading (the suspects section's per-source tables)."""
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("### "):
            return list(lines[:i])
    return list(lines)


NUMBERS = {"neg_index": "d", "s_qp": ".3f", "s_qn": ".3f", "fn_probability": ".3f"}  # column → format shown


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1].rstrip() + "…"


def _td(column: str, text: str) -> str:
    """A cell from suspects.csv's text: a number shown formatted and sorted by its value (``data-v``,
    the CSV's own digits; empty, NaN: sorted first), a text escaped and cut."""
    if column in NUMBERS:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if math.isnan(value):
            return f'<td data-v="">{html.escape(text) or "—"}</td>'
        shown = format(int(value) if NUMBERS[column] == "d" else value, NUMBERS[column])
        return f'<td data-v="{html.escape(text)}">{shown}</td>'
    if column in ("query", "positive", "negative"):
        return f'<td class="text">{html.escape(_cut(text))}</td>'
    return f"<td>{html.escape(_cut(text))}</td>"


def suspects_html(suspects_csv: str | Path, n_suspects: int) -> Iterator[str]:
    """The first :data:`MAX_SUSPECTS` rows of ``suspects_csv`` (of ``n_suspects``), in its order, as a
    sortable, filterable table, in pieces (read :data:`CHUNK_ROWS` rows at a time); a sentence when
    there are none."""
    title = "<h3>Suspects of your sources</h3>\n"
    n = min(n_suspects, MAX_SUSPECTS)
    chunks = (
        pd.read_csv(suspects_csv, nrows=n, chunksize=CHUNK_ROWS, dtype=str, keep_default_na=False, na_filter=False)
        if n
        else iter(())
    )
    columns: list[str] = []
    for chunk in chunks:
        if not columns:
            columns = [c for c in SUSPECT_HEADERS if c in chunk.columns]
            scope = f"all {n:,}" if n == n_suspects else f"the first {n:,} of {n_suspects:,} (most probable first)"
            yield (
                f"{title}<p>The rows of suspects.csv ({scope}; every text cut at {TEXT_CHARS:,} characters, whole"
                " in suspects.csv). Click a header to sort, type to filter: "
                '<input type="search" id="tdx-filter" placeholder="filter: text in any column"'
                f' aria-label="filter the suspects"> <span id="tdx-shown">{n:,}</span> of {n:,} rows shown.</p>\n'
                '<table id="tdx-suspects">\n<thead><tr>'
                + "".join(f'<th scope="col">{html.escape(SUSPECT_HEADERS[c])}</th>' for c in columns)
                + "</tr></thead>\n<tbody>\n"
            )
        for values in chunk[columns].itertuples(index=False, name=None):
            yield "<tr>" + "".join(_td(c, v) for c, v in zip(columns, values, strict=True)) + "</tr>\n"
    yield "</tbody></table>\n" if columns else f"{title}<p>No suspect in your sources.</p>\n"


def html_pieces(report: str, suspects_csv: str | Path, n_suspects: int, plots: Mapping[str, bytes]) -> Iterator[str]:
    """report.html, in pieces, from report.md's text (``report``), suspects.csv (``suspects_csv``, of
    ``n_suspects`` rows) and the PNG plots report.md names (file name → bytes): the verdict (report.md's
    first section), the profile, the suspects, the rest."""
    images = {name: "data:image/png;base64," + base64.b64encode(data).decode("ascii") for name, data in plots.items()}
    head, sections = split_sections(report)

    def rank(i: int) -> int:  # the verdict, FIRST_SECTIONS, then the rest (sorted is stable: in report.md's order)
        named = (k + 1 for k, t in enumerate(FIRST_SECTIONS) if sections[i][0].startswith(t))
        return 0 if i == 0 else next(named, len(FIRST_SECTIONS) + 1)

    def suspects_section() -> Iterator[str]:  # when report.md has none
        yield '<section id="suspects">\n'
        yield from suspects_html(suspects_csv, n_suspects)
        yield "</section>\n"

    missing = not any(title.startswith(SUSPECTS_SECTION) for title, _ in sections)
    yield "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>transferdx audit</title>",
            HTML_STYLE,
            PAGE_STYLE,
            "</head>",
            "<body>",
            f'<main class="{HTML_CLASS}">',
            markdown_html("\n".join(head), images),
            "",
        ]
    )
    for i in sorted(range(len(sections)), key=rank):
        title, lines = sections[i]
        if missing and rank(i) > 1:  # after the verdict and the profile
            yield from suspects_section()
            missing = False
        suspects = title.startswith(SUSPECTS_SECTION)
        yield f'<section id="{_slug(title)}">\n'
        yield markdown_html("\n".join(_before_subsections(lines) if suspects else lines), images) + "\n"
        if suspects:
            yield from suspects_html(suspects_csv, n_suspects)
        yield "</section>\n"
    if missing:
        yield from suspects_section()
    yield f"</main>\n{SCRIPT}\n</body>\n</html>\n"


def write_html(
    path: str | Path, report: str, suspects_csv: str | Path, n_suspects: int, plots: Mapping[str, bytes]
) -> Path:
    """Write report.html (:func:`html_pieces`) to ``path`` through :func:`~transferdx.artifacts.atomic_file`,
    a piece at a time (never the page as one string beside its rows)."""
    with atomic_file(path, "w") as handle:
        for piece in html_pieces(report, suspects_csv, n_suspects, plots):
            handle.write(piece)
    return Path(path)
