"""What three functions answered by a kind's name before the kinds answered for themselves (issue
55: nothing branches on a kind's name): the kind a webdataset member's extension is kept as, the
kind two sources' values widen to, and the isolated Loader's transport form of a served value.
The tables were taken from the code that branched on names and pin the same answers now."""

from __future__ import annotations

import functools
import io
import itertools
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from iotool.fields import kind_for_extension
from iotool.fields.kinds import field_kind, kind_names
from iotool.fields.kinds.registry import kind_for_wire_tag
from iotool.loading.loader.wire import decode_value, encode_value
from iotool.pipeline.sources.base import merge_kind

from ..conftest import make_image
from ..support.subprocesses import python_json

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
    mix (bytes-mixed, which stays so), anything else is JSON."""
    if a is None or a == b:
        return b
    if {a, b} == {"int", "float"}:
        return "float"
    if "bytes" in (a, b) or "bytes-mixed" in (a, b):
        return "bytes-mixed"
    return "json"


@pytest.mark.parametrize("a", [None, *MERGED_NAMES])
@pytest.mark.parametrize("b", MERGED_NAMES)
def test_two_values_kinds_merge_into_the_kind_their_column_is_kept_as(a, b):
    assert merge_kind(a, b) == merged(a, b)


@pytest.mark.parametrize("kinds", list(itertools.combinations_with_replacement(MERGED_NAMES[:-1], 3)), ids=str)
def test_a_columns_kind_does_not_hang_on_the_order_its_values_come_in(kinds):
    """bytes, then text, then text was json (bytes-mixed forgotten), text, text, bytes refused."""
    found = {functools.reduce(merge_kind, order, None) for order in itertools.permutations(kinds)}
    assert len(found) == 1, (kinds, found)


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


HEXCOLOR = """
import json, sys
from iotool.errors import InternalError, UsageError
from iotool.fields import FieldSpec, Schema, kind_for_extension
from iotool.fields.kinds import FieldKind, register_kind
from iotool.loading.loader.columns import Layout
from iotool.loading.loader.wire import decode_value, encode_value, pack, unpack
from iotool.pipeline.sources import open_source
from iotool.pipeline.sources.base import merge_kind
from iotool.storage import StorageConfig

class HexColor(FieldKind):
    name, max_bytes = "hexcolor", 7
    extensions = frozenset({"hex", "rgb"})
    wire_tag = b"h"  # three bytes, not the seven characters
    def widens(self, other):
        return "text" if other == "text" else None
    def encode(self, spec, value, at):
        return value.encode("ascii")
    def decode(self, spec, data, at):
        return bytes(data).decode("ascii")
    def to_wire(self, value, array):
        return bytes.fromhex(value[1:]) if isinstance(value, str) else None
    def from_wire(self, body, load):
        if len(body) != 3:
            raise ValueError("a colour is three bytes")
        return "#" + body.hex()

def refused(kind):
    try:
        register_kind(kind)
    except UsageError as exc:
        return str(exc)
    return None

def claims(name, extensions=frozenset(), tag=None):
    return type(name, (FieldKind,), {"name": name, "extensions": extensions, "wire_tag": tag})()
"""


def run_with_hexcolor(body: str, *args: str) -> dict:
    """The JSON ``body`` prints last, run after :data:`HEXCOLOR` in a fresh interpreter (a kind
    registered stays registered for the process)."""
    return python_json(HEXCOLOR + textwrap.dedent(body), *args)


def test_a_registered_kind_claims_extensions_a_wire_form_and_a_widening(tmp_path: Path) -> None:
    wds = pytest.importorskip("webdataset")
    shard = str(tmp_path / "s-000000.tar")
    with wds.TarWriter(shard) as sink:
        for i in range(2):
            sink.write({"__key__": f"s{i}", "jpg": make_image(i, (8, 8)), "c.hex": b"#00aa0%d" % i, "cls": i})
    got = run_with_hexcolor(
        """
        def scanned():
            source = open_source(sys.argv[1], "webdataset", StorageConfig())
            return [[f.name, f.kind] for f in source.schema.fields]
        before = {"ext": kind_for_extension("c.HEX"), "merge": merge_kind("text", "hexcolor"), "scan": scanned()}
        register_kind(HexColor())
        layout = Layout.of(("image", "c"), Schema((FieldSpec("c", "hexcolor"),)))
        fd, size = pack(layout, [["#ff8800", "#000001"]], 2)
        try:
            decode_value(b"h\\xff", "row 0")
            short = None
        except InternalError as exc:
            short = str(exc)
        after = {
            "ext": [kind_for_extension(e) for e in ("c.HEX", "rgb", "txt", "hexx")],
            "merge": [merge_kind("text", "hexcolor"), merge_kind("hexcolor", "text"), merge_kind("hexcolor", "int")],
            "scan": scanned(),
            "sent": encode_value("hexcolor", "#ff8800", "row 0").hex(),
            "back": decode_value(b"h\\x00\\xaa\\x01", "row 0"),
            "plain": encode_value("hexcolor", 7, "row 0").decode(),
            "batch": unpack(layout, fd, size, 2),
            "short": short,
        }
        print(json.dumps({"before": before, "after": after}))
        """,
        shard,
    )
    assert got["before"] == {"ext": "bytes", "merge": "json", "scan": [["class", "class"], ["c.hex", "bytes"]]}
    after = got["after"]
    assert after["ext"] == ["hexcolor", "hexcolor", "text", "bytes"]
    assert after["merge"] == ["text", "text", "json"]
    assert after["scan"] == [["class", "class"], ["c.hex", "hexcolor"]]
    assert after["sent"] == "68ff8800" and after["back"] == "#00aa01"
    assert after["plain"] == "j7"  # a value its kind gives no form of its own travels as a plain one
    assert after["batch"] == [["#ff8800", "#000001"]]
    assert "tagged b'h'" in after["short"]


def test_two_kinds_never_claim_one_extension_or_one_wire_tag() -> None:
    got = run_with_hexcolor(
        """
        register_kind(HexColor())
        print(json.dumps({
            "txt": refused(claims("caption", frozenset({"txt"}))),
            "hex": refused(claims("colour", frozenset({"hex"}))),
            "upper": refused(claims("upper", frozenset({"Hex2"}))),
            "dotted": refused(claims("dotted", frozenset({"seg.png"}))),
            "boxes": refused(claims("boxes2", tag=b"x")),
            "mine": refused(claims("colour", tag=b"h")),
            "plain": refused(claims("plain", tag=b"j")),
            "long": refused(claims("long", tag=b"hh")),
            "replaced": refused(claims("hexcolor", frozenset({"hex"}), b"h")),  # the same name: replaced
            "free": refused(claims("free", frozenset({"free"}), b"f")),
            "ext": kind_for_extension("a.free"),
        }))
        """
    )
    assert "extension 'txt', which field kind 'text' claims" in got["txt"]
    assert "extension 'hex', which field kind 'hexcolor' claims" in got["hex"]
    assert "'Hex2': one lower-case part" in got["upper"] and "'seg.png'" in got["dotted"]
    assert "wire tag b'x', which field kind 'boxes' has" in got["boxes"]
    assert "wire tag b'h', which field kind 'hexcolor' has" in got["mine"]
    assert "other than the plain values' bjns" in got["plain"] and "b'hh'" in got["long"]
    assert got["replaced"] is None and got["free"] is None and got["ext"] == "free"


def test_the_built_ins_claim_what_webdataset_decodes_and_boxes_its_wire_form() -> None:
    claimed = {name: sorted(field_kind(name).extensions) for name in kind_names() if field_kind(name).extensions}
    assert claimed == {
        "text": ["text", "transcript", "txt"],
        "json": ["jsn", "json"],
        "int": ["class", "cls", "cls2", "count", "id", "index", "inx"],
        "array": ["npy"],
    }
    tags = {name: field_kind(name).wire_tag for name in kind_names() if field_kind(name).wire_tag is not None}
    assert tags == {"boxes": b"x"}
    assert kind_for_wire_tag(b"x") is field_kind("boxes") and kind_for_wire_tag(b"j") is None


def test_a_merge_keeps_an_array_fields_dtype_and_shape_only_where_every_input_agrees():
    from iotool.fields import FieldSpec, Schema
    from iotool.pipeline.reshape.reconcile import merged_schema

    def schema(shape):
        return Schema((FieldSpec("a", "array", dtype="<f4", shape=shape), FieldSpec("t", "text")))

    same = merged_schema([schema((2,)), schema((2,))], ["x", "y"])
    assert same["a"].shape == (2,) and same["a"].dtype == "<f4" and same["t"] == FieldSpec("t", "text")
    differ = merged_schema([schema((2,)), schema((3,))], ["x", "y"])
    assert differ["a"].shape is None and differ["a"].dtype == "<f4"
