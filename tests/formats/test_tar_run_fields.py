"""A tar dataset's fields read a run at a time (``TarReader.read_run_fields``): the headers of a
run's members checked together by :func:`iotool.formats.tar.headers.plain_members`, never looser
than ``tarfile`` (``check_member``), and the values the same as a record read alone."""

from __future__ import annotations

import random
import tarfile

import numpy as np
import pytest

import iotool
from iotool.formats.tar.headers import BLOCK, plain_members
from iotool.formats.tar.reader import check_member

from ..support.fields import convert_fields, schema_of


def header(name: str, size: int, fmt: int, **info) -> bytes:
    """The header block ``tarfile`` writes for a regular member (PAX and GNU long names give
    extra blocks first: the last block is the member's own)."""
    member = tarfile.TarInfo(name)
    member.size = size
    for key, value in info.items():
        setattr(member, key, value)
    block = member.tobuf(fmt, "utf-8", "surrogateescape")
    return block[-BLOCK:]


def tarfile_says(block: bytes, name: str, size: int) -> bool:
    try:
        check_member(block, name, size, "test")
    except iotool.RecordError:
        return False
    return True


def as_rows(blocks: list[bytes]) -> np.ndarray:
    return np.frombuffer(bytearray(b"".join(blocks)), np.uint8).reshape(-1, BLOCK)


def expected_name(name: str) -> bytes:
    return name.encode("ascii", "replace")[: tarfile.LENGTH_NAME]


@pytest.mark.parametrize(
    "fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["ustar", "gnu", "pax"]
)
def test_headers_tarfile_writes_pass_as_tarfile_reads_them(fmt):
    rng = random.Random(fmt)
    names = ["a.txt", "x" * 95 + ".json", "s0000001.seg.png", "d/e.txt"]
    if fmt != tarfile.USTAR_FORMAT:  # a longer name: its own blocks first, the header's cut at 100
        names.append("k" * 99 + ".t")
    cases = [(n, rng.choice([0, 1, 511, 512, 10**6, 8**11 - 1]), rng.randrange(2**21)) for n in names for _ in range(4)]
    blocks = [header(n, size, fmt, mtime=mtime, mode=0o644) for n, size, mtime in cases]
    want = [tarfile_says(b, n, size) for b, (n, size, _) in zip(blocks, cases)]
    got = plain_members(as_rows(blocks), [expected_name(n) for n, _, _ in cases], np.array([c[1] for c in cases]))
    assert sum(want) == len(cases)  # tarfile finds each member it wrote (a long name cut as it checks it)
    assert got.tolist() == want


def test_another_name_size_type_or_checksum_is_left_to_tarfile():
    good = header("s1.txt", 10, tarfile.GNU_FORMAT)
    rows = as_rows([good] * 6)
    rows[2, 156] = ord("5")  # a directory
    rows[3, 150] ^= 1  # the checksum
    names = [b"s1.txt", b"s1.tx", b"s1.txt", b"s1.txt", b"s1.txt", b"s1.txt"]
    sizes = np.array([10, 10, 10, 10, 11, 10])
    rows[5, 345] = ord("p")  # a ustar prefix (frombuf prepends it to the name)
    assert plain_members(rows, names, sizes).tolist() == [True, False, False, False, False, False]


def test_mutated_headers_pass_only_where_tarfile_finds_that_member():
    """Never looser than tarfile: 20,000 headers with bytes changed (the checksum made right again
    in most), each passed only where ``check_member`` passes it too."""
    rng = random.Random(11)
    blocks, names, sizes = [], [], []
    for _ in range(20000):
        name, size = rng.choice(["a.txt", "s00001.json", "q" * 100]), rng.choice([0, 7, 4096])
        block = bytearray(header(name, size, rng.choice([tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])))
        for _ in range(rng.randint(1, 3)):
            block[rng.randrange(BLOCK)] = rng.choice(
                [0, 32, ord("0"), ord("7"), ord("8"), 0o200, 0o377, rng.randrange(256)]
            )
        if rng.random() < 0.8:  # the checksum made right, so the other checks are reached
            block[148:156] = b" " * 8
            block[148:156] = b"%06o\0 " % (sum(block) & 0o777777)
        blocks.append(bytes(block))
        names.append(name)
        sizes.append(size if rng.random() < 0.9 else size + 1)
    got = plain_members(as_rows(blocks), [expected_name(n) for n in names], np.array(sizes))
    looser = [k for k in np.flatnonzero(got).tolist() if not tarfile_says(blocks[k], names[k], sizes[k])]
    assert looser == []
    assert got.sum() > 2000  # the fast check still vouches for most plain headers


FIELDS = ("txt", "json", "count", "emb")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("tar-runs") / "f.tar"
    convert_fields(path, "tar", schema_of(*FIELDS), 12)
    return path


def test_a_run_reads_the_values_a_record_reads_alone(shards):
    reader = iotool.open_reader(shards)
    indices = [5, 0, 11, 3, 3, 7]
    run = reader.read_run_fields(indices, FIELDS)
    for i, got in zip(indices, run):
        assert got is not None
        alone = reader.read_fields(i, FIELDS)
        assert {k: bytes(v) for k, v in got.items()} == alone
    members = {}
    with tarfile.open(str(next(p for p in sorted(shards.glob("*.tar"))))) as tar:  # the real tarfile: same bytes
        for member in tar:
            members[member.name] = tar.extractfile(member).read()
    key = reader.member_keys[0]
    if f"{key}.txt" in members:
        assert bytes(run[1]["txt"]) == members[f"{key}.txt"]


def test_a_member_not_where_the_index_places_it_fails_its_record_alone(shards, tmp_path):
    copy = tmp_path / "copy.tar"
    convert_fields(copy, "tar", schema_of(*FIELDS), 12)
    reader = iotool.open_reader(copy)
    offset, _ = _location(reader, 4, "txt")
    shard = next(p for p in sorted(copy.glob("*.tar")))
    data = bytearray(shard.read_bytes())
    data[offset - BLOCK] ^= 0x20  # the member's name changed (its checksum now wrong too)
    shard.write_bytes(bytes(data))
    reader = iotool.open_reader(copy)
    run = reader.read_run_fields(list(range(12)), FIELDS)
    assert [k for k, got in enumerate(run) if got is None] == [4]
    with pytest.raises(iotool.RecordError, match="record 4, field 'txt'"):
        reader.read_fields(4, FIELDS)


def _location(reader, index: int, name: str) -> tuple[int, int]:
    from iotool.formats.sharded.fieldcols import location_column

    offset, size = (int(v) for v in reader.column(location_column(name))[index])
    return offset, size
