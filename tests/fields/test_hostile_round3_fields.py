"""Hostile inputs, third round, at the fields' own parsers (issue 53, points 1, 3, 5, 6): numbers
too large for a float, a fixed shape whose product is over the array bound, an array that
disagrees with its fixed shape, the Loader child's transport of served values and error
messages; with a fuzz of each (the cases end to end are in tests/loading and tests/pipeline).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from iotool.errors import FormatError, InternalError, IotoolError, RecordError, UsageError
from iotool.fields import FieldSpec, decode, encode
from iotool.fields.limits import MAX_ARRAY_BYTES, MAX_ARRAY_ELEMENTS
from iotool.loading.loader.isolated import MAX_MESSAGE, _error_message, escaped_size, fit
from iotool.loading.loader.wire import decode_value, encode_value

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

BIG = 10**400


def test_a_float_field_refuses_an_integer_too_large_for_a_float():
    with pytest.raises(RecordError, match="'f': an integer of 1329 bits is too large for a float"):
        encode(FieldSpec("f", "float"), BIG, "row 3")


@pytest.mark.parametrize("where", ["box", "label"])
def test_boxes_holding_an_integer_too_large_for_a_float_are_a_record_error(where):
    spec = FieldSpec("b", "boxes", box_format="XYXY")
    raw = '{"boxes":[[0,0,1,%s]],"labels":[%s]}' % ((BIG, 0) if where == "box" else (2, BIG))
    for call in (lambda: decode(spec, raw.encode(), "record 1"), lambda: encode(spec, raw.encode(), "row 1")):
        with pytest.raises(RecordError, match="'b': boxes must be numbers"):
            call()


@pytest.mark.parametrize(
    ("shape", "dtype", "ok"),
    [
        ([1 << 24, 1 << 24], "<f4", False),  # each size within the bound, the product 2**48
        ([1 << 12, 1 << 12], "|u1", True),  # 2**24 elements, 16 MiB: the bounds exactly
        ([1 << 12, 1 << 12, 2], "|u1", False),  # one element too many
        ([1 << 12, 1 << 12], "<f4", True),  # 64 MiB: the byte bound exactly
        ([1 << 12, 1 << 12], "<f8", False),  # 128 MiB
        ([0, 1 << 30], "<f8", False),  # a size over the element bound, even beside a zero
        ([1] * 9, "<f4", False),  # rank 9
    ],
)
def test_a_fixed_shape_is_held_to_the_array_bounds_by_its_product(shape, dtype, ok):
    raw = {"name": "a", "kind": "array", "dtype": dtype, "shape": shape}
    if ok:
        assert FieldSpec.from_dict(raw, "meta").shape == tuple(shape)
    else:
        with pytest.raises(FormatError, match=r"meta: .*'a'.*shape"):
            FieldSpec.from_dict(raw, "meta")
        with pytest.raises(UsageError, match="shape"):
            FieldSpec("a", "array", dtype=dtype, shape=tuple(shape))


def test_fuzz_forged_shapes_are_refused_or_within_the_bounds():
    rng = random.Random(53)
    for _ in range(2000):
        shape = [
            rng.choice([0, 1, 2, 3, 1 << rng.randrange(32), rng.randrange(1 << 31)]) for _ in range(rng.randrange(10))
        ]
        dtype = rng.choice(["|u1", "<f4", "<f8", "<i2"])
        try:
            spec = FieldSpec.from_dict({"name": "a", "kind": "array", "dtype": dtype, "shape": shape}, "m")
        except FormatError:
            continue
        count = int(np.prod(spec.shape or (), dtype=object))
        assert count <= MAX_ARRAY_ELEMENTS and count * np.dtype(dtype).itemsize <= MAX_ARRAY_BYTES


def test_an_array_disagreeing_with_its_fixed_shape_is_a_record_error():
    stored = encode(FieldSpec("a", "array"), np.zeros(3, np.float32), "row 0")
    with pytest.raises(RecordError, match=r"record 1: field 'a': array float32 \[3\]; the schema says <f4 \[2\]"):
        decode(FieldSpec("a", "array", dtype="<f4", shape=(2,)), stored, "record 1")
    with pytest.raises(RecordError, match="the schema says <i8"):
        decode(FieldSpec("a", "array", dtype="<i8"), stored, "record 1")


SERVED = [
    ("json", "\ud800"),  # a JSON string with a lone surrogate: valid JSON
    ("json", {"a": "\udfff x", "n": [1e15] * 65000}),  # 325 KB stored, 1.2 MB re-encoded
    ("json", [1.5e300, -0.0, float("nan"), 2**70]),
    ("text", "caf\u00e9 \ud83d\ude00"),
    ("bytes", b"\x00\xff" * 10),
    ("array", np.ones((4200, 4200), np.uint8)),  # a decoded mask: more elements than a stored array
    ("boxes", {"boxes": np.array([[1, 2, 3.5, 4]], np.float32), "labels": np.array([7])}),
]


@pytest.mark.parametrize(("kind", "value"), SERVED, ids=[k for k, _ in SERVED])
def test_a_served_value_crosses_from_the_child_unchanged(kind, value):
    back = decode_value(encode_value(kind, value, "row 0"), "row 0")
    if kind == "boxes":
        assert np.array_equal(back["boxes"], value["boxes"]) and np.array_equal(back["labels"], value["labels"])
    elif kind == "array":
        assert back.dtype == value.dtype and np.array_equal(back, value)
    else:
        assert json.dumps(back) == json.dumps(value) if kind == "json" else back == value


def test_fuzz_the_transport_decoder_gives_a_value_or_an_iotool_error():
    """2000 mutated transport values (flipped, cut, retagged): a value or an iotool error."""
    rng = random.Random(6)
    seeds = [encode_value(kind, value, "row") for kind, value in SERVED if kind != "array"]
    seeds.append(encode_value("array", np.arange(6, dtype=np.int16).reshape(2, 3), "row"))
    for _ in range(2000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(3)
            if op == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == 1:
                data = data[: rng.randrange(len(data) + 1)]
            else:
                data[:1] = rng.choice([b"s", b"b", b"j", b"n", b"x", b"?"])
        try:
            decode_value(bytes(data), "row")
        except (IotoolError, InternalError):
            pass


@pytest.mark.parametrize(
    "text",
    ["\u932f" * 12000, "\x00" * 40000, "\U0001f600" * 9000, "a" * 100000, "\ud800" * 20000, "record 3 (\u932f)"],
    ids=["cjk", "control", "astral", "ascii", "surrogates", "short"],
)
def test_an_error_message_fits_its_frame_by_encoded_bytes(text):
    message = _error_message(RecordError(f"d.lmdb: record 3 ({text}): the reason"), 1, 0)
    assert len(json.dumps(message)) <= MAX_MESSAGE
    assert message["message"].startswith("d.lmdb: record 3 (") and message["message"].endswith("): the reason")
    assert escaped_size(fit(text, 100)) <= 100 and fit(text, 1 << 20) == text


def test_an_error_message_too_long_for_its_frame_is_cut_in_a_capped_child():
    """A child capped at 64 MiB past its imports: cutting a message of 50 MB of CJK by its
    encoded size is a bisection over a budget's characters, not a copy per character."""
    code = (
        CAP_AFTER_IMPORTS
        + """
preload('torch', 'iotool.loading.loader.isolated')
from iotool.loading.loader.isolated import fit, escaped_size
text = 'record 1 (' + '\\u932f' * (16 << 20) + '): why'
cap_address_space(64 << 20)
out = fit(text, 1 << 14)
print('OK', escaped_size(out) <= 1 << 14, out.endswith('): why'))
"""
    )
    run = run_capped(code, timeout=60)
    assert run.stdout.split() == ["OK", "True", "True"], run.stderr[-2000:]
