"""The one name rule (iotool.names): every name, one at a time and as a whole column, against a
plain reference written here from the rule's own words."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iotool.names import first_bad_name, inside, name_problem, resolve_inside


def reference_ok(name: str) -> bool:
    """Relative, POSIX, plain components; no backslash, NUL or control character."""
    if not name or name[0] == "/" or "\\" in name:
        return False
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


GOOD = [
    "a.jpg",
    "cls/img.jpg",
    "a/b/c/d.png",
    "...",
    "a/.../b",
    "..a",
    "a..",
    ".hidden/x",
    "x/.y",
    "ünïcødé 画像.jpg",
    "name with spaces 'q' \"d\".jpg",
    "a.b.c",
    "%2E%2E/x",
    "C:x",
]
BAD = [
    "",
    "/abs",
    "../x",
    "a/../b",
    "a/..",
    "..",
    ".",
    "./a",
    "a/./b",
    "a/.",
    "a//b",
    "a/",
    "//",
    "a\\b",
    "..\\x",
    "a\0b",
    "new\nline.jpg",
    "tab\there",
    "del\x7f",
    "esc\x1b[31m",
]


@pytest.mark.parametrize("name", GOOD)
def test_plain_names_pass(name):
    assert name_problem(name) is None and reference_ok(name)


@pytest.mark.parametrize("name", BAD)
def test_names_that_climb_or_hide_are_refused_with_a_reason(name):
    reason = name_problem(name)
    assert reason and not reference_ok(name)


def test_reasons_say_what_is_wrong():
    assert name_problem("../x") == "climbs out ('..')"
    assert name_problem("/etc/passwd") == "absolute"
    assert name_problem("a\\b") == "holds a backslash"
    assert "control character" in name_problem("a\nb")
    assert name_problem(3) == "not a string (int)"


def column(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [n.encode() for n in names]
    offsets = np.zeros(len(names) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    return offsets, np.frombuffer(b"".join(encoded), dtype=np.uint8)


def test_column_check_finds_each_bad_name_at_any_position():
    for bad in BAD:
        for at in range(3):
            names = GOOD[:2] + GOOD[5:6]
            names.insert(at, bad)
            assert first_bad_name(*column(names)) == at, (bad, at)
    assert first_bad_name(*column(GOOD)) == -1
    assert first_bad_name(*column([])) == -1


alphabet = st.sampled_from(list("ab./\\\n\x00é"))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(alphabet, max_size=6), min_size=1, max_size=6))
def test_column_check_agrees_with_the_reference(names):
    expected = next((i for i, n in enumerate(names) if not reference_ok(n)), -1)
    assert first_bad_name(*column(names)) == expected
    assert [name_problem(n) is None for n in names] == [reference_ok(n) for n in names]


def test_resolve_inside_follows_links(tmp_path):
    root = tmp_path / "ds"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "leak")
    os.symlink(root / "sub", root / "alias")
    assert resolve_inside(root, "sub/x.bmp") == os.path.join(os.path.realpath(root), "sub/x.bmp")
    assert resolve_inside(root, "alias/x.bmp") is not None  # a link that stays inside is fine
    assert resolve_inside(root, "leak/x.bmp") is None


def test_inside_is_a_deprecated_alias_of_resolve_inside(tmp_path):
    with pytest.warns(DeprecationWarning, match="resolve_inside"):
        assert inside(tmp_path, "x.bmp") == resolve_inside(tmp_path, "x.bmp")


def test_offsets_outside_the_blob_make_that_name_bad_not_an_index_error():
    offsets, blob = column(["a.jpg", "b/c.jpg", "d.png"])  # offsets 0, 5, 12, 17
    for i, value, first in [(1, -5, 0), (1, 10**12, 0), (2, 1, 1), (3, len(blob) + 1, 2)]:
        broken = offsets.copy()
        broken[i] = value
        assert first_bad_name(broken, blob) == first, (i, value)


HOSTILE_TEXT = st.text(
    st.sampled_from(list('ab/.é\n\t\x00\x1b[2J\x7f\x85\x9b\u200e\u200f\u061c\u202a\u202e\u2066\u2069\U0001f600\\"')),
    max_size=24,
)


@settings(max_examples=400, deadline=None)
@given(HOSTILE_TEXT)
def test_generated_control_text_is_never_shown_raw_and_json_keeps_its_value(text):
    import json

    from iotool.names import is_unprintable, json_escaped, printable

    shown = printable(text)
    assert not any(is_unprintable(c) for c in shown), repr(shown)
    as_json = json_escaped(json.dumps({"name": text}, ensure_ascii=False))
    assert not any(is_unprintable(c) for c in as_json) and json.loads(as_json) == {"name": text}
    assert (name_problem(text) is None) <= (not any(is_unprintable(c) for c in text))  # never let one in


def test_the_first_bad_character_is_found_as_a_character_by_character_scan_finds_it():
    """name_problem searches a name in one regex call; the rule is per character: a backslash, a
    C0 or C1 control, DEL or a BiDi control, the first one named."""
    import random

    bidi = "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    alphabet = ["a", "Z", "0", ".", "-", "_", " ", "é", "ü", "\u4e2d", "\\", "\x00", "\x1b", "\x1f", "\x7f"]
    alphabet += ["\x80", "\x9f", "\xa0", *bidi, "\u200d", "\ufeff"]

    def first_bad(name: str) -> str | None:
        for c in name:
            if c == "\\" or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in bidi:
                return c
        return None

    rng = random.Random(11)
    for _ in range(3000):
        name = "x" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        bad = first_bad(name)
        problem = name_problem(name)
        if bad is None:
            assert problem is None or "holds" not in problem, (name, problem)
        elif bad == "\\":
            assert problem == "holds a backslash", (name, problem)
        else:
            assert problem == f"holds the control character {bad!r}", (name, problem)
