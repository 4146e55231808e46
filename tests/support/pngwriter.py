"""A small PNG writer for tests: any bit depth, colour type and row filter, chunks in any order
and split as asked, so the mask decoder (``csrc/_masks_png.c``) meets what Pillow's encoder never
writes (greyscale of 2 and 4 bits, every filter type, IDAT split anywhere, ancillary chunks).
Independent of iotool: Python's zlib and the PNG specification's filters."""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    """One chunk: length, type, body, CRC (the right one unless ``crc`` is given)."""
    value = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", value & 0xFFFFFFFF)


def packed_rows(values: np.ndarray, depth: int) -> list[bytes]:
    """Each row of the (H, W) ``values`` packed at ``depth`` bits, most significant first."""
    rows = []
    for row in values.astype(np.uint16):
        if depth == 16:
            rows.append(row.astype(">u2").tobytes())
            continue
        per = 8 // depth
        padded = np.concatenate([row, np.zeros((-len(row)) % per, np.uint16)]).reshape(-1, per)
        shifts = np.array([8 - depth * (i + 1) for i in range(per)], np.uint16)
        rows.append((padded << shifts).sum(axis=1).astype(np.uint8).tobytes())
    return rows


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def filtered(rows: list[bytes], filters: list[int], bpp: int = 1) -> bytes:
    """The rows filtered, row ``y`` by ``filters[y % len(filters)]`` (0 to 4), each after its
    filter byte: what a PNG's zlib stream holds."""
    out, prior = bytearray(), bytes(len(rows[0]) if rows else 0)
    for y, row in enumerate(rows):
        kind = filters[y % len(filters)]
        line = bytearray([kind])
        for i, x in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b = prior[i]
            c = prior[i - bpp] if i >= bpp else 0
            guess = (0, a, b, (a + b) >> 1, _paeth(a, b, c))[kind]
            line.append((x - guess) & 0xFF)
        out += line
        prior = row
    return bytes(out)


def png(
    values: np.ndarray,
    depth: int = 8,
    colour: int = 0,
    filters: tuple[int, ...] = (0,),
    palette: bytes | None = None,
    before: tuple[bytes, ...] = (),
    after: tuple[bytes, ...] = (),
    idat_parts: int = 1,
    interlace: int = 0,
    stream: bytes | None = None,
) -> bytes:
    """A PNG of ``values`` (H x W, or H x W x C for colour types 2, 4, 6): IHDR, then ``before``
    (whole chunks), the palette where given, the data in ``idat_parts`` IDAT chunks (``stream``
    instead of the compressed rows where given), ``after``, IEND."""
    height, width = values.shape[:2]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    flat = values.reshape(height, width * channels)
    bpp = max(1, depth * channels // 8)
    data = zlib.compress(filtered(packed_rows(flat, depth), list(filters), bpp)) if stream is None else stream
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
    cuts = np.linspace(0, len(data), idat_parts + 1).astype(int)
    idats = b"".join(chunk(b"IDAT", data[a:b]) for a, b in zip(cuts[:-1], cuts[1:]))
    plte = chunk(b"PLTE", palette) if palette is not None else b""
    return SIGNATURE + chunk(b"IHDR", ihdr) + b"".join(before) + plte + idats + b"".join(after) + chunk(b"IEND", b"")
