"""Generate a seeded, ImageNet-like ImageFolder from the photos in sample_data/.

Each output image is a random crop of one of the sample photos, resized to ImageNet's typical
sizes (longer side 500 px most of the time, e.g. 500x375 or 375x500), flipped half of the time,
colour-jittered, sharpened and given luminance noise (so the JPEGs come closer to real photos'
size and decode cost than smooth upscales would), and saved as a baseline JPEG at a random
quality.
A small fraction is grayscale, as in ImageNet. The same seed always gives the same bytes.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 1000 --classes 10
"""

from __future__ import annotations

import argparse
import io
import random
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO / "sample_data" / "imagefolder"
ASPECTS = (4 / 3, 4 / 3, 4 / 3, 3 / 2, 1.0, 5 / 4)  # longer / shorter, 4:3 most often


def load_photos(source: Path) -> list[Image.Image]:
    """Every image under ``source``, as RGB."""
    paths = sorted(p for p in source.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    if not paths:
        raise SystemExit(f"no photos found under {source}")
    return [Image.open(p).convert("RGB") for p in paths]


def target_size(rng: random.Random, min_side: int, max_side: int) -> tuple[int, int]:
    """(width, height): the longer side is ``max_side`` 70% of the time, portrait 25% of the time."""
    longer = max_side if rng.random() < 0.7 else rng.randint(min_side, max_side)
    shorter = max(min_side // 2, round(longer / rng.choice(ASPECTS)))
    return (shorter, longer) if rng.random() < 0.25 else (longer, shorter)


def random_crop(photo: Image.Image, size: tuple[int, int], rng: random.Random) -> Image.Image:
    """Crop 35-100% of the photo's area at the target aspect ratio, resize to ``size``."""
    w, h = photo.size
    tw, th = size
    scale = min(w / tw, h / th) * rng.uniform(0.6, 1.0)
    cw, ch = max(8, round(tw * scale)), max(8, round(th * scale))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    return photo.crop((x, y, x + cw, y + ch)).resize(size, Image.Resampling.BICUBIC)


def jitter(img: Image.Image, rng: random.Random) -> Image.Image:
    """Flip half the time; brightness, contrast and saturation x [0.7, 1.3]."""
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    for enhance in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
        img = enhance(img).enhance(rng.uniform(0.7, 1.3))
    return img


def add_detail(img: Image.Image, sigma: float, seed: int) -> Image.Image:
    """Unsharp mask plus luminance noise of ``sigma`` levels: the fine texture upscaled crops lose.

    The noise is the same on R, G and B, so it survives 4:2:0 chroma subsampling the way real
    detail does; it brings file sizes towards ImageNet's (about 110 KB per image).
    """
    img = img.filter(ImageFilter.UnsharpMask(radius=2, percent=160, threshold=2))
    if sigma <= 0:
        return img
    arr = np.asarray(img, dtype=np.float32)
    noise = np.random.default_rng(seed).normal(0.0, sigma, arr.shape[:2]).astype(np.float32)
    return Image.fromarray(np.clip(arr + noise[..., None], 0, 255).astype(np.uint8))


def make_one(photos: list[Image.Image], rng: random.Random, args: argparse.Namespace, seed: int) -> bytes:
    """One generated JPEG."""
    img = random_crop(rng.choice(photos), target_size(rng, args.min_side, args.max_side), rng)
    img = add_detail(jitter(img, rng), args.noise, seed)
    if rng.random() < args.gray_fraction:
        img = img.convert("L")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=rng.randint(args.quality_min, args.quality_max))
    return buf.getvalue()


def generate(args: argparse.Namespace) -> tuple[int, int]:
    """Write the tree; returns (images, bytes)."""
    rng = random.Random(args.seed)
    photos = load_photos(Path(args.source))
    out = Path(args.dst)
    total = 0
    for i in range(args.images):
        cls = f"class_{i % args.classes:03d}"
        (out / cls).mkdir(parents=True, exist_ok=True)
        data = make_one(photos, rng, args, args.seed * 1_000_003 + i)
        (out / cls / f"img_{i:06d}.jpg").write_bytes(data)
        total += len(data)
    return args.images, total


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dst", help="output ImageFolder root (created)")
    p.add_argument("--images", type=int, default=1000, help="number of images (default 1000)")
    p.add_argument("--classes", type=int, default=10, help="number of class folders (default 10)")
    p.add_argument("--min-side", type=int, default=300, help="smallest longer side (default 300)")
    p.add_argument("--max-side", type=int, default=500, help="typical longer side (default 500)")
    p.add_argument("--quality-min", type=int, default=75, help="lowest JPEG quality (default 75)")
    p.add_argument("--quality-max", type=int, default=95, help="highest JPEG quality (default 95)")
    p.add_argument("--gray-fraction", type=float, default=0.01, help="grayscale share (default 0.01)")
    p.add_argument("--noise", type=float, default=10.0, help="luminance noise sigma in levels (default 10)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--source", default=str(DEFAULT_SOURCE), help="folder of source photos")
    args = p.parse_args(argv)
    if args.images < 1 or args.classes < 1 or not 1 <= args.quality_min <= args.quality_max <= 100:
        p.error("need --images >= 1, --classes >= 1 and 1 <= --quality-min <= --quality-max <= 100")
    if not 8 <= args.min_side <= args.max_side:
        p.error("need 8 <= --min-side <= --max-side")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    if Path(args.dst).exists() and any(Path(args.dst).iterdir()):
        print(f"{args.dst} exists and is not empty; choose another destination", file=sys.stderr)
        return 2
    n, total = generate(args)
    print(
        f"wrote {n} images in {args.classes} classes to {args.dst}: {total / 1e6:.1f} MB, "
        f"{total / n / 1e3:.0f} KB per image on average"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
