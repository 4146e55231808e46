"""The one rule for names that become paths: record keys, file and member names from a dataset.

A name read from a dataset (an ImageFolder key, a key of an iotool dataset used as a source, a
TFRecord's ``image/filename``, a tar member, a DALI index line, a file named by an index) may
become a file or a tar member under a destination, or a file opened under a dataset. It is
safe when it is relative, POSIX (``/`` only), and every component is a plain name: no empty,
``.`` or ``..`` component, no NUL, control character (C0, DEL, C1), BiDi control or backslash.
This is what git refuses in the paths it reads from an object, and what tar strips unless told
otherwise.

:func:`printable` is the one rule for showing a dataset's text (a name, a key, a metadata value, a
reason quoting one) on a terminal: every character :func:`is_unprintable` names is written as an
escape (``\\x1b``, ``\\u202e``), so nothing a dataset holds can move the cursor, set a title or
reorder what is shown.

:func:`name_problem` checks one name, :func:`first_bad_name` a whole string column at once;
:func:`resolve_inside` is the containment check a writer or reader makes after joining a name to
its root (a symlink on the way may still lead out).

The containment rule itself is :func:`is_under`, and only here: a real path is inside a real root
when it is the root or continues it after a separator (``/data2`` is not inside ``/data``).
:func:`iotool.storage.files.open_regular` applies it to the file a descriptor opened, and the C
reader ``csrc/_readfile.c`` (``outside()``) states it again; ``tests/storage/test_containment.py``
runs all of them on one table of cases.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ALLOWED = (
    "a relative POSIX path of plain names: no leading '/', no empty, '.' or '..' "
    "component, no backslash, NUL, control character (C0, DEL, C1) or BiDi control"
)

# BiDi controls: LRM, RLM, ALM, the embeddings and overrides (LRE..RLO) and isolates (LRI..PDI)
BIDI_CONTROLS = "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# C0 controls, DEL, C1 controls and BiDi controls: never shown raw, never part of a name
_UNPRINTABLE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}]")
# what JSON encoders leave raw in a string (they escape C0 themselves; outside strings JSON text
# holds only spaces and line breaks, which stay)
_RAW_IN_JSON = re.compile(f"[\\x7f-\\x9f{BIDI_CONTROLS}]")
# what a name may not hold anywhere: a backslash, or what is_unprintable refuses (one search)
_NOT_IN_NAMES = re.compile(f"[\\\\\\x00-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}]")


def is_unprintable(char: str) -> bool:
    """True for a character that :func:`printable` escapes and :func:`name_problem` refuses:
    a C0 control, DEL, a C1 control or a BiDi control."""
    return _UNPRINTABLE.fullmatch(char) is not None


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` (``str()`` of it) with every control character (C0, DEL, C1) and BiDi control
    written as an escape: ``"a\\x1b[2Jb"`` is shown as ``a\\x1b[2Jb``, U+202E as ``\\u202e``.
    Everything the command line shows that came from a dataset or a source goes through here."""
    return _UNPRINTABLE.sub(_escape, text if isinstance(text, str) else str(text))


def json_escaped(text: str) -> str:
    """JSON text with the characters :func:`printable` escapes written as ``\\uXXXX`` (JSON's own
    encoders leave DEL, C1 and BiDi controls raw); valid JSON for the same values."""
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def name_problem(name: object) -> str | None:
    """Why ``name`` may not become a path under a root (None: it may)."""
    if not isinstance(name, str):
        return f"not a string ({type(name).__name__})"
    if name == "":
        return "empty"
    if name.startswith("/"):
        return "absolute"
    found = _NOT_IN_NAMES.search(name)  # every read of a record checks its name: one C call
    if found is not None:
        bad = found.group()
        return "holds a backslash" if bad == "\\" else f"holds the control character {bad!r}"
    parts = name.split("/")
    if "" in parts:
        return "has an empty component"
    if ".." in parts:
        return "climbs out ('..')"
    if "." in parts:
        return "has a '.' component"
    return None


def first_bad_name(offsets: np.ndarray, blob: np.ndarray) -> int:
    """The index of the first name that :func:`name_problem` refuses in a string column (names
    ``blob[offsets[i]:offsets[i+1]]``, UTF-8), or whose offsets lie outside the blob, or -1;
    vectorised over the whole column."""
    import numpy as np

    starts, ends = np.asarray(offsets[:-1], dtype=np.int64), np.asarray(offsets[1:], dtype=np.int64)
    if len(starts) == 0:
        return -1
    data = np.asarray(blob, dtype=np.uint8)
    broken = np.flatnonzero((starts < 0) | (ends < starts) | (ends > len(data)) | (starts > len(data)))
    if len(broken):  # offsets that describe no name in the blob: that name is bad, first of all
        return int(broken[0])
    if len(data) == 0:
        return 0
    bad = ends <= starts  # empty
    full = ~bad
    slash = data == ord("/")
    bad[full] |= slash[starts[full]] | slash[ends[full] - 1]  # absolute, or a trailing empty component

    def owner(positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(starts, positions, side="right") - 1

    odd = np.flatnonzero((data < 0x20) | (data == 0x7F) | (data == ord("\\")))
    bad[owner(odd)] = True
    bad[owner(_encoded_controls(data))] = True
    # a component of only dots, one or two long, or an empty one ("a//b"): found where it begins
    begins_component = np.ones(len(data), dtype=bool)
    begins_component[1:] = slash[:-1]
    begins_component[starts[full]] = True
    for pattern in (b"/", b".", b".."):
        k = len(pattern)
        if len(data) < k:
            continue
        hit = np.ones(len(data) - k + 1, dtype=bool)
        for j, byte in enumerate(pattern):
            hit &= data[j : len(data) - k + 1 + j] == byte
        candidates = np.flatnonzero(hit & begins_component[: len(hit)])
        if len(candidates) == 0:
            continue
        who = owner(candidates)
        inside_name = candidates >= starts[who]
        after = candidates + k
        if pattern == b"/":  # "//": the slash begins a component (follows a slash) in the same name
            found = inside_name & (candidates > starts[who]) & (after <= ends[who])
        else:
            at_end = after == ends[who]
            then_slash = slash[np.minimum(after, len(data) - 1)] & (after < ends[who])
            starts_here = (candidates == starts[who]) | slash[np.maximum(candidates - 1, 0)]
            found = inside_name & (after <= ends[who]) & starts_here & (at_end | then_slash)
        bad[who[found]] = True
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else -1


def _encoded_controls(data: np.ndarray) -> np.ndarray:
    """Where a C1 or BiDi control's UTF-8 encoding begins in ``data`` (the ones :func:`name_problem`
    refuses beyond C0 and DEL): C2 80..9F, D8 9C (U+061C), E2 80 8E/8F, E2 80 AA..AE, E2 81 A6..A9."""
    import numpy as np

    n = len(data)
    nxt = np.zeros(n, dtype=np.int64)
    third = np.zeros(n, dtype=np.int64)
    nxt[:-1] = data[1:]
    third[:-2] = data[2:]
    c1 = (data == 0xC2) & (nxt >= 0x80) & (nxt <= 0x9F)
    alm = (data == 0xD8) & (nxt == 0x9C)
    marks = (data == 0xE2) & (nxt == 0x80) & ((third == 0x8E) | (third == 0x8F) | ((third >= 0xAA) & (third <= 0xAE)))
    isolates = (data == 0xE2) & (nxt == 0x81) & (third >= 0xA6) & (third <= 0xA9)
    return np.flatnonzero(c1 | alm | marks | isolates)


def is_under(real: str, real_root: str) -> bool:
    """True when ``real`` is ``real_root`` or lies under it; both must already be real paths
    (symlinks resolved). A sibling that shares the prefix (``/data2`` beside ``/data``) is not."""
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def resolve_inside(root: str | os.PathLike, name: str) -> str | None:
    """``root/name`` (under the real ``root``) when its real path (symlinks resolved) lies under
    the real ``root`` (:func:`is_under`), else None. Check :func:`name_problem` first: this only
    catches what links on the way do."""
    base = os.path.realpath(root)
    path = os.path.join(base, name)
    return path if is_under(os.path.realpath(path), base) else None


def inside(root: str | os.PathLike, name: str) -> str | None:
    """Deprecated spelling of :func:`resolve_inside` (it returns a path, not a yes or no)."""
    warnings.warn(
        "iotool.names.inside() is deprecated; use iotool.names.resolve_inside()", DeprecationWarning, stacklevel=2
    )
    return resolve_inside(root, name)
