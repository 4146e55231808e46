"""The tfrecord-files source decodes only the features it keeps, each list counted against its
bound before a value is made: Examples built byte by byte (a feature no protobuf writer makes)."""

from __future__ import annotations

import pytest

from iotool.formats.tfrecord.example import ExampleError, _field, encode_example, read_features
from iotool.formats.tfrecord.framing import frame
from iotool.pipeline.sources import open_source
from iotool.pipeline.sources.tfrecord_files import LIST_LIMITS
from iotool.storage import StorageConfig

from ..conftest import make_image


def example(i: int, extra: dict[str, bytes]) -> bytes:
    """An Example with an image, a label and ``extra`` features given as raw Feature messages."""
    base = encode_example({"image/encoded": ("bytes", [make_image(i, (16, 12))]), "image/class/label": ("int64", [1])})
    entries = base[2:] if base[1] < 0x80 else base[3:]  # the Features payload (one- or two-byte length)
    for name, feature in extra.items():
        entries += _field(1, _field(1, name.encode()) + _field(2, feature))
    return _field(1, entries)


def write(path, records: list[bytes]) -> str:
    with open(path, "wb") as f:
        for data in records:
            f.write(frame(data))
    return str(path)


EMPTY_STRINGS = _field(1, b"\x0a\x00" * (LIST_LIMITS["bytes"] + 1))  # a bytes list one past the bound
BROKEN = _field(1, b"\x08\x05")  # a bytes list holding a varint: refused if ever decoded


def test_a_list_past_its_bound_is_refused_naming_the_feature(tmp_path):
    path = write(tmp_path / "t", [example(i, {"junk": EMPTY_STRINGS}) for i in range(3)])
    source = open_source(path, "tfrecord-files", StorageConfig(), {"label_offset": "1"})
    errors = [t.error for t in source.tasks()]
    assert all(e and "feature 'junk': a list of more than the 65536 values read" in e for e in errors), errors


@pytest.mark.parametrize("junk", [EMPTY_STRINGS, BROKEN], ids=["past the bound", "malformed"])
def test_features_not_kept_are_never_decoded(tmp_path, junk):
    path = write(tmp_path / "t", [example(i, {"junk": junk, "note": _field(1, _field(1, b"hi"))}) for i in range(3)])
    for fields in ("class", "class,note"):
        source = open_source(path, "tfrecord-files", StorageConfig(), {"fields": fields})
        assert all(t.error is None for t in source.tasks())
        state = source.worker_state()
        loaded = [source.load(state, t) for t in source.tasks()]
        assert [r[2] for r in loaded] == [0, 0, 0]
        if fields == "class,note":
            assert [r[4] for r in loaded] == [{"note": b"hi"}] * 3


def test_read_features_walks_what_it_skips_and_bounds_what_it_reads():
    data = example(0, {"a": BROKEN, "b": _field(3, _field(1, b"\x01\x02\x03"))})
    got = read_features(data, lambda name: 10 if name == "b" else None)
    assert got == {"b": ("int64", [1, 2, 3])}
    with pytest.raises(ExampleError, match="feature 'b': a list of more than the 2 values read"):
        read_features(data, lambda name: {"int64": 2} if name == "b" else None)
    with pytest.raises(ExampleError, match="feature 'a': a bytes list value with wire type 0"):
        read_features(data, lambda name: 10)
    with pytest.raises(ExampleError, match="more than 3 features read"):
        read_features(data, lambda name: 10, max_features=3)
    assert len(read_features(data, lambda name: 10 if name != "a" else None, max_features=3)) == 3
