"""``iotool._masks`` (csrc/_masks*.c): a run's PNG masks decoded and moved in C with the GIL
released. The decoder is held to Pillow (what :func:`iotool.decode.masks.decode_mask` gives), the
move to torch's ``interpolate(mode="nearest")`` after a zero-padded crop and a flip (torchvision
v2's moves of a ``Mask``); on hostile bytes it may refuse more than Pillow, never less, and never
give other values."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from iotool.decode.masks import MOVE_FIELDS, decode_mask, decode_moved_masks

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped
from ..support.pngwriter import chunk, png

_masks = pytest.importorskip("iotool._masks", reason="iotool's C extension iotool._masks is not built")

OK, BROKEN, UNSUPPORTED, SIZE, NOT_GIVEN = 0, 1, 2, 3, 5


def status(data: bytes, height: int, width: int) -> int:
    """What the C decoder says of ``data`` as a ``height x width`` mask left as stored."""
    out = np.empty((height, width), np.uint8)
    return _masks.move_masks(
        [data], np.array([[height, width, 0, 0, height, width, height, width, 0]]).tobytes(), [out]
    )[0]


def decoded(data: bytes, height: int, width: int) -> np.ndarray | None:
    (got,) = decode_moved_masks([data], np.array([[height, width, 0, 0, height, width, height, width, 0]]))
    return None if got is None else got.numpy()


def pillow(data: bytes) -> np.ndarray:
    """The reference: Pillow's values, as decode_mask takes them."""
    with Image.open(io.BytesIO(data)) as img:
        return np.array(img, dtype=np.uint8)


def pillow_saved(values: np.ndarray, mode: str, **options) -> bytes:
    buffer = io.BytesIO()
    if mode == "P":
        img = Image.frombytes("P", values.shape[::-1], values.tobytes())
        img.putpalette(list(range(256)) * 3)
    elif mode == "1":
        img = Image.fromarray(values.astype(bool))
    else:
        img = Image.fromarray(values, mode="L")
    img.save(buffer, format="PNG", **options)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "mode, options", [("L", {}), ("1", {}), ("P", {}), ("P", {"bits": 1}), ("P", {"bits": 2}), ("P", {"bits": 4})]
)
def test_pillows_masks_decode_to_pillows_values(mode, options):
    rng = np.random.default_rng(len(mode) + len(options))
    top = {"1": 2, "L": 256, "P": 1 << options.get("bits", 8)}[mode]
    for height, width in [(1, 1), (1, 9), (7, 1), (13, 17), (40, 33)]:
        values = rng.integers(0, top, (height, width), dtype=np.uint8)
        data = pillow_saved(values, mode, **options)
        np.testing.assert_array_equal(decoded(data, height, width), pillow(data))
        np.testing.assert_array_equal(decoded(data, height, width), decode_mask(data).numpy())


@pytest.mark.parametrize("depth, colour", [(1, 0), (2, 0), (4, 0), (8, 0), (1, 3), (2, 3), (4, 3), (8, 3)])
@pytest.mark.parametrize(
    "filters", [(0,), (1,), (2,), (3,), (4,), (4, 3, 2, 1, 0)], ids=lambda f: "filters" + "".join(map(str, f))
)
def test_every_depth_and_filter_decodes_to_pillows_values(depth, colour, filters):
    rng = np.random.default_rng(depth * 10 + colour)
    for height, width in [(1, 1), (5, 3), (9, 11), (16, 31)]:
        values = rng.integers(0, 1 << depth, (height, width), dtype=np.uint8)
        palette = bytes(range(256)) * 3 if colour == 3 else None
        data = png(values, depth, colour, filters, palette=palette[: 3 << depth] if palette else None, idat_parts=3)
        want = pillow(data)
        if depth in (2, 4) and colour == 0:  # Pillow's "L;2" and "L;4" scale grey to 0-255
            np.testing.assert_array_equal(want, values * (255 // ((1 << depth) - 1)))
        np.testing.assert_array_equal(decoded(data, height, width), want)


def test_ancillary_chunks_pillow_reads_or_passes_over_are_passed_over():
    values = np.arange(30, dtype=np.uint8).reshape(5, 6)
    extras = (
        chunk(b"gAMA", struct.pack(">I", 45455)),
        chunk(b"sRGB", b"\x00"),
        chunk(b"pHYs", struct.pack(">IIB", 2835, 2835, 1)),
        chunk(b"cHRM", bytes(32)),
        chunk(b"tIME", bytes(7)),
        chunk(b"prVt", b"anything"),
    )
    data = png(values, before=extras, after=(chunk(b"tIME", bytes(7)),))
    np.testing.assert_array_equal(decoded(data, 5, 6), pillow(data))


@pytest.mark.parametrize(
    "why, data",
    [
        ("colour", png(np.zeros((4, 4, 3), np.uint8), colour=2)),
        ("grey and alpha", png(np.zeros((4, 4, 2), np.uint8), colour=4)),
        ("16 bits", png(np.zeros((4, 4), np.uint16), depth=16)),
        ("interlaced", png(np.zeros((4, 4), np.uint8), interlace=1)),
        ("transparency", png(np.zeros((4, 4), np.uint8), before=(chunk(b"tRNS", b"\x00\x00"),))),
        ("text", png(np.zeros((4, 4), np.uint8), before=(chunk(b"tEXt", b"k\x00v"),))),
        (
            "compressed text",
            png(np.zeros((4, 4), np.uint8), after=(chunk(b"zTXt", b"k\x00\x00" + zlib.compress(b"v")),)),
        ),
        ("unknown critical chunk", png(np.zeros((4, 4), np.uint8), before=(chunk(b"ABCD", b""),))),
        ("a palette in a grey image", png(np.zeros((4, 4), np.uint8), palette=bytes(6))),
        ("a palette image without one", png(np.zeros((4, 4), np.uint8), colour=3)),
        ("a short gAMA", png(np.zeros((4, 4), np.uint8), before=(chunk(b"gAMA", b"\x01"),))),
    ],
)
def test_what_it_does_not_take_is_left_to_pillow(why, data):
    assert status(data, 4, 4) == UNSUPPORTED
    assert decoded(data, 4, 4) is None  # the caller decodes it with Pillow, which gives it or refuses it


def _good(height: int = 6, width: int = 5) -> bytes:
    return png(np.arange(height * width, dtype=np.uint8).reshape(height, width), filters=(1, 4), idat_parts=2)


@pytest.mark.parametrize(
    "why, data",
    [
        ("not a PNG", b"GIF89a" + bytes(40)),
        ("empty", b""),
        ("cut in its chunks", _good()[:-20]),
        ("no IEND", _good()[:-12]),
        ("a CRC wrong", _good()[:-4] + b"\x00\x00\x00\x00"),
        ("a zlib stream cut short", png(np.ones((6, 5), np.uint8), stream=zlib.compress(bytes(6 * 6))[:-8])),
        ("a stream of too few rows", png(np.ones((6, 5), np.uint8), stream=zlib.compress(bytes(5 * 6)))),
        ("a stream of too many rows", png(np.ones((6, 5), np.uint8), stream=zlib.compress(bytes(7 * 6)))),
        ("a filter byte of 5", png(np.ones((6, 5), np.uint8), stream=zlib.compress(b"\x05" + bytes(35)))),
        ("data after the stream", png(np.ones((6, 5), np.uint8), stream=zlib.compress(bytes(36)) + b"\x00")),
        ("no IDAT", png(np.ones((6, 5), np.uint8), stream=b"", idat_parts=0)),
        ("IDATs apart", png(np.ones((6, 5), np.uint8), idat_parts=2).replace(b"IDAT", b"IDAT", 1)),
    ],
)
def test_broken_pngs_are_refused(why, data):
    if why == "IDATs apart":  # a tIME chunk between the two IDATs
        first = data.index(b"IDAT") - 4
        length = struct.unpack(">I", data[first : first + 4])[0]
        end = first + 12 + length
        data = data[:end] + chunk(b"tIME", bytes(7)) + data[end:]
    assert status(data, 6, 5) == BROKEN
    if why in PILLOW_TAKES:  # the caller's Pillow decodes it (C is stricter: the rows then Pillow's)
        assert pillow(data).shape == (6, 5)
    else:
        with pytest.raises((OSError, SyntaxError, ValueError)):  # UnidentifiedImageError is an OSError
            pillow(data)


# Pillow does not read the end of a PNG once its rows are in (no IEND, its CRC, what follows the
# rows), and a zlib stream that ends early leaves its last rows as they were allocated
PILLOW_TAKES = {
    "no IEND",
    "a CRC wrong",
    "data after the stream",
    "a stream of too many rows",
    "a stream of too few rows",
}


def test_a_mask_not_of_its_images_size_is_refused_from_its_header():
    assert status(_good(6, 5), 5, 6) == SIZE
    assert status(_good(6, 5), 6, 5) == OK


def test_missing_bytes_and_outputs_of_another_size_are_not_given():
    moves = np.array([[6, 5, 0, 0, 6, 5, 6, 5, 0]] * 3, np.int64)
    outs = [np.empty((6, 5), np.uint8), np.empty((5, 5), np.uint8), None]
    assert list(_masks.move_masks([None, _good(), _good()], moves.tobytes(), outs)) == [NOT_GIVEN] * 3
    with pytest.raises(ValueError):
        _masks.move_masks([_good()], moves.tobytes(), [outs[0]])


@pytest.mark.parametrize(
    "move",
    [
        [2**62, 2, 0, 0, 6, 5, 6, 5, 0],  # sides whose product overflows int64
        [6, 5, 0, 0, 6, 5, 2**40, 2**40, 0],
        [6, 5, 2**62, -(2**62), 6, 5, 6, 5, 0],  # offsets past any image
        [6, 5, 0, 0, 0, 5, 6, 5, 0],  # an empty box
        [-6, 5, 0, 0, 6, 5, 6, 5, 0],
    ],
)
def test_moves_out_of_range_are_not_given_before_any_arithmetic(move):
    out = np.empty((6, 5), np.uint8)
    assert _masks.move_masks([_good()], np.array([move], np.int64).tobytes(), [out])[0] == NOT_GIVEN


def reference_move(mask: np.ndarray, move: list[int]) -> np.ndarray:
    """torchvision v2's moves of a Mask, in torch: a crop padded with zeros, torch's nearest
    interpolate, a flip."""
    _, _, top, left, box_h, box_w, out_h, out_w, flip = move
    chw = torch.from_numpy(mask)[None, None].float()
    padded = torch.zeros((1, 1, box_h, box_w))
    y0, y1, x0, x1 = max(top, 0), min(top + box_h, mask.shape[0]), max(left, 0), min(left + box_w, mask.shape[1])
    if y0 < y1 and x0 < x1:
        padded[..., y0 - top : y1 - top, x0 - left : x1 - left] = chw[..., y0:y1, x0:x1]
    out = torch.nn.functional.interpolate(padded, size=(out_h, out_w), mode="nearest")
    out = out.flip(-1) if flip else out
    return out[0, 0].to(torch.uint8).numpy()


def test_moves_equal_torchs_crop_nearest_resize_and_flip():
    rng = np.random.default_rng(7)
    datas, moves, masks = [], [], []
    for _ in range(400):
        h, w = (int(v) for v in rng.integers(1, 50, 2))
        mask = rng.integers(0, 256, (h, w), dtype=np.uint8)
        box_h, box_w = (int(v) for v in rng.integers(1, 70, 2))
        top, left = int(rng.integers(-10, h)), int(rng.integers(-10, w))
        out_h = int(rng.choice([box_h, 2 * box_h, int(rng.integers(1, 90))]))
        out_w = int(rng.choice([box_w, 2 * box_w, int(rng.integers(1, 90))]))
        datas.append(pillow_saved(mask, "L"))
        moves.append([h, w, top, left, box_h, box_w, out_h, out_w, int(rng.integers(0, 2))])
        masks.append(mask)
    got = decode_moved_masks(datas, np.array(moves, np.int64))
    for mask, move, out in zip(masks, moves, got):
        assert out is not None
        np.testing.assert_array_equal(out.numpy(), reference_move(mask, move), err_msg=str(move))
    assert len(MOVE_FIELDS) == 9


FUZZ_CHILD = (
    CAP_AFTER_IMPORTS
    + r"""
import io, json, random, struct, sys, zlib
import numpy as np
preload("PIL.Image", "PIL.PngImagePlugin", "iotool._masks")
from PIL import Image
from iotool import _masks
from tests.support.pngwriter import png
cap_address_space(256 << 20)

def resign(data):
    # every chunk's CRC made right again, so the mutation reaches the decoder's checks past them
    out, at = bytearray(data[:8]), 8
    while at + 12 <= len(data):
        length = struct.unpack(">I", data[at:at + 4])[0]
        if at + 12 + length > len(data):
            break
        body = data[at + 4:at + 8 + length]
        out += data[at:at + 8 + length] + struct.pack(">I", zlib.crc32(body))
        at += 12 + length
    return bytes(out + data[at:])

rng = random.Random(int(sys.argv[1]))
taken = refused = 0
for case in range(int(sys.argv[2])):
    h, w = rng.randint(1, 24), rng.randint(1, 24)
    depth, colour = rng.choice([(1, 0), (2, 0), (4, 0), (8, 0), (1, 3), (2, 3), (4, 3), (8, 3)])
    values = np.array([[rng.randrange(1 << depth) for _ in range(w)] for _ in range(h)], np.uint8)
    data = bytearray(png(values, depth, colour, (rng.randrange(5), rng.randrange(5)),
                         palette=bytes(3 << depth) if colour == 3 else None, idat_parts=rng.randint(1, 3)))
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data))
        how = rng.random()
        if how < 0.5:
            data[at] = rng.randrange(256)
        elif how < 0.7:
            del data[at:at + rng.randint(1, 16)]
        elif how < 0.85:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            data[at:at + 4] = struct.pack(">I", rng.choice([0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1]))
    data = resign(bytes(data)) if rng.random() < 0.8 else bytes(data)
    out = np.empty((h, w), np.uint8)
    move = np.array([[h, w, 0, 0, h, w, h, w, 0]], np.int64).tobytes()
    if _masks.move_masks([data], move, [out])[0] != 0:
        refused += 1
        continue
    taken += 1
    with Image.open(io.BytesIO(data)) as img:  # what C took, Pillow takes, to the same values
        want = np.array(img, dtype=np.uint8)
    assert img.size == (w, h) and (want == out).all(), (case, data.hex())
print(json.dumps({"taken": taken, "refused": refused}))
"""
)


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_pngs_are_refused_or_decoded_as_pillow_decodes_them(seed):
    """Mutated PNGs (bytes changed, cut, inserted, lengths set to boundaries; most CRCs made right
    again) in a child capped in address space and time: no crash, and every one C takes Pillow
    takes to the same values."""
    done = run_capped(FUZZ_CHILD, str(seed), "1500", timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert counts["taken"] > 50 and counts["refused"] > 500, counts
