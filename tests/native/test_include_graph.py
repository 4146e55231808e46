"""The C sources (csrc/) include each other along a graph without cycles, a header per file.

Each ``X.c`` declares what it defines, and only that, in ``X.h``; the types an extension's files
share, and no function, are in its ``_common.h``. A file that uses what another defines includes
that file's header. So the include graph is the graph of which file needs which, and it has no
cycle: the resize kernel (``_resize_kernel.c``) calls the passes, the passes ask the CPU's features
(``_resize_cpu.c``), and nothing below calls back up.

Run as a script (``python tests/native/test_include_graph.py``), it prints the graph and exits 1
on a cycle.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2] / "csrc"
SETUP = CSRC.parent / "setup.py"

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# What a header declares: a function or variable marked INTERNAL (hidden, shared between files).
DECLARED = re.compile(r"^(?:extern\s+)?INTERNAL\b[^;(]*?\b(\w+)\s*[(;]", re.M)
COMMON = "_common.h"


def include_graph(folder: Path = CSRC) -> dict[str, list[str]]:
    """Each C file and header of `folder` -> the files of `folder` it includes, in order."""
    return {p.name: INCLUDE.findall(p.read_text()) for p in sorted([*folder.glob("*.c"), *folder.glob("*.h")])}


def find_cycle(graph: dict[str, list[str]]) -> list[str]:
    """A cycle of `graph` as its nodes in order (first repeated last), or [] when it has none."""
    state: dict[str, int] = {}  # 1 on the path being walked, 2 done
    path: list[str] = []

    def walk(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in graph:
        if node not in state and (found := walk(node)):
            return found
    return []


def declarations(folder: Path = CSRC) -> dict[str, str]:
    """Each INTERNAL name a header of `folder` declares -> that header."""
    return {name: h.name for h in sorted(folder.glob("*.h")) for name in DECLARED.findall(h.read_text())}


def defined_in(name: str, folder: Path = CSRC) -> list[str]:
    """The C files of `folder` with a definition (or a prototype) of `name` at the start of a line."""
    at_top = re.compile(rf"^[A-Za-z][^\n]*\b{name}\s*[(=]", re.M)
    return sorted(c.name for c in folder.glob("*.c") if at_top.search(c.read_text()))


def uses(c_file: Path, names: dict[str, str]) -> set[str]:
    """The headers that declare a name `c_file` mentions (comments and strings left out)."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\])*\"", " ", c_file.read_text(), flags=re.S)
    words = set(re.findall(r"\b\w+\b", code))
    return {header for name, header in names.items() if name in words}


def test_every_include_is_a_file_of_csrc():
    graph = include_graph()
    missing = {f"{src} -> {inc}" for src, incs in graph.items() for inc in incs if inc not in graph}
    assert missing == set()


def test_the_include_graph_has_no_cycle():
    graph = include_graph()
    assert {"_resize_kernel.c", "_resize_horizontal.h", "_jpegregion_run.c"} <= set(graph)
    assert find_cycle(graph) == []


def test_the_cycle_finder_finds_a_cycle_of_three():
    graph = {"a.c": ["a.h", "b.h"], "a.h": [], "b.h": ["c.h"], "c.h": ["b.h"]}
    assert find_cycle(graph) == ["b.h", "c.h", "b.h"]
    assert find_cycle({"a.c": ["a.h"], "a.h": []}) == []


def test_a_header_declares_only_what_its_own_file_defines():
    names = declarations()
    assert {"rs_run", "rs_hpass", "rs_level_cap", "jr_decode_into", "jr_strict_errors"} <= set(names)
    where = {name: defined_in(name) for name in names}
    misplaced = {
        name: (header, where[name])
        for name, header in names.items()
        if header.endswith(COMMON) or where[name] != [header.removesuffix(".h") + ".c"]
    }
    assert misplaced == {}


def test_every_header_but_the_common_ones_has_its_c_file():
    headers = {h.stem for h in CSRC.glob("*.h") if not h.name.endswith(COMMON)}
    assert headers - {c.stem for c in CSRC.glob("*.c")} == set()


def test_a_file_includes_the_header_of_every_file_it_calls():
    """So the include graph is the graph of who needs whom, and its having no cycle means something."""
    names = declarations()
    graph = include_graph()
    lacking = {
        c.name: sorted(needed - set(graph[c.name]))
        for c in sorted(CSRC.glob("*.c"))
        if (needed := uses(c, names) - {c.stem + ".h"}) - set(graph[c.name])
    }
    assert lacking == {}


def test_every_c_file_is_a_source_of_setup_py():
    text = SETUP.read_text()
    assert {c.name for c in CSRC.glob("*.c") if f'"csrc/{c.name}"' not in text} == set()


if __name__ == "__main__":
    graph = include_graph()
    for node, included in graph.items():
        print(f"{node:28} -> {', '.join(included) or '(none)'}")
    cycle = find_cycle(graph)
    print("cycle: " + " -> ".join(cycle) if cycle else f"no cycle ({len(graph)} files)")
    sys.exit(1 if cycle else 0)
