"""Build a valid dataset of N records quickly, to measure the index at ImageNet scale.

Writing 14 million real images would take hours and terabytes. For ``tar`` the format's own writer
(:class:`iotool.formats.tar.TarWriter`) writes one real shard of ``--shard-size`` tiny JPEG
records (and one more for the remainder), every other shard is a hard link to the first, and the
index is written through the format's own index API (column files with
:class:`iotool.formats.sharded.columns.ColumnWriter`, then ``index.json``): one row per record, unique
keys, the real member keys, labels, checksums and byte locations of the shard each record is in.
The result opens, iterates and passes ``iotool verify`` like any tar dataset; it uses a few MB for
the shards plus the index columns (about 130 bytes a record).

For ``lmdb`` and ``hdf5`` (one container, no shards to link) the format's own writer
(:class:`iotool.formats.lmdb.LmdbWriter`, :class:`iotool.formats.hdf5.Hdf5Writer`) writes every
record, each the same tiny JPEG under its own key: about 0.8 KB a record on disk.

Example:

    python benchmarks/scale_index.py tar /tmp/in1k --records 1281167
    python benchmarks/scale_index.py lmdb /tmp/in1k.lmdb --records 1281167
    python benchmarks/scale_index.py hdf5 /tmp/in1k.h5 --records 1281167
    python benchmarks/scale_index.py tar /tmp/in22k --records 14000000
    python benchmarks/scale_index.py tar /tmp/in1k-v1 --records 1281167 --index-version 1
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import iotool
from iotool.fields import Schema
from iotool.formats import get_format
from iotool.formats.sharded.columns import ColumnWriter
from iotool.formats.sharded.index import write_index
from iotool.formats.tar import TarOptions, TarWriter, shard_name
from iotool.formats.tar.writer import KINDS, tar_index
from iotool.records import DatasetMeta, Record, checksum

CLASSES = 1000


def tiny_jpeg() -> bytes:
    """An 8x8 JPEG: a real, decodable payload of about 600 bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 128, dtype=np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def meta_for(count: int, shard_size: int | None, fmt: str = "tar") -> DatasetMeta:
    classes = [f"n{c:08d}" for c in range(CLASSES)]
    options = {"source": "benchmarks/scale_index.py"}
    if fmt == "tar":
        options.update(shard_size=shard_size, shard_bytes=None)
    return DatasetMeta(
        format=fmt,
        format_version=get_format(fmt).reader.write_version(Schema.classification()),
        classes=classes,
        class_to_idx={c: i for i, c in enumerate(classes)},
        count=count,
        options=options,
        created_by=f"iotool {iotool.__version__}",
    )


def build_container(fmt: str, dst: Path, records: int) -> None:
    """Write ``records`` records into ``dst`` through the writer of ``fmt`` (lmdb or hdf5)."""
    spec = get_format(fmt)
    payload = tiny_jpeg()
    digest = checksum(payload)
    writer = spec.writer(str(dst), spec.options())
    try:
        for i in range(records):
            key = f"n{i % CLASSES:08d}/img_{i:08d}.jpg"
            writer.add(Record(i, key, i % CLASSES, payload, "jpg", digest, position=i))
        writer.finish(meta_for(records, None, fmt))
    except BaseException:
        writer.abort()
        raise


def real_shard(folder: Path, first: int, count: int, payload: bytes) -> dict:
    """Write ``count`` records through TarWriter into ``folder``; return its index columns."""
    writer = TarWriter(str(folder), TarOptions(shard_size=count))
    digest = checksum(payload)
    for i in range(first, first + count):
        key = f"n{i % CLASSES:08d}/img_{i:08d}.jpg"
        writer.add(Record(i - first, key, i % CLASSES, payload, "jpg", digest, position=i - first))
    writer.finish(meta_for(count, count))
    reader = iotool.open_reader(folder)
    return {
        "member_keys": list(reader.member_keys),
        "labels": np.asarray(reader.labels.array),
        "checksums": bytes(np.asarray(reader.column("checksums").raw)),
        "offsets": np.asarray(reader.column("locations"))[:, 1:].copy(),
        "shapes": np.asarray(reader.column("shapes")).copy(),
    }


def build(dst: Path, records: int, shard_size: int) -> None:
    """Write the dataset into ``dst`` (which must not exist)."""
    payload = tiny_jpeg()
    full, rest = divmod(records, shard_size)
    shards = full + (1 if rest else 0)
    dst.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        parts = {shard_size: real_shard(Path(tmp) / "full", 0, shard_size, payload)} if full else {}
        if rest:
            parts[rest] = real_shard(Path(tmp) / "rest", 0, rest, payload)
        columns = ColumnWriter(str(dst), KINDS)
        units = []
        for k in range(shards):
            n = shard_size if k < full else rest
            part = parts[n]
            os.link(Path(tmp) / ("full" if n == shard_size else "rest") / shard_name(0), dst / shard_name(k))
            first = k * shard_size
            keys = [f"s{k:06d}/img_{i:08d}.jpg" for i in range(first, first + n)]
            locations = np.column_stack([np.full(n, k, dtype=np.int64), part["offsets"]])
            columns.append_batch(
                keys=keys,
                member_keys=part["member_keys"],
                labels=part["labels"],
                checksums=part["checksums"],
                locations=locations,
                shapes=part["shapes"],
            )
            units.append({"name": shard_name(k), "count": n, "bytes": n * len(payload)})
        write_index(str(dst), tar_index(meta_for(records, shard_size), units, columns.finish()))


def downgrade(dst: Path) -> None:
    """Rewrite the index as format version 1 (every column a JSON list inside index.json)."""
    reader = iotool.open_reader(dst)
    index = json.loads((dst / "index.json").read_text())
    index.pop("integrity")
    table = index.pop("columns")
    index.update(
        keys=list(reader.keys),
        member_keys=list(reader.member_keys),
        labels=list(reader.labels),
        checksums=list(reader.checksums),
        locations=np.asarray(reader.column("locations")).tolist(),
    )
    index["meta"]["format_version"] = 1
    write_index(str(dst), index)
    for entry in table.values():
        for name in entry["files"]:
            (dst / name).unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=["tar", "lmdb", "hdf5"], help="the format to build")
    parser.add_argument("dst", type=Path)
    parser.add_argument("--records", type=int, default=1_281_167)
    parser.add_argument("--shard-size", type=int, default=1000, help="tar only")
    parser.add_argument(
        "--index-version",
        type=int,
        choices=[1, 2],
        default=2,
        help="tar only; 1: the old index.json with JSON lists, for comparison",
    )
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if args.dst.exists():
        if not args.overwrite:
            print(f"{args.dst} exists; pass --overwrite", file=sys.stderr)
            return 2
        shutil.rmtree(args.dst) if args.dst.is_dir() else args.dst.unlink()
    start = time.perf_counter()
    if args.format != "tar":
        build_container(args.format, args.dst, args.records)
        files = list(args.dst.iterdir()) if args.dst.is_dir() else [args.dst]
        print(
            f"{args.dst}: {args.records:,} records, {args.format} format version "
            f"{get_format(args.format).reader.write_version(Schema.classification())}, "
            f"{sum(p.stat().st_size for p in files) / 2**20:.1f} MiB, built in {time.perf_counter() - start:.1f} s"
        )
        return 0
    build(args.dst, args.records, args.shard_size)
    if args.index_version == 1:
        downgrade(args.dst)
    size = sum(p.stat().st_size for p in args.dst.glob("index*"))
    print(
        f"{args.dst}: {args.records:,} records in {-(-args.records // args.shard_size):,} shards, index "
        f"version {args.index_version}, index files {size / 2**20:.1f} MiB, built in "
        f"{time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
