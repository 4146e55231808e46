"""Hostile bytes through the runs' C code (``iotool._jpegregion.run_samples``,
``iotool._resize.run_samples`` and ``run_packed``, the latter also with hostile spans): mutated JPEG and BMP headers and bodies (huge or zero sizes,
offsets past the end, truncations, stray markers, bit flips) neither crash nor hang the
interpreter nor grow its memory past a small cap: each sample is written or left to the
per-sample path. Run in a capped child process with a time limit."""

from __future__ import annotations

import os
import textwrap

import pytest

from iotool.transforms import draws

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")

CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import io, random, struct, sys
    import numpy as np
    from PIL import Image
    from iotool import _jpegregion, _resize
    from iotool.decode import region, segments
    from iotool.decode.bmp import encode_bmp

    rng = random.Random(int(sys.argv[1]))
    gen = np.random.default_rng(int(sys.argv[1]))

    def jpeg(w, h):
        buf = io.BytesIO()
        Image.fromarray(gen.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG", quality=80)
        return buf.getvalue()

    def mutate(data, header_end):
        data = bytearray(data)
        kind = rng.randrange(5)
        if kind == 0:  # bytes of the header
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(min(header_end, len(data)))] = rng.randrange(256)
        elif kind == 1:  # anywhere
            for _ in range(rng.randint(1, 16)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 2:  # truncated
            del data[rng.randrange(2, len(data)):]
        elif kind == 3:  # stray markers in the body
            at = rng.randrange(header_end, len(data)) if header_end < len(data) else 2
            data[at:at + 8] = b"\\xff\\xd5" * 4
        else:  # a huge or zero size where the frame or info header keeps it
            return bytes(data), True
        return bytes(data), False

    preload()
    cap_address_space(512 << 20)
    rows = np.zeros((16, 3, 24, 24), np.uint8)
    crop = (0, 24, 24, 0.05, 1.0, 0.5, 2.0, 0.5, 1.0, 89_478_485)
    jpegs = [jpeg(rng.randint(8, 96), rng.randint(8, 96)) for _ in range(8)]
    written = left = 0
    for _ in range(int(sys.argv[2])):
        sources = []
        for _ in range(16):
            data = rng.choice(jpegs)
            sof = data.find(b"\\xff\\xc0")
            out, size = mutate(data, sof + 10)
            if size and sof > 0:  # height and width in the frame header
                out = out[: sof + 5] + struct.pack(">HH", rng.choice([0, 1, 65535]), rng.choice([0, 1, 65535])) + out[sof + 9 :]
            sources.append(out)
        status = _jpegregion.run_samples(region.LIBRARY.handle, crop, sources, (1, 2, 3), list(range(16)), rows, 0,
                                         segments.TAG, segments.VERSION)
        written += status.count(0)
        left += status.count(1)
        bmps = []
        for _ in range(16):
            data = encode_bmp(gen.integers(0, 256, (rng.randint(1, 40), rng.randint(1, 40), 3), dtype=np.uint8))
            out, size = mutate(data, 54)
            if size:  # width, height and the pixel offset
                out = out[:10] + struct.pack("<I", rng.choice([0, 54, 2**32 - 1])) + out[14:18] + struct.pack(
                    "<ii", rng.choice([0, 1, 2**24, 2**31 - 1]), rng.choice([0, -1, -(2**24), -(2**31), 2**31 - 1])
                ) + out[26:]
            bmps.append(out)
        op = (0, 3, 24, 24, 0.05, 1.0, 0.5, 2.0, 0.5)
        status = _resize.run_samples(op, bmps, True, (1, 2, 3), list(range(16)), rows, 0)
        written += status.count(0)
        left += status.count(1)
        blob, spans, at = b"".join(bmps), [], 0  # the same files read into one buffer, some spans hostile
        for data in bmps:
            spans += rng.choice([(at, at + len(data))] * 3 + [(-1, -1), (at, len(blob) + 1), (at + 5, at), (-(2**63), 2**63 - 1)])
            at += len(data)
        packed = _resize.run_packed(op, blob, struct.pack("<32q", *spans), (1, 2, 3), list(range(16)), rows, 0)
        written += packed.count(0)
        left += packed.count(1)
    print(written, left)
    """
)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutated_jpegs_and_bmps_are_written_or_left_never_a_crash(seed):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc to cap the child's address space")
    from iotool.decode import region

    if not region.region_available():
        pytest.skip("the JPEG region decoder is not built")
    proc = run_capped(CHILD, str(seed), "200")
    assert proc.returncode == 0, proc.stderr[-2000:]
    written, left = map(int, proc.stdout.split())
    assert written + left == 200 * 48 and written > 0 and left > 0  # both outcomes occurred
