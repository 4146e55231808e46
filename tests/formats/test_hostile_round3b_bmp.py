"""BMP cache files larger than their index allows (issue 53, point 8): the index records every
image's size, so a file is read only up to the 24-bit BMP of that size (54 header bytes and its
rows), by ``ds[i]`` and by the Loader's packed runs alike. Files padded (sparse) to 1000 MiB
were read whole: 1.3 GiB for ``ds[0]`` of a 32x32 record, 2.1 GiB for a Loader pass, a
``MemoryError`` under a cap. Each case runs in a child with an address-space cap and a time
limit."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

import iotool

from ..conftest import make_image
from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc to cap the child")

N = 16


def bmp_cache(root: Path, sizes: list[tuple[int, int]]) -> Path:
    """A bmp cache converted from JPEGs of ``sizes`` (width, height; the shorter side is 32)."""
    for i, size in enumerate(sizes):
        (root / "src" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (root / "src" / "ab"[i % 2] / f"{i:02d}.jpg").write_bytes(make_image(i, size))
    iotool.convert(str(root / "src"), str(root / "c.bmp"), "bmp", resize=32)
    return root / "c.bmp"


def bmp_file(dst: Path, key: str) -> Path:
    return dst / (key.rsplit(".", 1)[0] + ".bmp")


CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import json, sys
    import iotool
    from iotool.transforms import RandomResizedCrop
    preload("torch", "iotool.loading.loader", "iotool.formats.bmp", "iotool.transforms")
    cap_address_space(512 << 20)  # a padded file is 1000 MiB
    path, how = sys.argv[1], sys.argv[2]
    out = {}
    def attempt(name, call):
        try:
            out[name] = call()
        except iotool.IotoolError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    ds = iotool.open_dataset(path)
    attempt("item", lambda: list(ds[0][0].shape))
    def passes(transform, on_error):
        ds = iotool.open_dataset(path, transform=transform, on_error=on_error)
        loader = iotool.Loader(ds, batch_size=8, shuffle=False, on_error=on_error)
        return [len(labels) for _, labels in loader]
    attempt("loader", lambda: passes(None, "raise"))
    attempt("runs", lambda: passes(RandomResizedCrop(16, seed=1), "raise"))
    attempt("runs_skip", lambda: passes(RandomResizedCrop(16, seed=1), "skip"))
    reader = ds.reader
    out["packed"] = [v is not None for v in reader.read_packed(list(range(8))).views()]
    print(json.dumps(out))
    """
)


def run_child(path: Path) -> dict:
    proc = run_capped(CHILD, str(path), "", timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_files_padded_to_a_gigabyte_are_refused_by_their_index_size(tmp_path):
    dst = bmp_cache(tmp_path, [(32, 32)] * N)
    keys = iotool.open_dataset(dst).reader.keys
    for i in (0, 5):
        os.truncate(bmp_file(dst, keys[i]), 1000 << 20)  # sparse: no disk spent
    got = run_child(dst)
    for case in ("item", "loader", "runs"):
        # ds[0] names record 0; a Loader's threads share a batch out, so the pass stops at whichever
        # padded record a thread reaches first (0 or 5): either is named with its file and bound
        bad = (0,) if case == "item" else (0, 5)
        assert isinstance(got[case], str) and got[case].startswith("RecordError"), got
        assert any(
            f"record {i} " in got[case]
            and f"{bmp_file(dst, keys[i])}: 1048576000 bytes, more than the {54 + 96 * 32}" in got[case]
            for i in bad
        ), got[case]
        assert "index's size 32x32" in got[case]
    assert got["runs_skip"] == [8, 8]  # the two bad records replaced by good ones
    assert got["packed"] == [k not in (0, 5) for k in range(8)]


def test_a_run_of_mixed_sizes_holds_each_file_to_its_own(tmp_path):
    """A run is read under its largest file's bound; a small image's file padded up to it (and
    still decodable) is not taken from the run but read alone and refused, as ``ds[i]`` refuses it."""
    dst = bmp_cache(tmp_path, [(32, 32), (48, 32)] * (N // 2))
    reader = iotool.open_dataset(dst).reader
    small = next(i for i in range(N) if list(reader.column("sizes")[i]) == [32, 32])
    with open(bmp_file(dst, reader.keys[small]), "ab") as f:
        f.write(b"\0" * 64)
    got = run_child(dst)
    assert got["packed"] == [k != small for k in range(8)]
    assert got["runs"].startswith("RecordError") and "more than the 3126 its index's size 32x32" in got["runs"]
