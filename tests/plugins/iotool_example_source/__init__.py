"""``filelist``: an iotool source kind defined outside the package, as a third party would write one.

SRC is a UTF-8 text file of ``RELATIVE/PATH.jpg<TAB>CLASS`` lines; paths are relative to the
list's folder and may not leave it. Classes are the sorted distinct class names (or the lines of
the ``classes`` option's file). It is registered through the ``iotool.sources`` entry-point group
(the ``.dist-info`` folder beside this package), so the shared source suite runs on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from iotool.errors import RecordError, SourceError
from iotool.names import ALLOWED, name_problem, resolve_inside
from iotool.pipeline.sources import SourceKind, SourceOptions, read_label_file, read_source_file

MAX_LIST_BYTES = 1 << 26


@dataclass(frozen=True)
class FilelistOptions(SourceOptions):
    """Options of the filelist source."""

    classes: str | None = None  # a file of class names, one per line (default: the names listed, sorted)


class Entry(NamedTuple):
    key: str
    path: str
    label: int
    error: str | None


class FilelistSource:
    """The images a list file names; a task is an :class:`Entry`."""

    def __init__(self, src: str, options: FilelistOptions):
        self.options = options
        self.root = os.path.abspath(src)
        try:
            with open(self.root, encoding="utf-8") as f:
                text = f.read(MAX_LIST_BYTES + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{self.root}: cannot be read ({exc}).") from None
        if len(text) > MAX_LIST_BYTES:
            raise SourceError(f"{self.root}: more than {MAX_LIST_BYTES} bytes; not a file list.")
        rows = [line.split("\t") for line in text.splitlines() if line.strip()]
        if not rows or any(len(r) != 2 for r in rows):
            raise SourceError(f"{self.root}: expected RELATIVE/PATH<TAB>CLASS lines.")
        self.classes = read_label_file(options.classes, "classes") if options.classes \
            else sorted({cls for _, cls in rows})
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        folder = os.path.dirname(self.root)
        self._tasks = [self._entry(folder, rel, cls) for rel, cls in rows]

    def _entry(self, folder: str, rel: str, cls: str) -> Entry:
        problem = name_problem(rel)
        path = resolve_inside(folder, rel) if problem is None else None
        if problem is None and path is None:
            problem = "it leads outside the list's folder"
        label = self.class_to_idx.get(cls, -1)
        if problem:
            return Entry(rel, os.path.join(folder, rel), -1, f"unsafe path {rel!r}: {problem}; a path must be {ALLOWED}")
        if label < 0:
            return Entry(rel, path, -1, f"class {cls!r} is not one of the classes")
        return Entry(rel, path, label, None)

    def options_dict(self) -> dict[str, Any]:
        return {"classes": self.options.classes} if self.options.classes else {}

    def tasks(self) -> Sequence[Entry]:
        return self._tasks

    def worker_state(self) -> None:
        return None

    @staticmethod
    def load(state: Any, task: Entry) -> tuple[str, str, int, bytes]:
        if task.error:
            raise RecordError(task.error)
        return task.key, task.path, task.label, read_source_file(task.path)


SOURCE = SourceKind("filelist", "a list file of image paths and class names (an example plugin)",
                    lambda src, config, options: FilelistSource(src, options), FilelistOptions,
                    src_help="a file of RELATIVE/PATH<TAB>CLASS lines")
