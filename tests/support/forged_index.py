"""A sharded dataset's index changed as an attacker (or a bug) would change it: a column file
replaced and index.json's digests made to match again (they are no signature)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from iotool.formats.sharded.columns import file_digest
from iotool.formats.sharded.index import canonical_json, sha256_hex


def rewrite_index(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change index.json with ``change`` and give it a matching digest."""
    raw = json.loads((path / "index.json").read_bytes())
    raw.pop("integrity")
    change(raw)
    body = {**raw, "integrity": sha256_hex(canonical_json(raw))}
    (path / "index.json").write_bytes(canonical_json(body))


def set_column(path: Path, name: str, array: np.ndarray) -> None:
    """Replace column file ``name`` and its digest in the index."""
    np.save(path / f"index.{name}.npy", array)

    def change(raw: dict[str, Any]) -> None:
        raw["columns"][name]["files"][f"index.{name}.npy"] = file_digest(str(path / f"index.{name}.npy"))

    rewrite_index(path, change)
