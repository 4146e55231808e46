"""What a map-style dataset's sample is: the names chosen (``fields=``), in order, and whether a
tuple or a dict of them; ``(image, class)`` as a tuple is the plain case, computed with nothing
else decoded. The last part of the sample path (:mod:`iotool.loading.mapstyle`): it assembles
the values computed, or gives them as elements in another order without assembling.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import UsageError
from ..fields import CLASS, IMAGE, Schema

__all__ = ["Assembly"]


class Assembly:
    """A sample of the fields ``names`` (in order), a dict when ``as_dict`` else a tuple.

    Attributes:
        plain: ``(image, class)`` as a tuple: ``ds[i]`` is ``(image, label)`` as before fields existed.
        others: the names besides the image; ``wanted``: the stored ones among them (not ``class``).
    """

    def __init__(self, names: tuple[str, ...], as_dict: bool):
        self.names, self.as_dict = names, as_dict
        self.plain = names == (IMAGE, CLASS) and not as_dict
        self.image = IMAGE in names
        self.others = tuple(n for n in names if n != IMAGE)
        self.wanted = tuple(n for n in self.others if n != CLASS)

    @classmethod
    def of(cls, schema: Schema, fields: str | Sequence[str] | None) -> Assembly:
        """The sample a dataset's ``fields=`` chooses of ``schema`` (UsageError on an unknown name)."""
        return cls(*schema.select(fields))

    def assemble(self, image: Any, values: dict[str, Any]) -> Any:
        """The sample of ``image`` and the ``values`` of the other names: a dict (the image first),
        or a tuple in :attr:`names` order."""
        if self.as_dict:
            return {IMAGE: image, **values}
        return tuple(image if n == IMAGE else values[n] for n in self.names)

    def items(self, image: Any, values: dict[str, Any], names: Sequence[str]) -> tuple[Any, ...]:
        """The sample's elements in ``names`` order, not assembled (``values`` may be changed).

        Raises:
            UsageError: a name that is not among :attr:`names`, naming them.
        """
        if self.image:
            values[IMAGE] = image
        try:
            return tuple(values[n] for n in names)
        except KeyError:
            missing = next(n for n in names if n not in values)
            raise UsageError(f"{missing!r:.80} is not among the dataset's fields ({', '.join(self.names)}).") from None
