"""Writing a conversion's output folder, local or remote: temporary names renamed into place."""

from __future__ import annotations

import os
import uuid
from typing import Any

from .cache import remove_if_exists
from .config import TMP_TAG, StorageConfig, StorageError, basename, is_url, join, normalize
from .remote import exists, filesystem
from .retries import with_retries


def temporary_name(name: str) -> str:
    """``dir/.name.tmp-<pid>-<random>``: the name a file is written under before its rename."""
    folder, _, base = name.rpartition("/")
    tmp = f".{base}{TMP_TAG}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return f"{folder}/{tmp}" if folder else tmp


class OutputDir:
    """A folder that a conversion writes into: a local path or an fsspec URL prefix.

    Every file appears under its final name only when complete: it is written (or uploaded)
    under a temporary name beside it and then renamed (on object stores: copied and deleted,
    each object appearing whole). A task that dies leaves only temporaries, which
    :meth:`remove_temporaries` deletes; a retried task simply renames over the same name.
    """

    def __init__(self, location: str, config: StorageConfig | None = None):
        self.location = normalize(location)
        self.config = config or StorageConfig()
        self.remote = is_url(self.location)

    def url(self, name: str) -> str:
        """The full location of ``name`` (a ``/``-separated relative name)."""
        return join(self.location, *name.split("/"))

    def _fs(self) -> tuple[Any, str]:
        return filesystem(self.location, self.config)

    def scratch_path(self, name: str) -> str:
        """A local file to write ``name`` into before :meth:`publish`: beside the final name for
        a local folder (the rename is then free), in the system temporary folder for a URL."""
        if not self.remote:
            full = os.path.join(self.location, *temporary_name(name).split("/"))
            os.makedirs(os.path.dirname(full), exist_ok=True)
            return full
        import tempfile

        fd, path = tempfile.mkstemp(prefix="iotool-", suffix="-" + basename(name))
        os.close(fd)
        return path

    def publish(self, local: str, name: str, sync: bool = True) -> int:
        """Move the complete local file ``local`` to ``name`` atomically; return its size.

        ``sync=False`` skips the fsync for a caller that has synced the file system itself.
        """
        length = os.path.getsize(local)
        if not self.remote:
            if sync:
                with open(local, "rb+") as f:
                    os.fsync(f.fileno())
            final = self.url(name)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(local, final)
            return length
        fs, _ = self._fs()
        tmp_url, final = self.url(temporary_name(name)), self.url(name)
        tmp_path, final_path = filesystem(tmp_url, self.config)[1], filesystem(final, self.config)[1]
        try:
            with_retries("upload", tmp_url, lambda: fs.put_file(local, tmp_path), self.config)
            with_retries("rename", final, lambda: fs.mv(tmp_path, final_path), self.config)
        finally:
            os.remove(local)
            _quiet_rm(fs, tmp_path)
        return length

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``data`` to ``name`` atomically (temporary name, flush, rename)."""
        local = self.scratch_path(name)
        with open(local, "wb") as f:
            f.write(data)
        self.publish(local, name)

    def exists(self, name: str) -> bool:
        """Whether ``name`` exists in the folder."""
        if not self.remote:
            return os.path.lexists(self.url(name))
        return exists(self.url(name), self.config)

    def remove(self, name: str) -> None:
        """Delete ``name`` if it exists."""
        if not self.remote:
            if os.path.lexists(self.url(name)):
                os.remove(self.url(name))
            return
        fs, _ = self._fs()
        _quiet_rm(fs, filesystem(self.url(name), self.config)[1])

    def names(self) -> list[str]:
        """The names of the files directly in the folder (none when it does not exist)."""
        if not self.remote:
            return sorted(os.listdir(self.location)) if os.path.isdir(self.location) else []
        fs, path = self._fs()
        try:
            listing = with_retries(
                "listing", self.location, lambda: fs.ls(path, detail=False, refresh=True), self.config
            )
        except StorageError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                return []
            raise
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listing)

    def remove_temporaries(self) -> list[str]:
        """Delete every file left under a temporary name by tasks that died (in sub-folders too, for
        a local folder); return their names."""
        if not self.remote:
            stale = []
            for folder, _, files in os.walk(self.location):
                for name in files:
                    if name.startswith(".") and TMP_TAG in name:
                        remove_if_exists(os.path.join(folder, name), stale)
            return [os.path.relpath(p, self.location) for p in stale]
        stale = [n for n in self.names() if n.startswith(".") and TMP_TAG in n]
        for name in stale:
            self.remove(name)
        return stale


def _quiet_rm(fs: Any, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm(path)
    except FileNotFoundError:
        pass
