"""Plain values out of a pickle, read without unpickling: nothing is imported, looked up or called.

Python's unpickler runs whatever the stream asks for (``os.system`` through ``REDUCE``), so a pickle
from someone else is never given to it. :func:`load_values` reads the opcode stream itself
(protocols 2 to 5, the binary opcodes only) and builds nothing but ``None``, ``bool``, ``int``,
``bytes``, ``bytearray``, ``str``, ``tuple``, ``list`` and ``dict``. Every other opcode
(``REDUCE``, ``BUILD``, ``INST``, ``OBJ``, ``NEWOBJ``, ``EXT1``, ``PERSID``, sets ...) is
refused by name with its byte offset; floats (``BINFLOAT``) only unless ``Limits.floats``.

One exception, and it constructs a value rather than calling anything: pickle writes ``bytes``
at protocol 2, and ``bytearray`` at 2 to 4, as a "global" applied to arguments
(``_codecs.encode(str, 'latin1')``, ``builtins.bytearray(b'...')``). Those few names are
recognised as words, the arguments checked, and the bytes made here; any other global is refused.

Bounded: the stream's length, the nesting depth, the number of items, and every length field is
checked against the bytes left before anything is sliced. A list or dict is filled before it is
put inside another container (as pickle writes them), so the depth seen is the real depth.
A memo reference (``BINGET``) is counted for what it stands for: every container's size counts
its items with all they hold (a value used ten times counts ten times), and is refused past
``max_items`` values or ``max_expanded_bytes`` of str and bytes; hashing a tuple as a dict key
walks all it holds, and those walks together are held to ``max_items`` too. So a 12 KB pickle
that expands to 10**18 values, which no one could hash, print or encode, is refused as it is read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ..errors import RecordError
from ..preview import preview

PROTOCOLS = (2, 3, 4, 5)
MAX_INT_BYTES = 64  # LONG1/LONG4: an int of up to 512 bits; labels are far smaller


class PickleRefused(RecordError):
    """A pickle that is not plain values (an opcode outside the allowed ones), or a broken one."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what one pickle may hold."""

    max_bytes: int = (1 << 30) + (1 << 20)  # a 1 GiB image and its label
    max_depth: int = 32
    max_items: int = 1 << 20  # values built, in all; also what one value expands to (memo references counted)
    max_expanded_bytes: int | None = None  # str and bytes one value expands to; None: max_bytes
    floats: bool = False  # read BINFLOAT (a plain 8-byte double: a field's value) instead of refusing it


# Globals that only construct bytes or bytearray (protocol 2-4 spellings); nothing is imported.
_CONSTRUCTORS = {
    ("_codecs", "encode"): "encode",
    ("__builtin__", "bytes"): "bytes",
    ("builtins", "bytes"): "bytes",
    ("__builtin__", "bytearray"): "bytearray",
    ("builtins", "bytearray"): "bytearray",
}

# Every opcode's name (pickletools' names), for errors: the printable ones, then 0x80-0x98.
OPCODE_NAMES = dict(
    zip(
        b"(.012FIJKLMNPQRSTUVXabc}deghijl]opqrst)uGBC",
        (
            "MARK STOP POP POP_MARK DUP FLOAT INT BININT BININT1 LONG BININT2 NONE PERSID BINPERSID REDUCE STRING "
            "BINSTRING SHORT_BINSTRING UNICODE BINUNICODE APPEND BUILD GLOBAL EMPTY_DICT DICT APPENDS GET BINGET INST "
            "LONG_BINGET LIST EMPTY_LIST OBJ PUT BINPUT LONG_BINPUT SETITEM TUPLE EMPTY_TUPLE SETITEMS BINFLOAT BINBYTES "
            "SHORT_BINBYTES"
        ).split(),
    )
) | dict(
    zip(
        range(0x80, 0x99),
        (
            "PROTO NEWOBJ EXT1 EXT2 EXT4 TUPLE1 TUPLE2 TUPLE3 NEWTRUE NEWFALSE LONG1 LONG4 SHORT_BINUNICODE BINUNICODE8 "
            "BINBYTES8 EMPTY_SET ADDITEMS FROZENSET NEWOBJ_EX STACK_GLOBAL MEMOIZE FRAME BYTEARRAY8 NEXT_BUFFER "
            "READONLY_BUFFER"
        ).split(),
    )
)


class _Constructor:
    """A recognised global: a word standing for a bytes/bytearray constructor, never called
    (not a tuple, so that it can never pass for a value)."""

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name


class _Parser:
    """One pass over the opcode stream; ``pos`` is the offset of the next byte."""

    def __init__(self, data: bytes | bytearray | memoryview, limits: Limits):
        self.data = data if isinstance(data, bytes) else bytes(data)
        self.limits = limits
        self.max_items = limits.max_items
        self.pos = self.op_at = 0
        self.stack: list[Any] = []
        self.marks: list[int] = []  # stack heights at each MARK
        self.memo: dict[int, Any] = {}
        self.items = 0
        self.depth: dict[int, int] = {}  # id(container) -> its nesting depth
        self.size: dict[int, tuple[int, int]] = {}  # id(container) -> (values, str/bytes bytes) it expands to
        self.max_expanded = limits.max_bytes if limits.max_expanded_bytes is None else limits.max_expanded_bytes
        self.hashed = 0  # values walked hashing tuple keys
        self.sealed: set[int] = set()  # ids of lists/dicts already placed inside another container
        self.keep: list[Any] = []  # keeps every container alive, so that its id() stays its own

    # -- reading ---------------------------------------------------------------------------------

    def fail(self, why: str) -> PickleRefused:
        name = OPCODE_NAMES.get(self.data[self.op_at], "") if self.op_at < len(self.data) else ""
        opcode = f"opcode {name} " if name else ""
        return PickleRefused(f"{opcode}at byte {self.op_at}: {why}")

    def take(self, n: int) -> bytes:
        pos = self.pos
        if n < 0 or n > len(self.data) - pos:
            raise self.fail(f"declares {n} bytes, {len(self.data) - pos} are left")
        self.pos = pos + n
        return self.data[pos : pos + n]

    def number(self, fmt: str) -> int:
        return struct.unpack(fmt, self.take(_SIZES[fmt]))[0]

    def sized(self, width: int) -> bytes:
        """A length-prefixed run of bytes (the length ``width`` bytes, little-endian, unsigned)."""
        data, pos = self.data, self.pos
        if width > len(data) - pos:
            raise self.fail(f"declares {width} bytes, {len(data) - pos} are left")
        size = int.from_bytes(data[pos : pos + width], "little")
        start = pos + width
        if size > len(data) - start:
            raise self.fail(f"declares {size} bytes, {len(data) - start} are left")
        self.pos = start + size
        return data[start : start + size]

    def line(self) -> str:
        """A GLOBAL's text argument: ASCII up to a newline, at most 256 bytes."""
        end = self.data[self.pos : self.pos + 257].find(b"\n")
        if end < 0:
            raise self.fail("a module or name longer than 256 bytes, or no newline")
        return self.take(end + 1)[:-1].decode("ascii", "replace")

    # -- building --------------------------------------------------------------------------------

    def count(self) -> None:
        self.items += 1
        if self.items > self.max_items:
            raise self.fail(f"more than {self.max_items} values")

    def depth_of(self, value: Any) -> int:
        return self.depth.get(id(value), 0) if isinstance(value, (tuple, list, dict)) else 0

    def contain(self, container: Any, children: list[Any]) -> None:
        """Record that ``children`` now sit inside ``container``; check depth and sealing."""
        if id(container) in self.sealed:
            raise self.fail(
                "fills a list or dict that is already inside another container "
                "(pickle never writes that; a crafted nesting)"
            )
        deepest = max((self.depth_of(c) for c in children), default=0)
        depth = max(self.depth.get(id(container), 1), deepest + 1)
        if depth > self.limits.max_depth:
            raise self.fail(f"values nested more than {self.limits.max_depth} deep")
        self.depth[id(container)] = depth
        self.grow(container, children)
        for child in children:
            if isinstance(child, (list, dict)) and child is not container:
                self.sealed.add(id(child))

    def expanded(self, value: Any) -> tuple[int, int]:
        """(values, str/bytes bytes) ``value`` stands for, each shared part counted where it is used."""
        if isinstance(value, (tuple, list, dict)):
            return self.size.get(id(value), (1, 0))
        return (1, len(value)) if isinstance(value, (str, bytes, bytearray)) else (1, 0)

    def grow(self, container: Any, children: list[Any]) -> None:
        """Add what ``children`` expand to to ``container``'s size; refuse it past the bounds."""
        values, size = self.size.get(id(container), (1, 0))
        for child in children:
            more, extra = (1, 0) if child is container else self.expanded(child)
            values, size = values + more, size + extra
        if values > self.max_items:
            raise self.fail(
                f"a value that expands to more than {self.max_items} values (a value the memo "
                f"refers to counts each time it is used)"
            )
        if size > self.max_expanded:
            raise self.fail(f"a value that expands to more than {self.max_expanded} bytes of str and bytes")
        self.size[id(container)] = (values, size)

    def new_container(self, value: Any) -> Any:
        self.count()
        self.keep.append(value)
        self.depth[id(value)] = 1
        return value

    def push(self, value: Any) -> None:
        self.items += 1
        if self.items > self.max_items:
            raise self.fail(f"more than {self.max_items} values")
        self.stack.append(value)

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise self.fail("no MARK before it")
        height = self.marks.pop()
        items = self.stack[height:]
        del self.stack[height:]
        return self.values(items)

    def values(self, items: list[Any]) -> list[Any]:
        """``items``, refused if one is a recognised global rather than a value."""
        for item in items:
            if isinstance(item, _Constructor):
                raise self.fail(f"uses {item.name} as a value")
        return items

    def pop(self, n: int = 1) -> list[Any]:
        floor = self.marks[-1] if self.marks else 0
        if len(self.stack) - floor < n:
            raise self.fail(f"needs {n} value(s) on the stack")
        items = self.stack[len(self.stack) - n :]
        del self.stack[len(self.stack) - n :]
        return self.values(items)

    def top(self, kind: type) -> Any:
        floor = self.marks[-1] if self.marks else 0
        if len(self.stack) <= floor or not isinstance(self.stack[-1], kind):
            raise self.fail(f"needs a {kind.__name__} on the stack")
        return self.stack[-1]

    def tuple_of(self, items: list[Any]) -> None:
        value = tuple(items)
        self.new_container(value)
        self.contain(value, items)
        self.stack.append(value)

    def append(self, items: list[Any]) -> None:
        target = self.top(list)
        self.contain(target, items)
        target.extend(items)

    def set_items(self, items: list[Any]) -> None:
        if len(items) % 2:
            raise self.fail("an odd number of values for keys and values")
        target = self.top(dict)
        self.contain(target, items)
        for k in range(0, len(items), 2):
            if isinstance(items[k], tuple):  # hashing walks all the tuple holds
                self.hashed += self.expanded(items[k])[0]
                if self.hashed > self.max_items:
                    raise self.fail(f"tuple dict keys that expand to more than {self.max_items} values in all")
            try:
                target[items[k]] = items[k + 1]
            except TypeError:
                raise self.fail(f"a dict key of type {type(items[k]).__name__}, which is not hashable") from None

    def global_(self, module: str, name: str) -> None:
        kind = _CONSTRUCTORS.get((module, name))
        if kind is None:
            raise self.fail(
                f"refers to {preview(module, 100)[1:-1]}.{preview(name, 100)[1:-1]}; only plain values (tuples, lists, dicts, bytes, "
                f"str, ints, bools, None) are read, nothing is imported or called"
            )
        self.count()
        self.stack.append(_Constructor(kind, f"{module}.{name}"))

    def reduce(self) -> None:
        """Apply a recognised constructor to its argument tuple, checking the arguments."""
        floor = self.marks[-1] if self.marks else 0
        if len(self.stack) - floor < 2:
            raise self.fail("needs a callable and its arguments")
        func, args = self.stack[-2], self.stack[-1]
        if not isinstance(func, _Constructor):
            raise self.fail("calls something that is not a global (nothing is called)")
        if not isinstance(args, tuple):
            raise self.fail(f"applies {func.name} to a {type(args).__name__}, not a tuple")
        del self.stack[-2:]
        self.push(self.construct(func, args))

    def construct(self, func: _Constructor, args: tuple) -> bytes | bytearray:
        latin1 = len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1")
        if func.kind == "encode" and latin1:
            try:
                return args[0].encode("latin-1")
            except UnicodeEncodeError:
                raise self.fail(f"{func.name} of a str that is not latin-1") from None
        if func.kind == "bytes" and args == ():
            return b""
        if func.kind == "bytearray":
            if args == ():
                return bytearray()
            if len(args) == 1 and isinstance(args[0], (bytes, bytearray)):
                return bytearray(args[0])
        raise self.fail(f"{func.name} with arguments other than pickle's own for bytes / bytearray")

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> Any:
        if len(self.data) > self.limits.max_bytes:
            raise PickleRefused(
                f"{len(self.data)} bytes, more than {self.limits.max_bytes} (the bound on one pickled value)"
            )
        if bytes(self.data[:1]) != b"\x80":
            raise PickleRefused("at byte 0: not a pickle of protocol 2 to 5 (no PROTO opcode)")
        data, size, handlers, stack, memo = self.data, len(self.data), _HANDLERS, self.stack, self.memo
        while True:
            pos = self.pos
            if pos >= size:
                self.op_at = pos
                raise self.fail("the data ends before the STOP opcode")
            self.op_at, self.pos, op = pos, pos + 1, data[pos]
            if op == 0x43 and pos + 2 <= size and pos + 2 + data[pos + 1] <= size:  # SHORT_BINBYTES, in bounds
                end = pos + 2 + data[pos + 1]
                self.pos = end
                self.push(data[pos + 2 : end])
            elif op == 0x94 and len(stack) > (self.marks[-1] if self.marks else 0):  # MEMOIZE of a value
                if len(memo) not in memo:
                    self.count()
                memo[len(memo)] = stack[-1]
            elif op == 0x2E:  # STOP
                return self.stop()
            else:
                handler = handlers.get(op)
                if handler is None:
                    name = OPCODE_NAMES.get(op)
                    raise self.fail(
                        "not allowed: only plain values (tuples, lists, dicts, bytes, str, ints, "
                        "bools, None) are read, and nothing is executed"
                        if name
                        else f"unknown opcode {bytes([op])!r}"
                    )
                handler(self)

    def stop(self) -> Any:
        if self.marks or len(self.stack) != 1:
            raise self.fail(f"ends with {len(self.stack)} values and {len(self.marks)} open MARKs, not one value")
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} bytes follow the end of the pickle")
        value = self.stack[0]
        if isinstance(value, _Constructor):
            raise self.fail(f"ends with {value.name}, not a value")
        return value


def _proto(p: _Parser) -> None:
    version = p.number("<B")
    if p.op_at != 0 or version not in PROTOCOLS:
        raise p.fail(
            f"protocol {version}"
            + ("" if p.op_at == 0 else " again, not at the start")
            + f"; protocols {PROTOCOLS[0]}-{PROTOCOLS[-1]} are read"
        )


def _frame(p: _Parser) -> None:
    size = p.number("<Q")
    if size > len(p.data) - p.pos:
        raise p.fail(f"a frame of {size} bytes, {len(p.data) - p.pos} are left")


def _long(p: _Parser, fmt: str) -> None:
    size = p.number(fmt)
    if size > MAX_INT_BYTES:
        raise p.fail(f"an int of {size} bytes, more than {MAX_INT_BYTES}")
    p.push(int.from_bytes(p.take(size), "little", signed=True))


def _text(p: _Parser, width: int) -> None:
    raw = p.sized(width)
    try:
        p.push(str(raw, "utf-8", "surrogatepass"))
    except UnicodeDecodeError as exc:
        raise p.fail(f"a str that is not UTF-8 ({exc.reason} at byte {exc.start})") from None


def _memo_put(p: _Parser, index: int) -> None:
    if len(p.stack) <= (p.marks[-1] if p.marks else 0):
        raise p.fail("memoizes an empty stack")
    memo = p.memo
    if index not in memo:
        p.count()
    memo[index] = p.stack[-1]


def _memo_get(p: _Parser, index: int) -> None:
    if index not in p.memo:
        raise p.fail(f"memo {index} was never stored")
    p.push(p.memo[index])


def _empty(kind: type):
    return lambda p: p.stack.append(p.new_container(kind()))


def _raw(width: int, make=None):
    if make is None:
        return lambda p: p.push(p.sized(width))
    return lambda p: p.push(make(p.sized(width)))


_BY_OPCODE = {
    b"\x80": _proto,
    b"\x95": _frame,
    b"(": lambda p: (p.marks.append(len(p.stack)), p.count()),
    b"0": lambda p: p.pop(1),
    b"1": lambda p: p.pop_mark(),
    b"N": lambda p: p.push(None),
    b"\x88": lambda p: p.push(True),
    b"\x89": lambda p: p.push(False),
    b"J": lambda p: p.push(p.number("<i")),
    b"K": lambda p: p.push(p.number("<B")),
    b"M": lambda p: p.push(p.number("<H")),
    b"\x8a": lambda p: _long(p, "<B"),
    b"\x8b": lambda p: _long(p, "<I"),
    b"U": _raw(1),  # SHORT_BINSTRING: a Python 2 str, i.e. bytes
    b"T": _raw(4),  # BINSTRING (its length is signed in pickle; > 2 GiB fails the bounds check)
    b"C": _raw(1),
    b"B": _raw(4),
    b"\x8e": _raw(8),
    b"\x96": _raw(8, bytearray),
    b"\x8c": lambda p: _text(p, 1),
    b"X": lambda p: _text(p, 4),
    b"\x8d": lambda p: _text(p, 8),
    b")": lambda p: p.tuple_of([]),
    b"t": lambda p: p.tuple_of(p.pop_mark()),
    b"\x85": lambda p: p.tuple_of(p.pop(1)),
    b"\x86": lambda p: p.tuple_of(p.pop(2)),
    b"\x87": lambda p: p.tuple_of(p.pop(3)),
    b"]": _empty(list),
    b"}": _empty(dict),
    b"a": lambda p: p.append(p.pop(1)),
    b"e": lambda p: p.append(p.pop_mark()),
    b"s": lambda p: p.set_items(p.pop(2)),
    b"u": lambda p: p.set_items(p.pop_mark()),
    b"q": lambda p: _memo_put(p, p.number("<B")),
    b"r": lambda p: _memo_put(p, p.number("<I")),
    b"\x94": lambda p: _memo_put(p, len(p.memo)),
    b"h": lambda p: _memo_get(p, p.number("<B")),
    b"j": lambda p: _memo_get(p, p.number("<I")),
    b"c": lambda p: p.global_(p.line(), p.line()),
    b"\x93": lambda p: _stack_global(p),
    b"R": lambda p: p.reduce(),
    b"G": lambda p: _float(p),
}


def _float(p: _Parser) -> None:
    """BINFLOAT: an 8-byte big-endian double, read only when the limits allow floats."""
    if not p.limits.floats:
        raise p.fail("not allowed: floats are read only as field values (Limits.floats)")
    p.push(struct.unpack(">d", p.take(8))[0])


_HANDLERS = {op[0]: handler for op, handler in _BY_OPCODE.items()}  # by opcode byte value
_SIZES = {fmt: struct.calcsize(fmt) for fmt in ("<B", "<H", "<I", "<i", "<Q")}


def _stack_global(p: _Parser) -> None:
    module, name = p.pop(2)
    if not (isinstance(module, str) and isinstance(name, str)):
        raise p.fail("a module and name that are not str")
    p.global_(module, name)


def load_values(data: bytes | bytearray | memoryview, limits: Limits = Limits()) -> Any:
    """The value a protocol 2-5 pickle holds, if it is made of plain values only.

    Args:
        data: the pickle's bytes.
        limits: bounds on its size, nesting depth and number of values.

    Returns:
        ``None``, a bool, int, bytes, bytearray, str, or a tuple / list / dict of those.

    Raises:
        PickleRefused: an opcode outside the plain values (named, with its byte offset), a
            length past the end of the data, a bound exceeded, or a malformed stream. Nothing
            in the stream is ever executed.
    """
    return _Parser(data, limits).run()
