"""The ``coco`` source: a folder of images and a COCO ``instances`` annotation file.

``iotool convert coco FORMAT IMAGES_DIR DST -s annotations=instances_train2017.json``: one
sample per entry of the file's ``images`` list (in image id order, as torchvision's
``CocoDetection`` reads them), its key the entry's ``file_name`` (a path under IMAGES_DIR), with
the image's annotations (in file order, as pycocotools' ``getAnnIds`` lists them) as fields:

- ``boxes`` (boxes, XYXY float32 pixels from COCO's ``[x, y, w, h]``; labels are the category ids
  mapped to 0 .. K-1 in ascending id order, the field's classes the category names in that order),
- ``iscrowd`` (uint8 array) and ``area`` (float32 array), one per box,
- ``segmentation`` (kind ``segmentation``, stored as JSON: each annotation's polygons or RLE as the
  file holds it, null when absent; ``open_dataset(..., masks=("segmentation",))`` reads it as one
  mask per box, :mod:`iotool.fields.kinds.instance_masks`, its ``area`` the field ``area``),
- ``image_id`` (int),
- from a person keypoints file (categories that declare ``keypoints``), ``keypoints`` (kind
  keypoints: ``(N, K, 3)`` x, y, v, the category's point names and skeleton in the field) and
  ``num_keypoints`` (int32 array), one per box (:mod:`.cocokeypoints`).

An image without annotations has no boxes ((0, 4)). There is no class. A missing ``iscrowd`` is
0 and a missing ``area`` the box's w * h (as pycocotools' ``loadRes``). Option ``fields`` chooses.
``area`` and ``segmentation`` are in the image's pixels and marked so (``pixels``): a conversion
that resizes the images scales the boxes but refuses to keep those two.

Bad records (``--on-error skip`` lists them, ``fail`` stops naming them): an image entry without
an integer id or a string file_name, a file_name that is not a safe relative path under
IMAGES_DIR (:mod:`iotool.names`, links included), an image id or file_name given twice (every
image of a repeated id, the later of a repeated file_name), and an image whose annotation names
no category, has a bbox that is not 4 finite numbers with w, h >= 0 (an integer too large for a
float, which valid JSON may hold, is not one), an area that is not a finite number >= 0, an
iscrowd other than 0/1, or a segmentation that is not polygons of finite numbers or an RLE of the image's size; an
annotation whose image_id names no image is a record of its own (``FILE#annotations[K]``).

Bounds: the file is refused over ``max_annotation_bytes`` before it is read and parsed within
:func:`iotool.fields.parse_json`'s depth and Python-memory bounds (``max_annotation_memory``);
an image with more than :data:`~iotool.fields.limits.MAX_BOXES` annotations, an annotation with
more than :data:`~iotool.fields.limits.MAX_POLYGON_COORDINATES` polygon numbers or
:data:`~iotool.fields.limits.MAX_RLE_COUNTS` RLE runs are bad records. Nothing the file holds is
printed raw (:func:`iotool.preview.preview`).
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence, TypeGuard

import numpy as np

from ...errors import RecordError, SourceError, SourceNotFoundError, UsageError
from ...fields import FieldSpec, parse_json
from ...fields.limits import (
    MAX_ANNOTATION_DEPTH,
    MAX_ANNOTATION_FILE_BYTES,
    MAX_ANNOTATION_MEMORY,
    MAX_BOX_CLASSES,
    MAX_BOXES,
    MAX_CLASS_NAME_CHARS,
    MAX_POLYGON_COORDINATES,
)
from ...names import ALLOWED, name_problem, resolve_inside
from ...preview import preview
from .base import SourceKind, SourceOptions, choose_fields, field_list, stored_options
from .cocokeypoints import keypoint_category, keypoint_fields, keypoint_values
from .detection import area_problem, box_problem, finite_float, to_xyxy
from .imagefolder import read_source_file
from .rle import rle_problem

INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class CocoOptions(SourceOptions):
    """Options of the coco source (``-s KEY=VALUE``)."""

    annotations: str = ""  # the COCO instances JSON file (required)
    max_annotation_bytes: int = MAX_ANNOTATION_FILE_BYTES  # a larger file is refused unread
    max_annotation_memory: int = MAX_ANNOTATION_MEMORY  # Python objects parsing it may build, at most
    fields: str | None = None  # the fields kept, comma-separated; None: all

    def __post_init__(self) -> None:
        if not self.annotations:
            raise UsageError("The coco source needs its annotation file: -s annotations=instances_train2017.json.")
        if self.max_annotation_bytes <= 0 or self.max_annotation_memory <= 0:
            raise UsageError("max_annotation_bytes and max_annotation_memory must be positive.")
        field_list(self.fields)


class CocoImage(NamedTuple):
    """One image to convert (or an annotation that names no image): its entry and annotations;
    ``error`` holds why it cannot be converted (None if it can)."""

    key: str
    path: str
    label: int
    image_id: int
    size: tuple[int, int] | None  # (height, width) when the entry gives both
    annotations: tuple[dict, ...]
    error: str | None = None


class CocoState(NamedTuple):
    """What a worker needs: category id -> label, and the fields kept."""

    root: str
    labels: dict[int, int]
    fields: tuple[str, ...]
    keypoints: int = 0  # the points of each person (COCO's keypoints names), 0 without keypoints


def read_annotations(path: str, options: CocoOptions) -> dict:
    """The annotation file's JSON object, read only if it is a regular file within the bounds."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise SourceNotFoundError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{path}: not a regular file; the annotations are a JSON file.")
        if st.st_size > options.max_annotation_bytes:
            raise SourceError(
                f"{path}: {st.st_size} bytes, more than max_annotation_bytes={options.max_annotation_bytes} "
                f"(raise it with -s max_annotation_bytes=N)."
            )
        os.set_blocking(fd, True)
        data = f.read(st.st_size)
    doc = parse_json(
        data,
        path,
        options.max_annotation_bytes,
        max_items=None,
        max_depth=MAX_ANNOTATION_DEPTH,
        max_memory=options.max_annotation_memory,
        error=SourceError,
    )
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise SourceError(f"{path}: not a COCO annotation file (a JSON object with an 'images' list).")
    for name in ("annotations", "categories"):
        if not isinstance(doc.get(name, []), list):
            raise SourceError(f"{path}: {name!r} is not a list.")
    return doc


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and INT64[0] <= v <= INT64[1]


def categories(doc: dict, path: str) -> tuple[list[str], dict[int, int]]:
    """(names in ascending id order, category id -> dense label) of the file's categories."""
    cats = doc.get("categories", [])
    if len(cats) > MAX_BOX_CLASSES:
        raise SourceError(f"{path}: {len(cats)} categories, more than the {MAX_BOX_CLASSES} a boxes field may have.")
    by_id: dict[int, str] = {}
    for k, cat in enumerate(cats):
        if not isinstance(cat, dict) or not _is_int(cat.get("id")) or not isinstance(cat.get("name"), str):
            raise SourceError(f"{path}: categories[{k}] is not an object with an integer id and a string name.")
        if cat["id"] in by_id:
            raise SourceError(f"{path}: category id {cat['id']} is given twice.")
        if len(cat["name"]) > MAX_CLASS_NAME_CHARS:
            raise SourceError(f"{path}: category {cat['id']}: a name over {MAX_CLASS_NAME_CHARS} characters.")
        by_id[cat["id"]] = cat["name"]
    ids = sorted(by_id)
    return [by_id[i] for i in ids], {i: k for k, i in enumerate(ids)}


def _ann_name(ann: Any, k: int) -> str:
    """How an annotation is named in errors: by its id, else by its position."""
    if isinstance(ann, dict) and "id" in ann:
        return f"annotation {preview(ann['id'], 40)}"
    return f"annotations[{k}]"


class CocoSource:
    """The images of a COCO annotation file under IMAGES_DIR; a task is a :class:`CocoImage`."""

    def __init__(self, root: str, options: CocoOptions):
        from ...storage import is_url

        self.options = options
        if not is_url(root) and not os.path.exists(root):
            raise SourceNotFoundError(f"Source {root!r} does not exist; give the folder of the COCO images.")
        if is_url(root) or not os.path.isdir(root):
            raise SourceError(f"{root!r}: not a local folder; the coco source reads IMAGES_DIR from a local path.")
        self.root = os.path.abspath(root)
        path = os.path.abspath(os.path.expanduser(options.annotations))
        doc = read_annotations(path, options)
        names, self._labels = categories(doc, path)
        keypoints = keypoint_category(doc, path)
        self._keypoints = len(keypoints[0]) if keypoints else 0
        self.classes: list[str] = []  # no class: the categories are the boxes' classes
        self.class_to_idx: dict[str, int] = {}
        self.schema = choose_fields(
            [
                FieldSpec("boxes", "boxes", box_format="XYXY", classes=tuple(names)),
                FieldSpec("iscrowd", "array", dtype="|u1", per_box="boxes"),
                FieldSpec("area", "array", dtype="<f4", per_box="boxes", pixels=True),
                FieldSpec("segmentation", "segmentation", per_box="boxes", pixels=True, params=(("area", "area"),)),
                FieldSpec("image_id", "int"),
                *(keypoint_fields(*keypoints) if keypoints else ()),
            ],
            field_list(options.fields),
            self.root,
        )
        self._tasks = self._scan(doc, path)
        if not self._tasks:
            raise SourceError(f"{path}: no images in its 'images' list.")

    def _scan(self, doc: dict, path: str) -> list[CocoImage]:
        """Every image (sorted by id), then every annotation that names no image."""
        base = os.path.basename(path)
        images: list[dict] = []
        bad: list[CocoImage] = []
        for k, entry in enumerate(doc["images"]):
            problem = None
            if not isinstance(entry, dict) or not _is_int(entry.get("id")):
                problem = "no integer id"
            elif not isinstance(entry.get("file_name"), str):
                problem = "no string file_name"
            if problem:
                bad.append(CocoImage(f"{base}#images[{k}]", path, -1, 0, None, (), f"images[{k}]: {problem}"))
            else:
                images.append(entry)
        images.sort(key=lambda e: e["id"])
        ids = Counter(e["id"] for e in images)
        by_id = {e["id"]: e for e in images}
        anns: dict[int, list[dict]] = {i: [] for i in by_id}
        problems: dict[int, str] = {}
        for k, ann in enumerate(doc.get("annotations", [])):
            image_id = ann.get("image_id") if isinstance(ann, dict) else None
            if not _is_int(image_id) or image_id not in by_id:
                why = f"{_ann_name(ann, k)}: image_id {preview(image_id, 40)} names no image of the file"
                bad.append(CocoImage(f"{base}#annotations[{k}]", path, -1, 0, None, (), why))
                continue
            category = ann.get("category_id")
            if not _is_int(category) or category not in self._labels:
                problems.setdefault(
                    image_id, f"{_ann_name(ann, k)}: category_id {preview(category, 40)} names no category"
                )
            elif len(anns[image_id]) >= MAX_BOXES:
                problems.setdefault(image_id, f"more than the {MAX_BOXES} annotations an image may have")
            else:
                anns[image_id].append(ann)
        seen: set[str] = set()
        return [self._task(e, ids, anns, problems, seen) for e in images] + bad

    def _task(self, entry: dict, ids: Counter, anns: dict, problems: dict, seen: set[str]) -> CocoImage:
        image_id, name = entry["id"], entry["file_name"]
        unsafe = name_problem(name)
        if ids[image_id] > 1:
            error = f"image id {image_id} is given to {ids[image_id]} images; its annotations cannot be placed"
        elif unsafe:
            error = f"unsafe path {preview(name, 200)}: {unsafe}; a file_name must be {ALLOWED}"
        elif name in seen:
            error = "its file_name is used by an earlier image"
        else:
            error = problems.get(image_id)
        seen.add(name)
        h, w = entry.get("height"), entry.get("width")
        size = (h, w) if _is_int(h) and _is_int(w) else None
        path = self.root if unsafe else os.path.join(self.root, name)
        return CocoImage(name, path, -1, image_id, size, tuple(anns[image_id]), error)

    def options_dict(self) -> dict[str, Any]:
        """The options as stored in the metadata."""
        return stored_options(self.options)

    def tasks(self) -> Sequence[CocoImage]:
        return self._tasks

    def worker_state(self) -> CocoState:
        return CocoState(self.root, self._labels, tuple(f.name for f in self.schema.stored), self._keypoints)

    @staticmethod
    def load(state: CocoState, task: CocoImage) -> tuple[str, str, int, bytes, dict[str, Any]]:
        """(key, path, -1, image bytes, values by field) of one image."""
        if task.error is not None:
            raise RecordError(task.error)
        full = resolve_inside(state.root, task.key)
        if full is None:
            raise RecordError(f"unsafe path {preview(task.key, 200)}: a link on the way leads out of IMAGES_DIR")
        values = annotation_values(task, state.labels)
        if state.keypoints:
            values.update(keypoint_values(task.annotations, state.keypoints, _ann_name))
        data = read_source_file(full)
        check_rle_sizes(task, data)
        return task.key, task.path, -1, data, {n: values[n] for n in state.fields}


def annotation_values(task: CocoImage, labels: dict[int, int]) -> dict[str, Any]:
    """Every field's value of one image from its annotations, each checked (a RecordError names
    the annotation)."""
    n = len(task.annotations)
    boxes, area = [], np.zeros(n, np.float32)
    iscrowd, segmentation = np.zeros(n, np.uint8), []
    for k, ann in enumerate(task.annotations):
        where = _ann_name(ann, k)
        problem = box_problem(ann.get("bbox"), "xywh")
        if problem:
            raise RecordError(f"{where}: {problem}")
        boxes.append(ann["bbox"])
        crowd = ann.get("iscrowd", 0)
        if isinstance(crowd, bool | float) or crowd not in (0, 1):
            raise RecordError(f"{where}: iscrowd {preview(crowd, 20)} is not 0 or 1")
        iscrowd[k] = crowd
        value = ann.get("area", float(ann["bbox"][2]) * float(ann["bbox"][3]))
        problem = area_problem(value)
        if problem:
            raise RecordError(f"{where}: {problem}")
        area[k] = float(value)
        problem = segmentation_problem(ann.get("segmentation"), task.size)
        if problem:
            raise RecordError(f"{where}: segmentation {problem}")
        segmentation.append(ann.get("segmentation"))
    return {
        "boxes": {
            "boxes": to_xyxy(boxes, "xywh"),
            "labels": np.array([labels[a["category_id"]] for a in task.annotations], np.int64),
        },
        "iscrowd": iscrowd,
        "area": area,
        "segmentation": segmentation,
        "image_id": task.image_id,
    }


def check_rle_sizes(task: CocoImage, data: bytes) -> None:
    """Raise a RecordError naming the first annotation whose RLE's size is not the (height,
    width) of the image ``data`` (read from its header; pycocotools would allocate the RLE's)."""
    from ...decode.headers import image_size

    rles = [(k, a) for k, a in enumerate(task.annotations) if isinstance(a.get("segmentation"), dict)]
    size = image_size(data, task.key) if rles else None
    for k, ann in rles:
        shape = ann["segmentation"]["size"]
        if tuple(shape) != size:
            raise RecordError(
                f"{_ann_name(ann, k)}: segmentation RLE size {shape} is not the image's [height, width] {list(size or ())}"
            )


def segmentation_problem(seg: Any, size: tuple[int, int] | None) -> str | None:
    """Why a COCO segmentation is not polygons of finite numbers or an RLE mask (of ``size``, the
    image entry's (height, width), when given), or None."""
    if seg is None:
        return None
    if isinstance(seg, list):
        total = 0
        for poly in seg:
            if not isinstance(poly, list):
                return "is not a list of polygons"
            total += len(poly)
            if total > MAX_POLYGON_COORDINATES:
                return f"has more than the {MAX_POLYGON_COORDINATES} polygon coordinates read"
            if len(poly) % 2 or not all(type(v) in (int, float) and finite_float(v) is not None for v in poly):
                return "has a polygon that is not pairs of finite numbers"  # no bools, nothing past a float
        return None
    if not isinstance(seg, dict):
        return "is neither polygons nor an RLE {size, counts}"
    return rle_problem(seg, size)


SOURCE = SourceKind(
    "coco",
    "a folder of images and a COCO instances annotation file (-s annotations=FILE)",
    lambda src, config, options: CocoSource(src, options),
    CocoOptions,
    src_help="the images folder the file_names of the annotation file are under",
)
