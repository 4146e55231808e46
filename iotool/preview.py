"""A value's ``repr`` cut to a few characters, made without building the whole ``repr``.

``repr(value)[:40]`` first builds the whole text: for a tuple whose items share a nested tuple
a thousand times over (a 12 KB pickle), that text does not fit in memory. :func:`preview` walks
the value and stops once it has its characters, so what an error message shows costs at most
about ``limit`` characters of work per level, whatever the value expands to.
"""

from __future__ import annotations

from typing import Any

MAX_INT_BITS = 256  # a longer int is shown by its size (its decimal text costs quadratic time)


def preview(value: Any, limit: int = 40) -> str:
    """``repr(value)`` when at most ``limit`` characters long, else its first characters and
    ``...``; control and BiDi characters escaped as ``repr`` escapes them."""
    out: list[str] = []
    _walk(value, out, [limit + 1], set())
    text = "".join(out)
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def _walk(value: Any, out: list[str], budget: list[int], path: set[int]) -> None:
    if budget[0] <= 0:
        return
    if isinstance(value, (str, bytes, bytearray)):
        piece = repr(value[: budget[0]])
    elif isinstance(value, bool) or value is None or isinstance(value, float):
        piece = repr(value)
    elif isinstance(value, int):
        bits = value.bit_length()
        piece = repr(value) if bits <= MAX_INT_BITS else f"<int of {bits} bits>"
    elif isinstance(value, (tuple, list, dict)):
        _container(value, out, budget, path)
        return
    else:
        piece = f"<{type(value).__name__}>"
    out.append(piece)
    budget[0] -= len(piece)


def _emit(text: str, out: list[str], budget: list[int]) -> None:
    out.append(text)
    budget[0] -= len(text)


def _container(value: tuple | list | dict, out: list[str], budget: list[int], path: set[int]) -> None:
    if id(value) in path:  # a list or dict inside itself
        _emit("[...]" if isinstance(value, list) else "{...}", out, budget)
        return
    path.add(id(value))
    opening, closing = "()" if isinstance(value, tuple) else "{}" if isinstance(value, dict) else "[]"
    _emit(opening, out, budget)
    items = iter(value.items()) if isinstance(value, dict) else iter(value)
    for n, item in enumerate(items):
        if budget[0] <= 0:
            break
        if n:
            _emit(", ", out, budget)
        if isinstance(value, dict):
            _walk(item[0], out, budget, path)
            _emit(": ", out, budget)
            _walk(item[1], out, budget, path)
        else:
            _walk(item, out, budget, path)
    else:
        if isinstance(value, tuple) and len(value) == 1:
            _emit(",", out, budget)
    path.discard(id(value))
    if budget[0] > 0:
        _emit(closing, out, budget)
