"""Exception types raised by iotool.

Every error iotool raises on bad input derives from :class:`IotoolError`, so callers
(and the CLI) can tell a data problem from a bug.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Remedy(NamedTuple):
    """What the user can do about an error, said once for library callers and once for the CLI."""

    api: str  # e.g. "Pass overwrite=True to replace it."
    cli: str  # e.g. "Pass --overwrite to replace it."


class IotoolError(Exception):
    """Base class for every error iotool raises on bad input or bad usage.

    An error may carry a :class:`Remedy`: ``str(error)`` ends with its library spelling, and
    :meth:`cli_message` with its command-line spelling.
    """

    remedy: Remedy | None = None

    def with_remedy(self, remedy: Remedy) -> IotoolError:
        """This error, told what the user can do about it (returns ``self``, to raise)."""
        self.remedy = remedy
        return self

    def _message(self, hint: str | None) -> str:
        text = super().__str__()
        return f"{text} {hint}" if hint else text

    def __str__(self) -> str:
        return self._message(self.remedy.api if self.remedy else None)

    def cli_message(self) -> str:
        """The message in the command line's words."""
        return self._message(self.remedy.cli if self.remedy else None)


class SourceError(IotoolError):
    """The source tree cannot be used (missing, empty, no images)."""


class DecodeError(IotoolError):
    """An image could not be decoded; the message names the input."""


class ConversionError(IotoolError):
    """A conversion stopped on a bad input file; the message names the file and the reason."""

    def __init__(self, message: str, path: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.path = path
        self.reason = reason


class UnstorableRecord(ConversionError):
    """A writer cannot store record ``key``: its name collides on disk with another key's (two
    keys on one path, a file where another key needs a folder) or is over the file system's
    limits. A bad record like a file that does not decode: skipped under ``on_error="skip"``.
    Raised by a writer's ``add`` before anything of the record is written."""

    def __init__(self, key: str, reason: str):
        super().__init__(f"{key}: {reason}", None, reason)
        self.key = key


class DestinationExistsError(IotoolError):
    """The destination exists and overwriting was not asked for."""


class DestinationError(IotoolError):
    """The destination could not be written (a full disk, an I/O error, no permission); the
    message names it, says why and what was left there."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class DestinationLockedError(IotoolError):
    """Another conversion is writing the same destination; the message names its process."""


class Interrupted(KeyboardInterrupt):
    """A conversion stopped by a signal (SIGINT: Ctrl-C, SIGTERM: a scheduler).

    ``kept`` is the partial output kept for ``--resume`` (None: nothing was left behind).
    """

    def __init__(self, signum: int = 2, kept: str | None = None):
        super().__init__(signum)
        self.signum = signum
        self.kept = kept


class FormatError(IotoolError):
    """A dataset on disk is not a format iotool knows, or its metadata is invalid."""


class UnknownFormatError(FormatError):
    """A path holds no dataset in any registered format, or a format name is unknown."""


class FormatVersionError(FormatError):
    """A dataset was written with a format version this iotool does not read."""


class RecordError(IotoolError):
    """A stored record cannot be read or decoded; the message names the dataset, index and key."""


class UsageError(IotoolError):
    """An option or argument value is invalid; the message names the value and the choices."""


class SourceNotFoundError(SourceError, UsageError):
    """The source names nothing: a path that does not exist, a pattern no file matches. A usage
    error (exit 2), as a mistyped option is; still a :class:`SourceError` for the library's callers."""


class UnknownArgumentError(UsageError, TypeError):
    """A keyword argument a function does not take (a ``TypeError`` as Python's own, and a
    :class:`UsageError`); the message names it, the closest names and the choices."""


class InternalError(IotoolError):
    """iotool broke one of its own rules (not the caller's input): the message says what, and asks
    for a bug report."""


# What reading or decoding one stored record may raise when the record (not iotool) is at fault:
# a dataset's on_error policy applies to these.
RECORD_ERRORS = (IotoolError, OSError, ValueError)


def did_you_mean(name: str, *choices: Iterable[str]) -> str:
    """`` Did you mean 'lmdb'?`` for the names of ``choices`` closest to ``name`` (difflib), to end
    a message that names the bad value and the choices; ``""`` when none is close. With several
    groups of choices, the first group holding a close name answers (a function's own arguments
    before the options it passes on)."""
    import difflib

    for group in choices:
        close = difflib.get_close_matches(name, list(dict.fromkeys(group)), n=2, cutoff=0.6)
        if close:
            return f" Did you mean {' or '.join(repr(c) for c in close)}?"
    return ""


def unknown_argument(
    owner: str, name: str, known: Sequence[str], more: Sequence[str] = (), hints: Mapping[str, str] | None = None
) -> UnknownArgumentError:
    """The error refusing keyword argument ``name`` of ``owner``: the answer of ``hints`` for a
    name with one (another library's spelling), else the closest of ``known`` (then of ``more``,
    e.g. a format's options) and the choices."""
    if hints and name in hints:
        return UnknownArgumentError(f"{owner}() has no argument {name!r}: {hints[name]}")
    choices = ", ".join([*known, *more])
    return UnknownArgumentError(
        f"{owner}() has no argument {name!r}; its arguments: {choices}.{did_you_mean(name, known, more)}"
    )


def checked_keywords(hints: Mapping[str, str] | None = None) -> Callable[[F], F]:
    """Decorate a function (or ``__init__``) so an unknown keyword argument raises
    :func:`unknown_argument` (a ``TypeError`` that names the closest argument) instead of
    Python's bare ``TypeError``; ``hints`` answers other libraries' names (DataLoader's)."""

    def decorate(func: F) -> F:
        import inspect

        params = inspect.signature(func).parameters.values()
        known = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
        owner = "iotool." + func.__qualname__.removesuffix(".__init__")

        @functools.wraps(func)
        def checked(*args: Any, **kwargs: Any) -> Any:
            for name in kwargs:
                if name not in known:
                    raise unknown_argument(owner, name, known, hints=hints)
            return func(*args, **kwargs)

        return checked  # pyright: ignore[reportReturnType]

    return decorate


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_deprecated(message: str) -> None:
    """A DeprecationWarning pointing at the user's line: the first caller outside the iotool
    package, however many of iotool's frames lie between it and the deprecated spelling."""
    level, frame = 2, sys._getframe(1)  # stacklevel 2 is the frame that called this function
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, DeprecationWarning, stacklevel=level)
