"""A source's class and field choice at their edges: a column is refused as a class only when
every value is distinct and there are more than the bound, and ``fields=`` keeps the source's
order (a mutation audit's survivors, pinned)."""

from __future__ import annotations

import pytest

from iotool.errors import SourceError, UsageError
from iotool.fields import FieldSpec
from iotool.fields.limits import MAX_UNIQUE_CLASS_VALUES
from iotool.pipeline.sources.base import choose_fields, refuse_unique_class


def test_exactly_the_bound_of_distinct_values_is_still_a_class() -> None:
    refuse_unique_class([f"v{i}" for i in range(MAX_UNIQUE_CLASS_VALUES)], "col", "hint")
    with pytest.raises(SourceError, match=f"col: {MAX_UNIQUE_CLASS_VALUES + 1} distinct values"):
        refuse_unique_class([f"v{i}" for i in range(MAX_UNIQUE_CLASS_VALUES + 1)], "col", "keep it as a field")


def test_one_repeated_value_makes_it_a_class_and_missing_values_do_not_count() -> None:
    many = [f"v{i}" for i in range(2 * MAX_UNIQUE_CLASS_VALUES)]
    refuse_unique_class([*many, many[0]], "col", "hint")
    with pytest.raises(SourceError, match=f"in {len(many)} samples"):
        refuse_unique_class([None, *many, None], "col", "hint")


def test_chosen_fields_keep_the_sources_order_and_an_unknown_one_is_named() -> None:
    found = [FieldSpec("txt", "text"), FieldSpec("json", "json"), FieldSpec("n", "int")]
    assert choose_fields(found, ("n", "txt"), "src").names == ("txt", "n")
    assert choose_fields(found, None, "src").names == ("txt", "json", "n")
    with pytest.raises(UsageError, match="no field 'nope'; this source has: txt, json, n"):
        choose_fields(found, ("txt", "nope"), "src")
