"""The datasets return the fields chosen (``fields=``): tuples in the order asked, a dict for
``"all"``, ``(image, label)`` by default on class datasets; values decoded, checked, skipped when
bad; the sharded split, shuffle, DataLoader workers and resume unchanged with fields.

Map-style formats that store fields are converted from :mod:`tests.support.fields` through the real
pipeline. The sharded dataset is a real tar dataset; until the tar format stores fields, a small
subclass of its reader serves the fields of :mod:`tests.support.fields` beside its real records.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest
from torch.utils.data import DataLoader

import iotool
from iotool.errors import RecordError, UsageError
from iotool.fields import Schema, encode, record_checksum
from iotool.formats import get_format
from iotool.formats.tar.reader import TarReader
from iotool.loading.iterable import ShardedIterableDataset
from iotool.loading.mapstyle import ImageDataset
from iotool.loading.split import ShardEnv

from ..conftest import formats_where, indices_by_place
from ..support.fields import EVERY_KIND, SPECS, convert_fields, same, schema_of, value

N = 9
SCHEMA = schema_of(*EVERY_KIND)
MAP_FORMATS = formats_where(lambda s: s.reader.fields_version is not None and not s.iterable)
SHARDED_FORMATS = formats_where(lambda s: s.reader.fields_version is not None and s.iterable)


def source_index(key: str) -> int:
    """The FieldsSource sample a record key names (``a/img004.jpg`` -> 4)."""
    return int(Path(key).stem[3:])


def check_values(names: Sequence[str], got: Sequence[Any] | dict[str, Any], i: int, label: bool = True) -> None:
    """``got`` (a tuple in ``names`` order, or a dict) holds sample ``i``'s values."""
    items = got.items() if isinstance(got, dict) else zip(names, got, strict=True)
    for name, v in items:
        if name == "image":
            assert isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 3
        elif name == "class":
            assert type(v) is int and v == i % 2
        else:
            assert same(v, value(name, i)), (name, i, v)


# -- the sharded dataset: a real tar, with fields served beside it where tar stores none yet -----------
class TarWithFields(TarReader):
    """A real tar dataset's reader that also serves :data:`SCHEMA`'s fields (values of
    :func:`tests.support.fields.value`), checksummed over the image and them; ``tampered`` bytes
    replace a record's stored field (the file is not touched)."""

    def _load_meta(self):
        return dataclasses.replace(super()._load_meta(), fields=SCHEMA.to_list())

    def read_fields(self, index: int, names: Sequence[str]) -> dict[str, bytes]:
        self.fields_read = getattr(self, "fields_read", 0) + 1
        i = source_index(self.keys[index])
        tampered = getattr(self, "tampered", {})
        return {n: tampered.get((index, n)) or encode(SPECS[n], value(n, i), "test") for n in names}

    def _load_checksums(self) -> list[str]:
        names = [f.name for f in SCHEMA.stored]
        return [record_checksum(self.read(i)[0], self.read_fields(i, names)) for i in range(len(self))]


@pytest.fixture(scope="module")
def tar_path(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("fields") / "ds.tar"
    fmt = SHARDED_FORMATS[0] if SHARDED_FORMATS else "tar"
    convert_fields(dst, fmt, SCHEMA if SHARDED_FORMATS else Schema.classification(), N, shard_size=4)
    return dst


def sharded(path: Path, **kw: Any) -> ShardedIterableDataset:
    reader = get_format(SHARDED_FORMATS[0]).reader(path) if SHARDED_FORMATS else TarWithFields(path)
    return ShardedIterableDataset(reader, **kw)


# -- map-style: real formats that store fields ---------------------------------------------------------
@pytest.fixture(scope="module", params=MAP_FORMATS or [pytest.param("none", marks=pytest.mark.skip)])
def map_path(request, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("fields") / f"ds.{request.param}"
    convert_fields(dst, request.param, SCHEMA, N)
    return dst


def counting(path: Path, tampered: dict[tuple[int, str], bytes] | None = None):
    """The real reader of ``path`` that counts its ``read_fields`` calls and swaps ``tampered`` bytes in."""
    base = type(iotool.open_reader(path))

    class Counting(base):
        fields_read = 0

        def read_fields(self, index: int, names: Sequence[str]) -> dict[str, bytes]:
            type(self).fields_read += 1
            got = dict(super().read_fields(index, names))
            return {n: (tampered or {}).get((index, n), got[n]) for n in got}

    return Counting(path)


def test_default_fields_of_a_class_dataset_are_image_and_label_without_reading_fields(map_path):
    reader = counting(map_path)
    ds = ImageDataset(reader)
    assert ds.fields == ("image", "class") and not ds.as_dict and ds.schema.names == SCHEMA.names
    for i in range(N):
        image, label = ds[i]
        assert isinstance(image, np.ndarray) and label == source_index(ds.keys[i]) % 2
    assert reader.fields_read == 0
    assert len(iotool.open_dataset(map_path)[0]) == 2


def test_tuple_fields_come_in_the_order_asked(map_path):
    names = ("txt", "image", "boxes", "class", "score", "ragged")
    ds = iotool.open_dataset(map_path, fields=names)
    assert ds.fields == names and not ds.as_dict
    reference = iotool.open_dataset(map_path)
    for i in range(N):
        sample = ds[i]
        check_values(names, sample, source_index(ds.keys[i]))
        np.testing.assert_array_equal(sample[1], reference[i][0])


def test_all_gives_a_dict_of_the_image_and_every_field(map_path):
    ds = iotool.open_dataset(map_path, fields="all")
    assert ds.as_dict and ds.fields == ("image", "class", *EVERY_KIND)
    for i in range(N):
        sample = ds[i]
        assert list(sample) == list(ds.fields)
        check_values(ds.fields, sample, source_index(ds.keys[i]))


def test_decoder_none_gives_the_image_bytes_and_decoded_fields(map_path):
    ds = iotool.open_dataset(map_path, decoder=None, fields=("image", "json", "emb", "count"))
    raw, payload, emb, count = ds[3]
    i = source_index(ds.keys[3])
    assert isinstance(raw, bytes) and raw[:2] in (b"\xff\xd8", b"BM")
    assert same(payload, value("json", i)) and same(emb, value("emb", i)) and same(count, value("count", i))


def test_without_the_image_nothing_is_decoded_or_transformed(map_path):
    def refuse(image):
        raise AssertionError("the transform ran on an image that was not asked for")

    ds = iotool.open_dataset(map_path, transform=refuse, fields=("seg.png", "class"))
    for i in range(N):
        check_values(ds.fields, ds[i], source_index(ds.keys[i]))


def test_an_unknown_or_repeated_field_is_refused_naming_the_choices(map_path):
    with pytest.raises(UsageError, match="choose from image, class, txt"):
        iotool.open_dataset(map_path, fields=("image", "caption"))
    with pytest.raises(UsageError, match="once"):
        iotool.open_dataset(map_path, fields=("txt", "txt"))


def test_a_dataset_without_a_class_defaults_to_the_image_and_every_field(tmp_path):
    if not MAP_FORMATS:
        pytest.skip("no map-style format stores fields here")
    dst = tmp_path / f"ds.{MAP_FORMATS[0]}"
    convert_fields(dst, MAP_FORMATS[0], schema_of("txt", "boxes", with_class=False), 4)
    ds = iotool.open_dataset(dst)
    assert ds.fields == ("image", "txt", "boxes") and not ds.as_dict
    for i in range(4):
        check_values(ds.fields, ds[i], source_index(ds.keys[i]))


def test_sample_fields_gives_the_image_and_values_by_name(map_path):
    ds = iotool.open_dataset(map_path)
    image, values = ds.sample_fields(2, fields=("image", "class", "txt"))
    assert isinstance(image, np.ndarray) and list(values) == ["class", "txt"]
    check_values(["class", "txt"], values, source_index(ds.keys[2]))
    default_image, default_values = ds.sample_fields(2)
    np.testing.assert_array_equal(default_image, ds[2][0])
    assert default_values == {"class": ds[2][1]}
    no_image, only = ds.sample_fields(2, fields=("score",))
    assert no_image is None and same(only["score"], value("score", source_index(ds.keys[2])))


def test_the_ram_cache_keeps_pixels_and_reads_the_fields_each_time(map_path):
    reader = counting(map_path)
    ds = ImageDataset(reader, decoder="auto", ram_cache=True, fields=("image", "txt", "class"))
    first = [ds[i] for i in range(N)]
    assert ds.cache is not None and ds.cache.filled() == N and reader.fields_read == N
    second = [ds[i] for i in range(N)]
    assert reader.fields_read == 2 * N
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        np.testing.assert_array_equal(a[0], b[0])
        check_values(ds.fields, b, source_index(ds.keys[i]))


def test_a_field_tampered_after_the_pixels_are_cached_is_still_refused(map_path):
    tampered: dict[tuple[int, str], bytes] = {}
    ds = ImageDataset(counting(map_path, tampered), ram_cache=True, check_checksums=True, fields=("image", "txt"))
    for i in range(N):
        ds[i]
    assert ds.cache is not None and ds.cache.filled() == N
    tampered[(1, "txt")] = b"another caption"
    ds[0]
    with pytest.raises(RecordError, match="checksum mismatch"):
        ds[1]


def test_the_sharded_ram_cache_serves_fields_read_in_each_pass(tar_path):
    names = ("image", "count", "boxes")
    ds = sharded(tar_path, decoder="auto", ram_cache=True, fields=names)
    first = list(ds)
    assert ds.cache is not None and ds.cache.filled() == N
    assert _by_count(ds, names) == _by_count(first, names) == Counter(range(N))


@pytest.mark.parametrize("names", [None, ("image", "txt")])
def test_check_checksums_refuses_a_tampered_field_chosen_or_not(map_path, names):
    tampered = {(4, "score"): b"0.125"}  # a valid value, not the stored one
    ds = ImageDataset(counting(map_path, tampered), check_checksums=True, fields=names)
    ds[3]
    with pytest.raises(RecordError, match="checksum mismatch"):
        ds[4]
    plain = ImageDataset(counting(map_path, tampered), fields=("image", "score"))
    assert plain[4][1] == 0.125  # without the check, the tampered value is what is read


def test_a_field_that_does_not_decode_is_a_bad_record(map_path):
    tampered = {(2, "txt"): b"\xff\xfe not utf-8"}
    ds = ImageDataset(counting(map_path, tampered), fields=("image", "txt"))
    with pytest.raises(RecordError, match=r"record 2 .*field 'txt'.*UTF-8"):
        ds[2]
    skipping = ImageDataset(counting(map_path, tampered), fields=("image", "txt"), on_error="skip")
    assert same(skipping[2][1], value("txt", source_index(skipping.keys[3])))  # the next record served
    assert skipping.skipped == 1
    assert len(ImageDataset(counting(map_path, tampered))[2]) == 2  # not chosen: not read, not decoded


def _samples(batch: list) -> list:
    return batch


def test_dataloader_workers_give_every_map_sample_once_with_its_fields(map_path):
    ds = iotool.open_dataset(map_path, fields="all")
    seen = Counter()
    for batch in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=_samples):
        for sample in batch:
            i = (sample["count"] + 3) // 1000
            check_values(ds.fields, sample, i)
            seen[i] += 1
    assert seen == Counter(range(N))


# -- the sharded dataset ---------------------------------------------------------------------------------
def _by_count(samples, names: Sequence[str]) -> Counter:
    """Check each sample's values against the sample its ``count`` field names; count them."""
    seen = Counter()
    for sample in samples:
        count = sample["count"] if isinstance(sample, dict) else sample[list(names).index("count")]
        i = (count + 3) // 1000
        check_values(names, sample, i)
        seen[i] += 1
    return seen


def test_sharded_default_fields_read_no_fields(tar_path):
    ds = sharded(tar_path)
    assert ds.fields == ("image", "class") and not ds.as_dict and ds.schema.names == SCHEMA.names
    samples = list(ds)
    assert len(samples) == N and all(len(s) == 2 for s in samples)
    assert getattr(ds.reader, "fields_read", 0) == 0


@pytest.mark.parametrize("shuffle", [False, True])
def test_sharded_fields_come_with_every_record_once(tar_path, shuffle):
    names = ("image", "count", "txt", "boxes", "class")
    ds = sharded(tar_path, fields=names, shuffle=shuffle, seed=3, buffer_size=4)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        assert _by_count(ds, names) == Counter(range(N))
    every = sharded(tar_path, fields="all")
    assert _by_count(every, every.fields) == Counter(range(N))


def test_sharded_fields_read_in_the_sequential_pass(tar_path):
    reader = get_format(SHARDED_FORMATS[0]).reader(tar_path) if SHARDED_FORMATS else TarWithFields(tar_path)
    calls = []

    class Recording(type(reader)):
        def read_records(self, indices, names):
            calls.append(tuple(names))
            return super().read_records(indices, names)

    ds = ShardedIterableDataset(Recording(tar_path), fields=("count", "json"))
    assert _by_count(ds, ds.fields) == Counter(range(N)) and calls == [("count", "json")]


def test_dataloader_workers_over_shards_give_every_sample_once_with_its_fields(tar_path):
    ds = sharded(tar_path, fields="all")
    samples = [s for batch in DataLoader(ds, batch_size=2, num_workers=2, collate_fn=_samples) for s in batch]
    assert _by_count(samples, ds.fields) == Counter(range(N))


@pytest.mark.parametrize(("world", "workers"), [(2, 1), (2, 2), (3, 2)])
def test_the_ddp_split_is_unchanged_by_fields(tar_path, world, workers):
    plain, with_fields = sharded(tar_path), sharded(tar_path, fields=("count", "image", "ragged"))
    places = indices_by_place(plain, world, workers)
    assert indices_by_place(with_fields, world, workers) == places
    seen = Counter()
    for (rank, worker), indices in places.items():
        with_fields.env = ShardEnv(rank, world, worker, workers)
        got = _by_count(with_fields, with_fields.fields)
        assert sum(got.values()) == len(indices)
        seen += got
    assert seen == Counter(range(N))


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_resumed_pass_with_fields_continues_sample_for_sample(tar_path, shuffle):
    names = ("image", "count", "emb")
    ds = sharded(tar_path, fields=names, shuffle=shuffle, buffer_size=3)
    ds.set_epoch(2)
    full = [s[1] for s in ds]
    first = iter(ds)
    head = [next(first)[1] for _ in range(4)]
    state = ds.state_dict()
    resumed = sharded(tar_path, fields=names, shuffle=shuffle, buffer_size=3)
    resumed.set_epoch(2)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert head + [s[1] for s in tail] == full
    _by_count(tail, names)


def test_sharded_check_checksums_refuses_a_tampered_field(tar_path):
    ds = sharded(tar_path, check_checksums=True, fields=("image", "txt"))
    assert len(list(ds)) == N
    if SHARDED_FORMATS:
        pytest.skip("tampering is exercised through the simulated reader only")
    ds.reader.tampered = {(5, "json"): b'{"id": 5}'}  # a field not chosen: the checksum still covers it
    with pytest.raises(RecordError, match="checksum mismatch"):
        list(ds)
    skipping = sharded(tar_path, check_checksums=True, fields=("image", "txt"), on_error="skip")
    skipping.reader.checksums  # noqa: B018  (the true ones, before the tampering)
    skipping.reader.tampered = {(5, "json"): b'{"id": 5}'}
    assert len(list(skipping)) == N - 1 and skipping.mapstyle.skipped == 1
