"""The pickle reader's refusals at their edges: every opcode outside the plain-data set (BUILD
among them) is refused by name where it stands, and the depth bound holds at exactly its value."""

from __future__ import annotations

import pickle

import pytest

from iotool.pipeline.picklevalues import OPCODE_NAMES, Limits, PickleRefused, load_values

# What a plain value may be made of (this test's own list, not the reader's table).
PLAIN = set(
    "PROTO FRAME MARK POP POP_MARK NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 LONG4 SHORT_BINSTRING "
    "BINSTRING SHORT_BINBYTES BINBYTES BINBYTES8 BYTEARRAY8 SHORT_BINUNICODE BINUNICODE BINUNICODE8 EMPTY_TUPLE "
    "TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST EMPTY_DICT APPEND APPENDS SETITEM SETITEMS BINPUT LONG_BINPUT MEMOIZE "
    "BINGET LONG_BINGET GLOBAL STACK_GLOBAL REDUCE STOP".split()
)
REFUSED = sorted((code, name) for code, name in OPCODE_NAMES.items() if name not in PLAIN)


def test_the_refused_set_is_what_runs_code_or_builds_other_types():
    names = {name for _, name in REFUSED}
    assert {"BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4"} <= names
    assert {"BINFLOAT", "FLOAT", "EMPTY_SET", "ADDITEMS", "FROZENSET", "NEXT_BUFFER", "READONLY_BUFFER"} <= names


@pytest.mark.parametrize(("code", "name"), REFUSED, ids=[name for _, name in REFUSED])
def test_each_opcode_outside_the_plain_set_is_refused_by_name_where_it_stands(code, name):
    # three values and a MARK on the stack, so that no opcode is refused for want of arguments
    data = b"\x80\x04(}\x94]\x94N" + bytes([code]) + b"\x00" * 16 + b"."
    with pytest.raises(PickleRefused, match=rf"^opcode {name} at byte 8: not allowed"):
        load_values(data)


def test_build_on_a_dict_is_refused_not_taken_as_a_no_op():
    """``{}`` then a state ``{}`` then BUILD: a reader that dropped the state would return ``{}``."""
    with pytest.raises(PickleRefused, match="opcode BUILD at byte 5"):
        load_values(b"\x80\x02}\x94}b.")


def nest(kind: str, depth: int) -> object:
    value: object = {"list": [], "tuple": (), "dict": {}}[kind]
    for _ in range(depth - 1):
        value = {"list": lambda v: [v], "tuple": lambda v: (v, 1), "dict": lambda v: {"k": v}}[kind](value)
    return value


@pytest.mark.parametrize("kind", ["list", "tuple", "dict"])
@pytest.mark.parametrize("limit", [1, 2, 5, 32])
def test_the_depth_bound_holds_at_exactly_its_value(kind, limit):
    """A value ``limit`` containers deep is read; one more is refused."""
    limits = Limits(max_depth=limit)
    at = nest(kind, limit)
    assert load_values(pickle.dumps(at, protocol=4), limits) == at
    with pytest.raises(PickleRefused, match=f"nested more than {limit} deep"):
        load_values(pickle.dumps(nest(kind, limit + 1), protocol=4), limits)


def test_the_default_depth_bound_is_32():
    assert load_values(pickle.dumps(nest("list", 32), protocol=4)) == nest("list", 32)
    with pytest.raises(PickleRefused, match="nested more than 32 deep"):
        load_values(pickle.dumps(nest("list", 33), protocol=4))
