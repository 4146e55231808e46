"""The small data the docs' code blocks read, made in a page's scratch folder before its blocks run.

The scratch folder is the working directory; ``/tmp/x`` and ``/data/x`` of a block are its
``tmp/x`` and ``data/x``. What a reader has at hand: the checkout's ``sample_data/`` and
``benchmarks/`` (linked), in ``tmp/`` what the README and cli page convert ``sample_data/imagefolder`` into (``sample.lmdb``, ``sample.h5``,
``shards``, ``tf``), and for the pages that convert files iotool did not write, a few of each kind under
the names they use (``cap-*.tar``, ``data/train-*.parquet``, ``imagenet/train-*-of-01024``,
``shards/train-*.tar``, ``old/train.lmdb`` ...). Add here what a new page's blocks read.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import iotool
from iotool.formats.tfrecord.example import encode_example
from iotool.formats.tfrecord.framing import frame

from ..conftest import make_image

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data" / "imagefolder"
LINKED = ("sample_data", "benchmarks")
PREPARED = [
    ("sample.lmdb", "lmdb", {}),
    ("sample.h5", "hdf5", {}),
    ("shards", "tar", {"shard_size": 10}),
    ("tf", "tfrecord", {"shard_size": 10}),
]


def prepare(scratch: Path, page_text: str) -> None:
    """Make in ``scratch`` what ``page_text``'s blocks read (only what the page names)."""
    for name in LINKED:
        os.symlink(REPO / name, scratch / name)
    for name, fmt, options in PREPARED:
        iotool.convert(SAMPLE, scratch / "tmp" / name, fmt, workers=0, **options)
    for marker, make in MAKERS.items():
        if marker in page_text:
            make(scratch)


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def caption_shards(scratch: Path) -> None:
    """``cap-000000.tar``, ``cap-000001.tar``: jpg, txt and json members, as ShardWriter writes."""
    for shard in range(2):
        members = []
        for i in range(4):
            key, n = f"{shard * 4 + i:06d}", shard * 4 + i
            members += [
                (f"{key}.jpg", make_image(n, (48, 40))),
                (f"{key}.txt", f"a photo, number {n}".encode()),
                (f"{key}.json", json.dumps({"width": 48, "n": n}).encode()),
            ]
        _tar(scratch / f"cap-{shard:06d}.tar", members)


def parquet_files(scratch: Path) -> None:
    """``data/train-0000N.parquet``: image bytes, text, a float score and a list of numbers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for part in range(2):
        rows = range(part * 4, part * 4 + 4)
        table = pa.table(
            {
                "image": pa.array([{"bytes": make_image(i, (48, 40)), "path": f"{i}.jpg"} for i in rows]),
                "text": [f"photo {i}" for i in rows],
                "aesthetic": [float(i) / 2 for i in rows],
                "tags": [[i, i + 1] for i in rows],
            }
        )
        pq.write_table(table, scratch / "data" / f"train-{part:05d}.parquet")


def tfrecord_files(scratch: Path) -> None:
    """``imagenet/train-0000N-of-01024`` as TF-slim writes them (1-based labels) and the synsets."""
    (scratch / "imagenet").mkdir(exist_ok=True)
    for part in range(2):
        records = [
            frame(
                encode_example(
                    {"image/encoded": ("bytes", [make_image(i)]), "image/class/label": ("int64", [1 + i % 2])}
                )
            )
            for i in range(part * 3, part * 3 + 3)
        ]
        (scratch / "imagenet" / f"train-{part:05d}-of-01024").write_bytes(b"".join(records))
    (scratch / "imagenet_lsvrc_2015_synsets.txt").write_text("n01440764\nn01443537\n")


def webdataset_shards(scratch: Path) -> None:
    """``shards/train-000000.tar`` ... ``train-000146.tar`` (one sample each, a ``txt`` class
    name beside a ``cls`` index) and ``classes.txt``."""
    for shard in range(147):
        key = f"n{shard % 2}/img{shard:04d}"
        cls = str(shard % 2).encode()
        members = [
            (f"{key}.jpg", make_image(shard, (24, 16))),
            (f"{key}.cls", cls),
            (f"{key}.txt", b"cat dog".split()[shard % 2]),
        ]
        _tar(scratch / "shards" / f"train-{shard:06d}.tar", members)
    (scratch / "classes.txt").write_text("cat\ndog\n")


def image_files(scratch: Path) -> None:
    """``/data/val`` (a folder of images) and ``photo.jpg``, from the sample data."""
    os.symlink(SAMPLE, scratch / "data" / "val")
    (scratch / "photo.jpg").write_bytes(next(iter(sorted(SAMPLE.glob("*/*.jpg")))).read_bytes())


def pickled_lmdb(scratch: Path) -> None:
    """``old/train.lmdb``, as the folder2lmdb scripts write it, and ``classes.txt``."""
    from ..pipeline.test_sources_pickled_lmdb import write_pickled_lmdb

    (scratch / "old").mkdir(exist_ok=True)
    write_pickled_lmdb(scratch / "old" / "train.lmdb", [(make_image(i), i % 2) for i in range(6)])
    (scratch / "classes.txt").write_text("cat\ndog\n")


def coco_set(scratch: Path) -> None:
    """``coco/images`` and ``coco/instances.json``: 16 JPEGs and their COCO annotations."""
    from ..support.coco import make_coco

    make_coco(scratch / "coco", 16, 0)


MAKERS = {
    "coco/instances.json": coco_set,
    "cap-{": caption_shards,
    "data/train-*.parquet": parquet_files,
    "imagenet/train-": tfrecord_files,
    "shards/train-{": webdataset_shards,
    "old/train.lmdb": pickled_lmdb,
    "/data/val": image_files,
}
