"""Griffe extension: the reST markup of iotool's docstrings, rendered as Markdown on the site.

The docstrings are Google-style but name other objects with Sphinx roles (``:func:`fuse```,
``:class:`~iotool.transforms.Resize```), which mkdocstrings would show as raw text. Once the
package is loaded, each role becomes an optional mkdocs-autorefs cross-reference: a link where
the target is rendered on the site, an inline code span where it is not (an object left out of
the API page, or one of the standard library), never a build warning. Short names resolve in the
scope of the docstring's object, as Sphinx resolves them (a class's methods, a module's imports).
reST's ``::`` literal-block markers become Markdown too (:func:`literal_blocks`).

Configured in mkdocs.yml under the python handler's ``extensions``.
"""

from __future__ import annotations

import ast
import html
import re
from typing import Any

from griffe import Alias, Extension, Object

ROLES = ("mod", "func", "class", "meth", "attr", "data", "exc", "obj", "const")
ROLE = re.compile(r":(?:py:)?(?:" + "|".join(ROLES) + r"):`(?P<text>[^`]+)`")
QUOTED_LITERAL = re.compile(r"(?P<indent> {4,})``(?P<code>[^`]+)``[ \t]*")
EXPLICIT_TITLE = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def lazy_names(pkg: Object) -> dict[str, str]:
    """The package's lazily exported names (``iotool.open_dataset``) -> where they are defined.

    ``iotool/__init__.py`` exports its API through ``__getattr__`` from a ``_LAZY`` table of
    ``name: (module, attribute)``, which griffe cannot follow; read the table as written.
    """
    table = pkg.members.get("_LAZY")
    try:
        entries = ast.literal_eval(str(table.value)) if table is not None else {}
        return {f"{pkg.path}.{name}": f"{pkg.path}.{module}.{attr}" for name, (module, attr) in entries.items()}
    except (ValueError, TypeError, SyntaxError):
        return {}


def full_path(obj: Object, target: str, public: dict[str, str]) -> str:
    """The dotted path ``target`` names from ``obj``'s docstring; ``target`` itself if unknown."""
    target = target.lstrip(".")
    head, _, rest = target.partition(".")
    try:
        resolved = obj.resolve(head)
        found = f"{resolved}.{rest}" if rest else resolved
    except Exception:
        found = f"{obj.package.path}.{target}" if f"{obj.package.path}.{target}" in public else target
    return public.get(found, found)


def role_markup(obj: Object, text: str, public: dict[str, str]) -> str:
    """The HTML that replaces one role: an optional cross-reference around a code span."""
    explicit = EXPLICIT_TITLE.match(text)
    title, target = (explicit["title"], explicit["target"]) if explicit else (None, text)
    if target.startswith("!"):
        return f"<code>{html.escape(title or target[1:])}</code>"
    short = target.startswith("~")
    target = target.lstrip("~")
    shown = title or (target.rsplit(".", 1)[-1] if short else target)
    identifier = html.escape(full_path(obj, target, public), quote=True)
    return f'<autoref identifier="{identifier}" optional><code>{html.escape(shown)}</code></autoref>'


def literal_blocks(docstring: str) -> str:
    """reST literal blocks as Markdown code blocks.

    ``text::`` before an indented block ends the paragraph with ``text:`` (a lone ``::`` goes);
    the indented block is already a Markdown code block. An indented line that is one inline
    literal on its own (reST's block quote of ````expr````) loses its backticks, which a code
    block would show.
    """
    lines = docstring.split("\n")
    for i, line in enumerate(lines):
        if line.endswith("::"):
            lines[i] = line[:-2].rstrip() if line[:-2].endswith(" ") else line[:-1]
        quoted = QUOTED_LITERAL.fullmatch(line)
        alone = (i == 0 or not lines[i - 1].strip()) and (i + 1 == len(lines) or not lines[i + 1].strip())
        if quoted and alone:
            lines[i] = quoted["indent"] + quoted["code"]
    return "\n".join(lines)


def replace_roles(obj: Object, docstring: str, public: dict[str, str]) -> str:
    """``docstring`` with every Sphinx role turned into a cross-reference, literal blocks fixed."""
    return literal_blocks(ROLE.sub(lambda match: role_markup(obj, match["text"], public), docstring))


class SphinxRoles(Extension):
    """Rewrites the roles in the docstrings of every object of a loaded package."""

    def on_package(self, *, pkg: Object, **kwargs: Any) -> None:
        public = lazy_names(pkg)
        pending = [pkg]
        while pending:
            obj = pending.pop()
            if obj.docstring is not None and ("`" in obj.docstring.value or "::" in obj.docstring.value):
                obj.docstring.value = replace_roles(obj, obj.docstring.value, public)
            pending.extend(member for member in obj.members.values() if not isinstance(member, Alias))
