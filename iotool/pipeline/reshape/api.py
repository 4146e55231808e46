"""``merge``, ``split`` and ``subset``: new datasets from the records of existing ones, copied as stored.

Nothing is decoded or re-encoded: each record's stored image bytes, field bytes and checksum are
those of its input (the checksum recorded when the input was converted, carried over; computed
again only for a record whose fields change). The work runs on convert's local engine (records
read a block at a time in this process, :mod:`.stored`; one writer writes, in ``order``) into
temporary siblings renamed into place when every output is complete.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ...errors import UsageError
from ...formats import get_format
from ...storage import StorageConfig
from ..sources.dataset import DatasetOptions, DatasetSource
from .copying import (
    CopyOptions,
    Output,
    Part,
    PickedSource,
    Written,
    carried_payload_options,
    check_outputs,
    write_outputs,
)
from .picks import (
    check_fraction,
    check_seed,
    check_stratify,
    pick_classes,
    pick_first,
    pick_fraction,
    pick_keys,
    read_key_file,
    rest,
)
from .reconcile import KeyClash, merged_classes, merged_schema, relabelled, unique_keys
from .stored import key_list, label_array

__all__ = ["ChangeReport", "KeyClash", "Written", "merge", "split", "subset"]


@dataclass
class ChangeReport:
    """What a merge, split or subset wrote.

    Attributes:
        operation: ``merge``, ``split`` or ``subset``.
        inputs: the input datasets' paths, in order.
        outputs: each dataset written (``split``: DST_A then DST_B), with its records per class.
        classes: the outputs' class names, in index order.
        relabelled: ``merge``: for each input, how many of its classes have another index in the output.
        clashes: ``merge``: the keys two inputs held, and what became of the later one's record.
        seconds: the time it took.
    """

    operation: str
    inputs: list[str]
    outputs: list[Written]
    classes: list[str]
    relabelled: list[int] = field(default_factory=list)
    clashes: list[KeyClash] = field(default_factory=list)
    seconds: float = 0.0


def merge(
    srcs: Sequence[str | os.PathLike],
    dst: str | os.PathLike,
    *,
    to: str | None = None,
    fields: str | Sequence[str] | None = None,
    on_duplicate: str = "fail",
    workers: int | None = None,
    overwrite: bool = False,
    order: str | None = None,
    order_seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
    storage_options: dict[str, Any] | None = None,
    **format_options: Any,
) -> ChangeReport:
    """Merge iotool datasets of any formats into one at ``dst``, copying their stored records.

    Args:
        srcs: two or more datasets (paths, or URLs the format reads); records are written in
            this order (each input's in its own order), unless ``order`` shuffles them.
        dst: the output path (local); written under a temporary name, renamed when complete.
        to: the output format; default: the first input's.
        fields: the fields to keep, by name (``class`` for the class), comma-separated or a
            sequence; default: every field, which every input must then have. A field of one name
            must be the same field (kind, dtype, extension ...) in every input.
        on_duplicate: a key two inputs hold: ``fail`` (the default; the error names both),
            ``skip`` (the later input's record is left out) or ``prefix`` (its key becomes
            ``NAME/KEY``, NAME the input's last path component without its extension).
        workers: reader processes for inputs at URLs (default: CPU count; 0 or 1: in this
            process). Local inputs are read in this process, a block of records at a time:
            handing a record's bytes to a worker and back costs more than copying them.
        overwrite: replace an existing ``dst`` (only a dataset iotool wrote).
        order: ``shuffled`` or ``source``, as for :func:`iotool.convert` (default: shuffled for
            formats read as shards in sequence, tar and tfrecord; source otherwise).
        order_seed: the seed of a shuffled order.
        progress: called with (output path, records done, records to do) as records are written.
        storage_options: fsspec options for inputs at URLs.
        **format_options: options of the output format (e.g. ``shard_size`` for tar).

    Returns:
        A :class:`ChangeReport`. The classes are the union of the inputs' class names: the first
        input's in their order, then each later input's new ones; a record keeps its class name,
        and its class index changes where its name has another index in the union
        (``report.relabelled`` counts them per input).

    Raises:
        UsageError: fewer than two inputs, a field or key conflict (naming both inputs), a bad option.
        IotoolError: an input does not open, or one of its records does not read (naming it).
    """
    if isinstance(srcs, str | os.PathLike) or len(srcs) < 2:
        raise UsageError("merge needs two or more datasets to merge.")
    start = time.perf_counter()
    chosen = _field_text(fields)
    sources = _open_all(srcs, chosen, storage_options)
    names = [s.root for s in sources]
    schema = merged_schema([s.schema for s in sources], names)
    classes, maps = merged_classes([s.classes for s in sources]) if schema.has_class else ([], [])
    taken, renamed, clashes = unique_keys([key_list(s.reader) for s in sources], names, on_duplicate)
    parts = [Part(s, idx, maps[n] if maps else None, renamed[n]) for n, (s, idx) in enumerate(zip(sources, taken))]
    parts = [p for p in parts if len(p.indices)]
    given = {**carried_payload_options(sources), "merged_from": names}
    if on_duplicate != "fail":
        given["on_duplicate"] = on_duplicate
    out = Output(
        os.fspath(dst), get_format(to or sources[0].reader.format_name), PickedSource(parts, classes, schema), given
    )
    written = _write([out], names, workers, overwrite, order, order_seed, progress, format_options)
    return ChangeReport(
        "merge", names, written, classes, relabelled(maps) if maps else [], clashes, time.perf_counter() - start
    )


def split(
    src: str | os.PathLike,
    dst_a: str | os.PathLike,
    dst_b: str | os.PathLike,
    *,
    fraction: float,
    seed: int = 0,
    stratify: str | None = None,
    to: str | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    order: str | None = None,
    order_seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
    storage_options: dict[str, Any] | None = None,
    **format_options: Any,
) -> ChangeReport:
    """Split a dataset in two: ``dst_b`` takes ``fraction`` of its records, ``dst_a`` the rest.

    Args:
        src: an iotool dataset of any format.
        dst_a: the first output, the records ``dst_b`` does not take (a local path).
        dst_b: the second output, ``fraction`` of the records (a local path). Both outputs
            appear only when both are complete.
        fraction: the share ``dst_b`` takes, between 0 and 1 (both excluded): ``round(count *
            fraction)`` records (halves rounded up), chosen by a hash of each record's key keyed
            with ``seed`` (the same choice on every machine; a record keeps its side when others are
            added). With ``stratify="class"``, each class gives ``round(its count * fraction)``,
            so every class's share is exact to one record.
        seed: the seed of the choice (0 or more).
        stratify: ``class`` to split each class on its own; None to split the records as a whole.
        to: the output format (default: the input's).
        workers: as for :func:`merge`.
        overwrite: as for :func:`merge`.
        order: as for :func:`merge`; without it each output's records keep the input's order.
        order_seed: as for :func:`merge`.
        progress: as for :func:`merge`.
        storage_options: as for :func:`merge`.
        **format_options: as for :func:`merge`.

    Both outputs keep the input's classes and class indices, and its records' keys.

    Returns:
        A :class:`ChangeReport` whose ``outputs`` are ``dst_a`` then ``dst_b``, each with its
        records per class.

    Raises:
        UsageError: a fraction out of range, one that leaves an output empty, an unknown
            ``stratify`` or one on a dataset without classes.
        IotoolError: the input does not open, or a record does not read (naming it).
    """
    start = time.perf_counter()
    fraction, seed = check_fraction(fraction), check_seed(seed)
    source = _open_all([src], None, storage_options)[0]
    stratified = check_stratify(stratify, source.schema.has_class, source.root)
    b = _fraction_of(source, fraction, seed, stratified)
    count = len(source.reader)
    if len(b) in (0, count):
        side = "no record" if len(b) == 0 else "every record"
        raise UsageError(
            f"{source.root}: fraction={fraction} of its {count} records gives {side} to the second output; "
            "choose a fraction that leaves records on both sides."
        )
    a = rest(count, b)
    spec = get_format(to or source.reader.format_name)
    made = {"split_from": source.root, "split_fraction": fraction, "split_seed": seed, "split_stratify": stratify}
    outputs = [
        _single(source, dst, picked, spec, {**made, "split_part": part})
        for dst, picked, part in ((dst_a, a, "a"), (dst_b, b, "b"))
    ]
    written = _write(outputs, [source.root], workers, overwrite, order, order_seed, progress, format_options)
    return ChangeReport("split", [source.root], written, list(source.classes), seconds=time.perf_counter() - start)


def subset(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    classes: str | Sequence[str] | None = None,
    fraction: float | None = None,
    seed: int = 0,
    stratify: str | None = None,
    first: int | None = None,
    keys: Iterable[str] | None = None,
    keys_file: str | os.PathLike | None = None,
    to: str | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    order: str | None = None,
    order_seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
    storage_options: dict[str, Any] | None = None,
    **format_options: Any,
) -> ChangeReport:
    """Write the records of a dataset chosen by one selector into a new dataset at ``dst``.

    Give exactly one of:

    - ``classes``: the records of these classes (names, comma-separated or a sequence);
    - ``fraction`` (with ``seed``, optionally ``stratify="class"``): the records :func:`split`
      would give its second output with the same options;
    - ``first``: the first N records, in the dataset's order;
    - ``keys`` or ``keys_file`` (one key a line, blank lines skipped): the records with these keys.

    The output keeps the input's classes and class indices (a class left with no record stays in
    the class list), its records' keys, and their order (or ``order``'s). The other arguments are
    as for :func:`merge`.

    Returns:
        A :class:`ChangeReport` with the one output and its records per class.

    Raises:
        UsageError: no selector or more than one; an unknown class (naming it and the classes); a
            fraction out of range; ``first`` over the record count; keys the dataset does not hold
            (how many, the first by name); a selection that takes no record.
        IotoolError: the input does not open, or a record does not read (naming it).
    """
    start = time.perf_counter()
    given = {
        "classes": classes,
        "fraction": fraction,
        "first": first,
        "keys": keys,
        "keys_file": keys_file,
    }
    named = [name for name, value in given.items() if value is not None]
    if len(named) != 1:
        raise UsageError(
            f"subset takes one selector: classes, fraction, first, keys or keys_file (given: {', '.join(named) or 'none'})."
        )
    source = _open_all([src], None, storage_options)[0]
    picked, how = _selection(source, named[0], given[named[0]], seed, stratify)
    if len(picked) == 0:
        raise UsageError(f"{source.root}: {how} takes no record; nothing to write.")
    spec = get_format(to or source.reader.format_name)
    output = _single(source, dst, picked, spec, {"subset_from": source.root, "subset_by": how})
    written = _write([output], [source.root], workers, overwrite, order, order_seed, progress, format_options)
    return ChangeReport("subset", [source.root], written, list(source.classes), seconds=time.perf_counter() - start)


def _selection(source: DatasetSource, name: str, value: Any, seed: int, stratify: str | None) -> tuple[np.ndarray, str]:
    """The records a subset's selector takes (ascending), and the selector as the metadata says it."""
    reader, where = source.reader, source.root
    if name != "fraction" and stratify is not None:
        raise UsageError("stratify applies to a fraction only.")
    if name == "classes":
        names = [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else list(value)
        if not source.schema.has_class:
            raise UsageError(f"{where}: its records have no class to choose by.")
        return pick_classes(names, reader.classes, label_array(reader), where), f"classes={','.join(names)}"
    if name == "fraction":
        fraction, seed = check_fraction(value), check_seed(seed)
        stratified = check_stratify(stratify, source.schema.has_class, where)
        how = f"fraction={fraction} seed={seed}" + (" stratify=class" if stratified else "")
        return _fraction_of(source, fraction, seed, stratified), how
    if name == "first":
        return pick_first(len(reader), value, where), f"first={value}"
    if name == "keys_file":
        wanted = read_key_file(os.fspath(value))
        return pick_keys(wanted, key_list(reader), where, f"{len(wanted)} keys of {os.fspath(value)}"), (
            f"keys_file={os.fspath(value)}"
        )
    wanted = [value] if isinstance(value, str) else list(value)
    return pick_keys(wanted, key_list(reader), where, f"{len(wanted)} keys given"), f"keys ({len(wanted)})"


def _fraction_of(source: DatasetSource, fraction: float, seed: int, stratified: bool) -> np.ndarray:
    labels = label_array(source.reader) if stratified else None
    return pick_fraction(key_list(source.reader), labels, fraction, seed)


def _single(source: DatasetSource, dst: str | os.PathLike, picked: np.ndarray, spec: Any, made: dict) -> Output:
    """The output of records ``picked`` of one input: its classes, schema and keys unchanged."""
    part = Part(source, picked)
    given = {**carried_payload_options([source]), **made}
    return Output(os.fspath(dst), spec, PickedSource([part], list(source.classes), source.schema), given)


def _write(
    outputs: list[Output],
    inputs: list[str],
    workers: int | None,
    overwrite: bool,
    order: str | None,
    order_seed: int,
    progress: Callable[[str, int, int], None] | None,
    format_options: dict[str, Any],
) -> list[Written]:
    check_outputs(outputs, inputs)
    options = CopyOptions(workers, overwrite, order, order_seed, progress, dict(format_options))
    return write_outputs(outputs, options)


def _field_text(fields: str | Sequence[str] | None) -> str | None:
    """``fields=`` as the comma-separated text a dataset source takes."""
    if fields is None or isinstance(fields, str):
        return fields
    return ",".join(fields)


def _open_all(
    srcs: Sequence[str | os.PathLike], fields: str | None, storage_options: dict[str, Any] | None
) -> list[DatasetSource]:
    """Each input opened as a dataset source (its format detected), keeping ``fields``."""
    config = StorageConfig(options=dict(storage_options or {}))
    options = DatasetOptions(fields=fields)
    out = []
    for src in srcs:
        path = os.fspath(src)
        out.append(DatasetSource(path, None, config, options))
    return out
