"""report.html (auditing/html.py): one self-contained page beside report.md, the verdict first, user
texts escaped, the same bytes again; opened in headless Chromium: no console error, every genuine
source with its action, as many suspect rows as suspects.csv, sort and filter working; the notebook's
``_repr_html_`` showing the same verdict through the same renderer.

The browser is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: the browser
reads commands on fd 3, writes answers and events on fd 4, each a JSON message ending in NUL), so no
port and no log parsing: a console error is any ``Runtime.exceptionThrown`` (an uncaught exception),
``Runtime.consoleAPICalled`` of type error or assert, or ``Log.entryAdded`` of level error (what the
browser itself reports: a resource that failed or was refused by the page's Content-Security-Policy).
The checker is itself tested on a page with such errors. Without Chromium (``apt-get install
chromium``; ``make browser``) the browser tests skip, saying so. A screenshot of the page goes to
``$TRANSFERDX_SCREENSHOT_DIR`` when set, else to the test's tmp_path."""

from __future__ import annotations

import csv
import dataclasses
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import transferdx as tdx
from transferdx import display
from transferdx.auditing.facts import audit_facts
from transferdx.auditing.html import MAX_SUSPECTS, html_pieces, split_sections
from transferdx.auditing.verdict import Context, judge
from transferdx.inputs.records import LoadResult, Passage

EVIL = '<script>window.__pwned = 1</script><img src="https://example.invalid/x.png" onerror="window.__pwned = 2">'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium, or make browser)"
)


@pytest.fixture(scope="module")
def audit() -> tdx.Audit:
    """The demo plus a genuine source that repeats a negative in every record (a lexical suspect per
    record, so the user's own sources have suspects without an encoder), one of whose repeated
    negatives and its query carry markup; lexical, so it runs in seconds."""
    loaded = tdx.load("demo")
    repeats = []
    for i, r in enumerate(r for r in loaded.records if r.source == "bm25"):
        first = r.negatives[0]
        if i == 0:
            first = dataclasses.replace(first, text=f"{first.text} {EVIL}")
            r = dataclasses.replace(r, query=f"{r.query} {EVIL}")
        negatives: tuple[Passage, ...] = (first, *r.negatives[1:], first)
        repeats.append(dataclasses.replace(r, source="bm25_repeats", negatives=negatives))
    return tdx.audit(LoadResult([*loaded.records, *repeats]), encoder=None, resamples=50, controls="all")


@pytest.fixture(scope="module")
def saved(audit, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("report_html") / "audit"
    audit.save(folder)
    return folder


class _Refs(HTMLParser):
    """Every tag and every attribute that could fetch or link: src, href, srcset, action, …"""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "formaction", "data", "poster", "background"):
                self.refs.append((tag, name, value or ""))


def test_report_html_is_self_contained_and_keeps_user_text_as_data(saved):
    page = (saved / "report.html").read_text(encoding="utf-8")
    parser = _Refs()
    parser.feed(page)
    assert parser.refs, "the plots are inline images"
    outside = [r for r in parser.refs if not (r[1] == "src" and r[2].startswith("data:image/png;base64,"))]
    assert outside == [], "a reference outside the file"
    assert "link" not in parser.tags and "iframe" not in parser.tags and "url(" not in page and "@import" not in page
    assert parser.tags.count("script") == 1 and parser.tags.count("style") == 2  # ours, inline
    assert "default-src 'none'" in page  # the page may load nothing, whatever it held
    assert EVIL not in page and "window.__pwned" in page
    assert page.count("&lt;script&gt;window.__pwned = 1&lt;/script&gt;") >= 2  # the query and the negative
    assert "onerror=" not in page.replace("onerror=&quot;", "")


def test_report_html_opens_with_report_md_verdict_and_has_the_same_bytes_again(audit, saved, tmp_path):
    page = (saved / "report.html").read_text(encoding="utf-8")
    report = (saved / "report.md").read_text(encoding="utf-8")
    _, sections = split_sections(report)
    verdict = display.markdown_html("\n".join(sections[0][1]))  # report.md's first section, the verdict
    assert verdict in page  # report.md's verdict, whatever it says, rendered whole
    body = page[page.index("<main") :]
    assert body.index(verdict) < body.index("<h2>Audit profile</h2>") < body.index('id="tdx-suspects"')
    assert body.index('id="tdx-suspects"') < body.index("<h2>Settings</h2>") < body.index("<h2>Exclusions</h2>")
    audit.save(tmp_path / "again")
    assert (tmp_path / "again" / "report.html").read_bytes() == (saved / "report.html").read_bytes()


def test_notebook_html_display_shows_the_verdict_rendered_the_same_way(audit):
    shown = audit._repr_html_()
    assert display.markdown_html(audit.verdict()) in shown
    assert shown.index("<h2>") < shown.index("Profile (compact")
    assert EVIL not in shown and "<script" not in shown
    assert len(shown) < 60_000


def test_a_markdown_subset_rendered_and_escaped():
    text = (
        "## A <b>\n\n- **x<y>** `a|<b>` & c\n  Also: more\n- two\n\nline one\nline two\n\n"
        '| h | k |\n|---|---|\n| 1 \\| 2 | **z** |\n\n![cap](p.png)\n![gone](q.png)\n\n```json\n{"a": "<i>"}\n```'
    )
    got = display.markdown_html(text, {"p.png": "data:image/png;base64,AA==", "q.png": "https://example.invalid/q"})
    assert got.split("\n") == [
        "<h2>A &lt;b&gt;</h2>",
        "<ul>",
        "<li><strong>x&lt;y&gt;</strong> <code>a|&lt;b&gt;</code> &amp; c<br>Also: more</li>",
        "<li>two</li>",
        "</ul>",
        "<p>line one line two</p>",
        "<table>",
        "<thead><tr><th>h</th><th>k</th></tr></thead>",
        "<tbody>",
        "<tr><td>1 | 2</td><td><strong>z</strong></td></tr>",
        "</tbody></table>",
        '<figure><img alt="cap" src="data:image/png;base64,AA=="></figure>',
        "<p><em>[plot: gone (q.png)]</em></p>",
        "<pre><code>{&quot;a&quot;: &quot;&lt;i&gt;&quot;}</code></pre>",
    ]


def test_the_suspects_follow_the_profile_even_without_their_section(tmp_path):
    """Kills: the suspects table lost (or put first) when report.md has no suspects section, a table
    for no suspect, more rows than MAX_SUSPECTS."""
    report = "# t\n\n## Decision\n\n- **a** use\n\n## Audit profile\n\n| x |\n|---|\n| 1 |\n\n## Settings\n\n- s"
    csv_path = tmp_path / "suspects.csv"
    csv_path.write_text(
        "source,qid,neg_index,s_qn,negative\n" + "".join(f"a,q{i},{i},0.{i},<b>{i}\n" for i in range(MAX_SUSPECTS + 5)),
        encoding="utf-8",
    )
    page = "".join(html_pieces(report, csv_path, MAX_SUSPECTS + 5, {}))
    order = ["<h2>Decision</h2>", "<h2>Audit profile</h2>", 'id="tdx-suspects"', "<h2>Settings</h2>", "</html>"]
    assert [page.index(x) for x in order] == sorted(page.index(x) for x in order)
    assert page.count("<tr><td>a</td>") == MAX_SUSPECTS and "&lt;b&gt;7</td>" in page and "<b>7" not in page
    assert f"the first {MAX_SUSPECTS} of {MAX_SUSPECTS + 5}" in page
    empty = "".join(html_pieces(report, csv_path, 0, {}))
    assert 'id="tdx-suspects"' not in empty and "No suspect in your sources." in empty


# ---------------------------------------------------------------------------------------------
# In a browser
# ---------------------------------------------------------------------------------------------


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe``; :meth:`open` loads a page in a fresh
    tab and gathers its console errors in :attr:`errors`."""

    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="tdx-chromium-")
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def on_fd_3_and_4() -> None:  # in the child: first out of the way (≥ 10), then onto 3 and 4
            a, b = fcntl.fcntl(to_browser, fcntl.F_DUPFD, 10), fcntl.fcntl(from_browser, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                executable,
                "--headless",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=on_fd_3_and_4,
            pass_fds=(3, 4),
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._id = 0
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._next()
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def _next(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError(f"Chromium did not answer within {self.timeout} s")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        if "method" in message:
            self.events.append(message)
        return message

    def open(self, path: Path) -> None:
        """A fresh tab (1280 × 2000) with ``path`` loaded; the events gathered start empty."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        self.events = []
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": path.resolve().as_uri()})
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            self._next()

    def js(self, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    @property
    def errors(self) -> list[str]:
        """The console errors so far (after one more round trip, so that none is still in the pipe)."""
        self.js("0")
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                details = p["exceptionDetails"]
                out.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, path: Path) -> None:
        import base64

        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._write)
        os.close(self._read)
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM is not None
    b = Browser(CHROMIUM)
    try:
        yield b
    finally:
        b.close()


@needs_chromium
def test_the_console_error_check_sees_errors(browser, tmp_path):
    """Kills a checker that cannot fail: an uncaught exception, console.error and a refused image are
    each seen."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
        ' script-src \'unsafe-inline\'"></head><body><img src="https://example.invalid/x.png">'
        "<script>console.error('said'); undefinedFunction();</script></body></html>",
        encoding="utf-8",
    )
    browser.open(page)
    errors = browser.errors
    assert any("undefinedFunction" in e for e in errors), errors
    assert any("said" in e for e in errors), errors
    assert any("example.invalid" in e or "Content Security Policy" in e for e in errors), errors


@needs_chromium
def test_report_html_in_a_browser(audit, saved, browser, tmp_path):
    browser.open(saved / "report.html")
    shots = Path(os.environ.get("TRANSFERDX_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    browser.screenshot(shots / "report_html.png")
    assert browser.errors == []
    assert browser.js("window.__pwned === undefined") is True  # the user's markup stayed text

    # every genuine source named in the verdict with the action the audit judged for it
    verdict = browser.js("document.querySelector('main > section').innerText")  # the first section
    profile, facts = audit.result.profile, audit_facts(audit.result)
    mode = str(audit.settings.get("flags") or "envelope")
    genuine = [r for r in profile.rows if r["kind"] == "genuine" and r["n_records"] > 0]
    assert {r["source"] for r in genuine} == {"bm25", "bm25_repeats", "handwritten"}
    for row in genuine:
        action = judge(row, Context(facts[row["source"]], mode, audit.settings)).action
        named = re.compile(rf"(?<![\w]){re.escape(row['source'])}(?![\w])")
        said = [ln for ln in verdict.splitlines() if named.search(ln) and action in ln]
        assert said, (row["source"], action)

    # as many suspect rows as suspects.csv has data rows, in its order
    with open(saved / "suspects.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert 0 < len(rows) <= MAX_SUSPECTS
    assert browser.js("document.querySelectorAll('#tdx-suspects tbody tr').length") == len(rows)
    first_col = "Array.from(document.querySelectorAll('#tdx-suspects tbody tr'), r => r.cells[{}].textContent)"
    assert browser.js(first_col.format(1)) == [r["qid"] for r in rows]

    # sort: a click on qid sorts up, a second down; filter: only the rows holding the words stay shown
    browser.js("document.querySelectorAll('#tdx-suspects th')[1].click()")
    assert browser.js(first_col.format(1)) == sorted(r["qid"] for r in rows)
    browser.js("document.querySelectorAll('#tdx-suspects th')[1].click()")
    assert browser.js(first_col.format(1)) == sorted((r["qid"] for r in rows), reverse=True)
    shown = (
        "(f => { f.value = {}; f.dispatchEvent(new Event('input'));"
        " return [document.querySelectorAll('#tdx-suspects tbody tr:not([hidden])').length,"
        " document.getElementById('tdx-shown').textContent]; })(document.getElementById('tdx-filter'))"
    )
    evil = [r for r in rows if "window.__pwned" in r["negative"]]
    assert browser.js(shown.replace("{}", json.dumps("WINDOW.__PWNED"))) == [len(evil), str(len(evil))] != [0, "0"]
    assert browser.js(shown.replace("{}", json.dumps("no such text anywhere"))) == [0, "0"]
    assert browser.js(shown.replace("{}", json.dumps(""))) == [len(rows), str(len(rows))]
    assert browser.errors == []
