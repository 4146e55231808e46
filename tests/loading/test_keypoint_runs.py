"""Keypoints on the runs path: a run's keypoints are moved at once (the kind's ``move_run``, over
``move_points_run``), and the batches are the per-sample path's bit for bit (the same float32
coordinates, the same points marked not labelled outside the crop, the same left/right swap on a
flip), under RandomResizedCrop and a flip, a CenterCrop with and without a flip, with
boxes dropping rows, and beside a sample the run leaves to the per-sample path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import iotool
from iotool.decode.headers import image_size
from iotool.fields import FieldSpec
from iotool.fields.kinds.keypoints import KIND, KeypointsKind
from iotool.formats.lmdb.layout import record_key
from iotool.loading.loader.columns import layout_of
from iotool.loading.loader.runs import sample_runs
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, draws, pixel_only
from iotool.transforms.geometry import RunGeometry

from ..conftest import make_image
from ..support.coco import make_keypoints
from ..support.runs import random_run
from .test_loader_fields import equal, snapshot

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")

N = 12
FIELDS = ("image", "boxes", "keypoints", "num_keypoints")
CHAINS = {
    "crop-flip": lambda: [RandomResizedCrop((20, 28), scale=(0.1, 0.6)), RandomHorizontalFlip()],
    "center": lambda: [CenterCrop((40, 30))],  # smaller than every image: points left out of it
    "center-flip": lambda: [CenterCrop(40), RandomHorizontalFlip()],
}


@pytest.fixture(scope="module")
def keypoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kp-runs")
    images, annotations, _ = make_keypoints(root / "src", N, seed=7)
    out = {}
    for fmt in ("lmdb", "tar"):
        out[fmt] = root / f"kp.{fmt}"
        iotool.convert(
            images, out[fmt], fmt, src_format="coco", workers=0, source_options={"annotations": str(annotations)}
        )
    return out


def _chain(name: str, extra: bool) -> Compose:
    """The chain; with ``extra`` a pixel-only step after it: the same geometry and pixels, but a
    chain no run takes, so every sample goes the per-sample way."""
    steps = CHAINS[name]()
    return Compose([*steps, pixel_only(lambda image: image)] if extra else steps)


class Moves:
    """Counts the keypoints kind's moves (its real methods, wrapped): values moved one at a time,
    values moved a run at a time, and the runs that flipped some of their samples."""

    def __init__(self, monkeypatch):
        self.alone = self.in_runs = self.flipped_runs = 0
        move, move_run = KeypointsKind.move, KeypointsKind.move_run

        def counted_move(kind, spec, value, record):
            self.alone += 1
            return move(kind, spec, value, record)

        def counted_run(kind, spec, values, samples, run):
            self.in_runs += len(values)
            self.flipped_runs += bool(run.flipped[list(samples)].any())
            return move_run(kind, spec, values, samples, run)

        monkeypatch.setattr(KeypointsKind, "move", counted_move)
        monkeypatch.setattr(KeypointsKind, "move_run", counted_run)


def _epochs(path: Path, chain: str, extra: bool, threads: int, **options: Any) -> list[Any]:
    ds = iotool.open_dataset(path, transform=_chain(chain, extra), fields=FIELDS, **options)
    assert (sample_runs(ds.mapstyle, layout_of(ds.mapstyle)) is None) == extra
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=5, threads=threads)
    got = [snapshot(b) for _ in range(2) for b in loader]  # two epochs: two draws of each sample
    loader.close()
    return got


def _bits(batches: list[Any]) -> list[torch.Tensor]:
    """Every keypoints tensor of the batches as its float32 bit patterns (so -0.0 is not 0.0)."""
    out = []
    for batch in batches:
        for points in batch[FIELDS.index("keypoints")]:
            assert points.dtype == torch.float32 and points.ndim == 3 and points.shape[1:] == (17, 3)
            out.append(points.view(torch.int32))
    return out


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("keep_empty", [False, True])
def test_a_runs_keypoints_equal_the_per_sample_path_bit_for_bit(keypoints, fmt, chain, keep_empty, monkeypatch):
    moves = Moves(monkeypatch)
    runs = _epochs(keypoints[fmt], chain, False, 2, keep_empty_boxes=keep_empty)
    assert moves.alone == 0 and moves.in_runs == 2 * N  # every sample's keypoints moved in a run
    assert moves.flipped_runs > 0 or "flip" not in chain
    alone = _epochs(keypoints[fmt], chain, True, 2, keep_empty_boxes=keep_empty)
    assert moves.alone == 2 * N
    assert equal(runs, alone)
    assert all(torch.equal(a, b) for a, b in zip(_bits(runs), _bits(alone), strict=True))
    # the rules were exercised: labelled points left out of the crop are marked not labelled
    stored = iotool.open_dataset(keypoints[fmt], fields=FIELDS, decoder=None).mapstyle
    labelled = sum(int((stored[i][2][..., 2] > 0).sum()) for i in range(N))
    kept = sum(int((p[..., 2] > 0).sum()) for batch in runs for p in batch[2])
    assert kept < 2 * labelled
    for batch in runs:  # rows follow their boxes
        for boxes, points, counts in zip(batch[1], batch[2], batch[3]):
            assert len(boxes["boxes"]) == len(points) == len(counts)


def test_a_sample_the_run_leaves_keeps_its_neighbours_keypoints_in_place(keypoints, tmp_path, monkeypatch):
    """Record 0 is a PNG (the C code leaves it to the per-sample path): the run's other samples
    keep their own geometry, and every batch is the per-sample path's."""
    import shutil

    import lmdb

    path = tmp_path / "kp.lmdb"
    shutil.copytree(keypoints["lmdb"], path) if keypoints["lmdb"].is_dir() else shutil.copy(keypoints["lmdb"], path)
    env = lmdb.open(str(path), subdir=path.is_dir(), lock=False)
    with env.begin(write=True) as txn:
        stored = txn.get(record_key(0))
        assert stored is not None
        size = image_size(stored)  # (height, width)
        txn.put(record_key(0), make_image(0, (size[1], size[0]), "PNG"))
    env.close()

    def epoch(extra: bool) -> list[Any]:
        ds = iotool.open_dataset(path, transform=_chain("crop-flip", extra), fields=FIELDS)
        loader = iotool.Loader(ds, batch_size=4, threads=1, seed=2)  # one run a batch
        return [snapshot(b) for b in loader]

    moves = Moves(monkeypatch)
    runs = epoch(False)
    assert moves.alone == 1 and moves.in_runs == N - 1
    alone = epoch(True)
    assert equal(runs, alone)
    assert all(torch.equal(a, b) for a, b in zip(_bits(runs), _bits(alone), strict=True))


SPEC = FieldSpec(
    "keypoints", "keypoints", params=(("names", ("nose", "left_eye", "right_eye", "tail")), ("skeleton", ()))
)


@pytest.mark.parametrize("kind", ["crop", "center", "resize"])
@pytest.mark.parametrize("seed", range(4))
def test_the_kinds_move_run_gives_each_samples_move_bit_for_bit(kind, seed):
    """Points inside, on the edges of and outside the images, crops reaching past the image, some
    samples flipped, some with no instance, samples of the run not moved (absent): each moved
    value is :meth:`move`'s of the sample's record, bit for bit."""
    rng = np.random.default_rng(seed)
    n = 24
    sizes = rng.integers(8, 120, size=(n, 2))
    out = (19, 19) if kind == "center" else (37, 53)
    run = random_run(rng, kind, sizes, out, min_box=1)
    samples = sorted(rng.choice(n, size=n - 4, replace=False).tolist())  # four samples without the field
    values = []
    for k in samples:
        rows = int(rng.integers(0, 4))
        points = np.empty((rows, 4, 3), np.float32)
        points[..., 0] = rng.choice([0.0, -0.0, sizes[k][1] - 1, rng.uniform(-20, 140)], size=(rows, 4))
        points[..., 1] = rng.uniform(-20, 140, size=(rows, 4))
        points[..., 2] = rng.choice([0.0, 1.0, 2.0], size=(rows, 4))
        values.append(points)
    moved = KIND.move_run(SPEC, values, samples, run)
    assert moved is not None and len(moved) == len(samples)
    for k, value, (got, keep) in zip(samples, values, moved):
        want, want_keep = KIND.move(SPEC, value, run.record(k))
        assert keep is None and want_keep is None  # every row kept: (value, keep) pairs, as move gives
        assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
        assert np.array_equal(got.view(np.int32), want.view(np.int32)), k


def test_move_run_leaves_a_value_that_is_not_points_to_move():
    """A value that is not points: None, so the mover moves each alone (refusing that one)."""
    run = RunGeometry(np.array([[0, 0, 4, 4]]), np.array([True]), (4, 4), True, False, np.array([[8, 8]]))
    assert KIND.move_run(SPEC, [np.zeros(5, np.float32)], [0], run) is None
