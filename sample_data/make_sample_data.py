"""Regenerate sample_data/imagefolder from scikit-image's bundled photographs (seeded).

Run once by the maintainers (needs `pip install scikit-image`); the output is committed, so
users never need this script. Sources and licences: sample_data/README.md.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

from PIL import Image
from skimage import data as skdata

CLASSES = {
    "cat": ["chelsea"],
    "coffee": ["coffee"],
    "space": ["rocket", "astronaut", "hubble_deep_field"],
}
PER_CLASS = 8
OUT = Path(__file__).resolve().parent / "imagefolder"


def variant(photo: Image.Image, rng: random.Random) -> Image.Image:
    """A random crop resized to ImageNet-like sides: shorter 300-480 px, longer 400-640 px."""
    longer = rng.randint(400, 640)
    shorter = rng.randint(300, min(longer, 480))
    w, h = photo.size
    tw, th = (longer, shorter) if w >= h else (shorter, longer)
    scale = min(w / tw, h / th) * rng.uniform(0.7, 1.0)  # crop the largest box of that shape, or less
    cw, ch = round(tw * scale), round(th * scale)
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    return photo.crop((x, y, x + cw, y + ch)).resize((tw, th), Image.Resampling.LANCZOS)


def main() -> None:
    rng = random.Random(20261129)
    for cls, names in CLASSES.items():
        photos = [Image.fromarray(getattr(skdata, n)()).convert("RGB") for n in names]
        folder = OUT / cls
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(PER_CLASS):
            img = variant(photos[i % len(photos)], rng)
            if cls == "cat" and i == 7:
                img.save(folder / f"{cls}_{i:02d}.png", optimize=True)
                continue
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=rng.randint(75, 95), progressive=(i == 3))
            (folder / f"{cls}_{i:02d}.jpg").write_bytes(buf.getvalue())


if __name__ == "__main__":
    main()
