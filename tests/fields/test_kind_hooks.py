"""What three functions answered by a kind's name before the kinds answered for themselves (issue
55: nothing branches on a kind's name): the kind a webdataset member's extension is kept as, the
kind two sources' values widen to, and the isolated Loader's transport form of a served value.
The tables were taken from the code that branched on names and pin the same answers now."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from iotool.fields import kind_for_extension
from iotool.loading.loader.wire import decode_value, encode_value
from iotool.pipeline.sources.base import merge_kind

EXTENSIONS = {
    "txt": "text", "text": "text", "transcript": "text", "TXT": "text", "seg.txt": "text",
    "json": "json", "jsn": "json", "JSON": "json", "a.b.json": "json",
    "cls": "int", "cls2": "int", "class": "int", "count": "int", "index": "int", "inx": "int", "id": "int", "ID": "int",
    "npy": "array", "NPY": "array", "x.npy": "array",
    "png": "bytes", "jpg": "bytes", "seg.png": "bytes", "bin": "bytes", "mp4": "bytes", "": "bytes", "foo.": "bytes",
    "json.bin": "bytes", "txtx": "bytes", "npz": "bytes", "boxes": "bytes", "kp": "bytes",
}  # fmt: skip


@pytest.mark.parametrize(("ext", "kind"), EXTENSIONS.items(), ids=[repr(e) for e in EXTENSIONS])
def test_a_member_extension_is_kept_as_the_kind_that_claims_its_last_part(ext, kind):
    assert kind_for_extension(ext) == kind


MERGED_NAMES = ["text", "json", "int", "float", "array", "bytes", "boxes", "keypoints", "bytes-mixed"]


def merged(a: str | None, b: str) -> str:
    """The table's answer, written out: the same kind, int and float widen to float, bytes never
    mix (bytes-mixed), anything else is JSON."""
    if a is None or a == b:
        return b
    if {a, b} == {"int", "float"}:
        return "float"
    if "bytes" in (a, b):
        return "bytes-mixed"
    return "json"


@pytest.mark.parametrize("a", [None, *MERGED_NAMES])
@pytest.mark.parametrize("b", MERGED_NAMES)
def test_two_values_kinds_merge_into_the_kind_their_column_is_kept_as(a, b):
    assert merge_kind(a, b) == merged(a, b)


def test_int_and_float_widen_to_float_either_way_and_nothing_else_widens():
    assert merge_kind("int", "float") == merge_kind("float", "int") == "float"
    assert merge_kind("int", "text") == merge_kind("float", "array") == merge_kind("int", "boxes") == "json"


def npy(value) -> bytes:
    out = io.BytesIO()
    np.save(out, np.asarray(value), allow_pickle=False)
    return out.getvalue()


BOXES = np.array([[1, 2, 3.5, 4]], np.float32)
LABELS = np.array([7, 0], np.int64)
WIRE = [
    ("text", "a\ud800", b"sa\xed\xa0\x80"),
    ("bytes", b"\x00a", b"b\x00a"),
    ("json", {"boxes": [1], "labels": [2]}, b'j{"boxes":[1],"labels":[2]}'),  # a dict, not boxes
    ("json", [1.5, float("nan")], b"j[1.5,NaN]"),
    ("int", 3, b"j3"),
    ("float", 0.1, b"j0.1"),
    ("boxes", [1, 2], b"j[1,2]"),  # a boxes column's value that is not a mapping travels as JSON
    ("array", np.arange(3, dtype=np.int16), b"n" + npy(np.arange(3, dtype=np.int16))),
    ("json", np.arange(3, dtype=np.int16), b"n" + npy(np.arange(3, dtype=np.int16))),
    ("keypoints", torch.ones(1, 2, 3), b"n" + npy(np.ones((1, 2, 3), np.float32))),
    (
        "boxes",
        {"boxes": BOXES, "labels": LABELS},
        b"x" + len(npy(BOXES)).to_bytes(8, "little") + npy(BOXES) + npy(LABELS),
    ),
    (
        "boxes",
        {"boxes": torch.from_numpy(BOXES), "labels": torch.from_numpy(LABELS)},
        b"x" + len(npy(BOXES)).to_bytes(8, "little") + npy(BOXES) + npy(LABELS),
    ),
]


@pytest.mark.parametrize(("kind", "value", "sent"), WIRE, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(WIRE)])
def test_a_served_value_travels_in_its_kinds_transport_form(kind, value, sent):
    assert encode_value(kind, value, "row 0") == sent
    back = decode_value(sent, "row 0")
    if sent[:1] == b"x":
        assert set(back) == {"boxes", "labels"}
        assert np.array_equal(back["boxes"], BOXES) and np.array_equal(back["labels"], LABELS)
    elif sent[:1] == b"n":
        assert np.array_equal(back, np.asarray(value))
    else:
        assert json.dumps(back) == json.dumps(value) if sent[:1] == b"j" else back == value
