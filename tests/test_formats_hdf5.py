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
