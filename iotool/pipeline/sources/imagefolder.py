"""The ``imagefolder`` source: a tree of one folder per class, as torchvision reads it.

The ImageFolder scan follows ``torchvision.datasets.ImageFolder`` exactly. Classes are the sorted names of the root's sub-folders (symlinked folders included),
samples come from a sorted recursive walk of each class folder that follows symlinked
folders, and files are kept by a case-insensitive extension check. torchvision is not
imported; the rules are reimplemented and tested against hand-built trees.

The extensions are torchvision's (:data:`IMG_EXTENSIONS`) unless the ``extensions`` option adds
more (``--extensions .avif,.jxl``); the files of the class folders left out by their extension
are counted by extension (``.jpe``, ``.jfif``, ...) in the scan and the conversion's summary.

Hugging Face's metadata (a local root only): a ``metadata.jsonl`` or ``metadata.csv`` at the root
with a ``file_name`` column adds its other columns as fields (:mod:`.hfmetadata`). The class stays
the folder class; when the root has no class folders, its own images are the samples and there
is no class. An image without a row is a bad record naming it; a row naming a file that is not
one of the images is refused at open. Option ``fields`` (comma-separated; ``class`` for the
class) keeps only those.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from ...errors import RecordError, SourceError, SourceNotFoundError, UsageError
from ...fields import FieldSpec
from ...storage import StorageConfig
from .base import SourceKind, SourceOptions, choose_fields, field_list

MAX_SOURCE_FILE_BYTES = 1 << 30  # no source image is this large: a bigger file is refused unread

IMG_EXTENSIONS: tuple[str, ...] = (
    ".jpg",
    ".jpeg",
    ".png",
    ".ppm",
    ".bmp",
    ".pgm",
    ".tif",
    ".tiff",
    ".webp",
)


@dataclass(frozen=True)
class SourceSample:
    """One image of the source: absolute path, key (relative POSIX path) and label."""

    path: str
    key: str
    label: int


@dataclass
class SourceScan:
    """The result of scanning an ImageFolder root."""

    root: str
    classes: list[str]
    class_to_idx: dict[str, int]
    samples: list[SourceSample] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)  # files of the class folders not kept, by extension

    def __len__(self) -> int:
        return len(self.samples)


def has_image_extension(name: str, extensions: tuple[str, ...] = IMG_EXTENSIONS) -> bool:
    """True when ``name`` ends with one of ``extensions`` (torchvision's by default), ignoring case."""
    return name.lower().endswith(extensions)


def image_extensions(extra: str | Sequence[str] = ()) -> tuple[str, ...]:
    """:data:`IMG_EXTENSIONS` and the ``extra`` suffixes (``".avif,.jxl"`` or a list), lower case.

    Raises:
        UsageError: a suffix that is empty or holds a path separator.
    """
    items = extra.split(",") if isinstance(extra, str) else [p for item in extra for p in str(item).split(",")]
    added = []
    for item in (i.strip().lower() for i in items if i.strip()):
        suffix = item if item.startswith(".") else f".{item}"
        if len(suffix) < 2 or "/" in suffix or "\\" in suffix or "\0" in suffix:
            raise UsageError(f"--extensions {item!r}: give file suffixes, e.g. --extensions .avif,.jxl.")
        if suffix not in IMG_EXTENSIONS and suffix not in added:
            added.append(suffix)
    return (*IMG_EXTENSIONS, *added)


def _suffix(name: str) -> str:
    """How a left-out file is counted: its lower-case extension, or "(none)"."""
    ext = os.path.splitext(name)[1].lower()
    return ext or "(none)"


def find_classes(root: str | os.PathLike) -> tuple[list[str], dict[str, int]]:
    """Return the sorted class folder names under ``root`` and their indices."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise SourceNotFoundError(f"Source root {root!r} does not exist or is not a directory.")
    with os.scandir(root) as it:
        classes = sorted(entry.name for entry in it if entry.is_dir())
    if not classes:
        raise SourceError(
            f"Found no class folders in {root!r}. An ImageFolder root holds one sub-folder per "
            f"class, e.g. {root}/cat/001.jpg; accepted extensions: {', '.join(IMG_EXTENSIONS)}."
        )
    return classes, {name: i for i, name in enumerate(classes)}


def _walk(top: str) -> list[tuple[str, list[str]]]:
    """List (dirpath, filenames) under ``top``, following symlinked folders, without looping.

    A folder whose (device, inode) is already on the path from ``top`` is a symlink loop and is
    not entered again; torchvision would repeat it until the OS refuses the path.
    """
    found: list[tuple[str, list[str]]] = []

    def visit(path: str, ancestors: frozenset) -> None:
        try:
            st = os.stat(path)
            entries = list(os.scandir(path))
        except OSError:
            return  # os.walk ignores unreadable folders the same way
        ident = (st.st_dev, st.st_ino)
        if ident in ancestors:
            return
        ancestors = ancestors | {ident}
        files, dirs = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        found.append((path, files))
        for name in dirs:
            visit(os.path.join(path, name), ancestors)

    visit(top, frozenset())
    return found


def scan_imagefolder(
    root: str | os.PathLike, storage: StorageConfig | None = None, extensions: tuple[str, ...] = IMG_EXTENSIONS
) -> SourceScan:
    """Scan ``root`` and return classes, class_to_idx and samples in torchvision's order.

    Files are kept by ``extensions`` (torchvision's; :func:`image_extensions` adds more), and
    those left out are counted by extension in :attr:`SourceScan.left_out`.

    ``root`` may also be an fsspec URL that can be listed (``s3://``, ``gs://``): class folders
    are the prefixes directly under it, and files are ordered as a sorted walk would order them.
    Sample paths are then URLs.

    Raises:
        SourceError: the root is missing, has no class folders, or holds no image files.
    """
    from ...storage import is_url, normalize

    if is_url(root) or os.fspath(root).lower().startswith("file://"):
        root = normalize(root)
    if is_url(root):
        return _scan_remote(os.fspath(root), storage, extensions)
    root = os.path.abspath(os.fspath(root))
    classes, class_to_idx = find_classes(root)
    samples: list[SourceSample] = []
    empty: list[str] = []
    left_out: Counter[str] = Counter()
    for cls in classes:
        before = len(samples)
        # sorted() over (dirpath, files) mirrors torchvision's sorted(os.walk(...)).
        for dirpath, fnames in sorted(_walk(os.path.join(root, cls))):
            for fname in sorted(fnames):
                if has_image_extension(fname, extensions):
                    path = os.path.join(dirpath, fname)
                    key = Path(os.path.relpath(path, root)).as_posix()
                    samples.append(SourceSample(path, key, class_to_idx[cls]))
                else:
                    left_out[_suffix(fname)] += 1
        if len(samples) == before:
            empty.append(cls)
    _check_not_empty(root, empty, extensions)
    return SourceScan(
        root=root, classes=classes, class_to_idx=class_to_idx, samples=samples, left_out=dict(sorted(left_out.items()))
    )


def _scan_remote(root: str, storage: StorageConfig | None, extensions: tuple[str, ...]) -> SourceScan:
    """The ImageFolder scan over a listable fsspec URL (object stores have no symlinks)."""
    from ...storage import StorageConfig, StorageError, list_tree

    try:
        classes, files = list_tree(root, storage or StorageConfig())
    except StorageError as exc:
        raise SourceError(f"Source root {root!r} cannot be listed: {exc}") from None
    if not classes:
        raise SourceError(
            f"Found no class folders in {root!r}. An ImageFolder root holds one sub-folder per "
            f"class, e.g. {root}/cat/001.jpg; accepted extensions: {', '.join(IMG_EXTENSIONS)}."
        )
    class_to_idx = {name: i for i, name in enumerate(classes)}
    by_class: dict[str, list[tuple[str, str]]] = {cls: [] for cls in classes}
    left_out: Counter[str] = Counter()
    for rel in files:
        folder, _, name = rel.rpartition("/")
        cls = rel.split("/", 1)[0]
        if folder and cls in by_class:
            if has_image_extension(name, extensions):
                by_class[cls].append((folder, name))
            else:
                left_out[_suffix(name)] += 1
    samples = [
        SourceSample(f"{root}/{folder}/{name}", f"{folder}/{name}", class_to_idx[cls])
        for cls in classes
        for folder, name in sorted(by_class[cls])
    ]  # = sorted(os.walk) order
    _check_not_empty(root, [cls for cls in classes if not by_class[cls]], extensions)
    return SourceScan(
        root=root, classes=classes, class_to_idx=class_to_idx, samples=samples, left_out=dict(sorted(left_out.items()))
    )


def _check_not_empty(root: str, empty: list[str], extensions: tuple[str, ...] = IMG_EXTENSIONS) -> None:
    """Refuse class folders without images, as torchvision does."""
    if empty:
        raise SourceError(
            f"Found no valid image files in {len(empty)} class folder(s) of {root!r}: "
            f"{', '.join(empty[:10])}{' ...' if len(empty) > 10 else ''}. "
            f"Accepted extensions (case-insensitive): {', '.join(extensions)}; add others with --extensions."
        )


# --- conversion sources ------------------------------------------------------------------------


class ImageFolderSource:
    """Samples of an ImageFolder tree; a task is a SourceSample, loading reads the file.

    The root may be a listable fsspec URL (``s3://``, ``gs://``); its files are then read
    through :mod:`iotool.storage` with retries (the worker state is the storage config).
    """

    def __init__(self, root: str, config: StorageConfig | None = None, options: ImageFolderOptions | None = None):
        from ... import storage
        from .hfmetadata import find_metadata

        self.options = options or ImageFolderOptions()
        root = os.fspath(root)
        local = not storage.is_url(root) and not root.lower().startswith("file://")
        metadata = find_metadata(os.path.abspath(root)) if local and os.path.isdir(root) else None
        extensions = image_extensions(self.options.extensions)
        if metadata is not None and not _has_class_folders(os.path.abspath(root)):
            self.scan = _scan_root(os.path.abspath(root), extensions)
        else:
            self.scan = scan_imagefolder(root, config, extensions)
        self.root = self.scan.root
        self.classes = self.scan.classes
        self.class_to_idx = self.scan.class_to_idx
        self.left_out = self.scan.left_out  # reported in the conversion's summary
        self.config = config if storage.is_url(self.root) else None
        self._tasks: Sequence[SourceSample | FieldSample] = self.scan.samples
        if metadata is not None:
            self._with_metadata(metadata)
        elif self.options.fields is not None:
            self.schema = choose_fields([FieldSpec("class", "class")], field_list(self.options.fields), self.root)

    def _with_metadata(self, path: str) -> None:
        """The fields of the metadata file at ``path``, and each image's values from its row."""
        from .hfmetadata import read_metadata

        found, bad, rows = read_metadata(path)
        chosen = field_list(self.options.fields)
        for column, problem in bad.items():
            if chosen is None or column in chosen:
                raise SourceError(
                    f"{path}: column {column!r:.80} cannot be a field ({problem}); choose the fields with -s fields=..."
                )
        specs = ([FieldSpec("class", "class")] if self.classes else []) + found
        self.schema = choose_fields(specs, chosen, self.root)
        keys = {s.key for s in self.scan.samples}
        stray = next((name for name in rows if name not in keys), None)
        if stray is not None:
            exists = os.path.isfile(os.path.join(self.root, stray))
            raise SourceError(
                f"{path}: the row of {stray[:200]!r} names "
                f"{'a file that is not one of the images read' if exists else 'a file that does not exist'}."
            )
        if not self.schema.has_class:
            self.classes, self.class_to_idx = [], {}
        names = [f.name for f in self.schema.stored]
        tasks = []
        for s in self.scan.samples:
            label = s.label if self.schema.has_class else -1
            row = rows.get(s.key)
            missing = None if row is None else next((n for n in names if row.get(n) is None), None)
            if row is None:
                error = f"no row in {os.path.basename(path)} (every image needs one)"
            elif missing is not None:
                error = f"its row in {os.path.basename(path)} has no value for {missing!r}"
            else:
                error = None
            values = tuple((n, row[n]) for n in names) if row is not None and error is None else ()
            tasks.append(FieldSample(s.path, s.key, label, values, error))
        self._tasks = tasks

    def options_dict(self) -> dict[str, Any]:
        """The source's own options as stored in the metadata: none unless extensions were added
        (so that a plain ImageFolder conversion's metadata and resume fingerprint stay as they were)."""
        added = image_extensions(self.options.extensions)[len(IMG_EXTENSIONS) :]
        out = {"extensions": ",".join(added)} if added else {}
        return {**out, "fields": self.options.fields} if self.options.fields is not None else out

    def tasks(self) -> Sequence[SourceSample | FieldSample]:
        return self._tasks

    def worker_state(self) -> StorageConfig | None:
        return self.config

    @staticmethod
    def load(state: StorageConfig | None, task: SourceSample | FieldSample) -> Any:
        """(key, path, label, bytes[, values by field]) of one source file."""
        if isinstance(task, FieldSample):
            if task.error is not None:
                raise RecordError(f"{task.path}: {task.error}")
            return task.key, task.path, task.label, read_source_file(task.path), dict(task.values)
        if state is not None:
            from ... import storage

            return (
                task.key,
                task.path,
                task.label,
                storage.read_bytes(task.path, state, MAX_SOURCE_FILE_BYTES, "a source image may have"),
            )
        return task.key, task.path, task.label, read_source_file(task.path)


def _has_class_folders(root: str) -> bool:
    with os.scandir(root) as it:
        return any(entry.is_dir() for entry in it)


def _scan_root(root: str, extensions: tuple[str, ...]) -> SourceScan:
    """The images directly under ``root`` (no class folders: Hugging Face metadata without labels)."""
    samples, left_out = [], Counter()
    for name in sorted(os.listdir(root)):
        if name in ("metadata.jsonl", "metadata.csv") or not os.path.isfile(os.path.join(root, name)):
            continue
        if has_image_extension(name, extensions):
            samples.append(SourceSample(os.path.join(root, name), name, -1))
        else:
            left_out[_suffix(name)] += 1
    if not samples:
        raise SourceError(f"Found no images at the root of {root!r} (a metadata file and no class folders).")
    return SourceScan(root=root, classes=[], class_to_idx={}, samples=samples, left_out=dict(sorted(left_out.items())))


def read_source_file(path: str) -> bytes:
    """A source image's bytes, read only if it is a regular file of at most
    :data:`MAX_SOURCE_FILE_BYTES` (a FIFO named ``x.jpg`` would block the read, a device would
    never end): anything else is a bad file, named with the reason."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{path}: not a regular file (a FIFO, socket or device); only files are read.")
        if st.st_size > MAX_SOURCE_FILE_BYTES:
            raise RecordError(
                f"{path}: {st.st_size} bytes, more than any image iotool reads ({MAX_SOURCE_FILE_BYTES} at most)."
            )
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(st.st_size)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ImageFolderOptions(SourceOptions):
    """Options of the ImageFolder source: ``extensions`` adds file suffixes to torchvision's
    (``.avif,.jxl``; the CLI's ``--extensions``)."""

    extensions: str = ""
    fields: str | None = None  # with a metadata file: the fields kept, comma-separated (class for the class)

    def __post_init__(self) -> None:
        image_extensions(self.extensions)  # refuses a bad suffix by name
        field_list(self.fields)


class FieldSample(NamedTuple):
    """An image of a folder with Hugging Face metadata: its values by field (from its row), or
    why it has none."""

    path: str
    key: str
    label: int
    values: tuple[tuple[str, Any], ...]
    error: str | None = None


SOURCE = SourceKind(
    "imagefolder",
    "a folder per class, as torchvision's ImageFolder reads it",
    lambda src, config, options: ImageFolderSource(src, config, options),
    ImageFolderOptions,
    src_help="an ImageFolder root (a path or a listable URL: s3://, gs://)",
)
