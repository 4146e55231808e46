"""``iotool._tfrecord.image_spans`` (the tfrecord runs' image bytes, found in C with the GIL
released) against the Python steps it stands in for (``framing.unframe`` then
``example.find_bytes``): on iotool's own records, on hand-made Examples (repeated names, unknown
fields, packed and unpacked lists, several kind fields, empty lists, names that are not ASCII)
and on thousands of mutated ones (CRCs made to match again, so the walk is what is tested), a span
it gives is always the bytes Python gives, and it gives None wherever Python raises or finds no
image. Its CRC32C is google-crc32c's. The mutations run in a capped child process."""

from __future__ import annotations

import os
import textwrap

import pytest

from iotool.formats.tfrecord import example, framing

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

_tfrecord = pytest.importorskip("iotool._tfrecord", reason="iotool's C extension iotool._tfrecord is not built")
pytestmark = pytest.mark.skipif(_tfrecord.crc32c(b"") is None, reason="the CPU has no CRC32C instruction (SSE4.2)")

IMAGE = example.IMAGE.encode()


def python_image(raw: bytes) -> bytes | None:
    """What TfrecordReader._payload gives for ``raw``: the image bytes, or None where it raises."""
    try:
        image = example.find_bytes(framing.unframe(raw, "f", 0), example.IMAGE)
    except Exception:
        return None
    return None if image is None else bytes(image)


def c_image(raw: bytes) -> bytes | None:
    (span,) = _tfrecord.image_spans([raw], IMAGE, framing.MAX_RECORD_BYTES)
    return None if span is None else raw[span[0] : span[1]]


def entry(name: bytes, feature: bytes | None) -> bytes:
    body = example._field(1, name) + (example._field(2, feature) if feature is not None else b"")
    return example._field(1, body)


def made(*entries: bytes, extra: bytes = b"") -> bytes:
    return framing.frame(extra + example._field(1, b"".join(entries)))


JPEG = b"\xff\xd8fake-jpeg\xff\xd9"
CASES = {
    "iotool's record": framing.frame(
        example.encode_example(
            {
                "image/encoded": ("bytes", [JPEG]),
                "image/class/label": ("int64", [3]),
                "image/filename": ("bytes", [b"a/b.jpg"]),
                "image/height": ("int64", [12]),
            }
        )
    ),
    "the last entry wins": made(
        entry(b"image/encoded", example.encode_feature("bytes", [b"first"])),
        entry(b"image/encoded", example.encode_feature("bytes", [b"second", b"third"])),
    ),
    "the last kind field wins": made(
        entry(b"image/encoded", example.encode_feature("bytes", [JPEG]) + example.encode_feature("int64", [1]))
    ),
    "a bytes field after an int64 one": made(
        entry(b"image/encoded", example.encode_feature("int64", [1, -5]) + example.encode_feature("bytes", [JPEG]))
    ),
    "an empty list": made(entry(b"image/encoded", example.encode_feature("bytes", []))),
    "no Feature": made(entry(b"image/encoded", None)),
    "absent": made(entry(b"image/other", example.encode_feature("bytes", [JPEG]))),
    "unknown fields everywhere": made(
        entry(b"image/encoded", example._field(9, b"zz") + example.encode_feature("bytes", [JPEG])),
        extra=example._varint(7 << 3 | 0) + example._varint(300) + example._varint(6 << 3 | 5) + b"abcd",
    ),
    "a non-ASCII name elsewhere": made(
        entry("bild/é".encode(), example.encode_feature("bytes", [b"x"])),
        entry(b"image/encoded", example.encode_feature("bytes", [JPEG])),
    ),
    "a name that is not UTF-8": made(
        entry(b"\xff\xfe", example.encode_feature("bytes", [b"x"])),
        entry(b"image/encoded", example.encode_feature("bytes", [JPEG])),
    ),
    "packed floats of a bad length": made(
        entry(b"image/encoded", example._field(2, example._field(1, b"abc")) + example.encode_feature("bytes", [JPEG]))
    ),
    "a group wire type": made(entry(b"image/encoded", example.encode_feature("bytes", [JPEG]) + b"\x0b")),
    "a data CRC that does not match": framing.frame(example.encode_example({"image/encoded": ("bytes", [JPEG])}))[:-1]
    + b"\x00",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_made_record_gives_what_python_gives_or_is_left_to_it(case):
    raw = CASES[case]
    got, want = c_image(raw), python_image(raw)
    assert got is None or got == want
    if case in (
        "iotool's record",
        "the last entry wins",
        "a bytes field after an int64 one",
        "unknown fields everywhere",
    ):
        assert got == want and got is not None  # the ordinary cases are found in C, not left


def test_its_crc32c_is_google_crc32cs():
    import google_crc32c

    for n in (0, 1, 7, 8, 9, 63, 64, 65, 4096, 66_001):
        data = os.urandom(n)
        assert _tfrecord.crc32c(data) == google_crc32c.value(data)


def test_records_of_a_real_shard_are_all_found_in_c(tmp_path):
    import iotool

    from ..conftest import SAMPLE

    dst = tmp_path / "d.tfrecord"
    iotool.convert(SAMPLE, dst, "tfrecord", workers=0)
    reader = iotool.open_reader(dst)
    order = list(range(len(reader)))[::-1]
    raws = [bytes(reader._read_span(*reader._location(i))) for i in order]
    spans = _tfrecord.image_spans(raws, IMAGE, framing.MAX_RECORD_BYTES)
    assert all(span is not None for span in spans)
    assert [raw[a:b] for raw, (a, b) in zip(raws, spans)] == [reader.read(i)[0] for i in order]


CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import random, struct, sys
    from iotool import _tfrecord
    from iotool.formats.tfrecord import example, framing
    from tests.formats.test_tfrecord_spans import CASES, IMAGE, python_image

    rng = random.Random(int(sys.argv[1]))
    preload()
    cap_address_space(256 << 20)
    seeds = list(CASES.values())
    found = mismatched = python_found = 0
    for _ in range(int(sys.argv[2])):
        raw = bytearray(rng.choice(seeds))
        data = raw[12:-4]
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(4)
            if kind == 0 and data:  # a byte
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind == 1 and data:  # a cut
                del data[rng.randrange(len(data)):]
            elif kind == 2:  # a varint of 0x80s, a huge length, a field number 0
                at = rng.randrange(len(data) + 1)
                data[at:at] = rng.choice([b"\\x80" * 11, b"\\x0a\\xff\\xff\\xff\\xff\\x0f", b"\\x00", b"\\x0a\\x00"])
            elif data:  # a run of bytes moved
                a = rng.randrange(len(data))
                data[a:a] = data[rng.randrange(len(data)):][:8]
        if rng.random() < 0.9:
            raw = bytearray(framing.frame(bytes(data)))  # CRCs made to match: the walk is tested
        elif rng.random() < 0.5:
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        raw = bytes(raw)
        (span,) = _tfrecord.image_spans([raw], IMAGE, framing.MAX_RECORD_BYTES)
        want = python_image(raw)
        python_found += want is not None
        if span is not None:
            found += 1
            mismatched += raw[span[0]:span[1]] != want
    print("ok", found, mismatched, python_found)
    """
)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutated_records_never_give_other_bytes_than_python(seed):
    out = run_capped(CHILD, str(seed), "3000", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    words = out.stdout.split()
    assert words[0] == "ok" and int(words[2]) == 0, out.stdout
    # many mutants still parse (the comparison has teeth), and C finds most that Python does (it
    # leaves records with a non-ASCII name to Python: one seed of 13 has one)
    assert int(words[1]) > 40 and int(words[1]) >= 0.75 * int(words[3]), out.stdout
