"""open_dataset on LMDB: decoders, pickling, and real DataLoader workers under fork and spawn."""

from __future__ import annotations

import collections
import hashlib
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import iotool
from iotool.errors import FormatVersionError, UnknownFormatError, UsageError

from ..conftest import SAMPLE, rewrite_meta


def test_pil_and_opencv_give_identical_pixels_on_jpegs(sample_lmdb):
    pil = iotool.open_dataset(sample_lmdb, decoder="pil")
    cv = iotool.open_dataset(sample_lmdb, decoder="opencv")
    jpegs = [i for i, k in enumerate(pil.keys) if k.endswith(".jpg")]
    assert len(jpegs) == 23
    for i in jpegs:
        a, label_a = pil[i]
        b, label_b = cv[i]
        assert a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3 and a.flags.c_contiguous
        assert label_a == label_b
        np.testing.assert_array_equal(a, b, err_msg=pil.keys[i])


def test_decoded_image_matches_pil_on_the_source_file(sample_lmdb):
    ds = iotool.open_dataset(sample_lmdb)  # decoder="auto"
    for i in (0, 7, 23):  # 7 is the PNG
        img, _ = ds[i]
        expected = np.asarray(Image.open(SAMPLE / ds.keys[i]).convert("RGB"))
        np.testing.assert_array_equal(img, expected)


def test_decoder_none_returns_stored_bytes_and_transform_runs_last(sample_lmdb):
    ds = iotool.open_dataset(sample_lmdb, decoder=None, transform=len)
    raw, label = ds[-1]
    assert raw == (SAMPLE / ds.keys[-1]).stat().st_size and label == 2


def test_unknown_decoder_is_refused_with_choices(sample_lmdb):
    with pytest.raises(UsageError, match="opencv"):
        iotool.open_dataset(sample_lmdb, decoder="turbo")
    with pytest.raises(UsageError, match="fused"):
        iotool.open_dataset(sample_lmdb, decoder="turbo")


def test_the_default_decoder_is_fused_and_decodes_as_auto(sample_lmdb):
    from iotool.loading.mapstyle import DEFAULT_DECODER

    assert DEFAULT_DECODER == "fused"
    default, fused, auto = (
        iotool.open_dataset(sample_lmdb, **kw) for kw in ({}, {"decoder": "fused"}, {"decoder": "auto"})
    )
    assert default.decoder == fused.decoder == "fused" and auto.decoder == "auto"
    for i in (0, 7):  # no transform: nothing to fuse, the same pixels as "auto"
        np.testing.assert_array_equal(default[i][0], auto[i][0])
        np.testing.assert_array_equal(fused[i][0], auto[i][0])


def test_pickling_drops_handles(sample_lmdb):
    ds = iotool.open_dataset(sample_lmdb)
    ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    assert all(v is None for k, v in vars(clone.reader).items() if k.startswith("_"))
    np.testing.assert_array_equal(clone[3][0], ds[3][0])


def _bytes_collate(batch):
    return [hashlib.sha256(b).hexdigest() for b, _ in batch], [label for _, label in batch]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_see_every_sample_once(sample_lmdb, start_method):
    ds = iotool.open_dataset(sample_lmdb, decoder=None)
    ds[5]  # opened in the parent before the workers start
    loader = DataLoader(
        ds, batch_size=5, shuffle=True, num_workers=2, collate_fn=_bytes_collate, multiprocessing_context=start_method
    )
    digests, labels = [], []
    for d, lab in loader:
        digests += d
        labels += lab
    expected = [hashlib.sha256((SAMPLE / k).read_bytes()).hexdigest() for k in ds.keys]
    assert collections.Counter(digests) == collections.Counter(expected)
    assert sorted(labels) == sorted(ds.targets) and len(labels) == 24


def test_decoded_batches_through_workers(sample_lmdb):
    def crop(img):
        return torch.from_numpy(np.ascontiguousarray(img[:64, :64])).permute(2, 0, 1)

    ds = iotool.open_dataset(sample_lmdb, decoder="opencv", transform=crop)
    loader = DataLoader(ds, batch_size=8, num_workers=2)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [torch.Size([8, 3, 64, 64])] * 3
    assert torch.cat([b[1] for b in batches]).tolist() == ds.targets


def test_unknown_format_version_is_refused(imagefolder, tmp_path):
    dst = tmp_path / "o.lmdb"
    iotool.convert(imagefolder, dst, "lmdb", workers=0)
    rewrite_meta("lmdb", dst, format_version=99)
    with pytest.raises(FormatVersionError, match="version 99"):
        iotool.open_dataset(dst)


def test_metadata_with_wrong_types_is_refused(imagefolder, tmp_path):
    dst = tmp_path / "o.lmdb"
    iotool.convert(imagefolder, dst, "lmdb", workers=0)
    rewrite_meta("lmdb", dst, count="13")
    with pytest.raises(iotool.FormatError, match="'count'"):
        iotool.open_dataset(dst)


def test_not_a_dataset(tmp_path):
    with pytest.raises(UnknownFormatError, match="iotool convert"):
        iotool.open_dataset(tmp_path)
