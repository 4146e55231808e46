"""HDF5 layout readable with plain h5py, and per-process handles."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np

import iotool
from iotool.sources import scan_imagefolder


def test_layout_with_plain_h5py(imagefolder, tmp_path):
    dst = tmp_path / "o.h5"
    iotool.convert(imagefolder, dst, "hdf5", workers=0)
    scan = scan_imagefolder(imagefolder)
    with h5py.File(dst, "r") as f:
        meta = json.loads(f.attrs["iotool_meta"])
        assert meta["format"] == "hdf5" and meta["count"] == 13 and meta["classes"] == ["ant", "bee", "cat"]
        assert f["images"].shape == f["labels"].shape == f["keys"].shape == f["checksums"].shape == (13,)
        assert bytes(f["images"][0]) == open(scan.samples[0].path, "rb").read()
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
        assert f["images"].shape == (600,)
        stored = {k.decode(): bytes(v) for k, v in zip(f["keys"][:], f["images"][:])}
    assert stored == payloads
    assert iotool.verify(dst).ok
