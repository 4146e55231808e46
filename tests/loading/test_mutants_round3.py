"""Edges of the third round's Loader and dataset code that a mutation audit found unpinned (issue
53): the child's transport refusing a forged boxes length and list lengths that do not add up
(an InternalError, never a short value or a skippable RecordError), an error message cut to
exactly its budget with its head, its tail and the traceback's tail kept, and a mask read
without its image held to the image's (height, width) as the index records it."""

from __future__ import annotations

import io
import os
import signal
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import iotool
from iotool.errors import InternalError, RecordError
from iotool.fields import FieldSpec, Schema
from iotool.loading.loader.columns import Layout
from iotool.loading.loader.isolated import MAX_MESSAGE, _error_message, escaped_size, fit
from iotool.loading.loader.wire import decode_value, encode_value, pack, unpack

from ..conftest import make_image
from ..support.detection import convert_detection, image_size, mask_png

MARK = " [...] "


def test_a_boxes_value_whose_length_runs_past_it_is_an_internal_error():
    good = encode_value("boxes", {"boxes": np.ones((2, 4), np.float32), "labels": np.array([1, 2])}, "row 0")
    assert decode_value(good, "row 0")["labels"].tolist() == [1, 2]
    for wrong in (len(good) - 8, len(good), 1 << 40):  # past the labels' start: len(good) - 9
        forged = good[:1] + wrong.to_bytes(8, "little") + good[9:]
        with pytest.raises(InternalError, match="tagged b'x'"):
            decode_value(forged, "row 0")


def test_list_lengths_that_do_not_add_up_to_the_file_are_an_internal_error():
    layout = Layout.of(("image", "txt"), Schema((FieldSpec("txt", "text"),)))
    fd, size = pack(layout, [["ab", "cd"]], 2)
    try:
        assert unpack(layout, os.dup(fd), size, 2) == [["ab", "cd"]]
        for lengths in ([3, 2], [2, 3], [3, 4]):  # the values' bytes are 3 and 3
            os.pwrite(fd, np.array(lengths, np.int64).tobytes(), 0)
            with pytest.raises(InternalError, match="malformed list fields"):
                unpack(layout, os.dup(fd), size, 2)
    finally:
        os.close(fd)


@pytest.mark.parametrize("budget", [40, 41, 100, 101, 1000])
def test_an_ascii_message_is_cut_to_exactly_its_budget_head_and_tail(budget):
    text = "".join(chr(ord("a") + k % 26) for k in range(5000))
    out = fit(text, budget)
    assert len(out) == escaped_size(out) == budget
    head, tail = out.split(MARK)
    assert text.startswith(head) and text.endswith(tail) and len(tail) - len(head) in (0, 1)
    tail_only = fit(text, budget, keep="tail")
    assert len(tail_only) == budget and tail_only.startswith(MARK) and text.endswith(tail_only[len(MARK) :])


def test_a_cjk_message_keeps_its_head_and_tail_within_its_budget():
    text = "record 3 (" + "\u932f" * 5000 + "): why"
    out = fit(text, 300)
    assert escaped_size(out) <= 300 and escaped_size(out) > 300 - 6 - len(MARK)
    head, tail = out.split(MARK)
    assert text.startswith(head) and text.endswith(tail) and head.startswith("record 3 (") and tail.endswith("): why")
    tail_only = fit(text, 300, keep="tail")
    assert tail_only.startswith(MARK) and text.endswith(tail_only[len(MARK) :]) and tail_only.endswith("): why")


def test_a_long_traceback_keeps_its_last_frames():
    try:
        raise RecordError("d.lmdb: record 3 (k): " + "x" * 40000 + " the reason")
    except RecordError as exc:
        error = exc
    full = "".join(traceback.format_exception(error))
    assert len(full) > MAX_MESSAGE // 2
    sent = _error_message(error, 1, 0)["traceback"]
    assert sent.startswith(MARK) and full.endswith(sent[len(MARK) :]) and escaped_size(sent) <= MAX_MESSAGE // 2
    assert sent.rstrip().endswith("x the reason")


@pytest.fixture(scope="module")
def det_lmdb(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("det") / "det.lmdb"
    convert_detection(dst, "lmdb", 4)
    return dst


def test_a_mask_without_its_image_is_held_to_the_recorded_height_and_width(det_lmdb):
    """Landscape and portrait images: the index records (height, width), the mask's header the same."""
    ds = iotool.open_dataset(det_lmdb, fields=("boxes", "seg.png"), masks=("seg.png",))
    assert ds.reader.records_image_sizes()
    for i in range(len(ds)):
        width, height = image_size(i)
        reference = torch.from_numpy(np.array(Image.open(io.BytesIO(mask_png(i)))))
        mask = ds[i][1]
        assert tuple(mask.shape) == (height, width) and torch.equal(mask, reference)


N, BAD = 6, 2


def refuse_wide(image):
    """Refuses (as a decoding transform would) the one image 40 pixels wide."""
    if image.shape[1] == 40:
        raise iotool.DecodeError("this image does not decode (a test refusal)")
    return image[:, :32].transpose(2, 0, 1).copy()


@pytest.fixture(scope="module")
def lmdb_with_odd_one(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("policy")
    for i in range(N):
        (root / "src" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (root / "src" / "ab"[i % 2] / f"{i}.jpg").write_bytes(make_image(i, (40 if i == BAD else 32, 32)))
    iotool.convert(str(root / "src"), str(root / "p.lmdb"), "lmdb")
    return root / "p.lmdb"


@pytest.mark.filterwarnings("ignore:iotool.Loader. the transform")
@pytest.mark.parametrize("loader_policy", ["raise", "skip"])
def test_the_dataset_takes_back_its_policy_once_the_loader_has_read(lmdb_with_odd_one, loader_policy):
    """``loader.sample`` reads in the calling thread under the Loader's policy; afterwards ``ds[i]``
    in that thread follows the dataset's own ``on_error`` again."""
    ds = iotool.open_dataset(lmdb_with_odd_one, on_error="skip", transform=refuse_wide)
    bad = list(ds.reader.keys).index(f"{'ab'[BAD % 2]}/{BAD}.jpg")
    loader = iotool.Loader(ds, batch_size=2, threads=1, on_error=loader_policy)
    if loader_policy == "raise":
        with pytest.raises(RecordError, match="a test refusal"):
            loader.sample(bad)
    else:
        assert loader.sample(bad)[-1] != bad and loader.skipped == 1
    assert ds.skipped == 0
    assert ds[bad] is not None and ds.skipped == 1  # the dataset's skip: the next readable record


def _exited(pid: int, timeout: float = 10.0) -> bool:
    """True once child ``pid`` has exited with all its threads (waitable), left unreaped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.filterwarnings("ignore:iotool.Loader. the transform")
@pytest.mark.parametrize("processes", [1, 2])
def test_a_child_killed_between_passes_is_replaced_and_its_skips_still_count(lmdb_with_odd_one, processes):
    """Two passes skip the bad record twice, whether or not a child was killed (SIGKILL) while
    idle between them: the next iter() forks a new one in its place (before, every later pass
    raised BrokenPipeError), and the count keeps what the killed one skipped, as threads count."""
    ds = iotool.open_dataset(lmdb_with_odd_one, transform=refuse_wide)
    threads = iotool.Loader(ds, batch_size=2, threads=1, on_error="skip")
    assert [sum(len(b[1]) for b in threads) for _ in range(2)] == [N, N] and threads.skipped == 2
    loader = iotool.Loader(ds, batch_size=2, threads=1, processes=processes, on_error="skip")
    try:
        assert sum(len(b[1]) for b in loader) == N and loader.skipped == 1
        before = loader.child_pids
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        assert all(_exited(pid) for pid in before)
        assert sum(len(b[1]) for b in loader) == N
        assert not set(loader.child_pids) & set(before) and len(loader.child_pids) == processes
        assert loader.skipped == threads.skipped == 2
    finally:
        loader.close()
