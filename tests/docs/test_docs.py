"""Docs that cannot drift: the home page is the README, every link and quoted path exists, code
fits the page, measured figures live on the performance page, and the API page renders roles.

`mkdocs build --strict` (CI) checks links and anchors between the pages; these tests check what
it does not: links and paths that leave the site (into the repository), and the rules of
docs/contributing.md ("Other checks").
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
INLINE_LINK = re.compile(r"\]\((?P<target>[^)\s]+)")
CODE_SPAN = re.compile(r"(?<!`)`(?P<code>[^`\n]+)`(?!`)")
# Paths from the repository root as the docs quote them: `tests/conftest.py`, `benchmarks/`.
TOP_LEVEL = ("iotool/", "tests/", "benchmarks/", "docs/", "sample_data/", ".ci/")
ROOT_FILES = ("README.md", "pyproject.toml", "mkdocs.yml", "setup.py")
REPO_PATH = re.compile(r"^(?:" + "|".join(map(re.escape, TOP_LEVEL)) + r")[\w./-]*$")
SHELL_PATH = re.compile(r"(?<![\w/.-])(?P<path>(?:benchmarks|sample_data|tests|docs)/[\w./-]*\w)")
SHELL = {"bash", "sh", "console", "shell"}
MAX_CODE_LINE = 79  # characters: what a code block shows without wrapping at 1280 px


def load_hook(name: str) -> ModuleType:
    """A module of docs/hooks/ (build-time code of the site), imported from its file."""
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose(text: str) -> str:
    """The page without its fenced code blocks."""
    return FENCE.sub("", text)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block."""
    return [(m["lang"], m["body"]) for m in FENCE.finditer(text)]


def test_the_home_page_is_the_readme():
    lines = [line for line in (DOCS / "index.md").read_text().splitlines() if line.strip()]
    includes = [line for line in lines if line.startswith("--8<--")]
    assert includes == ['--8<-- "README.md"'], "docs/index.md must include README.md and only it"
    rest = "\n".join(line for line in lines if line not in includes)
    assert not re.sub(r"<!--.*?-->", "", rest, flags=re.S).strip(), "docs/index.md holds text besides the include"
    assert "docs/hooks/readme.py" in (REPO / "mkdocs.yml").read_text()


def test_the_readme_links_work_on_the_site_and_on_github():
    pytest.importorskip("mkdocs")
    hook = load_hook("readme")
    readme = README.read_text()
    site = hook.rebase_links(readme)
    for target in INLINE_LINK.findall(readme):
        if not hook.ABSOLUTE.match(target):
            assert target.startswith("docs/"), target
    for target in INLINE_LINK.findall(site):
        if not hook.ABSOLUTE.match(target):
            assert (DOCS / target.split("#")[0]).is_file(), f"the home page links to {target!r}"
    with pytest.raises(Exception, match="outside docs/"):
        hook.rebase_links("[licence](LICENSE)")
    assert hook.rebase_links("[a](https://example.org/docs/x) [b](#top)") == "[a](https://example.org/docs/x) [b](#top)"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_exists(page: Path):
    missing = []
    for target in INLINE_LINK.findall(prose(page.read_text())):
        if re.match(r"^(?:[a-z][a-z0-9+.-]*:|#)", target, re.I):
            continue
        if not (page.parent / target.split("#")[0]).exists():
            missing.append(target)
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_quoted_repository_path_exists(page: Path):
    text = page.read_text()
    quoted = [m["code"] for m in CODE_SPAN.finditer(prose(text))]
    paths = [q for q in quoted if (REPO_PATH.match(q) and "..." not in q) or q in ROOT_FILES]
    for lang, body in code_blocks(text):
        if lang in SHELL:
            paths += [m["path"] for m in SHELL_PATH.finditer(body) if "/tmp/" not in m["path"]]
    missing = sorted({p for p in paths if not (REPO / p).exists()})
    assert not missing, f"{page.name} quotes paths that do not exist: {missing}"


def test_no_reference_to_a_missing_design_file():
    name = "DESIGN" + ".md"  # not spelled out here, so this file does not match itself
    files = [
        *PAGES,
        REPO / "pyproject.toml",
        REPO / "mkdocs.yml",
        *REPO.glob("iotool/**/*.py"),
        *REPO.glob("tests/**/*.py"),
        *REPO.glob("benchmarks/*.py"),
    ]
    citing = [
        str(f.relative_to(REPO))
        for f in files
        if f != Path(__file__).resolve() and re.search(r"DESIGN(?:\.md| §)", f.read_text(errors="replace"))
    ]
    assert (REPO / name).exists() or not citing, f"{citing} cite {name}, which is not in the repository"


def test_the_readme_code_fits_the_page():
    long = [
        (lang, line)
        for lang, body in code_blocks(README.read_text())
        for line in body.splitlines()
        if len(line) > MAX_CODE_LINE
    ]
    assert not long, f"README code lines over {MAX_CODE_LINE} characters: {long}"


def test_code_blocks_wrap_on_the_site():
    css = (DOCS / "stylesheets" / "extra.css").read_text()
    assert re.search(r"pre > code\s*\{[^}]*white-space:\s*pre-wrap", css)
    assert "stylesheets/extra.css" in (REPO / "mkdocs.yml").read_text()


# A measured time or rate: "0.14 ms", "1,302 images/s", "70x slower", "3.4 s", "22% less".
MEASURED = re.compile(
    r"\b\d[\d,.]*\s?(?:ms|µs|us|ns)\b|\b\d[\d,.]*\s?(?:images|img|MB|GB|KB)/s\b"
    r"|\b\d[\d.]*x (?:faster|slower)\b|\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:s|seconds|minutes)\b"
    r"|\b\d+(?:\.\d+)?% (?:less|more|faster|slower)"
)
# Figures that are settings or bounds, not measurements of a machine.
NOT_MEASURED = {
    ("cli.md", "5% faster"),  # the tuner's stopping rule
    ("training.md", "5% more"),  # the tuner's choice rule
    ("scale-out.md", "2 s"),  # the retry backoff
    ("training.md", "5 minutes"),  # the GPU check's time bound
    ("contributing.md", "300 s"),  # the per-test timeout
}


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "performance.md"], ids=lambda p: p.name)
def test_measured_figures_live_on_the_performance_page(page: Path):
    found = [m.group() for m in MEASURED.finditer(page.read_text()) if (page.name, m.group()) not in NOT_MEASURED]
    assert not found, f"{page.name} quotes measured figures {found}: move them to docs/performance.md and link there"


def test_the_api_page_renders_no_raw_sphinx_roles():
    griffe = pytest.importorskip("griffe")
    roles = load_hook("sphinx_roles")
    package = griffe.load("iotool", search_paths=[str(REPO)], extensions=griffe.load_extensions(roles.SphinxRoles))
    raw = []
    pending = [package]
    while pending:
        obj = pending.pop()
        if obj.docstring is not None and roles.ROLE.search(obj.docstring.value):
            raw.append(obj.path)
        pending.extend(m for m in obj.members.values() if not isinstance(m, griffe.Alias))
    assert not raw, f"raw Sphinx roles left in {raw}"
    assert (
        'identifier="iotool.loading.opening.open_dataset"'
        in roles.replace_roles(package, ":func:`open_dataset`", roles.lazy_names(package))
        or "_LAZY" not in package.members
    )


def test_sphinx_roles_become_cross_references():
    griffe = pytest.importorskip("griffe")
    roles = load_hook("sphinx_roles")
    package = griffe.load("iotool", search_paths=[str(REPO)])
    transforms = package["transforms"]
    text = roles.replace_roles(transforms, "See :class:`~iotool.transforms.Resize` and :func:`!nowhere`.", {})
    assert text == (
        'See <autoref identifier="iotool.transforms.Resize" optional><code>Resize</code></autoref>'
        " and <code>nowhere</code>."
    )
    assert roles.literal_blocks("Use it so::\n\n    x = 1\n") == "Use it so:\n\n    x = 1\n"
    assert roles.literal_blocks("Where\n\n    ``y = f(x)``\n\nend") == "Where\n\n    y = f(x)\n\nend"
