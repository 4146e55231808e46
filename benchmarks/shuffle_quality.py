"""How well a shuffled read of tar shards mixes its batches, by shard size, write order and shuffle
window, against a true permutation of the same labels (``iotool.bench.shuffle``).

Two modes:

- **real** (default): a class-sorted ImageFolder (made here: small JPEGs, ``--classes`` x
  ``--per-class``; or ``--root``) converted to tar at each ``--shard-sizes``, written in source
  (class-sorted) order and, where ``iotool.convert`` has ``order=``, in a shuffled order; each
  dataset's shuffled read is scored at each ``--windows`` (the shards a shuffle mixes at a time;
  0: all) through ``iotool.bench.shuffle.shuffle_quality``, which takes the order the
  ``iotool.Loader`` reads.
- **simulate** (``--simulate``): ImageNet-like scale, no images and no files: ``--classes`` x
  ``--per-class`` labels (default 1000 x 1300) in shards of ``--shard-sizes`` (default 1000),
  class-sorted or shuffled at conversion (a NumPy permutation of the labels). The read order is
  made from the shard ranges alone by iotool's own window order
  (``iotool.loading.split.WindowOrder``, the one the sharded dataset reads); where this iotool
  has none, by a NumPy model of the same rule (shards in a random order, their records permuted
  ``window`` shards at a time), and the table says which ("order" column).

Both print one row per (write order, shard size, window): distinct classes and class entropy per
batch (read, and its ratio to a true permutation), distinct shards per batch, shard switches per
epoch and the order's memory.

Example:

    python benchmarks/shuffle_quality.py --smoke
    python benchmarks/shuffle_quality.py --classes 20 --per-class 60 --shard-sizes 25,100 --windows 1,4,0
    python benchmarks/shuffle_quality.py --simulate --windows 1,4,16,64,0 --json shuffle_sim.json
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

COLUMNS = (
    "written",
    "shard size",
    "window",
    "classes/batch",
    "perm",
    "ratio",
    "entropy ratio",
    "shards/batch",
    "switches",
    "order memory",
    "order",
)


def make_imagefolder(root: Path, classes: int, per_class: int, side: int = 24) -> Path:
    """A class-sorted ImageFolder of tiny JPEGs: ``classes`` folders of ``per_class`` images."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root / f"class_{c:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 255, (side, side, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, "JPEG", quality=70)
            (folder / f"{i:05d}.jpg").write_bytes(buf.getvalue())
    return root


def write_orders() -> list[str]:
    """The write orders this iotool's convert offers ('source' only before ``order=``)."""
    import iotool

    return ["source", "shuffled"] if "order" in inspect.signature(iotool.convert).parameters else ["source"]


def row(written: str, shard_size: int, window: int, report, order: str) -> dict:
    """One table row (plain data) from a ShuffleReport."""
    e = report.epochs
    return {
        "written": written,
        "shard_size": shard_size,
        "window": window,
        "distinct": report.measured.distinct_mean,
        "permutation_distinct": report.permutation.distinct_mean,
        "expected_distinct": report.expected_distinct,
        "ratio_distinct": report.ratio_distinct,
        "ratio_entropy": report.ratio_entropy,
        "shards_per_batch": float(np.mean([x.shards_per_batch for x in e])),
        "shard_switches": float(np.mean([x.shard_switches for x in e])),
        "order_bytes": report.order_bytes,
        "order": order,
    }


def run_real(args) -> tuple[list[dict], dict]:
    import iotool
    from iotool.bench.shuffle import shuffle_quality

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root) if args.root else make_imagefolder(Path(tmp) / "src", args.classes, args.per_class)
        orders = write_orders()
        for shard_size in args.shard_sizes:
            for written in orders:
                dst = Path(tmp) / f"tar-{shard_size}-{written}"
                order = {"order": written} if len(orders) > 1 else {}  # before order=: the source's
                iotool.convert(root, dst, "tar", workers=0, shard_size=shard_size, validate=False, **order)
                for window in args.windows:
                    report = shuffle_quality(
                        dst, batch_size=args.batch_size, epochs=args.epochs, seed=args.seed, window=window
                    )
                    rows.append(row(written, shard_size, window, report, "iotool.Loader"))
    return rows, {"mode": "real", "root": args.root or f"synthetic {args.classes} x {args.per_class}"}


def window_order(ranges: list[range], seed: int, epoch: int, window: int) -> tuple[np.ndarray, str]:
    """The epoch's read order of shards holding ``ranges``: iotool's WindowOrder where this
    iotool has it, else a NumPy model of its rule. Returns (order, which)."""
    total = ranges[-1].stop if ranges else 0
    try:
        from iotool.loading.split import WindowOrder
    except ImportError:
        rng = np.random.default_rng([seed, epoch])
        shards = rng.permutation(len(ranges))
        width = len(ranges) if window <= 0 else window
        parts = []
        for k in range(0, len(shards), width):
            records = np.concatenate([np.arange(ranges[s].start, ranges[s].stop) for s in shards[k : k + width]])
            parts.append(rng.permutation(records))
        return np.concatenate(parts), "numpy model"
    return WindowOrder(ranges, True, seed, epoch, window).records_at(np.arange(total)), "WindowOrder"


def run_simulation(args) -> tuple[list[dict], dict]:
    from iotool.bench.shuffle import ShuffleReport, expected_distinct, order_memory, score_epoch, summarize_mix

    n = args.classes * args.per_class
    sorted_labels = np.repeat(np.arange(args.classes, dtype=np.int64), args.per_class)
    written_labels = {
        "source": sorted_labels,
        "shuffled": np.random.default_rng(args.seed).permutation(sorted_labels),
    }
    rows = []
    for shard_size in args.shard_sizes:
        ranges = [range(lo, min(lo + shard_size, n)) for lo in range(0, n, shard_size)]
        shard_of = np.repeat(np.arange(len(ranges), dtype=np.int64), [len(r) for r in ranges])
        for written, labels in written_labels.items():
            for window in args.windows:
                report = ShuffleReport(
                    path="simulation",
                    format="tar",
                    records=n,
                    batch_size=args.batch_size,
                    seed=args.seed,
                    rank=0,
                    world_size=1,
                    sharded=True,
                    labels="class",
                    classes=args.classes,
                    access="",
                    order_bytes=order_memory(n, ranges, window)[1],
                    shards=len(ranges),
                    window=window,
                )
                read, reference, which = [], [], ""
                for epoch in range(args.epochs):
                    order, which = window_order(ranges, args.seed, epoch, window)
                    scored, mix, ref = score_epoch(
                        epoch, order, args.batch_size, n, labels=labels, shard_of=shard_of, seed=args.seed
                    )
                    report.epochs.append(scored)
                    read.append(mix)
                    reference.append(ref)
                report.measured = summarize_mix(*(np.concatenate(a) for a in zip(*read)))
                report.permutation = summarize_mix(*(np.concatenate(a) for a in zip(*reference)))
                report.expected_distinct = expected_distinct(labels, args.batch_size)
                rows.append(row(written, shard_size, window, report, f"simulated: {which}"))
    return rows, {"mode": "simulation", "classes": args.classes, "per_class": args.per_class}


def print_table(rows: list[dict]) -> None:
    from iotool.storage.units import human_bytes

    cells = [
        [
            r["written"],
            f"{r['shard_size']:,}",
            "all" if r["window"] == 0 else str(r["window"]),
            f"{r['distinct']:.1f}",
            f"{r['permutation_distinct']:.1f}",
            f"{r['ratio_distinct']:.2f}",
            f"{r['ratio_entropy']:.2f}",
            f"{r['shards_per_batch']:.1f}",
            f"{r['shard_switches']:,.0f}",
            human_bytes(r["order_bytes"]),
            r["order"],
        ]
        for r in rows
    ]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    for x in cells:
        print("  ".join(c.rjust(w) for c, w in zip(x, widths)))


def integers(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulate", action="store_true", help="ImageNet-like scale from labels alone (no files).")
    parser.add_argument("--root", help="real mode: an ImageFolder to convert (default: a synthetic class-sorted one)")
    parser.add_argument("--classes", type=int, help="classes (real: 10, simulate: 1000)")
    parser.add_argument("--per-class", type=int, help="records per class (real: 40, simulate: 1300)")
    parser.add_argument("--shard-sizes", type=integers, help="records per shard (real: 20,100; simulate: 1000)")
    parser.add_argument("--windows", type=integers, default=[1, 4, 16, 0], help="shards mixed at a time (0: all)")
    parser.add_argument("--batch-size", type=int, help="records per batch (real: 16, simulate: 256)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="a tiny run, for CI")
    parser.add_argument("--json", help="write the rows and settings as JSON to this file")
    args = parser.parse_args(argv)
    big = args.simulate and not args.smoke
    defaults = {
        "classes": 1000 if big else 4 if args.smoke else 10,
        "per_class": 1300 if big else 12 if args.smoke else 40,
        "shard_sizes": [1000] if big else [6] if args.smoke else [20, 100],
        "batch_size": 256 if big else 8 if args.smoke else 16,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.smoke and args.windows == [1, 4, 16, 0]:
        args.windows = [1, 0]
    start = time.perf_counter()
    rows, settings = (run_simulation if args.simulate else run_real)(args)
    print_table(rows)
    mode = "SIMULATION (labels and shard ranges only, no files)" if args.simulate else "real tar shards"
    print(
        f"{mode}: {args.classes} classes x {args.per_class}, batch {args.batch_size}, {args.epochs} epoch(s), "
        f"seed {args.seed}; written: source = class-sorted shards, shuffled = shuffled at conversion; "
        f"ratio = read / true permutation of the same labels; {time.perf_counter() - start:.1f} s",
    )
    if args.json:
        settings.update(batch_size=args.batch_size, epochs=args.epochs, seed=args.seed, windows=args.windows)
        Path(args.json).write_text(json.dumps({"settings": settings, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
