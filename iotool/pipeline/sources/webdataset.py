"""The ``webdataset`` source: WebDataset tar shards iotool did not write (no iotool index).

``iotool convert webdataset FORMAT 'shards-{000000..000099}.tar' DST``: SRC is split on ``::``,
brace patterns are expanded as webdataset (its ``braceexpand``) expands them (``{a,b}``,
``{000..099}`` zero-padded, ``{a..e}``, ``{0..10..2}``), and each result is a path or a glob.

Samples are grouped as webdataset groups them: the key of a member is its path up to the first
dot of its base name (``train.v2/n01/img.seg.png`` has key ``train.v2/n01/img`` and extension
``seg.png``, lower-cased), and consecutive members with the same key in one shard are one
sample. Members without a dot, and ``__...__`` metadata, are skipped as webdataset skips them;
directories too. The image is the sample's first member whose extension ends in an image
extension (torchvision's, as for ImageFolder); the label is the ``label_ext`` member (``cls`` by
default; ``txt``, or ``json`` with ``label_field``), an integer or, with ``class_list`` (one class
name per line; line k is class k), a class name. Classes: ``class_list``, else ``"0" .. max``.

Fields: every other member of a sample is kept under its extension, as webdataset returns it
(``txt`` -> text, ``json`` -> json, ``cls``/``id`` -> int, ``npy`` -> array, anything else
(``seg.png``) -> bytes; :func:`iotool.fields.kind_for_extension`); the ``label_ext`` member is
the class. A dataset whose samples have no ``.cls`` (captions) has no class. Option ``fields``
(comma-separated names; ``class`` for the class) keeps only those: ``fields=class`` gives image +
class, ``fields=txt,cls`` keeps the ``.cls`` member as an int field instead of a class. A member
only some samples have is a bad record naming the sample and the member (unless left out with
``fields``); a pickle member (``.pyd``, ``.pth`` ...) is a bad record, or refused at open when
chosen. A label member with as many distinct values as samples (more than
:data:`~iotool.fields.MAX_UNIQUE_CLASS_VALUES`) is refused as a class: keep it as a field.
Field members are bounded by their kind's :data:`~iotool.fields.MAX_ENCODED_BYTES` at the scan
and read by the workers.

Where iotool differs: a link, device or FIFO member is refused by name (webdataset skips it);
a key met twice (two samples, or a member repeated in a sample) is a bad record, not an
exception that ends the epoch. Headers are parsed with bounded reads
(:mod:`iotool.formats.tar.members`); a label member over :data:`MAX_LABEL_BYTES` and an image over
:data:`~.imagefolder.MAX_SOURCE_FILE_BYTES` are refused before they are read. A damaged or
truncated shard is a bad record naming the shard, the byte and the sample it cut off; the
samples before it convert as usual (``--on-error skip``).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import IO, Any, NamedTuple, Sequence

from ...errors import FormatError, RecordError, SourceError, SourceNotFoundError, UsageError
from ...fields import (
    MAX_ENCODED_BYTES,
    FieldSpec,
    Schema,
    kind_for_extension,
    name_problem,
    parse_json,
    pickle_problem,
)
from ...fields.kinds import field_kind
from ...formats.tar.members import Member, TarDamage, members
from .base import (
    SourceKind,
    SourceOptions,
    choose_fields,
    common_folder,
    field_list,
    read_label_file,
    refuse_unique_class,
    stored_options,
    too_large,
    value_classes,
)
from .imagefolder import IMG_EXTENSIONS, MAX_SOURCE_FILE_BYTES

MAX_LABEL_BYTES = 1 << 20
MAX_SHARDS = 1_000_000  # a brace pattern expanding to more is refused before it is expanded
# torchvision's, and the codecs iotool decodes besides (AVIF; JPEG XL with the jxl extra): a
# shard's member is an image by its extension, and no ImageFolder order depends on this list
IMAGE_EXTS = frozenset({*(e.lstrip(".") for e in IMG_EXTENSIONS), "avif", "jxl"})
_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")


@dataclass(frozen=True)
class WebDatasetOptions(SourceOptions):
    """Options of the webdataset source (``--src-option KEY=VALUE``)."""

    label_ext: str = "cls"  # the member holding the label: cls, txt, json ...
    label_field: str | None = None  # a field of a json label member
    class_list: str | None = None  # class names, one per line: labels may be names, looked up here
    fields: str | None = None  # the fields kept, comma-separated (class for the class); None: all

    def __post_init__(self) -> None:
        if not self.label_ext or "/" in self.label_ext:
            raise UsageError(f"label_ext={self.label_ext!r}: give a member extension, e.g. cls, txt or json.")
        field_list(self.fields)


class WdsSample(NamedTuple):
    """One sample to convert: its image member's bytes in the shard and its label; ``error``
    holds why it cannot be converted (None if it can)."""

    key: str
    path: str
    offset: int
    size: int
    label: int
    error: str | None = None
    fields: tuple[tuple[str, int, int], ...] = ()  # (field name, offset, size) of each field member


def split_key(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member name as webdataset splits it, or None (no dot in the base name)."""
    found = _KEY.match(name)
    return (found.group(1), found.group(2)) if found else None


def _range(body: str) -> list[str] | None:
    """The items of a ``{a..b}`` / ``{a..b..step}`` body, or None when it is not a range."""
    number = re.fullmatch(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?", body)
    letter = re.fullmatch(r"([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?", body)
    found = number or letter
    if not found:
        return None
    first, last, step = found.groups()
    step = abs(int(step)) if step and int(step) else 1
    if letter:
        a, b = ord(first), ord(last)
        return [chr(c) for c in (range(a, b + 1, step) if a <= b else range(a, b - 1, -step))]
    a, b = int(first), int(last)
    count = abs(b - a) // step + 1
    if count > MAX_SHARDS:
        raise SourceError(f"{{{body}}}: {count} names, more than the {MAX_SHARDS} a pattern may expand to.")
    width = (
        max(len(first), len(last))
        if any(len(s.lstrip("-")) > 1 and s.lstrip("-")[0] == "0" for s in (first, last))
        else 0
    )
    return [f"{n:0{width}d}" for n in (range(a, b + 1, step) if a <= b else range(a, b - 1, -step))]


def _closing(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def _alternatives(body: str) -> list[str] | None:
    """The top-level comma-separated items of a brace body, or None when it has no comma."""
    items, depth, last = [], 0, 0
    for i, c in enumerate(body):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if c == "," and depth == 0:
            items.append(body[last:i])
            last = i + 1
    return items + [body[last:]] if items else None


def expand_braces(pattern: str) -> list[str]:
    """``pattern`` with its brace expressions expanded, in webdataset's order."""
    search = 0
    while (start := pattern.find("{", search)) >= 0:
        end = _closing(pattern, start)
        if end < 0:
            break
        body = pattern[start + 1 : end]
        items = _alternatives(body)
        items = items if items is not None else _range(body)
        if items is None:  # a literal brace: look further on
            search = start + 1
            continue
        head, tails = pattern[:start], expand_braces(pattern[end + 1 :])
        out = [head + item + tail for raw in items for item in expand_braces(raw) for tail in tails]
        if len(out) > MAX_SHARDS:
            raise SourceError(f"{pattern}: more than the {MAX_SHARDS} names a pattern may expand to.")
        return out
    return [pattern]


def shard_files(src: str) -> list[str]:
    """The shards of SRC: ``::``-separated patterns, braces expanded, then each a path or a glob."""
    from ...storage import is_url

    files, missing = [], []
    for part in filter(None, src.split("::")):
        if is_url(part):
            raise UsageError(f"{part}: the webdataset source reads local shards; copy them first.")
        for name in expand_braces(os.path.expanduser(part)):
            if glob.has_magic(name):
                files += sorted(p for p in glob.glob(name, recursive=True) if os.path.isfile(p))
            elif os.path.isfile(name):
                files.append(name)
            else:
                missing.append(name)
    if missing:
        raise SourceNotFoundError(
            f"{len(missing)} shard(s) of {src!r} do not exist: {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}."
        )
    if not files:
        raise SourceNotFoundError(
            f"No shards match {src!r}; give tar files as a brace pattern or a glob, e.g. "
            f"'shards-{{000000..000099}}.tar' (quoted, so the shell does not expand it)."
        )
    return [os.path.abspath(p) for p in files]


class _Sample:
    """A sample being grouped while a shard is scanned."""

    def __init__(self, key: str):
        self.key = key
        self.exts: list[str] = []
        self.members: dict[str, tuple[int, int]] = {}  # ext -> (offset, size)
        self.label_raw: bytes | None = None
        self.error: str | None = None

    @property
    def image_ext(self) -> str | None:
        """The image member: the first whose extension is an image extension (``jpg``), else the
        first whose last part is one (``left.png``)."""
        for ext in self.exts:
            if ext in IMAGE_EXTS:
                return ext
        return next((e for e in self.exts if e.rsplit(".", 1)[-1] in IMAGE_EXTS), None)


class WebDatasetSource:
    """Samples of WebDataset shards; a task is a :class:`WdsSample`."""

    def __init__(self, src: str, options: WebDatasetOptions | None = None):
        self.options = options or WebDatasetOptions()
        self.root = src
        self.files = shard_files(src)
        self.names = read_label_file(self.options.class_list, "class_list") if self.options.class_list else None
        self._lookup = {name: i for i, name in enumerate(self.names or [])}
        common = common_folder(self.files)
        grouped = [(path, s) for path in self.files for s in self._scan(path, os.path.relpath(path, common))]
        self.schema = self._schema([s for _, s in grouped])
        with_class = self.schema.has_class
        if with_class:
            self._refuse_unique([s for _, s in grouped])
        self._tasks, seen, labels = [], set(), []
        for path, s in grouped:
            label, error = (-1, s.error) if s.error else self._label(s) if with_class else self._image_only(s)
            error = error or self._field_problem(s)
            if error is None and s.key in seen:
                label, error = -1, "the key is used by an earlier sample"
            seen.add(s.key)
            labels.append(label)
            image = s.members.get(s.image_ext or "", (0, 0))
            members = tuple((f.name, *s.members[f.name]) for f in self.schema.stored) if error is None else ()
            self._tasks.append(
                WdsSample(
                    s.key,
                    path,
                    *image,
                    label if error is None else -1,
                    None if error is None else f"sample {s.key!r}: {error}",
                    members,
                )
            )
        self.classes = (self.names if self.names is not None else value_classes(labels)) if with_class else []
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        if not self._tasks:
            raise SourceError(f"{src}: no samples in {len(self.files)} shard(s).")

    def options_dict(self) -> dict[str, Any]:
        """The options as stored in the metadata."""
        return stored_options(self.options)

    def _schema(self, samples: list[_Sample]) -> Schema:
        """The class (the label member, when samples have one or it was asked for) and a field per
        other member extension, in the order first met; ``fields`` chooses."""
        label_ext, chosen = self.options.label_ext, field_list(self.options.fields)
        found: list[FieldSpec] = []
        if label_ext != "cls" or any(label_ext in s.members for s in samples):
            found.append(FieldSpec("class", "class"))
        seen: set[str] = set()
        for s in samples:
            image = s.image_ext
            for ext in s.exts:
                if ext == image or ext in seen:
                    continue
                seen.add(ext)
                if chosen is None and (ext == label_ext or pickle_problem(ext)):
                    continue  # the class; a pickle member makes its sample a bad record
                problem = name_problem(ext) or (pickle_problem(ext) if chosen and ext in chosen else None)
                if problem and (chosen is None or ext in chosen):
                    raise SourceError(
                        f"{self.root}: member extension {ext!r:.80} cannot be kept as a field ({problem}); "
                        f"choose the fields with -s fields=NAME,... (class for the class)."
                    )
                if not problem:
                    kind = kind_for_extension(ext)
                    keeps_ext = "ext" in field_kind(kind).taken_attributes()  # bytes: the payload's extension
                    found.append(FieldSpec(ext, kind, ext=ext.rsplit(".", 1)[-1] if keeps_ext else None))
        return choose_fields(found, chosen, self.root)

    def _refuse_unique(self, samples: list[_Sample]) -> None:
        """Refuse a label member that holds a different value in every sample (a caption, an id)."""
        values = [self._label_value(s)[0] if s.label_raw is not None else None for s in samples]
        others = [f.name for f in self.schema.stored]
        refuse_unique_class(
            [v if isinstance(v, str | int) else None for v in values],
            f"{self.root}: the .{self.options.label_ext} label members",
            f"keep them as a field: -s fields={','.join([*others, self.options.label_ext])}",
        )

    def _image_only(self, s: _Sample) -> tuple[int, str | None]:
        """(-1, None) for a sample of a dataset without a class, or (-1, why it has no image)."""
        if s.image_ext is None:
            return -1, f"no image member (members: {', '.join(s.exts) or 'none'})"
        return -1, None

    def _field_problem(self, s: _Sample) -> str | None:
        """Why a sample's field members cannot be kept (a missing, pickled or oversized one), or None."""
        if self.options.fields is None:
            pickled = next((e for e in s.exts if e != s.image_ext and pickle_problem(e)), None)
            if pickled is not None:
                return f"the {pickled[:80]!r} member: {pickle_problem(pickled[:80])}"
        for f in self.schema.stored:
            if f.name not in s.members:
                return (
                    f"no .{f.name} member (other samples have one; every sample needs each field, "
                    f"or leave it out with -s fields=...)"
                )
            size, bound = s.members[f.name][1], MAX_ENCODED_BYTES[f.kind]
            if size > bound:
                return f"member .{f.name}: {size} bytes, more than the {bound} a {f.kind} field may have"
        return None

    def _scan(self, path: str, rel: str) -> list[_Sample]:
        """The samples of one shard, grouped by key; damage ends the shard as a bad sample."""
        samples: list[_Sample] = []
        try:
            f = open(path, "rb")
        except OSError as exc:
            raise SourceError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
        with f:
            size = os.fstat(f.fileno()).st_size
            try:
                for m in members(f, size):
                    self._add(f, m, samples)
            except TarDamage as exc:
                last = samples[-1] if samples else None
                prev = samples[-2] if len(samples) > 1 else None
                incomplete = (
                    last is not None
                    and not last.error
                    and (
                        last.image_ext is None
                        or (set(prev.exts) - set(last.exts) if prev is not None else last.label_raw is None)
                    )
                )
                cut = last if incomplete else None
                if cut is None:
                    cut = _Sample(f"{rel.replace(os.sep, '/')}#{exc.offset}")
                    samples.append(cut)
                cut.error = f"the shard is damaged at {exc}"
        return samples

    def _add(self, f: IO[bytes], m: Member, samples: list[_Sample]) -> None:
        """Put one member into its sample (a new one when its key changes)."""
        if (
            m.kind == "directory"
            or ("/" not in m.name and m.name.startswith("__") and m.name.endswith("__"))
            or _META.match(m.name)
        ):
            return
        split = split_key(m.name)
        if split is None:
            return
        key, ext = split[0], split[1].lower()
        if not samples or samples[-1].key != key:
            samples.append(_Sample(key))
        s = samples[-1]
        if s.error:
            return
        if m.kind != "file":
            s.error = f"member {m.name!r} is a {m.kind}; only regular files are read"
        elif ext in s.exts:
            s.error = f"member {m.name!r} appears twice in the sample"
        elif ext.rsplit(".", 1)[-1] in IMAGE_EXTS and m.size > MAX_SOURCE_FILE_BYTES:
            s.error = f"member {m.name!r}: {m.size} bytes, more than any image iotool reads"
        elif ext == self.options.label_ext:
            if m.size > MAX_LABEL_BYTES:
                s.error = f"label member {m.name!r}: {m.size} bytes, more than the {MAX_LABEL_BYTES} read"
            else:
                f.seek(m.offset)
                s.label_raw = f.read(m.size)
        s.exts.append(ext)
        s.members[ext] = (m.offset, m.size)

    def _label_value(self, s: _Sample) -> tuple[Any, str | None]:
        """(the label member's value: an int or a name, None), or (None, why it holds none)."""
        opts = self.options
        try:
            value: Any = (s.label_raw or b"").decode("utf-8").strip()
            if opts.label_field:
                value = parse_json(value, "label", MAX_LABEL_BYTES)[opts.label_field]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError, RecordError):
            return (
                None,
                f"the .{opts.label_ext} member holds no label{f' field {opts.label_field!r}' if opts.label_field else ''}",
            )
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        return value, None

    def _label(self, s: _Sample) -> tuple[int, str | None]:
        """(class index, None), or (-1, why the sample has no usable label)."""
        opts = self.options
        if s.image_ext is None:
            return -1, f"no image member (members: {', '.join(s.exts) or 'none'})"
        if s.label_raw is None:
            return -1, f"no .{opts.label_ext} label member (members: {', '.join(s.exts)})"
        value, problem = self._label_value(s)
        if problem is not None:
            return -1, problem
        if isinstance(value, str):
            if self.names is None:
                return -1, f"label {value[:80]!r} is a class name; give the class list with -s class_list=FILE"
            index = self._lookup.get(value, -1)
            return (index, None) if index >= 0 else (-1, f"label {value[:80]!r} is not in the class list")
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or value < 0
            or (self.names is not None and value >= len(self.names))
        ):
            return -1, f"label {value!r} is outside the classes"
        if self.names is None and too_large(value):
            return -1, too_large(value)
        return value, None

    def tasks(self) -> Sequence[WdsSample]:
        return self._tasks

    def worker_state(self) -> None:
        return None

    @staticmethod
    def load(state: None, task: WdsSample) -> tuple[str, str, int, bytes] | tuple[str, str, int, bytes, dict]:
        """(key, path, label, image bytes[, field member bytes by name]) of one sample, each
        member read with its size known (and bounded) beforehand."""
        if task.error is not None:
            raise FormatError(task.error)
        with open(task.path, "rb") as f:
            f.seek(task.offset)
            data = f.read(task.size)
            if len(data) != task.size:  # the shard changed since the scan
                raise FormatError(f"sample {task.key!r}: the shard ends inside its image (byte {task.offset})")
            values = {}
            for name, offset, size in task.fields:
                f.seek(offset)
                values[name] = f.read(size)
                if len(values[name]) != size:
                    raise FormatError(f"sample {task.key!r}: the shard ends inside its .{name} member (byte {offset})")
        return (
            (task.key, task.path, task.label, data, values) if task.fields else (task.key, task.path, task.label, data)
        )


SOURCE = SourceKind(
    "webdataset",
    "WebDataset tar shards without an iotool index (webdataset's key grouping)",
    lambda src, config, options: WebDatasetSource(src, options),
    WebDatasetOptions,
    pattern=True,
    src_help="a quoted brace pattern or glob of tar shards, e.g. 'shards-{000000..000099}.tar'",
)
