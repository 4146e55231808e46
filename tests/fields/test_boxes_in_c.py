"""``iotool._boxes`` (csrc/_boxes.c): a run's canonical boxes JSON parsed in C with the GIL
released, held to Python's ``json`` and numpy's arrays: the same float32 bits and labels where it
takes a run, None (the Python steps decide) wherever a value is not exactly the canonical form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from iotool.fields import FieldSpec
from iotool.fields.kinds.boxes import BoxesKind, parse_canonical
from iotool.fields.limits import MAX_BOXES

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

pytest.importorskip("iotool._boxes", reason="iotool's C extension iotool._boxes is not built")

KIND = BoxesKind()
SPEC = FieldSpec("boxes", "boxes", box_format="XYXY")


def reference(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """What Python's json and numpy make of one value (the arrays BoxesKind's decode checks)."""
    raw = json.loads(data)
    return np.asarray(raw["boxes"], dtype=np.float32).reshape(-1, 4), np.asarray(raw["labels"], dtype=np.int64)


def assert_same(got: dict[str, np.ndarray], data: bytes) -> None:
    boxes, labels = reference(data)
    assert got["boxes"].dtype == np.float32 and got["labels"].dtype == np.int64
    assert got["boxes"].shape == boxes.shape
    np.testing.assert_array_equal(got["boxes"].view(np.uint32), boxes.view(np.uint32))  # bit for bit: -0.0 too
    np.testing.assert_array_equal(got["labels"], labels)


def random_boxes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Coordinates of every size iotool writes: fractions, large and tiny ones, integers, -0.0."""
    scale = rng.choice([1.0, 1e-3, 1e-30, 1e3, 1e6, 1e15])  # past 1e18, encode writes over 18 digits
    boxes = (rng.standard_normal((n, 4)) * scale).astype(np.float32)
    boxes[rng.random((n, 4)) < 0.1] = -0.0
    boxes[rng.random((n, 4)) < 0.2] = rng.integers(-9999999, 9999999)
    return boxes


def test_what_encode_writes_parses_to_what_json_and_numpy_give():
    rng = np.random.default_rng(5)
    datas = []
    for _ in range(300):
        n = int(rng.integers(0, 12))
        value = {"boxes": random_boxes(rng, n), "labels": rng.integers(0, 1 << 31, n)}
        datas.append(KIND.encode(SPEC, value, "test"))
    run = parse_canonical(datas)
    assert run is not None and len(run) == len(datas)
    for got, data in zip(run, datas):
        assert_same(got, data)
        got["boxes"][:1] = 7  # the arrays are the caller's
    assert KIND.decode_run(SPEC, datas, "test") is not None
    huge = KIND.encode(SPEC, {"boxes": [[1e30, 0, 1, 1]], "labels": [0]}, "test")  # 31 digits: left to Python
    assert parse_canonical([*datas, huge]) is None
    assert_same(KIND.decode_run(SPEC, [*datas, huge], "test")[-1], huge)


def test_integer_coordinates_round_to_float32_as_numpy_casts_them():
    rng = np.random.default_rng(9)
    ints = [int(v) for v in rng.integers(-(10**18) + 1, 10**18, 2000)] + [2**24 + 1, 2**53 + 1, -(2**31) - 1, 16777217]
    ints += [int(v) * 10 ** int(e) for v, e in zip(rng.integers(1, 999, 500), rng.integers(0, 15, 500))]
    datas = [
        json.dumps({"boxes": [ints[i : i + 4]], "labels": [0]}, separators=(",", ":")).encode()
        for i in range(0, 2500, 4)
    ]
    run = parse_canonical(datas)
    assert run is not None
    for got, data in zip(run, datas):
        assert_same(got, data)


def test_a_run_of_boxes_values_equals_each_decoded_alone():
    datas = [b'{"boxes":[[1.5,2,3,4],[0,0,10.25,10]],"labels":[3,0]}', b'{"boxes":[],"labels":[]}']
    run = KIND.decode_run(SPEC, datas, "test")
    assert run is not None
    for got, data in zip(run, datas):
        alone = KIND.decode(SPEC, data, "test")
        np.testing.assert_array_equal(got["boxes"], alone["boxes"])
        np.testing.assert_array_equal(got["labels"], alone["labels"])


GOOD = b'{"boxes":[[1.5,2,3,4]],"labels":[3]}'


@pytest.mark.parametrize(
    "why, data",
    [
        ("a space", b'{"boxes": [[1.5,2,3,4]],"labels":[3]}'),
        ("keys swapped", b'{"labels":[3],"boxes":[[1.5,2,3,4]]}'),
        ("an exponent", b'{"boxes":[[1.5e0,2,3,4]],"labels":[3]}'),
        ("an extra key", b'{"boxes":[[1.5,2,3,4]],"labels":[3],"x":1}'),
        ("NaN", b'{"boxes":[[NaN,2,3,4]],"labels":[3]}'),
        ("an integer of 19 digits", b'{"boxes":[[1234567890123456789,2,3,4]],"labels":[3]}'),
        ("a leading zero", b'{"boxes":[[01,2,3,4]],"labels":[3]}'),
        ("a bare point", b'{"boxes":[[1.,2,3,4]],"labels":[3]}'),
        ("a float label", b'{"boxes":[[1.5,2,3,4]],"labels":[3.0]}'),
        ("a negative label", b'{"boxes":[[1.5,2,3,4]],"labels":[-3]}'),
        ("a label of 2**31", b'{"boxes":[[1.5,2,3,4]],"labels":[2147483648]}'),
        ("fewer labels", b'{"boxes":[[1.5,2,3,4]],"labels":[]}'),
        ("more labels", b'{"boxes":[[1.5,2,3,4]],"labels":[3,4]}'),
        ("three numbers", b'{"boxes":[[1.5,2,3]],"labels":[3]}'),
        ("five numbers", b'{"boxes":[[1.5,2,3,4,5]],"labels":[3]}'),
        ("past float32", b'{"boxes":[[1' + b"0" * 40 + b'.5,2,3,4]],"labels":[3]}'),
        ("trailing bytes", GOOD + b" "),
        ("cut short", GOOD[:-1]),
        ("a BOM", b"\xef\xbb\xbf" + GOOD),
        ("a trailing comma", b'{"boxes":[[1.5,2,3,4],],"labels":[3]}'),
        ("not read", None),
    ],
)
def test_a_run_with_one_value_not_canonical_is_left_to_python(why, data):
    assert parse_canonical([GOOD, data, GOOD]) is None


def test_more_boxes_than_an_image_may_have_are_left_to_python():
    def value(n: int) -> bytes:
        return ('{"boxes":[' + ",".join(["[0,0,1,1]"] * n) + '],"labels":[' + ",".join(["0"] * n) + "]}").encode()

    assert parse_canonical([value(MAX_BOXES + 1)]) is None
    assert len(parse_canonical([value(MAX_BOXES)])[0]["labels"]) == MAX_BOXES


FUZZ_CHILD = (
    CAP_AFTER_IMPORTS
    + r"""
import json, random, sys
import numpy as np
preload("iotool._boxes", "iotool.fields.kinds.boxes")
from iotool.fields.kinds.boxes import parse_canonical
cap_address_space(256 << 20)

rng = random.Random(int(sys.argv[1]))
ALPHABET = b'0123456789.-,[]{}":eE+ boxeslabels'
taken = 0
for case in range(int(sys.argv[2])):
    n = rng.randint(0, 5)
    boxes = [[rng.choice([rng.uniform(-1e4, 1e4), rng.randint(-99, 99), 0.5]) for _ in range(4)] for _ in range(n)]
    text = json.dumps({"boxes": boxes, "labels": [rng.randint(0, 40) for _ in range(n)]}, separators=(",", ":"))
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        how = rng.random()
        if how < 0.4 and at < len(data):
            data[at] = rng.choice(ALPHABET)
        elif how < 0.7:
            del data[at:at + rng.randint(1, 4)]
        else:
            data[at:at] = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 4)))
    got = parse_canonical([bytes(data)])
    if got is None:
        continue
    taken += 1
    raw = json.loads(bytes(data))  # what C took, json reads to the same arrays
    assert list(raw) == ["boxes", "labels"], data
    want = np.asarray(raw["boxes"], dtype=np.float32).reshape(-1, 4)
    assert got[0]["boxes"].shape == want.shape and (got[0]["boxes"].view(np.uint32) == want.view(np.uint32)).all(), data
    assert got[0]["labels"].tolist() == raw["labels"], data
print(json.dumps({"taken": taken}))
"""
)


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_boxes_json_is_left_to_python_or_parsed_as_json_parses_it(seed):
    done = run_capped(FUZZ_CHILD, str(seed), "20000", timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["taken"] > 200
