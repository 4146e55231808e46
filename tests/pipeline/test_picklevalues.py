"""The pickle reader that never unpickles: plain values at protocols 2-5, everything else refused."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from iotool.errors import IotoolError, RecordError
from iotool.pipeline.picklevalues import Limits, PickleRefused, load_values

PROTOCOLS = (2, 3, 4, 5)

VALUES = [
    (b"\xff\xd8\xff" + bytes(range(256)) * 3, 3),  # the (image bytes, label) of the ImageFolder-to-LMDB scripts
    [b"\x89PNG\r\n", 0],
    {"image": b"\x00" * 300, "label": 7},
    {b"image": b"x", b"label": 2**70},
    [b"0", b"1", b"0000000002"],  # a __keys__ list
    1281167,
    0,
    -1,
    -(2**40),
    255,
    256,
    65535,
    65536,
    None,
    True,
    False,
    (bytearray(b"z\x00"), bytearray(), b""),
    ("ünïcode", "", "x" * 300, [[], [[]]], {b"k": (1,), 3: None, (1, "a"): [b"v"]}),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_plain_values_read_as_pickle_wrote_them(protocol, value):
    got = load_values(pickle.dumps(value, protocol=protocol))
    assert got == value and type(got) is type(value)


def test_shared_and_self_referencing_values_keep_their_shape():
    inner = [b"a"]
    got = load_values(pickle.dumps((inner, inner, {"k": inner}), protocol=4))
    assert got[0] is got[1] is got[2]["k"] and got[0] == [b"a"]
    loop: list = []
    loop.append(loop)
    got = load_values(pickle.dumps(loop, protocol=2))
    assert got[0] is got


class Payload:
    """What an attacker pickles: unpickling calls os.system (creating a file)."""

    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return os.system, (f"touch {self.target}",)


class Sample:
    """An ordinary class instance; pickle stores a reference to it by name."""

    def __init__(self):
        self.image, self.label = b"x", 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_os_system_through_reduce_is_refused_by_name_and_never_runs(tmp_path, protocol):
    target = tmp_path / "pwned"
    data = pickle.dumps((b"\xff\xd8", Payload(str(target))), protocol=protocol)
    with pytest.raises(PickleRefused, match=r"opcode (STACK_)?GLOBAL at byte \d+: refers to (posix|os)\.system") as err:
        load_values(data)
    assert isinstance(err.value, RecordError) and isinstance(err.value, IotoolError)
    assert not target.exists()
    # The payload is live: pickle.loads of the same bytes (in another process) does run it.
    subprocess.run(
        [sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"], input=data, check=True
    )
    assert target.exists()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_class_instance_is_refused_by_name(protocol):
    with pytest.raises(PickleRefused, match=r"refers to [\w.]+\.Sample"):
        load_values(pickle.dumps(Sample(), protocol=protocol))


@pytest.mark.parametrize(
    "value, opcode",
    [
        ({1, 2}, "EMPTY_SET"),
        (frozenset({1}), "FROZENSET"),
        (1.5, "BINFLOAT"),
        (1j, "GLOBAL"),
    ],
)
def test_other_types_are_refused_naming_the_opcode(value, opcode):
    with pytest.raises(PickleRefused, match=rf"opcode ({opcode}|STACK_GLOBAL) at byte \d+"):
        load_values(pickle.dumps(value, protocol=4))


def test_reduce_of_a_recognised_constructor_with_other_arguments_is_refused():
    # _codecs.encode is recognised only as pickle's spelling of bytes: (str, "latin1").
    data = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R."
    with pytest.raises(PickleRefused, match="opcode REDUCE at byte"):
        load_values(data)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "no PROTO"),
        (pickle.dumps(1, protocol=0), "no PROTO"),
        (pickle.dumps(1, protocol=1), "no PROTO"),
        (b"\x80\x06K\x01.", "protocol 6"),
        (b"\x80\x04B\xff\xff\xff\x7fxx.", r"declares 2147483647 bytes, 3 are left"),
        (b"\x80\x04\x8e" + (2**63).to_bytes(8, "little") + b".", r"declares 9223372036854775808 bytes"),
        (b"\x80\x04\x95" + (10**6).to_bytes(8, "little") + b"K\x01.", "a frame of 1000000 bytes"),
        (b"\x80\x04K\x01K\x02.", "2 values"),
        (b"\x80\x04K\x01.junk", "4 bytes follow"),
        (b"\x80\x04h\x05.", "memo 5 was never stored"),
        (b"\x80\x04}](s.", r"needs 2 value"),
        (b"\x80\x04]K\x01a]\x94K\x02a.", "needs a list|values"),
        (b"\x80\x04\x8b\x00\x01\x00\x00" + b"\x01" * 256 + b".", "an int of 256 bytes"),
        (b"\x80\x04\x8c\x02\xff\xfe.", "not UTF-8"),
        (b"\x80\x04}]K\x01s.", "not hashable"),
        (b"\x80\x04\xfe.", "unknown opcode"),
    ],
)
def test_malformed_streams_are_refused_with_the_byte_offset(data, why):
    with pytest.raises(PickleRefused, match=why):
        load_values(data)


def test_opcode_names_are_pickletools_names():
    import pickletools

    from iotool.pipeline.picklevalues import OPCODE_NAMES

    assert OPCODE_NAMES == {ord(op.code.encode("latin-1")): op.name for op in pickletools.opcodes}


def test_bounds_on_depth_items_and_length():
    deep: list = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(PickleRefused, match="nested more than 32 deep"):
        load_values(pickle.dumps(deep, protocol=4))
    assert load_values(pickle.dumps(deep, protocol=4), Limits(max_depth=64)) == deep
    with pytest.raises(PickleRefused, match="more than 100 values"):
        load_values(pickle.dumps(list(range(200)), protocol=4), Limits(max_items=100))
    with pytest.raises(PickleRefused, match="more than 1000"):
        load_values(pickle.dumps(b"x" * 2000, protocol=4), Limits(max_bytes=1000))


def test_a_list_filled_after_it_was_nested_is_refused():
    # L1 = []; L2 = []; L1.append(L2); then L2 filled later: real depth hidden from a naive count.
    data = b"\x80\x04]\x94]\x94a" + b"h\x01K\x01a" + b"0."
    with pytest.raises(PickleRefused, match="already inside another container"):
        load_values(data)


FUZZ = textwrap.dedent("""
    import os, pickle, random, sys
    from iotool.pipeline.picklevalues import Limits, PickleRefused, load_values
    rng = random.Random(20261201)
    def levels(depth, fanout):  # shared references: each level refers to the one below, as a dict key
        out = bytearray(b"\\x80\\x04}C\\x01x\\x85\\x94")
        for k in range(1, depth + 1):
            out += b"0(" + (b"h" + bytes([k - 1])) * fanout + b"t\\x94"
        return bytes(out) + b"C\\x01vs."
    x = (b"a", [1, 2])
    shared = (x, x, [x, {"k": x}], {(1, b"k"): x})
    seeds = [pickle.dumps(v, protocol=p) for p in (2, 3, 4, 5) for v in (
        (b"\\xff\\xd8" * 20, 3), [b"ab", 1], {"image": b"x" * 40, "label": 2}, [b"0", b"1"], 1000,
        ("s", None, True, (1, (2, [3, {4: 5}]))), bytearray(b"q"), shared)]
    seeds += [levels(k, f) for k, f in ((2, 30), (3, 20), (4, 9))]
    limits = Limits(max_bytes=1 << 16, max_depth=16, max_items=4096)
    results = {"value": 0, "refused": 0}
    for case in range(int(sys.argv[1])):
        if case % 5 == 0:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64)))
            if case % 10 == 0:
                data = b"\\x80" + bytes([rng.choice((2, 3, 4, 5))]) + data
        else:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 6)):
                kind = rng.randrange(4)
                at = rng.randrange(len(data) + 1)
                if kind == 3:  # memo references (BINGET) to early entries: one, two or a run
                    data[at:at] = (b"h" + bytes([rng.randrange(4)])) * rng.choice((1, 2, 50))
                elif kind == 0:
                    data[at:at + 1] = bytes([rng.getrandbits(8)])
                elif kind == 1:
                    del data[at:at + rng.randrange(1, 8)]
                else:
                    data[at:at] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 8)))
            data = bytes(data)
        try:
            value = load_values(data, limits)
            assert len(repr(value)) < 1 << 20  # what a value expands to is bounded: so is its repr
            results["value"] += 1
        except PickleRefused:
            results["refused"] += 1
    print(results["value"], results["refused"])
""")


def test_fuzz_sees_only_the_parsers_own_error(tmp_path):
    """Mutated pickles and random bytes, in a subprocess (a crash would be a signal): every case
    is a value or a PickleRefused; any other exception ends the process with a traceback."""
    proc = subprocess.run(
        [sys.executable, "-c", FUZZ, "20000"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    value, refused = map(int, proc.stdout.split())
    assert value + refused == 20000 and refused > 5000
    assert not list(tmp_path.iterdir())  # nothing was created by any case


def shared_levels(levels: int, fanout: int, top: bytes = b"") -> bytes:
    """A pickle of a dict keyed by a tuple whose every level refers to the level below ``fanout``
    times through the memo (a few bytes per level, ``fanout ** levels`` values expanded)."""
    out = bytearray(b"\x80\x04}C\x01x\x85\x94")  # {}, (b'x',) memoized as 0
    for k in range(1, levels + 1):
        out += b"0(" + (b"h" + bytes([k - 1])) * fanout + b"t\x94"
    return bytes(out) + b"C\x01vs" + top + b"."


def test_memo_references_count_for_what_they_stand_for():
    # 3.5 M values from 720 bytes (the 12 KB case of 10**18, whose key no one can hash, is in
    # test_hostile_amplification.py, in a child with a time limit).
    data = shared_levels(3, 120)
    with pytest.raises(PickleRefused, match=r"opcode TUPLE at byte \d+: a value that expands to more than 1048576"):
        load_values(data)
    got = load_values(shared_levels(2, 500))  # 500,501 values expanded: within the bound
    (key,) = got
    assert len(key) == 500 and key[0] is key[1] and len(key[0]) == 500
    with pytest.raises(PickleRefused, match="expands to more than 1000 values"):
        load_values(shared_levels(2, 40), Limits(max_items=1000))
    assert load_values(shared_levels(2, 22), Limits(max_items=1000))  # 1 + 22 * (1 + 22 * 2) = 991 values


def test_str_and_bytes_count_each_time_they_are_used():
    blob = b"z" * 1000
    assert load_values(pickle.dumps([blob] * 10, protocol=4), Limits(max_expanded_bytes=10_000)) == [blob] * 10
    with pytest.raises(PickleRefused, match="expands to more than 10000 bytes of str and bytes"):
        load_values(pickle.dumps([blob] * 11, protocol=4), Limits(max_expanded_bytes=10_000))
    with pytest.raises(PickleRefused, match="expands to more than 10000 bytes"):
        load_values(pickle.dumps({"k": ["é" * 1000] * 11}, protocol=4), Limits(max_expanded_bytes=10_000))


def test_hashing_tuple_keys_is_held_to_the_bound_across_values():
    # One shared tuple of 320,401 values, used as the key of four dicts, each dropped (POP): no
    # value exceeds the bound, but hashing the key four times walks 1.28 M values.
    data = bytearray(shared_levels(2, 400)[:-1])  # the first dict is left on the stack
    for _ in range(3):
        data += b"0}h\x02C\x01vs"  # POP; {}; key = memo 2; SETITEM
    with pytest.raises(PickleRefused, match="tuple dict keys that expand to more than 1048576 values in all"):
        load_values(bytes(data) + b".")
    assert load_values(bytes(data[: -len(b"0}h\x02C\x01vs")]) + b".")  # three hashes: within it


def test_preview_is_a_bounded_prefix_of_repr():
    from iotool.preview import preview

    for value in [(1,), (), [1, [2, b"\x00"]], {"a": b"x" * 5, 3: None}, "\x1b[2J\u202e\x9b", -7, 1.5, "x" * 200]:
        text = repr(value)
        assert preview(value, 100) == (text if len(text) <= 100 else text[:97] + "...")
        assert preview(value, 12) == (text if len(text) <= 12 else text[:9] + "...")
    assert "\x1b" not in preview("\x1b[2J") and "\u202e" not in preview("\u202e")
    loop: list = []
    loop.append(loop)
    assert preview(loop) == repr(loop) == "[[...]]"
    assert preview(2**1000) == "<int of 1001 bits>" and preview(2**255, 100) == repr(2**255)
    key = load_values(shared_levels(2, 500))
    assert preview(key, 40) == repr(key)[:37] + "..."
    import time

    deep = (b"x",)
    for _ in range(40):
        deep = (deep,) * 1000  # 1000 ** 40 values: repr would never end
    start = time.monotonic()
    assert preview(deep, 40).startswith("((((") and time.monotonic() - start < 0.5


def test_the_expansion_bounds_hold_at_their_exact_boundary():
    data = shared_levels(2, 22)  # the key: 1 + 22 * 45 = 991 values; the dict: 993
    assert load_values(data, Limits(max_items=993))
    with pytest.raises(PickleRefused, match="expands to more than 992 values"):
        load_values(data, Limits(max_items=992))
    blob = b"z" * 1000
    assert load_values(pickle.dumps([blob] * 10, protocol=4), Limits(max_expanded_bytes=10_000))
