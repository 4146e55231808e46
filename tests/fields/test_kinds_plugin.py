"""A field kind is one class: a third-party kind (tests/plugins/iotool_example_kind, registered
through the ``iotool.field_kinds`` entry point by its .dist-info folder) is stored by every format
that stores fields, read back, batched by the Loader and refused when hostile, though no iotool
module names it; and the registry answers for the built-ins."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

import iotool
from iotool.errors import FormatError, RecordError, UsageError
from iotool.fields import MAX_ENCODED_BYTES, FieldSpec, Schema, decode, encode
from iotool.fields.kinds import FieldKind, field_kind, kind_names
from iotool.formats import all_formats

from ..conftest import make_image
from ..support.fields import convert_fields

FIELD_FORMATS = [spec.name for spec in all_formats() if spec.reader.fields_version is not None]
RATING = FieldSpec("stars", "rating", params=(("stars", 4),))
SCHEMA = Schema((RATING,))


class Task(NamedTuple):
    key: str
    path: str
    index: int


class RatingSource:
    """``n`` JPEGs, each rated ``1 + i % 4``."""

    def __init__(self, n: int):
        self.root, self.schema, self.classes, self.class_to_idx = "ratings", SCHEMA, [], {}
        self._tasks = [Task(f"img{i:03d}.jpg", f"mem:{i}", i) for i in range(n)]

    def options_dict(self) -> dict[str, Any]:
        return {}

    def tasks(self) -> list[Task]:
        return self._tasks

    def worker_state(self) -> Schema:
        return self.schema

    @staticmethod
    def load(schema: Schema, task: Task) -> tuple[str, str, int, bytes, dict[str, Any]]:
        return task.key, task.path, -1, make_image(task.index, (32, 32)), {"stars": 1 + task.index % 4}


def test_the_entry_point_kind_is_registered_beside_the_built_ins():
    names = kind_names()
    assert names[:9] == ["class", "text", "json", "int", "float", "array", "bytes", "boxes", "keypoints"]
    assert "rating" in names and isinstance(field_kind("rating"), FieldKind)
    assert MAX_ENCODED_BYTES["rating"] == 1 and MAX_ENCODED_BYTES["boxes"] == field_kind("boxes").max_bytes
    with pytest.raises(UsageError, match="Unknown field kind 'ratings'; choose one of: class, .*rating"):
        field_kind("ratings")


@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_a_plugin_kind_is_stored_read_and_batched_by_every_format(fmt, tmp_path: Path):
    dst = tmp_path / "d"
    convert_fields(dst, fmt, SCHEMA, 6, source=RatingSource(6))
    reader = iotool.open_reader(dst)
    assert reader.schema == SCHEMA and reader.schema["stars"].to_dict()["stars"] == 4
    ratings = {key: decode(RATING, reader.read_fields(i, ["stars"])["stars"], key) for i, key in enumerate(reader.keys)}
    assert ratings == {f"img{i:03d}.jpg": 1 + i % 4 for i in range(6)}
    assert iotool.verify(dst).ok
    ds = iotool.open_dataset(dst, fields=("image", "stars"), decoder="pil")
    batches = list(iotool.Loader(ds, batch_size=4, threads=1))
    column = torch.cat([b[1] for b in batches])
    assert column.dtype == torch.int64 and sorted(column.tolist()) == sorted(ratings.values())


def test_the_plugin_kind_validates_its_own_attribute_and_values():
    with pytest.raises(UsageError, match="stars must be an integer from 1 to 9"):
        FieldSpec("stars", "rating", params=(("stars", 12),))
    with pytest.raises(RecordError, match=r"^img7: field 'stars': a rating is an integer from 1 to 4, got 5"):
        encode(RATING, 5, "img7")
    with pytest.raises(RecordError, match="more than a rating value may have"):
        decode(RATING, b"12", "img7")
    with pytest.raises(FormatError, match="stars must be an integer"):
        Schema.from_list([{"name": "stars", "kind": "rating", "stars": "4"}], "meta")
    with pytest.raises(FormatError, match="unknown attributes"):
        Schema.from_list([{"name": "stars", "kind": "rating", "names": ["a"]}], "meta")
