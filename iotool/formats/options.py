"""A format's options: a frozen dataclass, built from keyword arguments or ``KEY=VALUE`` strings."""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping, Self

from ..errors import UsageError, did_you_mean


@dataclass(frozen=True)
class FormatOptions:
    """A format's options: subclass as a frozen dataclass; validate in ``__post_init__``.

    The base class is the options of a format that takes none.
    """

    noun: ClassVar[str] = "format"  # what the messages call the owner ("source" for source options)

    @classmethod
    def parse(cls, format_name: str, given: Mapping[str, Any]) -> Self:
        """Build the options from keyword arguments (or ``KEY=VALUE`` strings from the CLI);
        unknown names are refused with the format's choices."""
        hints = typing.get_type_hints(cls)
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            choices = ", ".join(names) if names else "none"
            raise UsageError(
                f"The {format_name} {cls.noun} has no option {', '.join(unknown)}; its options: {choices}."
                + did_you_mean(unknown[0], names)
            )
        values = {name: _coerce(f"{format_name} {cls.noun}", name, value, hints[name]) for name, value in given.items()}
        return cls(**values)


def _coerce(owner: str, name: str, value: Any, hint: Any) -> Any:
    """A CLI string turned into the option's type (int, float, bool; None for 'none')."""
    if not isinstance(value, str):
        return value
    kinds = [t for t in typing.get_args(hint) or (hint,) if t is not type(None)]
    if value.lower() == "none" and len(kinds) < len(typing.get_args(hint) or (hint,)):
        return None
    for kind in kinds:
        try:
            if kind is bool:
                if value.lower() in ("1", "true", "yes", "0", "false", "no"):
                    return value.lower() in ("1", "true", "yes")
                continue
            if kind in (int, float, str):
                return kind(value)
        except ValueError:
            continue
    raise UsageError(f"The {owner}'s option {name}={value!r} is not a valid {hint}.")
