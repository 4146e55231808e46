"""ImageFolders with planted duplicates and near-duplicates, and the duplicate sets computed here
from the files themselves (hashlib over their bytes; PIL for their pixels), independently of
:mod:`iotool.decode.identity`, so tests compare what ``overlap`` and ``--dedup`` find with them.
"""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path
from typing import Callable, Hashable

import numpy as np
from PIL import Image

from ..conftest import make_image


def array(seed: int, size: tuple[int, int] = (40, 32)) -> np.ndarray:
    """A seeded RGB uint8 image of (height, width) ``size``."""
    return np.random.default_rng(seed).integers(0, 256, size=(*size, 3), dtype=np.uint8)


def encoded(image: np.ndarray, fmt: str, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, fmt, **save)
    return buf.getvalue()


def planted_tree(root: Path) -> None:
    """An ImageFolder (classes ant, bee, cat) holding, besides distinct images:

    - exact copies: ``ant/a0.jpg`` again as ``bee/copy_a0.jpg`` and ``cat/copy_a0.jpg``,
      ``ant/a1.jpg`` again as ``cat/z_copy_a1.jpg``;
    - near-duplicates: ``ant/a2.jpg`` re-encoded at another JPEG quality (``bee/a2_q60.jpg``),
      ``cat/p.png`` with one pixel changed (``cat/p_pixel.png``);
    - one array stored losslessly twice: ``ant/l.png`` and ``bee/l.bmp`` (same pixels, other bytes).
    """
    for cls in ("ant", "bee", "cat"):
        (root / cls).mkdir(parents=True, exist_ok=True)
    files = {f"ant/a{i}.jpg": make_image(100 + i, (48 + 8 * i, 40)) for i in range(4)}
    files |= {"bee/b0.jpg": make_image(200, (56, 40)), "cat/c0.jpg": make_image(300, (40, 48))}
    files["bee/copy_a0.jpg"] = files["cat/copy_a0.jpg"] = files["ant/a0.jpg"]
    files["cat/z_copy_a1.jpg"] = files["ant/a1.jpg"]
    a2 = np.asarray(Image.open(io.BytesIO(files["ant/a2.jpg"])).convert("RGB"))
    files["bee/a2_q60.jpg"] = encoded(a2, "JPEG", quality=60)
    p = array(400)
    changed = p.copy()
    changed[3, 5, 1] ^= 1
    files["cat/p.png"], files["cat/p_pixel.png"] = encoded(p, "PNG"), encoded(changed, "PNG")
    lossless = array(500)
    files["ant/l.png"], files["bee/l.bmp"] = encoded(lossless, "PNG"), encoded(lossless, "BMP")
    for key, data in files.items():
        (root / key).write_bytes(data)


def copy_tree(src: Path, dst: Path, keys: list[str]) -> None:
    """``dst`` an ImageFolder of the files ``keys`` of ``src``."""
    for key in keys:
        (dst / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / key, dst / key)


def source_keys(root: Path) -> list[str]:
    """The image files under ``root`` as ``class/name`` keys, in ImageFolder's (sorted) order."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def file_bytes(path: Path) -> Hashable:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_pixels(path: Path) -> Hashable:
    """The file's pixels as PIL decodes them, with their shape."""
    pixels = np.asarray(Image.open(path).convert("RGB"))
    return pixels.shape, hashlib.sha256(pixels.tobytes()).hexdigest()


IDENTITY: dict[str, Callable[[Path], Hashable]] = {"bytes": file_bytes, "pixels": file_pixels}


def groups(root: Path, by: str) -> list[list[str]]:
    """The keys under ``root`` holding one image, for every image held more than once (each
    group in source order)."""
    found: dict[Hashable, list[str]] = {}
    for key in source_keys(root):
        found.setdefault(IDENTITY[by](root / key), []).append(key)
    return [keys for keys in found.values() if len(keys) > 1]


def expected_overlap(a_root: Path, b_root: Path, by: str) -> dict[str, list[str]]:
    """A's keys whose image B holds -> B's keys holding it."""
    in_b: dict[Hashable, list[str]] = {}
    for key in source_keys(b_root):
        in_b.setdefault(IDENTITY[by](b_root / key), []).append(key)
    found = {key: in_b.get(IDENTITY[by](a_root / key), []) for key in source_keys(a_root)}
    return {key: keys for key, keys in found.items() if keys}
