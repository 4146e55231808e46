"""MkDocs hook: the site's home page is README.md.

``docs/index.md`` holds one include line, ``--8<-- "README.md"``. At build time this hook puts the
README in its place, so the two cannot drift. The README is written for GitHub, where its links
are relative to the repository root (``docs/training.md``); the home page sits inside ``docs/``,
so each ``docs/...`` link loses that prefix. A relative link to anything outside ``docs/`` has no
page on the site: the build stops and names it (link to a docs page or an absolute URL instead).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

INCLUDE = re.compile(r'^--8<-- "(?P<name>[^"]+)"[ \t]*$', re.MULTILINE)
# Inline links and images: ](target) or ](target "title"); reference definitions: [id]: target.
INLINE_LINK = re.compile(r"(?P<head>\]\()(?P<target>[^)\s]+)")
REFERENCE_LINK = re.compile(r"^(?P<head>\[[^\]]+\]:[ \t]*)(?P<target>\S+)", re.MULTILINE)
ABSOLUTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)
DOCS_PREFIX = "docs/"


def rebase_links(markdown: str, source: str = "README.md") -> str:
    """Rewrite links relative to the repository root as links relative to ``docs/``."""

    def fix(match: re.Match[str]) -> str:
        target = match.group("target")
        if ABSOLUTE.match(target):
            return match.group(0)
        if not target.startswith(DOCS_PREFIX):
            raise PluginError(
                f"{source} links to {target!r}, which is outside docs/ and so not on the site; "
                f"link to a page under docs/ or use an absolute URL"
            )
        return match.group("head") + target[len(DOCS_PREFIX) :]

    return REFERENCE_LINK.sub(fix, INLINE_LINK.sub(fix, markdown))


def included(markdown: str, root: Path) -> str:
    """``markdown`` with each ``--8<-- "FILE"`` line replaced by FILE (from ``root``), links rebased."""

    def include(match: re.Match[str]) -> str:
        name = match.group("name")
        path = root / name
        if not path.is_file():
            raise PluginError(f"docs/index.md includes {name!r}, which is not a file in {root}")
        return rebase_links(path.read_text(encoding="utf-8"), name)

    return INCLUDE.sub(include, markdown)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != "index.md":
        return markdown
    return included(markdown, Path(config["config_file_path"]).parent)


def on_serve(server, config, builder):
    server.watch(str(Path(config["config_file_path"]).parent / "README.md"))
    return server
