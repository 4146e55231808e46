"""What a storage format is: its spec, the declaration of its capabilities and implementation.

A format is one module (or sub-package) that defines a :class:`FormatSpec` named ``SPEC``;
the registry (:mod:`iotool.formats.registry`) finds it by module path or through the
``iotool.formats`` entry-point group. Nothing outside the format's module needs its name:
the pipeline, the engines, ``verify``, ``info``, the datasets, DALI and the benchmarks read
the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .dali import DaliReading
from .options import FormatOptions
from .plugins import missing_extra

if TYPE_CHECKING:  # the classes a spec names; their modules load with the format that defines them
    from .plan import ShardPlan
    from .reader import FormatReader
    from .writer import FormatWriter


@dataclass(frozen=True)
class FormatSpec:
    """A format's declaration: what it is, what it can do, and its implementation.

    Attributes:
        name: the name used on the command line and stored in the metadata's ``format`` field.
        description: one line for help texts.
        writer, reader: the classes; ``reader`` subclasses :class:`ShardedReader` when the
            dataset is read as an IterableDataset.
        sniff: ``sniff(local_path)`` returns the format name the dataset's own metadata declares
            when ``path`` is a container of the kind this format writes, else None. Detection
            trusts what it says, never which files happen to exist.
        sniff_remote: the same for a URL (``sniff_remote(url, storage_config)``), for formats
            read remotely.
        options: the typed, frozen options class (unknown options are refused).
        sharded: how the Ray engine splits a conversion into shard tasks (None: one writer).
        remote_write: the writer reports closed units (``on_unit_closed``), so a conversion can
            publish them to a URL destination; ``unit_glob`` matches their file names.
        encoding: a payload encoding the format requires (the BMP cache: ``bmp``).
        needs_resize: the format stores resized images only.
        dali: how NVIDIA DALI reads the format's shards (its reader, index files and how to
            rebuild them; :mod:`iotool.formats.dali`), or None when DALI does not read it.
        webdataset: the ``webdataset`` package reads the shards as they are
            (``webdataset.WebDataset(reader.shard_urls())``; samples ``<key>.<ext>`` + ``<key>.cls``).
        example_options: options for a tiny dataset that still has several units (shards,
            commits); the shared test suites and docs use them.
        extra: the optional dependencies the format needs, as ``(pip extra, (module, ...))``,
            e.g. ``("tfrecord", ("google_crc32c",))``; None when it needs none.
    """

    name: str
    description: str
    writer: type[FormatWriter]
    reader: type[FormatReader]
    sniff: Callable[[str], str | None]
    sniff_remote: Callable[[str, Any], str | None] | None = None
    options: type[FormatOptions] = FormatOptions
    sharded: ShardPlan | None = None
    remote_write: bool = False
    unit_glob: str | None = None
    encoding: str | None = None
    needs_resize: bool = False
    dali: DaliReading | None = None
    webdataset: bool = False
    example_options: dict[str, Any] = field(default_factory=dict)
    extra: tuple[str, tuple[str, ...]] | None = None

    def missing_extra(self) -> str | None:
        """``pip install 'iotool[<extra>]'`` when a module the format needs is not installed
        (looked up without importing it), else None."""
        return missing_extra(self.extra)

    @property
    def resumable(self) -> bool:
        """Whether ``convert(..., resume=True)`` can continue a partial output of this format."""
        return self.writer.resumable

    @property
    def remote_read(self) -> bool:
        """Whether datasets of this format are read from URLs."""
        return self.reader.remote_ok and self.sniff_remote is not None

    @property
    def iterable(self) -> bool:
        """Whether ``open_dataset`` returns an IterableDataset (sharded reading)."""
        from .reader import ShardedReader

        return issubclass(self.reader, ShardedReader)

    def parse_options(self, given: Mapping[str, Any]) -> FormatOptions:
        """This format's typed options from keyword arguments; unknown ones are refused."""
        return self.options.parse(self.name, given)
