"""One owner for the bad-record policy (issue 53, point 10): a Loader's ``on_error`` governs the
records it reads, whatever the dataset's (the dataset's applies only when the Loader is given
none), and the Loader counts what it skips. A dataset opened with ``on_error="skip"`` inside
``Loader(on_error="raise")`` skipped silently (``ds.skipped=1``, ``loader.skipped=0``). Each case
runs in a child with an address-space cap and a time limit, on threads and on ``processes=1``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import iotool

from ..conftest import make_image
from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

N, BAD = 8, 3


@pytest.fixture(scope="module")
def lmdb_with_odd_one(tmp_path_factory) -> Path:
    """Eight 32x32 images but record 3's, 40 wide: the transform below refuses that one."""
    root = tmp_path_factory.mktemp("policy")
    for i in range(N):
        (root / "src" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (root / "src" / "ab"[i % 2] / f"{i}.jpg").write_bytes(make_image(i, (40 if i == BAD else 32, 32)))
    iotool.convert(str(root / "src"), str(root / "p.lmdb"), "lmdb")
    return root / "p.lmdb"


CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import json, sys
    import iotool
    from tests.loading.test_hostile_round3b_policy import refuse_wide
    preload("torch", "iotool.loading.loader")
    cap_address_space(1 << 30)
    path, ds_policy, loader_policy, processes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ds = iotool.open_dataset(path, on_error=ds_policy, transform=refuse_wide)
    extra = {"processes": processes} if processes else {"threads": 2}
    loader = iotool.Loader(ds, batch_size=4, on_error=None if loader_policy == "none" else loader_policy, **extra)
    try:
        out = sum(len(labels) for _, labels in loader)
    except iotool.IotoolError as exc:
        out = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"out": out, "ds": ds.skipped, "loader": loader.skipped}))
    """
)


def refuse_wide(image):
    """A transform that refuses (as a decoding transform would) the one image 40 pixels wide."""
    if image.shape[1] == 40:
        raise iotool.DecodeError("this image does not decode (a test refusal)")
    return image[:, :32].transpose(2, 0, 1).copy()


def run_child(path: Path, ds_policy: str, loader_policy: str, processes: int) -> dict:
    proc = run_capped(CHILD, str(path), ds_policy, loader_policy, str(processes), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("processes", [0, 1])
def test_the_loaders_raise_governs_a_dataset_opened_to_skip(lmdb_with_odd_one, processes):
    got = run_child(lmdb_with_odd_one, "skip", "raise", processes)
    assert got["out"].startswith("RecordError") and f"(b/{BAD}.jpg)" in got["out"], got
    assert "a test refusal" in got["out"] and got["ds"] == 0 and got["loader"] == 0


@pytest.mark.parametrize(("ds_policy", "loader_policy"), [("raise", "skip"), ("skip", "none"), ("skip", "skip")])
def test_the_loader_skips_and_counts_what_it_skips(lmdb_with_odd_one, ds_policy, loader_policy):
    got = run_child(lmdb_with_odd_one, ds_policy, loader_policy, 0)
    assert got == {"out": N, "ds": 0, "loader": 1}
