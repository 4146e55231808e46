"""HDF5 layout readable with plain h5py, and per-process handles."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import h5py
import numpy as np
import pytest

import iotool
from iotool.errors import IotoolError, RecordError
from iotool.pipeline.sources import scan_imagefolder


def test_layout_with_plain_h5py(imagefolder, tmp_path):
    dst = tmp_path / "o.h5"
    iotool.convert(imagefolder, dst, "hdf5", workers=0)
    scan = scan_imagefolder(imagefolder)
    with h5py.File(dst, "r") as f:
        meta = json.loads(f.attrs["iotool_meta"])
        assert meta["format"] == "hdf5" and meta["count"] == 13 and meta["classes"] == ["ant", "bee", "cat"]
        assert meta["format_version"] == 4
        for name in ("labels", "checksums", "shapes", "offsets"):  # contiguous: mapped by readers (version 4)
            assert f[name].chunks is None and f[name].id.get_offset() is not None
        assert f["labels"].shape == f["keys"].shape == f["checksums"].shape == (13,)
        assert f["shapes"].shape == (13, 2) and f["shapes"].dtype == np.dtype("<i4")  # (height, width)
        offsets = f["offsets"][:]
        assert offsets.shape == (14,) and offsets[0] == 0 and offsets[-1] == f["images"].shape[0]
        for i in (0, 12):
            assert f["images"][offsets[i] : offsets[i + 1]].tobytes() == open(scan.samples[i].path, "rb").read()
        assert f["labels"][:].tolist() == [s.label for s in scan.samples]
        assert [k.decode() for k in f["keys"][:]] == [s.key for s in scan.samples]
        assert len(f["checksums"][0]) == 64


def test_handle_reopens_in_a_forked_child(imagefolder, tmp_path):
    dst = tmp_path / "o.h5"
    iotool.convert(imagefolder, dst, "hdf5", workers=0)
    ds = iotool.open_dataset(dst)
    parent_first = ds[0][0]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must open its own handle and read correct pixels
        ok = np.array_equal(ds[0][0], parent_first) and ds.reader._h_pid == os.getpid()
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert ds.reader._h_pid == os.getpid()


def test_batches_of_equal_length_payloads_stay_one_record_each(tmp_path):
    """Payloads are written a batch at a time: a batch of equal lengths (which h5py would turn into
    a 2-D array) and mixed batches must both store every payload as its own record."""
    src = tmp_path / "src"
    payloads = {}
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        for i in range(300):  # more than one write batch; class a: all 64 bytes, class b: mixed
            payloads[f"{cls}/{i:03d}.jpg"] = os.urandom(64 if cls == "a" else 64 + i % 3)
            (src / cls / f"{i:03d}.jpg").write_bytes(payloads[f"{cls}/{i:03d}.jpg"])
    dst = tmp_path / "o.h5"
    iotool.convert(src, dst, "hdf5", workers=0, validate=False)
    with h5py.File(dst, "r") as f:
        offsets = f["offsets"][:]
        assert offsets.shape == (601,)
        images = f["images"][:].tobytes()
        stored = {k.decode(): images[a:b] for k, a, b in zip(f["keys"][:], offsets[:-1], offsets[1:])}
    assert stored == payloads
    assert iotool.verify(dst).ok


@pytest.fixture()
def large_payloads(tmp_path):
    """Random payloads of 40-300 KB, 5 MB in all: many straddle the 1 MiB chunks of '/images'."""
    rng = np.random.default_rng(3)
    src, payloads = tmp_path / "src", {}
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        for i in range(14):
            data = rng.integers(0, 256, int(rng.integers(40_000, 300_000)), dtype=np.uint8).tobytes()
            payloads[f"{cls}/{i:02d}.jpg"] = data
            (src / cls / f"{i:02d}.jpg").write_bytes(data)
    dst = tmp_path / "o.h5"
    iotool.convert(src, dst, "hdf5", workers=0, validate=False)
    return dst, payloads


def read_all(path) -> dict[str, bytes]:
    ds = iotool.open_dataset(path, decoder=None)
    return {ds.keys[i]: ds[i][0] for i in range(len(ds))}


def test_records_across_chunk_boundaries_read_back_exactly(large_payloads):
    dst, payloads = large_payloads
    with h5py.File(dst, "r") as f:
        offsets, chunk = f["offsets"][:], f["images"].chunks[0]
    assert sum(a // chunk != (b - 1) // chunk for a, b in zip(offsets[:-1], offsets[1:])) >= 3
    assert read_all(dst) == payloads


def copy_hdf5(src, dst, **images_options) -> None:
    """Copy an iotool HDF5 file with plain h5py, storing '/images' with other options (as h5repack would)."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for name in f:
            if name == "images":
                g.create_dataset("images", data=f["images"][:], **images_options)
            else:
                f.copy(f[name], g, name)
        for key, value in f.attrs.items():
            g.attrs[key] = value


@pytest.mark.parametrize(
    "options",
    [{"compression": "gzip"}, {}, {"chunks": (4096,), "shuffle": True}],
    ids=["gzip", "contiguous", "small-chunks-shuffle"],
)
def test_repacked_files_read_the_same(large_payloads, tmp_path, options):
    dst, payloads = large_payloads
    other = tmp_path / "repacked.h5"
    copy_hdf5(dst, other, **options)
    assert read_all(other) == payloads
    assert iotool.verify(other).ok


def test_version_1_files_with_variable_length_payloads_are_read(large_payloads, tmp_path):
    dst, payloads = large_payloads
    old = tmp_path / "v1.h5"
    with h5py.File(dst, "r") as f, h5py.File(old, "w") as g:
        offsets, images = f["offsets"][:], f["images"][:]
        column = g.create_dataset("images", (len(offsets) - 1,), h5py.vlen_dtype(np.uint8))
        for i in range(len(offsets) - 1):
            column[i] = images[offsets[i] : offsets[i + 1]]
        for name in ("labels", "keys", "checksums"):
            f.copy(f[name], g, name)
        meta = json.loads(f.attrs["iotool_meta"])
        meta["format_version"] = 1
        g.attrs["iotool_meta"] = meta_json = json.dumps(meta)
        digests = json.loads(f.attrs["iotool_integrity"])
        del digests["offsets"]
        digests["meta"] = hashlib.sha256(meta_json.encode()).hexdigest()
        g.attrs["iotool_integrity"] = json.dumps(digests)
    assert iotool.open_dataset(old).reader.meta.format_version == 1
    assert read_all(old) == payloads
    assert iotool.verify(old, decode_images=False).ok


def test_damaged_offsets_or_payload_bytes_are_named(large_payloads, tmp_path):
    dst, _ = large_payloads
    broken = tmp_path / "offsets.h5"
    shutil.copy(dst, broken)
    with h5py.File(broken, "r+") as f:
        offsets = f["offsets"][:]
        offsets[5], offsets[6] = offsets[6], offsets[5]  # not increasing any more
        f["offsets"][:] = offsets
    with pytest.raises(RecordError, match=r"record 0 \(a/00.jpg\): .*'/offsets' does not describe"):
        iotool.open_dataset(broken)[0]
    report = iotool.verify(broken)
    assert not report.ok and any("offsets" in p.reason for p in report.problems)

    short = tmp_path / "short.h5"
    shutil.copy(dst, short)
    with h5py.File(short, "r") as f:
        last_chunk = max(info.byte_offset for info in _chunks(f["images"]))
    with open(short, "r+b") as f:
        f.truncate(last_chunk + 10)
    with pytest.raises(IotoolError, match="short.h5"):  # libhdf5 notices the missing tail when it opens
        read_all(short)


def _chunks(images):
    out = []
    images.id.chunk_iter(out.append)
    return out
