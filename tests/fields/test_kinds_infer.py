"""A source's untyped value is kept as the kind that claims it: the kinds are asked in their
declared ``infer_order`` (``FieldKind.infers``), so a kind registered at run time takes part,
in a real source (the imagefolder's ``metadata.jsonl``) and a real conversion, with no iotool
module naming it. The built-ins' answers are pinned in tests/pipeline/test_sources_kind_of_value.py.

Registering a kind changes the process's registry for good, so those tests run in a subprocess."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from iotool.fields.kinds import field_kind, kind_names
from iotool.fields.kinds.registry import inferring_kinds

from ..conftest import make_image
from ..support.subprocesses import python_json


def test_the_built_ins_are_asked_in_their_declared_order() -> None:
    assert [k.name for k in inferring_kinds()] == ["text", "int", "float", "bytes", "array", "json"]
    # the others are never inferred: declared only (the installed rating kind too)
    for name in ("class", "boxes", "keypoints", "segmentation", "rating"):
        assert name in kind_names() and field_kind(name).infer_order is None


HEXCOLOR = """
import re
from iotool.errors import RecordError
from iotool.fields.kinds import FieldKind, register_kind

class HexColor(FieldKind):
    name, max_bytes, infer_order = "hexcolor", 7, 5
    def infers(self, value):
        return isinstance(value, str) and re.fullmatch("#[0-9a-f]{6}", value) is not None
    def encode(self, spec, value, at):
        if not self.infers(value):
            raise RecordError(f"{at}: not a colour")
        return value.encode("ascii")
    def decode(self, spec, data, at):
        return bytes(data).decode("ascii")

class Greedy(FieldKind):  # after json, which takes any value: never the answer
    name, max_bytes, infer_order = "greedy", 8, 2000
    def infers(self, value):
        return True
"""


def run(body: str, *args: str) -> dict:
    """The JSON ``body`` prints last, run after :data:`HEXCOLOR`'s definitions in a fresh interpreter."""
    return python_json(HEXCOLOR + textwrap.dedent(body), *args)


def test_a_registered_kind_is_asked_in_its_order() -> None:
    got = run(
        """
        import json
        from iotool.pipeline.sources.base import kind_of_value
        values = ["#ff8800", "#FF8800", "hello", 3, [1, 2], {"a": 1}, object()]
        before = [kind_of_value(v) for v in values]
        register_kind(HexColor())
        register_kind(Greedy())
        after = [kind_of_value(v) for v in values]
        print(json.dumps({"before": before, "after": after}))
        """
    )
    assert got["before"] == ["text", "text", "text", "int", "array", "json", "json"]
    assert got["after"] == ["hexcolor", "text", "text", "int", "array", "json", "json"]


def test_a_registered_kind_is_inferred_by_a_source_and_converted(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    lines = []
    for i in range(3):
        (root / f"img{i}.png").write_bytes(make_image(i, (8, 8), "PNG"))
        lines.append({"file_name": f"img{i}.png", "colour": f"#00{i:02x}ff", "caption": f"c{i}"})
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    got = run(
        """
        import json, sys
        import iotool
        from iotool.pipeline.sources import open_source
        from iotool.storage import StorageConfig
        root, dst = sys.argv[1], sys.argv[2]
        plain = [(f.name, f.kind) for f in open_source(root, "imagefolder", StorageConfig()).schema.fields]
        register_kind(HexColor())
        kinds = [(f.name, f.kind) for f in open_source(root, "imagefolder", StorageConfig()).schema.fields]
        iotool.convert(root, dst, "lmdb", workers=0)
        ds = iotool.open_dataset(dst, fields=("colour", "caption"))
        print(json.dumps({"plain": plain, "kinds": kinds, "read": [list(ds[i]) for i in range(len(ds))]}))
        """,
        str(root),
        str(tmp_path / "out.lmdb"),
    )
    assert got["plain"] == [["colour", "text"], ["caption", "text"]]
    assert got["kinds"] == [["colour", "hexcolor"], ["caption", "text"]]
    assert got["read"] == [[line["colour"], line["caption"]] for line in lines]


def test_an_installed_kind_that_cannot_load_is_left_out_of_inference(tmp_path: Path) -> None:
    info = tmp_path / "iotool_broken_kind-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: iotool-broken-kind\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[iotool.field_kinds]\nbroken = iotool_no_such_module:KIND\n")
    got = run(
        """
        import json, logging, sys
        sys.path.insert(0, sys.argv[1])
        logged = []
        handler = logging.Handler()
        handler.emit = lambda record: logged.append(record.getMessage())
        logging.getLogger("iotool").addHandler(handler)
        from iotool.errors import UsageError
        from iotool.fields import FieldSpec
        from iotool.fields.kinds import kind_names
        from iotool.pipeline.sources.base import kind_of_value
        kinds = [kind_of_value(v) for v in ("a", 1, 1.5, b"x", [1], {})]
        try:
            FieldSpec("caption", "text", box_format="XYXY")
        except UsageError as exc:
            refused = str(exc)
        print(json.dumps({"names": kind_names(), "kinds": kinds, "refused": refused, "logged": logged}))
        """,
        str(tmp_path),
    )
    assert "broken" in got["names"]
    assert got["kinds"] == ["text", "int", "float", "bytes", "array", "json"]
    assert got["refused"].startswith("field 'caption': a text field takes no box_format (it takes pixels;")
    assert len(got["logged"]) == 1
    assert got["logged"][0].startswith("field kind 'broken' is not asked what a value is: Field kind 'broken'")
