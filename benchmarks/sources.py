"""Time ``iotool convert`` from each foreign source against the producing tool's own reading.

From one ImageFolder (the sample data, or an ImageNet-like tree from make_imagenet_like.py) this
writes the same images as Parquet (by Hugging Face ``datasets``: an Image column with the bytes
embedded, a ClassLabel), as WebDataset shards (``webdataset.ShardWriter``) and as TFRecord files
(the ``tfrecord`` package), then times, in one process each (``--workers``, default 0):

- ``iotool convert SOURCE lmdb`` (every image fully decoded to validate it, then stored), and
- the producer reading the same data and decoding every image with PIL:
  ``datasets.load_dataset("parquet", ...)`` (its Arrow cache built, then iterated),
  ``webdataset.WebDataset(...).decode("pil")``, and the tfrecord package's reader + PIL.

Example:

    python benchmarks/make_imagenet_like.py /tmp/inet1k --images 1000 --classes 10
    python benchmarks/sources.py /tmp/inet1k --json /tmp/sources.json
    python benchmarks/sources.py --smoke  # the sample data, one round
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import iotool  # noqa: E402
from iotool.pipeline.sources import scan_imagefolder  # noqa: E402


def write_sources(root: Path, work: Path) -> dict[str, tuple[str, dict]]:
    """The ImageFolder as parquet, webdataset and tfrecord files; kind -> (SRC, source options)."""
    import datasets
    import webdataset as wds
    from tfrecord.writer import TFRecordWriter

    scan = scan_imagefolder(root)
    images = [(s.key, s.label, Path(s.path).read_bytes()) for s in scan.samples]
    (work / "pq").mkdir(parents=True)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=scan.classes)})
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": d, "path": k} for k, _, d in images], "label": [label for _, label, _ in images]},
        features=features,
    )
    ds.to_parquet(str(work / "pq" / "train-00000.parquet"))
    (work / "wds").mkdir()
    with wds.ShardWriter(str(work / "wds" / "shard-%06d.tar"), maxcount=500, verbose=0) as sink:
        for k, label, d in images:
            sink.write({"__key__": k.rsplit(".", 1)[0].replace(".", "_"), "jpg": d, "cls": label})
    (work / "tfr").mkdir()
    writer = TFRecordWriter(str(work / "tfr" / "train-00000-of-00001"))
    for k, label, d in images:
        writer.write(
            {"image/encoded": (d, "byte"), "image/class/label": (label, "int"), "image/filename": (k.encode(), "byte")}
        )
    writer.close()
    last = len(list((work / "wds").glob("*.tar"))) - 1
    return {
        "imagefolder": (str(root), {}),
        "parquet": (str(work / "pq" / "*.parquet"), {}),
        "webdataset": (str(work / "wds" / f"shard-{{000000..{last:06d}}}.tar"), {}),
        "tfrecord-files": (str(work / "tfr" / "train-*"), {"label_offset": 0}),
    }


def pil_decode(data: bytes) -> None:
    from PIL import Image

    Image.open(io.BytesIO(data)).convert("RGB")


def producer_reads(kind: str, src: str, work: Path) -> dict[str, float]:
    """Seconds the producing library takes to read every image and decode it with PIL."""
    if kind == "parquet":
        import datasets

        start = time.perf_counter()
        ds = datasets.load_dataset("parquet", data_files=src, split="train", cache_dir=str(work / "hf-cache"))
        built = time.perf_counter() - start
        for row in ds:
            row["image"].convert("RGB")
        return {"load_s": built, "total_s": time.perf_counter() - start}
    if kind == "webdataset":
        import webdataset as wds

        start = time.perf_counter()
        for sample in wds.WebDataset(src, shardshuffle=False).decode("pil"):
            sample["jpg"].convert("RGB")
        return {"total_s": time.perf_counter() - start}
    if kind == "tfrecord-files":
        from tfrecord.reader import tfrecord_loader

        start = time.perf_counter()
        for path in sorted(Path(src).parent.glob("train-*")):
            for record in tfrecord_loader(str(path), None, {"image/encoded": "byte"}):
                pil_decode(bytes(record["image/encoded"]))
        return {"total_s": time.perf_counter() - start}
    return {}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "root",
        nargs="?",
        default=str(REPO / "sample_data" / "imagefolder"),
        help="an ImageFolder (default: the sample data)",
    )
    parser.add_argument("--workers", type=int, default=0, help="iotool convert workers (0: in this process)")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many rounds")
    parser.add_argument("--smoke", action="store_true", help="one round on the given (default: sample) data")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    rounds = 1 if args.smoke else args.rounds
    figures: dict = {"root": args.root, "workers": args.workers, "rounds": rounds, "sources": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sources = write_sources(Path(args.root), work / "src")
        figures["images"] = len(scan_imagefolder(args.root))
        for kind, (src, options) in sources.items():
            best: dict[str, float] = {}
            for r in range(rounds):
                start = time.perf_counter()
                iotool.convert(
                    src,
                    work / f"out-{kind}-{r}",
                    "lmdb",
                    src_format=kind,
                    workers=args.workers,
                    source_options=options or None,
                )
                timing = {
                    "iotool_s": time.perf_counter() - start,
                    **{f"producer_{k}": v for k, v in producer_reads(kind, src, work / f"r{r}").items()},
                }
                best = {k: min(v, best.get(k, v)) for k, v in timing.items()}
            figures["sources"][kind] = {k: round(v, 3) for k, v in best.items()}
            print(kind, figures["sources"][kind], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
