"""iotool verify: every single-byte flip in payloads, metadata and index is reported."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli import app

from .conftest import write_tree

NAMES = {"hdf5": "d.h5"}
OPTIONS = {"bmp": {"resize": 24}, "tar": {"shard_size": 4}}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("vsrc") / "src"
    write_tree(root, {"a": 4, "b": 4, "c": 3}, seed=50, png_every=4)
    out = {}
    for fmt in ("lmdb", "hdf5", "tar", "bmp"):
        dst = tmp_path_factory.mktemp(f"v{fmt}") / NAMES.get(fmt, "d")
        iotool.convert(root, dst, fmt, workers=0, **OPTIONS.get(fmt, {}))
        out[fmt] = dst
    return out


def container_file(fmt: str, path: Path) -> Path:
    return {"lmdb": path / "data.mdb", "hdf5": path}.get(fmt, path)


def regions(fmt: str, path: Path) -> dict[str, list[tuple[Path, int, int]]]:
    """(file, start, end) byte ranges of payloads, metadata and index, found in the real files."""
    reader = iotool.open_reader(path)
    payloads = [reader.read(i)[0] for i in range(len(reader))]
    if fmt in ("lmdb", "hdf5"):
        blob = container_file(fmt, path).read_bytes()

        def where(data: bytes):
            start = blob.find(data)
            assert start >= 0 and blob.find(data, start + 1) < 0, "ambiguous or missing region"
            return (container_file(fmt, path), start, start + len(data))

        meta = reader.meta.to_json().encode() if fmt == "hdf5" else None
        if fmt == "lmdb":
            from iotool.formats.lmdb import open_env

            with open_env(str(path)).begin() as txn:  # the reader's own handle (one per process)
                meta = txn.get(b"__iotool_meta__")
                index = [txn.get(b"__iotool_keys__"), txn.get(b"__iotool_checksums__")]
        else:
            index = [reader.checksums[0].encode(), reader.checksums[-1].encode()]
        return {"payload": [where(p) for p in payloads], "metadata": [where(meta)],
                "index": [where(i) for i in index]}
    index_json = path / "index.json"
    whole_index = [(index_json, 0, index_json.stat().st_size)]
    if fmt == "tar":
        locs = reader._locations
        shards = [path / s["name"] for s in reader.shards]
        payload = [(shards[s], off, off + size) for s, off, size in locs]
        headers = [(shards[s], off - 512, off - 512 + 100) for s, off, _ in locs]  # member name fields
        return {"payload": payload, "metadata": whole_index, "index": headers}
    files = [path / f for f in reader._files]
    return {"payload": [(f, 54, f.stat().st_size) for f in files], "metadata": whole_index, "index": whole_index}


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5", "tar", "bmp"])
def test_every_flip_in_payload_metadata_or_index_is_reported(fmt, pristine, tmp_path):
    assert iotool.verify(pristine[fmt]).ok
    rng = random.Random(fmt)
    flips = 0
    for kind in ("payload", "metadata", "index"):
        for _ in range(8):  # 24 flips per format
            copy = tmp_path / f"{kind}{flips}" / pristine[fmt].name
            copy.parent.mkdir()
            (shutil.copytree if pristine[fmt].is_dir() else shutil.copy)(pristine[fmt], copy)
            file, start, end = rng.choice(regions(fmt, copy)[kind])
            data = bytearray(file.read_bytes())
            pos = rng.randrange(start, end)
            data[pos] ^= 1 << rng.randrange(8)
            file.write_bytes(bytes(data))
            report = iotool.verify(copy, decode_images=True)
            assert not report.ok, f"{fmt}: flip in {kind} at {file.name}:{pos} not reported"
            if kind == "payload":
                assert any(p.index is not None for p in report.problems)
            flips += 1
            shutil.rmtree(copy.parent)
    assert flips == 24


def test_cli_verify_lists_bad_records_and_exits_1(pristine, tmp_path):
    copy = tmp_path / "t"
    shutil.copytree(pristine["tar"], copy)
    reader = iotool.open_reader(copy)
    shard, offset, _ = reader._locations[5]
    shard_file = copy / reader.shards[shard]["name"]
    data = bytearray(shard_file.read_bytes())
    data[offset + 30] ^= 0xFF
    shard_file.write_bytes(bytes(data))
    runner = CliRunner()
    result = runner.invoke(app, ["verify", str(copy), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and [(p["index"], p["key"]) for p in report["problems"]] == [(5, reader.keys[5])]
    result = runner.invoke(app, ["verify", str(pristine["lmdb"]), "--decode"])
    assert result.exit_code == 0 and "OK" in result.output
    result = runner.invoke(app, ["verify", str(tmp_path / "nothing")])
    assert result.exit_code == 1 and "does not exist" in result.stderr
