"""Where the columns of an HDF5 file keep their bytes: only inside the file itself is accepted.

HDF5 lets a dataset keep its bytes elsewhere: external storage (raw bytes in any named file, such
as ``/etc/passwd`` or ``/dev/zero``), a virtual dataset (a view over datasets of other files),
soft and external links (a name that points at another object or another file), and filters that
only a plugin library can decode. None of these is written by iotool; each would let a file from
someone else make iotool read outside it, so each is refused, by name, before anything is read.
"""

from __future__ import annotations

import h5py

from ...errors import FormatError
from .layout import VLEN_VERSION

ALLOWED = "a dataset stored in the file itself (contiguous, chunked or compact, with built-in filters only)"


def column_names(format_version: int) -> tuple[str, ...]:
    """The datasets a reader of ``format_version`` reads."""
    names = ("images", "labels", "keys", "checksums")
    if format_version != VLEN_VERSION:
        names += ("offsets",)
    if format_version >= 3:
        names += ("shapes",)
    return names


def storage_problem(file: h5py.File, name: str) -> str | None:
    """Why ``/name`` is not stored inside the file (None: it is, or there is no such object)."""
    link = file.get(name, getlink=True)
    if isinstance(link, h5py.ExternalLink):
        return f"is an external link to {link.filename!r}:{link.path!r}"
    if isinstance(link, h5py.SoftLink):
        return f"is a soft link to {link.path!r}"
    if link is None:
        return None
    obj = file.get(name)
    if not isinstance(obj, h5py.Dataset):
        return None  # a missing or mistyped column is reported where it is read
    plist = obj.id.get_create_plist()
    if plist.get_layout() == h5py.h5d.VIRTUAL:
        return "is a virtual dataset over other files"
    if plist.get_external_count() > 0:
        target = plist.get_external(0)[0].decode("utf-8", "replace")
        return f"keeps its bytes in the external file {target!r}"
    for i in range(plist.get_nfilters()):
        code, _flags, _values, filter_name = plist.get_filter(i)
        if not h5py.h5z.filter_avail(code):
            return f"needs the filter {code} ({filter_name.decode('utf-8', 'replace')!r}), which is not built in"
    return None


def check_columns(path: str, file: h5py.File, format_version: int, extra: tuple[str, ...] = ()) -> None:
    """FormatError naming the first column of ``file`` (and of ``extra``: the stored fields'
    datasets) that is not stored inside it."""
    for name in column_names(format_version) + extra:
        problem = storage_problem(file, name)
        if problem is not None:
            raise FormatError(
                f"{path}: '/{name}' {problem}; iotool reads only {ALLOWED}, never another "
                f"file. The file was not written by iotool, or was modified after conversion."
            )
