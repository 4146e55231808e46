"""What ``--overwrite`` may replace, and keeping DST apart from the source.

``overwrite`` replaces only what iotool wrote: an iotool dataset of any registered format
(recognised by its own metadata, :func:`iotool.formats.detect_format`), an empty folder, or
nothing; anything else is refused before anything is written, naming a few of the entries found,
as ``rm -I`` and ``rsync --delete`` say what they would delete. :func:`check_apart` refuses a DST
that is the source, holds it, or lies inside it.
"""

from __future__ import annotations

import os
from typing import Sequence

from ..errors import DestinationExistsError, IotoolError, Remedy, UnknownFormatError, UsageError
from ..formats import detect_format
from ..storage import is_url, normalize

OVERWRITE = Remedy(api="Pass overwrite=True to replace it.", cli="Pass --overwrite to replace it.")
REPLACEABLE = "an iotool dataset (of any format), an empty folder, or nothing"
SHOWN_ENTRIES = 3  # entries a refusal names


def entries_text(names: Sequence[str], folders: Sequence[str] = ()) -> str:
    """``thesis.docx, photos/, ...``: the first few entries of a listing, folders with a ``/``."""
    shown = [f"{n}/" if n in folders else n for n in sorted(names)[:SHOWN_ENTRIES]]
    return ", ".join(shown) + (", ..." if len(names) > SHOWN_ENTRIES else "")


def _what_is_there(path: str) -> str:
    """What a path that is not a dataset holds, for a refusal."""
    if os.path.isdir(path):
        names = os.listdir(path)
        folders = [n for n in names if os.path.isdir(os.path.join(path, n))]
        return f"it holds {entries_text(names, folders)}"
    if os.path.islink(path) and not os.path.exists(path):
        return f"a symlink to {os.readlink(path)!r}, which does not exist"
    if os.path.isfile(path):
        return f"a file of {os.path.getsize(path):,} bytes"
    return "neither a file nor a folder"


def not_replaceable(dst: str) -> str | None:
    """Why ``--overwrite`` may not replace the local ``dst`` (None: it may): only an iotool
    dataset of any registered format, recognised by its own metadata, an empty folder, or
    nothing may be replaced."""
    try:
        if not os.path.lexists(dst) or (os.path.isdir(dst) and not os.listdir(dst)):
            return None
        try:
            detect_format(dst)
            return None
        except IotoolError as exc:
            # a file that looks like a dataset but whose metadata cannot be read says why
            why = "" if isinstance(exc, UnknownFormatError) else f"; {str(exc).rstrip('.')}"
        return _what_is_there(dst) + why
    except OSError as exc:
        return f"it cannot be read: {exc.strerror or exc}"


def refuse_local(dst: str, overwrite: bool) -> None:
    """The refusal of a local DST that exists without ``overwrite``, or is not replaceable."""
    why = not_replaceable(dst)
    if why is not None:
        raise DestinationExistsError(
            f"{dst!r} is not a dataset iotool wrote ({why}); --overwrite replaces only {REPLACEABLE}. "
            f"Choose another DST, or move or delete it yourself."
        )
    if os.path.lexists(dst) and not overwrite:
        raise DestinationExistsError(f"{dst!r} already exists.").with_remedy(OVERWRITE)


def check_apart(src: str, dst: str, src_is_pattern: bool = False) -> None:
    """Refuse a DST that is the source, holds it, or lies inside it (real paths: symlinks and
    ``..`` resolved; URLs compared as normalised strings). ``src_is_pattern``: ``src`` is the
    folder a glob pattern starts in, which DST may lie inside (the pattern picks the files)."""
    if is_url(src) != is_url(dst):
        return
    if is_url(src):
        root, target = normalize(src).rstrip("/"), normalize(dst).rstrip("/")
        sep, check_inside = "/", True
    else:
        root, target = os.path.realpath(src), os.path.realpath(dst)
        sep, check_inside = os.sep, os.path.isdir(root) and not src_is_pattern

    def under(child: str, parent: str) -> bool:
        return child.startswith(parent.rstrip(sep) + sep)

    if target == root:
        raise UsageError(f"{dst!r} is the source {src!r}; choose another DST.")
    if under(root, target):
        raise UsageError(
            f"{dst!r} holds the source {src!r}; writing there would replace the source. Choose a DST outside it."
        )
    if check_inside and under(target, root):
        raise UsageError(
            f"{dst!r} is inside the source {src!r}; the conversion would read its own output. "
            f"Choose a DST outside the source tree."
        )
