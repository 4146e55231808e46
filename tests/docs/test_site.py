"""The built site as a reader sees it: every page opened in headless Chromium at 1280x900.

`mkdocs build --strict` checks links and anchors; tests/docs/test_docs.py checks the Markdown. Neither
sees the rendered page: a code block that scrolls sideways, a table column pushed out of view, a
docstring role left as raw text, an empty header row, a plot that does not load. Here the site is
built into the test's temporary folder, a copy of each page gets a small script that measures the
laid-out page and writes its findings into the DOM, and `chromium --headless --dump-dom` returns
them; the same run saves a screenshot of the page (``<tmp>/site/shots/<page>.png``; pytest keeps
the last runs' temporary folders, so they can be looked at after a failure).

Needs Debian's ``chromium`` (``apt-get install chromium``; `.ci/run` installs it) and the docs
extra; skips without them.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1280, 900
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
ROLES = "mod|class|func|meth|attr|data|exc|obj|const"
# A Sphinx role as mkdocstrings would leave it: `:func:` then the name, in backticks or as code.
RAW_ROLE = re.compile(rf":(?:py:)?(?:{ROLES}):(?:`|<code)")
CHECK_ID = "iotool-site-check"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs a Chromium browser (apt-get install chromium)"),
]

# Runs in the page once it has loaded. Measures, does not judge: the tests below say what is wrong.
CHECK_JS = r"""
window.addEventListener("load", function () { setTimeout(function () {
  var out = {wide: [], clipped: [], roles: [], emptyHeaders: [], images: [], tables: 0, blocks: 0};
  function name(el) {
    var text = (el.textContent || el.getAttribute("src") || "").trim().replace(/\s+/g, " ");
    return el.tagName.toLowerCase() + " '" + text.slice(0, 70) + "'";
  }
  var column = document.querySelector(".md-content") || document.body;
  var content = document.querySelector(".md-content__inner") || document.body;
  var edge = column.getBoundingClientRect().right;
  var root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1)
    out.wide.push("the page (" + root.scrollWidth + " px > " + root.clientWidth + " px)");
  content.querySelectorAll("pre, pre > code, table, .md-typeset__scrollwrap, .md-typeset__table, img")
    .forEach(function (el) {
      if (el.scrollWidth > el.clientWidth + 1)
        out.wide.push(name(el) + " scrolls (" + el.scrollWidth + " px > " + el.clientWidth + " px)");
      var right = el.getBoundingClientRect().right;
      if (right > edge + 1) out.wide.push(name(el) + " ends at " + Math.round(right) + " px, past " + Math.round(edge));
    });
  out.blocks = content.querySelectorAll("pre > code").length;
  content.querySelectorAll("table").forEach(function (table) {
    out.tables += 1;
    var frame = (table.closest(".md-typeset__scrollwrap") || table.parentElement).getBoundingClientRect();
    var first = table.querySelector("tbody tr");
    var cells = Array.prototype.slice.call(table.querySelectorAll("thead th"))
      .concat(first ? Array.prototype.slice.call(first.children) : []);
    cells.forEach(function (cell) {
      var r = cell.getBoundingClientRect();
      if (r.width < 8 || r.left < frame.left - 1 || r.right > frame.right + 1 || r.right > edge + 1)
        out.clipped.push(name(cell) + " at " + Math.round(r.left) + "-" + Math.round(r.right) +
                         " px, outside its table's " + Math.round(frame.left) + "-" + Math.round(frame.right));
    });
    table.querySelectorAll("thead tr").forEach(function (row) {
      if (!row.textContent.trim()) out.emptyHeaders.push(name(table));
    });
  });
  var roleAlone = /:(?:py:)?(?:ROLES):(?:`|\s*$)/, roleQuoted = /:(?:py:)?(?:ROLES):`[^`]+`/;
  var walk = document.createTreeWalker(content, NodeFilter.SHOW_TEXT);
  for (var node = walk.nextNode(); node; node = walk.nextNode()) {
    var inCode = node.parentElement.closest("code, pre");
    if ((inCode ? roleQuoted : roleAlone).test(node.nodeValue)) out.roles.push(node.nodeValue.trim().slice(0, 80));
  }
  content.querySelectorAll("img").forEach(function (img) {
    out.images.push({src: img.getAttribute("src"), loaded: img.complete && img.naturalWidth > 0,
                     width: img.getBoundingClientRect().width, natural: img.naturalWidth});
  });
  var report = document.createElement("pre");
  report.id = "CHECK_ID";
  report.style.display = "none";
  report.textContent = JSON.stringify(out);
  document.body.appendChild(report);
}, 300); });
""".replace("ROLES", ROLES).replace("CHECK_ID", CHECK_ID)
REPORT = re.compile(rf'<pre id="{CHECK_ID}"[^>]*>(?P<json>.*?)</pre>', re.S)


def build_site(dest: Path) -> None:
    """``mkdocs build --strict`` of the repository's site into ``dest``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(dest)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"


def chromium(url: str, screenshot: Path, profile: Path) -> str:
    """The DOM of ``url`` after load, from headless Chromium at 1280x900, with a screenshot.

    The background-networking flags keep Chromium from calling home, which a closed network
    answers by refusing connections (and a CI machine should not do anyway).
    """
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--mute-audio",
        f"--user-data-dir={profile}",
        f"--window-size={WIDTH},{HEIGHT}",
        "--virtual-time-budget=5000",
        f"--screenshot={screenshot}",
        "--dump-dom",
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"chromium failed on {url}:\n{done.stderr[-2000:]}"
    return done.stdout


def page_name(page: Path, site: Path) -> str:
    """``performance`` for ``site/performance/index.html``; ``home`` for the top page."""
    rel = page.parent.relative_to(site).as_posix()
    return "home" if rel == "." else rel


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module."""
    pytest.importorskip("mkdocs")
    dest = tmp_path_factory.mktemp("site") / "built"
    build_site(dest)
    return dest


@pytest.fixture(scope="module")
def rendered(site: Path) -> dict[str, dict]:
    """Each page of the built site -> what the check script found in it (and ``shot``: the PNG)."""
    base = site.parent
    shots = base / "shots"
    shots.mkdir()
    pages = {
        page_name(p, site): p
        for p in sorted(site.glob("**/index.html"))
        if not page_name(p, site).startswith(("search", "assets"))
    }

    def render(name: str) -> dict:
        page = pages[name]
        text = page.read_text(encoding="utf-8")
        assert "</body>" in text, f"{page} has no </body>"
        checked = page.with_name("index.checked.html")  # beside the page: its relative links still work
        checked.write_text(text.replace("</body>", f"<script>{CHECK_JS}</script></body>"), encoding="utf-8")
        shot = shots / f"{name.replace('/', '_')}.png"
        with tempfile.TemporaryDirectory(dir=base) as profile:
            dom = chromium(checked.as_uri(), shot, Path(profile))
        report = REPORT.search(dom)
        assert report, f"the check script did not run on {name} (no #{CHECK_ID} in the DOM)"
        return {**json.loads(html.unescape(report["json"])), "shot": shot}

    with ThreadPoolExecutor(2) as pool:
        found = dict(zip(pages, pool.map(render, pages)))
    return found


def test_every_page_of_the_nav_is_rendered(rendered):
    nav = re.findall(r"^\s+- [^:]+: (\S+)\.md$", (REPO / "mkdocs.yml").read_text(), re.M)
    expected = {"home" if name == "index" else name for name in nav}
    assert expected <= set(rendered), f"pages not rendered: {sorted(expected - set(rendered))}"
    for name, found in rendered.items():
        assert found["shot"].stat().st_size > 10_000, f"the screenshot of {name} is empty"


def test_nothing_is_wider_than_the_page(rendered):
    wide = {name: found["wide"] for name, found in rendered.items() if found["wide"]}
    assert not wide, f"code blocks, tables or images wider than their container at {WIDTH} px: {wide}"
    assert rendered["home"]["blocks"] >= 3, "the home page's code blocks were not found (Material's markup changed?)"


def test_every_table_column_is_visible(rendered):
    clipped = {name: found["clipped"] for name, found in rendered.items() if found["clipped"]}
    assert not clipped, f"table columns cut off or squeezed at {WIDTH} px: {clipped}"
    assert rendered["api"]["tables"] >= 10, "the API page should show its parameter tables"


def test_no_table_has_an_empty_header_row(rendered):
    empty = {name: found["emptyHeaders"] for name, found in rendered.items() if found["emptyHeaders"]}
    assert not empty, f"tables whose header row is empty (give the columns names): {empty}"


def test_no_raw_sphinx_role_is_rendered(rendered):
    raw = {name: found["roles"] for name, found in rendered.items() if found["roles"]}
    assert not raw, f"raw docstring roles on the rendered pages: {raw}"


def test_no_raw_sphinx_role_anywhere_in_the_built_site(site):
    """Every file of the site, the search index and pages outside the nav included."""
    raw = {}
    for path in site.rglob("*"):
        if path.suffix in (".html", ".json") and not path.name.endswith(".checked.html"):
            hits = RAW_ROLE.findall(html.unescape(path.read_text(encoding="utf-8", errors="replace")))
            if hits:
                raw[str(path.relative_to(site))] = hits[:5]
    assert not raw, f"raw docstring roles in the built site: {raw}"


@pytest.mark.parametrize("page, least", [("performance", 3), ("training", 1)])
def test_the_plots_load(rendered, page, least):
    images = rendered[page]["images"]
    plots = [i for i in images if i["src"].endswith(".png")]
    assert len(plots) >= least, f"{page} shows {len(plots)} plots, expected at least {least}"
    broken = [i["src"] for i in images if not i["loaded"]]
    assert not broken, f"images on {page} that did not load: {broken}"
    squeezed = [i["src"] for i in plots if i["width"] < min(i["natural"], 600) - 1]
    assert not squeezed, f"plots on {page} shown narrower than 600 px (or their own width): {squeezed}"
