"""The TFRecord reader: records by index through the byte offsets of iotool's index, CRCs checked."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ... import storage
from ...errors import FormatError, IotoolError
from ..sharded.fieldcols import stored_bytes, value_column, value_kind
from ..sharded.reader import OffsetShardReader, Read
from . import example
from .fields import extra_problems, feature_limits, stored_field
from .framing import MAX_RECORD_BYTES, RecordError, framed_size, scan, unframe
from .writer import KINDS, index_name

try:
    from ... import _tfrecord  # optional C extension (setup.py)
except ImportError:  # pragma: no cover - built without a C compiler
    _tfrecord = None

IMAGE_KEY = example.IMAGE.encode()
MAX_FEATURES = 64  # the most feature names _tfrecord.field_spans takes (csrc/_tfrecord_common.h, MAX_NAMES)
FORMAT_VERSION = 2  # 2: the shapes column (decoded sizes)
FIELDS_VERSION = 3  # 3: stored fields as features, value.<name> columns (a dataset with fields besides the class)


class TfrecordReader(OffsetShardReader):
    """Random and sequential access to TFRecord shards: each read takes the whole framed record,
    checks both CRCs and returns its ``image/encoded`` bytes (labels come from the index)."""

    format_name = "tfrecord"
    format_versions = (1, FORMAT_VERSION, FIELDS_VERSION)
    fields_version = FIELDS_VERSION
    column_kinds = KINDS
    column_since = {"shapes": 2}
    max_record_bytes = framed_size(MAX_RECORD_BYTES)  # the framing's cap, checked before a read

    @property
    def label_offset(self) -> int:
        """What the records' ``image/class/label`` adds to the class index (0, or 1 for TF-slim)."""
        value = self.meta.options.get("label_offset", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _payload(self, shard: int, offset: int, raw: bytes) -> bytes:
        where = self.shard_path(shard)
        data = unframe(raw, where, offset)
        try:
            image = example.find_bytes(data, example.IMAGE)
        except example.ExampleError as exc:
            raise FormatError(f"{where}: record at byte {offset} is not a tf.train.Example ({exc}).") from None
        if image is None:
            raise FormatError(f"{where}: record at byte {offset} has no {example.IMAGE} bytes feature.")
        return bytes(image)

    def _payloads(self, shards: list[int], offsets: list[int], raws: list[Any]) -> list[Any]:
        """The image bytes of a run of records, found in C with the GIL released (``iotool._tfrecord``:
        CRCs and the Example checked as :meth:`_payload` checks them); a record it leaves (damage,
        anything unusual, no extension or no CRC32C instruction) is parsed by :meth:`_payload`."""
        if _tfrecord is None:
            return super()._payloads(shards, offsets, raws)
        spans = _tfrecord.image_spans(raws, IMAGE_KEY, MAX_RECORD_BYTES)
        return [
            raw[span[0] : span[1]] if span is not None else self._payload_or_none(shard, offset, raw)
            for shard, offset, raw, span in zip(shards, offsets, raws, spans)
        ]

    def read_run_fields(self, indices: list[int], names: Sequence[str]) -> list[dict[str, Any] | None]:
        """The stored bytes of fields ``names`` of each record of a run: where each field is one
        bytes feature a record (text, JSON, arrays, bytes, a float's decimal), the run's records
        read in one C call and their features found in another, both with the GIL released
        (``iotool._tfrecord.field_spans``: CRCs and the Example checked, each feature read with a
        limit of one value, as :meth:`_record` reads them), each value then taken by its kind's
        ``from_tfrecord``. None for a record whose fields do not read (:meth:`read_fields` of it
        names why); other kinds, remote datasets and records the C code leaves: a record at a time."""
        run = self._field_run(indices, names)
        if run is None:
            return super().read_run_fields(indices, names)
        return run[3]

    def read_run(
        self, indices: list[int], names: Sequence[str]
    ) -> tuple[list[tuple[int, Any, int | None]], list[dict[str, Any] | None]]:
        """(:meth:`read_views`, :meth:`read_run_fields`) of a run with each record read once: the
        ranges read and the features found as :meth:`read_run_fields` does, the image's span its
        ``field_spans`` row's first (the image bytes :meth:`read_views` gives); a record that C
        call leaves, or whose image is not one bytes value, has its image from :meth:`_payload`
        (None where that raises). Where :meth:`read_run_fields` reads a record at a time: the two
        calls."""
        run = self._field_run(indices, names)
        if run is None:
            return super().read_run(indices, names)
        found, raws, spans, fields = run
        images = [
            raw[span[0] : span[1]] if span is not None else self._payload_or_none(shard, offset, raw)
            for shard, offset, raw, span in zip(found[:, 0].tolist(), found[:, 1].tolist(), raws, spans)
        ]
        return self.labelled(indices, images), fields

    def reads_run_once(self, names: Sequence[str]) -> bool:
        """Whether :meth:`read_run` of fields ``names`` reads each record once: the extension is
        built, the dataset is local and each field is one bytes feature a record."""
        return _tfrecord is not None and not self.remote and self._bytes_features(names) is not None

    def _field_run(
        self, indices: list[int], names: Sequence[str]
    ) -> tuple[np.ndarray, list[Any], list[tuple[int, int] | None], list[dict[str, Any] | None]] | None:
        """A run's locations, framed records (one range read), the span of each one's image where
        ``field_spans`` found it as one bytes value (its row's first feature; else None) and the
        values of fields ``names`` of each record; None where the run is read a record at a time
        (no extension, a field of another kind, a remote dataset)."""
        plan = self._bytes_features(names)
        found = self.run_locations(indices) if _tfrecord is not None and plan is not None else None
        if found is None or plan is None or _tfrecord is None:
            return None
        ranges = [(offset, size) for offset, size in found[:, 1:].tolist()]
        raws = self.read_ranges(found[:, 0].tolist(), ranges).views()
        features = [IMAGE_KEY, *(feature.encode("ascii") for _, _, fs in plan for feature in fs)]
        rows = _tfrecord.field_spans(raws, features, MAX_RECORD_BYTES)
        found_all = [k for k, (raw, row) in enumerate(zip(raws, rows)) if raw is not None and row is not None]
        out: list[dict[str, Any] | None] = [None] * len(indices)
        spans: list[tuple[int, int] | None] = [None] * len(indices)
        if not found_all:
            return found, raws, spans, out
        table = np.frombuffer(b"".join(rows[k] for k in found_all), dtype=np.int64).reshape(len(found_all), -1, 3)
        whole = (table[:, :, 2] == 1).all(axis=1).tolist()  # the image and every feature: one bytes value
        image = (table[:, 0, 2] == 1).tolist()  # the image alone: one bytes value
        starts, stops = table[:, :, 0].tolist(), table[:, :, 1].tolist()
        bounds = [self.field_bound(name) for name, _, _ in plan]
        for j, k in enumerate(found_all):
            if image[j]:
                spans[k] = (starts[j][0], stops[j][0])
            if whole[j]:
                out[k] = _run_values(raws[k], starts[j], stops[j], plan, bounds)
        return found, raws, spans, out

    def _bytes_features(self, names: Sequence[str]) -> list[tuple[str, Any, list[str]]] | None:
        """For each of ``names``: (name, spec, its features' names) where every feature of every
        field is one bytes value (what ``field_spans`` finds); None otherwise."""
        stored = {f.name: f for f in self.schema.stored}
        plan = []
        for name in names:
            spec = stored.get(name)
            if spec is None or not name.isascii():
                return None
            features = spec.field_kind.tfrecord_features(spec)
            if not all(f.type == "bytes" and f.fixed and f.most == 1 for f in features):
                return None
            plan.append((name, spec, [name + f.suffix for f in features]))
        # field_spans looks for at most MAX_FEATURES names in a record, the image's among them
        return plan if plan and sum(len(f) for _, _, f in plan) < MAX_FEATURES else None

    def _record(
        self, shard: int, offset: int, raw: bytes, index: int, names: Sequence[str], read: Read
    ) -> tuple[bytes, dict[str, bytes]]:
        """The image and fields ``names`` of one record: unframed once, only their features
        decoded, each list within its bound (:mod:`.fields`)."""
        if not names:
            return self._payload(shard, offset, raw), {}
        where = f"{self.shard_path(shard)}: record {index} (at byte {offset})"
        data = unframe(raw, self.shard_path(shard), offset)
        limits = {example.IMAGE: 1, **feature_limits(self.schema, list(names))}
        try:
            features = example.find_features(data, limits)
        except example.ExampleError as exc:
            raise FormatError(f"{where}: not a tf.train.Example ({exc}).") from None
        image = example.first_bytes(features, example.IMAGE)
        if image is None:
            raise FormatError(f"{where}: no {example.IMAGE} bytes feature.")
        fields = {name: stored_field(self.schema[name], features, self.field_bound(name), where) for name in names}
        return bytes(image), fields

    def index_paths(self) -> list[str]:
        """The tfrecord2idx file of every shard, in shard order (for DALI and the tfrecord package)."""
        return [storage.join(self.path, index_name(s["name"])) for s in self.shards]

    def files(self) -> list[str]:
        return super().files() + self.index_paths()

    def _shard_problems(self, shard: int, indices: range, local: str) -> list[str]:
        where, problems = self.shard_path(shard), []
        with self.open_local(local) as f:
            found = list(scan(f, where))
        if len(found) != len(indices):
            problems.append(f"{where}: {len(found)} records, the index expects {len(indices)}.")
        for i, rec in zip(indices, found):
            _, offset, size = self._location(i)
            if rec.error is not None:
                problems.append(str(rec.error))
                continue
            if (rec.offset, rec.size) != (offset, size):
                problems.append(
                    f"{where}: record at byte {rec.offset} ({rec.size} bytes) is not where the index "
                    f"puts record {i} (byte {offset}, {size} bytes)."
                )
                continue
            assert rec.data is not None  # a record without an error has its data
            try:
                features = example.decode_example(rec.data)
            except example.ExampleError as exc:
                problems.append(f"{where}: record at byte {offset} is not a tf.train.Example ({exc}).")
                continue
            has_class = self.schema.has_class
            if has_class and example.first_int(features, example.LABEL) != int(self.labels[i]) + self.label_offset:
                problems.append(f"{where}: record at byte {offset}: its {example.LABEL} does not match the index.")
            problems += self._field_problems(features, i, f"{where}: record at byte {offset}")
            name = example.first_bytes(features, example.FILENAME)
            if name is not None and bytes(name) != str(self.keys[i]).encode("utf-8", "surrogateescape"):
                problems.append(f"{where}: record at byte {offset}: its {example.FILENAME} does not match the index.")
        return problems

    def _field_problems(self, features: dict[str, example.Feature], i: int, where: str) -> list[str]:
        """A record's field features: each readable, a float's float32 copy and the value columns
        agreeing with the stored bytes."""
        problems = []
        for spec in self.schema.stored:
            try:
                stored = stored_field(spec, features, self.field_bound(spec.name), where)
            except IotoolError as exc:
                problems.append(str(exc))
                continue
            problems += [f"{where}: {problem}." for problem in extra_problems(spec, features, stored)]
            column = value_kind(spec)
            if column is not None and stored != stored_bytes(column, self.column(value_column(spec.name))[i]):
                problems.append(f"{where}: field {spec.name!r} does not hold the index's value.")
        return problems

    def _companion_problems(self, shard: int, indices: range) -> list[str]:
        """The shard's tfrecord2idx file against the index's locations."""
        path = self.index_paths()[shard]
        expected = "".join(f"{o} {s}\n" for _, o, s in (self._location(i) for i in indices)).encode("ascii")
        try:
            if self.remote:
                found = storage.read_bytes(path, self.storage, len(expected) + 1)
            else:
                with self.open_local(path) as f:
                    found = f.read(len(expected) + 1)
        except (OSError, FormatError) as exc:
            return [f"{path}: unreadable ({exc}); rewrite it with `python -m tfrecord.tools.tfrecord2idx`."]
        return [] if found == expected else [f"{path}: does not match the records of its shard."]


__all__ = ["FIELDS_VERSION", "FORMAT_VERSION", "RecordError", "TfrecordReader"]


def _run_values(
    raw: Any, starts: list[int], stops: list[int], plan: list[tuple[str, Any, list[str]]], bounds: list[int]
) -> dict[str, Any] | None:
    """One record's values from its ``field_spans`` row (feature ``j``'s value at
    ``raw[starts[j]:stops[j]]``, the image's first): each field's stored bytes its kind's
    ``from_tfrecord`` of its features; None where one refuses (the per-sample path names why)."""
    values, at = {}, 1  # feature 0 is the image
    for (name, spec, features), bound in zip(plan, bounds):
        found = [[raw[starts[j] : stops[j]]] for j in range(at, at + len(features))]
        at += len(features)
        try:
            values[name] = spec.field_kind.from_tfrecord(spec, found, bound, name)
        except Exception:
            return None
    return values
