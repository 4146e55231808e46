"""The ``imagefolder`` source: a tree of one folder per class, as torchvision reads it.

The ImageFolder scan follows ``torchvision.datasets.ImageFolder`` exactly. Classes are the sorted names of the root's sub-folders (symlinked folders included),
samples come from a sorted recursive walk of each class folder that follows symlinked
folders, and files are kept by a case-insensitive extension check. torchvision is not
imported; the rules are reimplemented and tested against hand-built trees.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ...errors import RecordError, SourceError
from ...storage import StorageConfig
from .base import SourceKind

MAX_SOURCE_FILE_BYTES = 1 << 30  # no source image is this large: a bigger file is refused unread

IMG_EXTENSIONS: tuple[str, ...] = (
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
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

    def __len__(self) -> int:
        return len(self.samples)


def has_image_extension(name: str) -> bool:
    """True when ``name`` ends with one of :data:`IMG_EXTENSIONS`, ignoring case."""
    return name.lower().endswith(IMG_EXTENSIONS)


def find_classes(root: str | os.PathLike) -> tuple[list[str], dict[str, int]]:
    """Return the sorted class folder names under ``root`` and their indices."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise SourceError(f"Source root {root!r} does not exist or is not a directory.")
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


def scan_imagefolder(root: str | os.PathLike, storage: "StorageConfig | None" = None) -> SourceScan:
    """Scan ``root`` and return classes, class_to_idx and samples in torchvision's order.

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
        return _scan_remote(root, storage)
    root = os.path.abspath(os.fspath(root))
    classes, class_to_idx = find_classes(root)
    samples: list[SourceSample] = []
    empty: list[str] = []
    for cls in classes:
        before = len(samples)
        # sorted() over (dirpath, files) mirrors torchvision's sorted(os.walk(...)).
        for dirpath, fnames in sorted(_walk(os.path.join(root, cls))):
            for fname in sorted(fnames):
                if has_image_extension(fname):
                    path = os.path.join(dirpath, fname)
                    key = Path(os.path.relpath(path, root)).as_posix()
                    samples.append(SourceSample(path, key, class_to_idx[cls]))
        if len(samples) == before:
            empty.append(cls)
    _check_not_empty(root, empty)
    return SourceScan(root=root, classes=classes, class_to_idx=class_to_idx, samples=samples)


def _scan_remote(root: str, storage: "StorageConfig | None") -> SourceScan:
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
    for rel in files:
        folder, _, name = rel.rpartition("/")
        cls = rel.split("/", 1)[0]
        if folder and cls in by_class and has_image_extension(name):
            by_class[cls].append((folder, name))
    samples = [SourceSample(f"{root}/{folder}/{name}", f"{folder}/{name}", class_to_idx[cls])
               for cls in classes for folder, name in sorted(by_class[cls])]  # = sorted(os.walk) order
    _check_not_empty(root, [cls for cls in classes if not by_class[cls]])
    return SourceScan(root=root, classes=classes, class_to_idx=class_to_idx, samples=samples)


def _check_not_empty(root: str, empty: list[str]) -> None:
    """Refuse class folders without images, as torchvision does."""
    if empty:
        raise SourceError(
            f"Found no valid image files in {len(empty)} class folder(s) of {root!r}: "
            f"{', '.join(empty[:10])}{' ...' if len(empty) > 10 else ''}. "
            f"Accepted extensions (case-insensitive): {', '.join(IMG_EXTENSIONS)}."
        )


# --- conversion sources ------------------------------------------------------------------------

class ImageFolderSource:
    """Samples of an ImageFolder tree; a task is a SourceSample, loading reads the file.

    The root may be a listable fsspec URL (``s3://``, ``gs://``); its files are then read
    through :mod:`iotool.storage` with retries (the worker state is the storage config).
    """

    def __init__(self, root: str, config: StorageConfig | None = None):
        from ... import storage

        self.scan = scan_imagefolder(root, config)
        self.root = self.scan.root
        self.classes = self.scan.classes
        self.class_to_idx = self.scan.class_to_idx
        self.config = config if storage.is_url(self.root) else None

    def options_dict(self) -> dict[str, Any]:
        """The source's own options (none), as stored in the metadata."""
        return {}

    def tasks(self) -> Sequence[SourceSample]:
        return self.scan.samples

    def worker_state(self) -> StorageConfig | None:
        return self.config

    @staticmethod
    def load(state: StorageConfig | None, task: SourceSample) -> tuple[str, str, int, bytes]:
        """(key, path, label, bytes) of one source file."""
        if state is not None:
            from ... import storage

            return task.key, task.path, task.label, storage.read_bytes(
                task.path, state, MAX_SOURCE_FILE_BYTES, "a source image may have")
        return task.key, task.path, task.label, read_source_file(task.path)


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
            raise RecordError(f"{path}: {st.st_size} bytes, more than any image iotool reads "
                              f"({MAX_SOURCE_FILE_BYTES} at most).")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(st.st_size)
    finally:
        os.close(fd)


SOURCE = SourceKind("imagefolder", "a folder per class, as torchvision's ImageFolder reads it",
                    lambda src, config, options: ImageFolderSource(src, config),
                    src_help="an ImageFolder root (a path or a listable URL: s3://, gs://)")
