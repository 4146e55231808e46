"""``iotool.merge``, ``split`` and ``subset``: every output record is its input record byte for byte
(image, checksum, class name, fields), read with the formats' own libraries; ``verify`` is clean;
classes and fields are reconciled by name; split shares are exact per class; each selector of a
subset takes what an independent computation says; bad inputs are refused by name."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from pathlib import Path

import pytest

import iotool
from iotool.errors import UsageError
from iotool.fields import FieldSpec, Schema

from ..support.fields import convert_fields, schema_of
from ..support.stored import member_keys, webdataset_keys
from .reshape_support import assert_copied, assert_verified, make_folder, read, same_keys

FIRST = {"cat": ["c0", "c1", "c2"], "dog": ["d0", "d1"]}
SECOND = {"dog": ["d2", "d3"], "fish": ["f0", "f1", "f2"]}  # a class of FIRST's and a new one
UNEVEN = {"ant": [f"a{i}" for i in range(7)], "bee": [f"b{i}" for i in range(5)], "cat": ["c0"]}
UNEVEN |= {"dog": [f"d{i}" for i in range(10)]}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """FIRST as an lmdb, SECOND as tar shards of 2 records, UNEVEN as an lmdb and an hdf5 file."""
    root = tmp_path_factory.mktemp("reshape")
    iotool.convert(make_folder(root / "first", FIRST), root / "first.lmdb", "lmdb", workers=0)
    iotool.convert(make_folder(root / "second", SECOND, seed=1), root / "second.tar", "tar", workers=0, shard_size=2)
    uneven = make_folder(root / "uneven", UNEVEN, seed=2)
    iotool.convert(uneven, root / "uneven.lmdb", "lmdb", workers=0)
    iotool.convert(uneven, root / "uneven.h5", "hdf5", workers=0)
    return {"first": root / "first.lmdb", "second": root / "second.tar", "uneven": root / "uneven.lmdb"} | {
        "uneven_h5": root / "uneven.h5"
    }


# --- merge -------------------------------------------------------------------------------------


@pytest.mark.parametrize("to", [None, "tar", "hdf5"])
def test_merge_of_an_lmdb_and_tar_shards_copies_every_record_and_unites_the_classes(data, tmp_path, to):
    first, second = read(data["first"]), read(data["second"])
    dst = tmp_path / "merged"
    report = iotool.merge([data["first"], data["second"]], dst, to=to, workers=2)
    out = read(dst)
    assert out.meta["format"] == (to or "lmdb") and report.outputs[0].format == (to or "lmdb")
    assert out.classes == ["cat", "dog", "fish"]  # FIRST's in order, then SECOND's new one
    assert_copied(out, same_keys(first, first.keys) | same_keys(second, second.keys))
    assert report.relabelled == [0, 2]  # SECOND's dog 0 -> 1, fish 1 -> 2
    assert report.outputs[0].per_class == {"cat": 3, "dog": 4, "fish": 3}
    assert_verified(dst)
    if to == "tar":
        assert sorted(webdataset_keys(dst)) == sorted(member_keys(dst))
        assert out.meta["options"]["order"] == "shuffled"  # convert's default for shards
        assert out.keys != [*first.keys, *second.keys]


def test_merge_in_source_order_keeps_each_inputs_order(data, tmp_path):
    iotool.merge([data["second"], data["first"]], tmp_path / "m", to="tar", order="source", workers=0)
    first, second = read(data["first"]), read(data["second"])
    assert read(tmp_path / "m").keys == [*second.keys, *first.keys]
    assert read(tmp_path / "m").classes == ["dog", "fish", "cat"]


def test_merge_refuses_a_key_two_inputs_hold_naming_both(data, tmp_path):
    with pytest.raises(UsageError) as caught:
        iotool.merge([data["uneven"], data["uneven_h5"]], tmp_path / "m", workers=0)
    message = str(caught.value)
    assert str(data["uneven"]) in message and str(data["uneven_h5"]) in message and "23 keys" in message
    assert not (tmp_path / "m").exists()


def test_merge_on_duplicate_skip_leaves_out_the_later_record(data, tmp_path):
    lmdb = read(data["uneven"])
    report = iotool.merge([data["uneven"], data["uneven_h5"]], tmp_path / "m", on_duplicate="skip", workers=0)
    assert_copied(read(tmp_path / "m"), same_keys(lmdb, lmdb.keys))
    assert len(report.clashes) == 23 and all(c.new_key is None for c in report.clashes)


def test_merge_on_duplicate_prefix_keeps_both_under_the_inputs_name(data, tmp_path):
    lmdb, h5 = read(data["uneven"]), read(data["uneven_h5"])
    report = iotool.merge([data["uneven"], data["uneven_h5"]], tmp_path / "m", on_duplicate="prefix", workers=0)
    expected = same_keys(lmdb, lmdb.keys) | {f"uneven/{k}": (h5, k) for k in h5.keys}
    assert_copied(read(tmp_path / "m"), expected)
    assert {c.new_key for c in report.clashes} == {f"uneven/{k}" for k in h5.keys}
    assert_verified(tmp_path / "m")


def test_merge_keeps_field_bytes_and_refuses_a_field_only_one_input_has(data, tmp_path):
    names = ("txt", "json", "emb", "seg.png", "boxes")
    convert_fields(tmp_path / "f.lmdb", "lmdb", schema_of(*names), n=4)
    convert_fields(tmp_path / "g.lmdb", "lmdb", schema_of(*names), n=4)
    f, g = read(tmp_path / "f.lmdb"), read(tmp_path / "g.lmdb")
    iotool.merge([tmp_path / "f.lmdb", tmp_path / "g.lmdb"], tmp_path / "fg", on_duplicate="prefix", to="tar")
    out = read(tmp_path / "fg")
    assert_copied(out, same_keys(f, f.keys) | {f"g/{k}": (g, k) for k in g.keys})
    assert all(set(r.fields) == set(names) for r in out.records.values())
    assert_verified(tmp_path / "fg")

    with pytest.raises(UsageError, match=r"has the fields txt, json, emb, seg\.png, boxes and .* has not"):
        iotool.merge([tmp_path / "f.lmdb", data["first"]], tmp_path / "x", workers=0)
    iotool.merge([tmp_path / "f.lmdb", data["first"]], tmp_path / "x", fields="class", workers=0)
    assert read(tmp_path / "x").meta.get("fields") is None and len(read(tmp_path / "x").records) == 9


def test_merge_refuses_one_name_for_two_kinds_of_field(tmp_path):
    convert_fields(tmp_path / "text.lmdb", "lmdb", Schema((FieldSpec("txt", "text"),)), n=2)
    convert_fields(tmp_path / "json.lmdb", "lmdb", Schema((FieldSpec("txt", "json"),)), n=2)
    with pytest.raises(UsageError, match=r"field 'txt': kind 'text' in .*text\.lmdb but 'json' in .*json\.lmdb"):
        iotool.merge([tmp_path / "text.lmdb", tmp_path / "json.lmdb"], tmp_path / "x", on_duplicate="prefix")
    assert not (tmp_path / "x").exists()


def test_merge_needs_two_inputs(data, tmp_path):
    with pytest.raises(UsageError, match="two or more"):
        iotool.merge([data["first"]], tmp_path / "x")


# --- split -------------------------------------------------------------------------------------


def rule_b(keys: list[str], classes: list[str | None], fraction: float, seed: int) -> set[str]:
    """The documented rule, computed here: per group, the round-half-up share of the keys whose
    BLAKE2b-64 (keyed with the seed as 16 little-endian bytes) is lowest."""
    salt = seed.to_bytes(16, "little")
    groups: dict[str | None, list[str]] = {}
    for key, cls in zip(keys, classes):
        groups.setdefault(cls, []).append(key)
    out = set()
    for members in groups.values():
        ranked = sorted(members, key=lambda k: hashlib.blake2b(k.encode(), digest_size=8, key=salt).digest())
        out |= set(ranked[: math.floor(len(members) * fraction + 0.5)])
    return out


@pytest.mark.parametrize("src", ["uneven", "uneven_h5"])
@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.05])
def test_split_by_class_gives_each_class_its_share_exact_to_one_record(data, tmp_path, src, fraction):
    source = read(data[src])  # 0.05: every class rounds to 0 but dog (10 x 0.05 = 0.5, rounded up)
    report = iotool.split(data[src], tmp_path / "a", tmp_path / "b", fraction=fraction, seed=3, stratify="class")
    a, b = read(tmp_path / "a"), read(tmp_path / "b")
    have = Counter(r.cls for r in source.records.values())
    got_b, got_a = Counter(r.cls for r in b.records.values()), Counter(r.cls for r in a.records.values())
    for cls, n in have.items():
        assert abs(got_b[cls] - n * fraction) <= 0.5 and got_a[cls] + got_b[cls] == n
    assert_copied(a, same_keys(source, a.keys))
    assert_copied(b, same_keys(source, b.keys))
    assert set(a.keys).isdisjoint(b.keys) and set(a.keys) | set(b.keys) == set(source.keys)
    classes = [r.cls for r in source.records.values()]
    assert set(b.keys) == rule_b(source.keys, classes, fraction, 3)
    assert a.classes == b.classes == source.classes  # class indices unchanged on both sides
    assert [k for k in source.keys if k in set(a.keys)] == a.keys  # the input's order
    assert [o.per_class for o in report.outputs] == [{c: got[c] for c in source.classes} for got in (got_a, got_b)]
    assert_verified(tmp_path / "a")
    assert_verified(tmp_path / "b")


def test_split_without_stratify_takes_the_share_of_all_records_by_the_rule(data, tmp_path):
    source = read(data["uneven"])
    iotool.split(data["uneven"], tmp_path / "a", tmp_path / "b", fraction=0.25, seed=7, workers=0)
    b = read(tmp_path / "b")
    assert len(b.records) == round(23 * 0.25) == 6
    assert set(b.keys) == rule_b(source.keys, [None] * 23, 0.25, 7)
    iotool.split(data["uneven"], tmp_path / "a2", tmp_path / "b2", fraction=0.25, seed=7, to="tar", workers=2)
    assert set(read(tmp_path / "b2").keys) == set(b.keys)  # the same choice, whatever the format and workers
    iotool.split(data["uneven"], tmp_path / "a3", tmp_path / "b3", fraction=0.25, seed=8, workers=0)
    assert set(read(tmp_path / "b3").keys) != set(b.keys)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fraction": 1.5}, r"fraction=1\.5: give a number between 0 and 1"),
        ({"fraction": 0}, r"fraction=0: give a number between 0 and 1"),
        ({"fraction": 0.01}, "gives no record to the second output"),
        ({"fraction": 0.3, "stratify": "size"}, r"stratify='size'; choose one of: class"),
        ({"fraction": 0.3, "seed": -1}, r"seed=-1"),
    ],
)
def test_split_refuses_a_bad_option_by_name(data, tmp_path, kwargs, match):
    with pytest.raises(UsageError, match=match):
        iotool.split(data["uneven"], tmp_path / "a", tmp_path / "b", **kwargs)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_split_stratified_needs_a_class(tmp_path):
    convert_fields(tmp_path / "nc.lmdb", "lmdb", schema_of("txt", with_class=False), n=4)
    with pytest.raises(UsageError, match="stratify=class needs a class"):
        iotool.split(tmp_path / "nc.lmdb", tmp_path / "a", tmp_path / "b", fraction=0.5, stratify="class")


# --- subset ------------------------------------------------------------------------------------


def test_subset_by_classes_keeps_the_class_list_and_indices(data, tmp_path):
    source = read(data["uneven"])
    iotool.subset(data["uneven"], tmp_path / "s", classes="bee,cat", workers=0)
    out = read(tmp_path / "s")
    assert_copied(out, same_keys(source, [k for k, r in source.records.items() if r.cls in ("bee", "cat")]))
    assert out.classes == source.classes
    assert_verified(tmp_path / "s")


def test_subset_by_fraction_is_what_split_gives_its_second_output(data, tmp_path):
    iotool.subset(data["uneven"], tmp_path / "s", fraction=0.3, seed=3, stratify="class", to="tar")
    iotool.split(data["uneven"], tmp_path / "a", tmp_path / "b", fraction=0.3, seed=3, stratify="class")
    assert sorted(read(tmp_path / "s").keys) == sorted(read(tmp_path / "b").keys)
    assert_verified(tmp_path / "s")


def test_subset_first_n_in_the_datasets_order(data, tmp_path):
    source = read(data["second"])  # tar shards written in a shuffled order: "first" is that order
    iotool.subset(data["second"], tmp_path / "s", first=3, order="source", workers=0)
    out = read(tmp_path / "s")
    assert out.keys == source.keys[:3]
    assert_copied(out, same_keys(source, source.keys[:3]))


def test_subset_by_a_key_file(data, tmp_path):
    source = read(data["uneven"])
    wanted = [source.keys[5], source.keys[0], source.keys[17]]
    (tmp_path / "keys.txt").write_text("\n".join(wanted) + "\n\n", encoding="utf-8")
    iotool.subset(data["uneven"], tmp_path / "s", keys_file=tmp_path / "keys.txt", to="hdf5")
    out = read(tmp_path / "s")
    assert out.keys == [source.keys[0], source.keys[5], source.keys[17]]  # the dataset's order
    assert_copied(out, same_keys(source, wanted))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"classes": "bee,wasp"}, r"no class 'wasp'; its 4 classes are: ant, bee, cat, dog"),
        ({"first": 24}, "first=24, but the dataset holds 23 records"),
        ({"fraction": -0.1}, r"fraction=-0\.1"),
        ({"keys": ["ant/a0.png", "nope/1.png", "nope/2.png"]}, r"2 of the 3 keys given are not keys .*'nope/1\.png'"),
        ({"classes": "bee", "first": 2}, r"one selector.*given: classes, first"),
        ({}, r"one selector.*given: none"),
        ({"first": 2, "stratify": "class"}, "stratify applies to a fraction only"),
    ],
)
def test_subset_refuses_a_bad_selection_by_name(data, tmp_path, kwargs, match):
    with pytest.raises(UsageError, match=match):
        iotool.subset(data["uneven"], tmp_path / "s", **kwargs)
    assert not (tmp_path / "s").exists()


def test_an_output_inside_an_input_or_twice_is_refused(data, tmp_path):
    with pytest.raises(UsageError):
        iotool.split(data["uneven"], tmp_path / "a", tmp_path / "a", fraction=0.5)
    with pytest.raises(iotool.IotoolError):
        iotool.subset(data["second"], data["second"] / "inner", first=1)


def test_an_existing_output_needs_overwrite(data, tmp_path):
    iotool.subset(data["uneven"], tmp_path / "s", first=2, workers=0)
    with pytest.raises(iotool.DestinationExistsError):
        iotool.subset(data["uneven"], tmp_path / "s", first=3, workers=0)
    iotool.subset(data["uneven"], tmp_path / "s", first=3, workers=0, overwrite=True)
    assert len(read(tmp_path / "s").records) == 3
