"""The datasets return the fields chosen (``fields=``): tuples in the order asked, a dict for
``"all"``, ``(image, label)`` by default on class datasets; values decoded, checked, skipped when
bad; the sharded split, shuffle, DataLoader workers and resume unchanged with fields.

Map-style formats that store fields are converted from :mod:`tests.support.fields` through the real
pipeline. So are the sharded ones (tar, tfrecord). Tampered or undecodable fields come from a subclass of
the real reader that swaps bytes into what it reads (the files are not touched).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest
from torch.utils.data import DataLoader

import iotool
from iotool.errors import RecordError, UsageError
from iotool.formats import FormatReader
from iotool.loading.iterable import ShardedIterableDataset
from iotool.loading.mapstyle import ImageDataset
from iotool.loading.split import ShardEnv

from ..conftest import formats_where, indices_by_place
from ..support.fields import EVERY_KIND, convert_fields, same, schema_of, stored_value, value

N = 9
SCHEMA = schema_of(*EVERY_KIND)
MAP_FORMATS = formats_where(lambda s: s.reader.fields_version is not None and not s.iterable)
SHARDED_FORMATS = formats_where(lambda s: s.reader.fields_version is not None and s.iterable)


def source_index(key: str) -> int:
    """The FieldsSource sample a record key names (``a/img004.jpg`` -> 4)."""
    return int(Path(key).stem[3:])


def check_values(names: Sequence[str], got: Sequence[Any] | dict[str, Any], i: int, path: Path | None = None) -> None:
    """``got`` (a tuple in ``names`` order, or a dict) holds sample ``i``'s values (as the dataset
    at ``path`` stores them, when given: its boxes scaled with its images)."""
    items = got.items() if isinstance(got, dict) else zip(names, got, strict=True)
    for name, v in items:
        if name == "image":
            assert isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 3
        elif name == "class":
            assert type(v) is int and v == i % 2
        else:
            assert same(v, value(name, i) if path is None else stored_value(name, i, path)), (name, i, v)


# -- sharded formats that store fields ---------------------------------------------------------------
@pytest.fixture(scope="module", params=SHARDED_FORMATS or [pytest.param("none", marks=pytest.mark.skip)])
def shards(request, tmp_path_factory) -> tuple[str, Path]:
    """(format, path) of a sharded dataset with :data:`SCHEMA`'s fields, shards of 4 records."""
    dst = tmp_path_factory.mktemp("fields") / f"ds.{request.param}"
    convert_fields(dst, request.param, SCHEMA, N, shard_size=4)
    return request.param, dst


def sharded_reader(shards: tuple[str, Path], tampered: dict[tuple[int, str], bytes] | None = None):
    """The reader of ``shards``: picklable when not ``tampered``, else a subclass that swaps
    ``tampered`` bytes into what it reads (the files are not touched) and counts its field reads."""
    base = type(iotool.open_reader(shards[1]))
    if tampered is None:
        return base(shards[1])
    swapped = tampered

    class Tampering(base):
        calls: list[tuple[str, tuple[str, ...]]] = []

        def read_fields(self, index: int, names: Sequence[str]) -> dict[str, bytes]:
            self.calls.append(("read_fields", tuple(names)))
            got = super().read_fields(index, names)
            return {n: swapped.get((index, n), got[n]) for n in got}

        def read_record(self, index: int, names: Sequence[str]):
            return FormatReader.read_record(self, index, names)  # through read_fields, counted

        def read_records(self, indices, names):
            self.calls.append(("read_records", tuple(names)))
            for i, data, label, got in super().read_records(indices, names):
                yield i, data, label, None if got is None else {n: swapped.get((i, n), got[n]) for n in got}

    return Tampering(shards[1])


def sharded(shards: tuple[str, Path], tampered: dict[tuple[int, str], bytes] | None = None, **kw: Any):
    return ShardedIterableDataset(sharded_reader(shards, tampered), **kw)


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

        def read_record(self, index: int, names: Sequence[str]):
            return FormatReader.read_record(self, index, names)  # through read_fields, counted

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
        check_values(names, sample, source_index(ds.keys[i]), map_path)
        np.testing.assert_array_equal(sample[1], reference[i][0])


def test_all_gives_a_dict_of_the_image_and_every_field(map_path):
    ds = iotool.open_dataset(map_path, fields="all")
    assert ds.as_dict and ds.fields == ("image", "class", *EVERY_KIND)
    assert "fields='all'" in repr(ds) and "fields=" not in repr(iotool.open_dataset(map_path))
    for i in range(N):
        sample = ds[i]
        assert list(sample) == list(ds.fields)
        check_values(ds.fields, sample, source_index(ds.keys[i]), map_path)


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
        check_values(ds.fields, ds[i], source_index(ds.keys[i]), dst)


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


def test_the_sharded_ram_cache_serves_fields_read_in_each_pass(shards):
    names = ("image", "count", "boxes")
    ds = sharded(shards, decoder="auto", ram_cache=True, fields=names)
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


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_give_every_map_sample_once_with_its_fields(map_path, start_method):
    if start_method == "spawn" and map_path.suffix != f".{MAP_FORMATS[0]}":
        pytest.skip("spawn once: the dataset crosses pickled on one format")
    ds = iotool.open_dataset(map_path, fields="all")
    seen = Counter()
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=_samples, multiprocessing_context=start_method)
    for batch in loader:
        for sample in batch:
            i = (sample["count"] + 3) // 1000
            check_values(ds.fields, sample, i, map_path)
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


def test_sharded_default_fields_read_no_fields(shards):
    ds = sharded(shards, tampered={})
    assert ds.fields == ("image", "class") and not ds.as_dict and ds.schema.names == SCHEMA.names
    samples = list(ds)
    assert len(samples) == N and all(len(s) == 2 for s in samples) and "fields=" not in repr(ds)
    assert ds.reader.calls == []


@pytest.mark.parametrize("shuffle", [False, True])
def test_sharded_fields_come_with_every_record_once(shards, shuffle):
    names = ("image", "count", "txt", "boxes", "class")
    ds = sharded(shards, fields=names, shuffle=shuffle, seed=3, window=2)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        assert _by_count(ds, names) == Counter(range(N))
    every = sharded(shards, fields="all")
    assert "fields='all'" in repr(every)
    assert _by_count(every, every.fields) == Counter(range(N))


def test_sharded_fields_read_in_the_sequential_pass(shards):
    ds = sharded(shards, tampered={}, fields=("count", "json"))
    assert _by_count(ds, ds.fields) == Counter(range(N)) and ds.reader.calls == [("read_records", ("count", "json"))]


def test_dataloader_workers_over_shards_give_every_sample_once_with_its_fields(shards):
    ds = sharded(shards, fields="all")
    samples = [s for batch in DataLoader(ds, batch_size=2, num_workers=2, collate_fn=_samples) for s in batch]
    assert _by_count(samples, ds.fields) == Counter(range(N))


@pytest.mark.parametrize(("world", "workers"), [(2, 1), (2, 2), (3, 2)])
def test_the_ddp_split_is_unchanged_by_fields(shards, world, workers):
    plain, with_fields = sharded(shards), sharded(shards, fields=("count", "image", "ragged"))
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
def test_a_resumed_pass_with_fields_continues_sample_for_sample(shards, shuffle):
    names = ("image", "count", "emb")
    ds = sharded(shards, fields=names, shuffle=shuffle, window=2)
    ds.set_epoch(2)
    full = [s[1] for s in ds]
    first = iter(ds)
    head = [next(first)[1] for _ in range(4)]
    state = ds.state_dict()
    resumed = sharded(shards, fields=names, shuffle=shuffle, window=2)
    resumed.set_epoch(2)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert head + [s[1] for s in tail] == full
    _by_count(tail, names)


def tampered_after_checksums(shards: tuple[str, Path], **kw: Any) -> ShardedIterableDataset:
    """A dataset of ``shards`` whose record 5 has a field not chosen tampered (as read)."""
    tampered: dict[tuple[int, str], bytes] = {}
    ds = sharded(shards, tampered, check_checksums=True, fields=("image", "txt"), **kw)
    tampered[(5, "json")] = b'{"id": 5}'
    return ds


@pytest.mark.parametrize("shuffle", [False, True])
def test_sharded_check_checksums_refuses_a_tampered_field(shards, shuffle):
    assert len(list(sharded(shards, check_checksums=True, fields=("image", "txt"), shuffle=shuffle))) == N
    with pytest.raises(RecordError, match="checksum mismatch"):
        list(tampered_after_checksums(shards, shuffle=shuffle))
    skipping = tampered_after_checksums(shards, shuffle=shuffle, on_error="skip")
    assert len(list(skipping)) == N - 1 and skipping.mapstyle.skipped == 1


def test_a_sharded_field_that_does_not_decode_is_a_bad_record(shards):
    tampered = {(6, "boxes"): b'{"boxes": [[1, 2, 3]]}'}
    with pytest.raises(RecordError, match=r"record 6 .*field 'boxes'"):
        list(sharded(shards, tampered, fields=("image", "boxes")))
    skipping = sharded(shards, tampered, fields=("image", "boxes"), on_error="skip")
    assert len(list(skipping)) == N - 1 and skipping.mapstyle.skipped == 1
