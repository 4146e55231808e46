"""The format registry: names map to module paths, imported on first use.

Built-in formats are listed here by module path; other packages add formats through the
standard entry-point group ``iotool.formats`` (``name = "package.module:SPEC"``, or just the
module, whose ``SPEC`` is taken), as fsspec and pytest plugins do. Nothing is imported until a
format is asked for, so ``import iotool`` stays light. The mechanism is
:class:`iotool.registry.Registry`, which the source registry shares.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping

from ..errors import UnknownFormatError
from ..registry import Registry
from .spec import FormatSpec

ENTRY_POINT_GROUP = "iotool.formats"
BUILTIN: dict[str, str] = {
    "lmdb": "iotool.formats.lmdb:SPEC",
    "hdf5": "iotool.formats.hdf5:SPEC",
    "tar": "iotool.formats.tar:SPEC",
    "bmp": "iotool.formats.bmp:SPEC",
    "tfrecord": "iotool.formats.tfrecord:SPEC",
}

REGISTRY: Registry[FormatSpec] = Registry(
    "format", FormatSpec, ENTRY_POINT_GROUP, BUILTIN, attr="SPEC", error=UnknownFormatError
)


def format_names() -> list[str]:
    """Every registered format name, without importing any format (built-ins first)."""
    return REGISTRY.names()


def get_format(name: str) -> FormatSpec:
    """The spec of format ``name`` (imported on first use); the error lists the known ones."""
    return REGISTRY.get(name)


def register(spec: FormatSpec) -> FormatSpec:
    """Add a format at run time (an installed package uses the entry-point group instead)."""
    return REGISTRY.register(spec, spec.name)


def all_formats() -> list[FormatSpec]:
    """Every registered spec (imports each format)."""
    return [get_format(name) for name in format_names()]


def formats_where(capable: Callable[[FormatSpec], bool], among: Iterable[str] | None = None) -> list[str]:
    """The registered formats (or those named in ``among``, in its order) whose spec has a
    capability, e.g. ``lambda spec: spec.dali is not None``; imports each format asked about."""
    return [name for name in (format_names() if among is None else among) if capable(get_format(name))]


class _Formats(Mapping[str, FormatSpec]):
    """``FORMATS``: a read-only name -> spec mapping that imports a format when it is looked up."""

    def __getitem__(self, name: str) -> FormatSpec:
        try:
            return get_format(name)
        except UnknownFormatError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(format_names())

    def __len__(self) -> int:
        return len(format_names())

    def __contains__(self, name: object) -> bool:
        return name in format_names()

    def __repr__(self) -> str:
        return f"FORMATS({', '.join(format_names())})"


FORMATS = _Formats()
