"""Typos are answered: an unknown keyword argument of open_dataset, open_reader, convert or the
Loader, an unknown format, source, decoder or option, names the closest names ("did you mean")
and the choices; DataLoader's argument names given to the Loader get the Loader's spelling, or
why it has none. Each error is still the exception type callers catch (TypeError for a keyword)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli.app import app
from iotool.errors import UnknownArgumentError, UsageError, did_you_mean


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    from ..conftest import write_tree

    root = tmp_path_factory.mktemp("typos")
    write_tree(root / "src", {"a": 2, "b": 1}, seed=5)
    out = {fmt: root / f"d.{fmt}" for fmt in ("lmdb", "tar")}
    for fmt, path in out.items():
        iotool.convert(root / "src", path, fmt, workers=0)
    return root / "src", out


def suggestion(message: str) -> list[str]:
    """The names a message's "Did you mean ...?" offers."""
    found = re.search(r"Did you mean (.*)\?$", message)
    return re.findall(r"'([^']+)'", found.group(1)) if found else []


def test_did_you_mean_names_the_closest_first_group_first():
    assert did_you_mean("lmbd", ["lmdb", "hdf5", "tar"]) == " Did you mean 'lmdb'?"
    assert did_you_mean("zzz", ["lmdb", "hdf5"]) == ""
    # a function's own argument is offered before the options it passes on
    assert did_you_mean("transforms", ["transform", "shuffle"], ["transforms_x"]) == " Did you mean 'transform'?"
    assert did_you_mean("shufle", ["transform"], ["shuffle", "seed"]) == " Did you mean 'shuffle'?"


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_open_dataset_answers_an_unknown_keyword_with_the_closest_argument(datasets, fmt):
    _, paths = datasets
    with pytest.raises(TypeError) as caught:
        iotool.open_dataset(paths[fmt], transforms=None)
    message = str(caught.value)
    assert isinstance(caught.value, UnknownArgumentError) and isinstance(caught.value, UsageError)
    assert "has no argument 'transforms'" in message
    assert "only for sharded formats" not in message  # not taken for a sharded dataset's option
    assert suggestion(message) == ["transform"]
    assert "shuffle" in message and "buffer_size" in message  # the choices, the sharded options among them


def test_open_dataset_suggests_a_sharded_option_and_keeps_refusing_it_for_lmdb(datasets):
    _, paths = datasets
    with pytest.raises(TypeError) as caught:
        iotool.open_dataset(paths["tar"], shufle=True)
    assert suggestion(str(caught.value)) == ["shuffle"]
    with pytest.raises(UsageError, match="shuffle: only for sharded formats, not lmdb"):
        iotool.open_dataset(paths["lmdb"], shuffle=True)
    iotool.open_dataset(paths["tar"], shuffle=True, seed=1)  # the real options still pass


def test_open_reader_answers_an_unknown_keyword(datasets):
    _, paths = datasets
    with pytest.raises(TypeError) as caught:
        iotool.open_reader(paths["lmdb"], retry=2)
    assert suggestion(str(caught.value)) == ["retries"]
    assert iotool.open_reader(paths["lmdb"], retries=2).meta.count == 3


def test_convert_answers_an_argument_typo_before_the_format_options(datasets, tmp_path):
    src, _ = datasets
    with pytest.raises(TypeError) as caught:
        iotool.convert(src, tmp_path / "o.tar", "tar", workres=0)
    assert suggestion(str(caught.value)) == ["workers"]
    assert "shard_size" in str(caught.value)  # the format's options are among the choices
    with pytest.raises(UsageError) as option:  # a format option's typo: the format answers
        iotool.convert(src, tmp_path / "o.tar", "tar", shard_sise=2)
    assert "The tar format has no option shard_sise" in str(option.value)
    assert suggestion(str(option.value))[0] == "shard_size"
    with pytest.raises(UsageError, match="The lmdb format has no option shard_size") as other:
        iotool.convert(src, tmp_path / "o.lmdb", "lmdb", shard_size=2)  # another format's option
    assert not isinstance(other.value, TypeError)
    assert not (tmp_path / "o.tar").exists() and not (tmp_path / "o.lmdb").exists()


def test_unknown_formats_sources_and_decoders_get_the_closest_name(datasets, tmp_path):
    src, paths = datasets
    with pytest.raises(iotool.UnknownFormatError) as fmt:
        iotool.convert(src, tmp_path / "o", "lmbd")
    assert suggestion(str(fmt.value)) == ["lmdb"] and "choose one of: lmdb" in str(fmt.value)
    with pytest.raises(UsageError) as kind:
        iotool.convert(src, tmp_path / "o", "lmdb", src_format="imagefoler")
    assert suggestion(str(kind.value)) == ["imagefolder"]
    with pytest.raises(UsageError) as decoder:
        iotool.open_dataset(paths["lmdb"], decoder="simplejepg")
    assert suggestion(str(decoder.value)) == ["simplejpeg"]


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("num_workers", "threads="),
        ("collate_fn", "fast_collate"),
        ("persistent_workers", "last across epochs"),
        ("prefetch_factor", "prefetch="),
        ("sampler", "shuffle="),
    ],
)
def test_the_loader_answers_dataloaders_argument_names(datasets, name, answer):
    _, paths = datasets
    ds = iotool.open_dataset(paths["lmdb"], transform=iotool.transforms.Resize((8, 8)))
    with pytest.raises(TypeError) as caught:
        iotool.Loader(ds, batch_size=2, **{name: 2})
    assert f"has no argument {name!r}" in str(caught.value) and answer in str(caught.value)


def test_the_loader_answers_a_typo_with_its_closest_argument(datasets):
    _, paths = datasets
    ds = iotool.open_dataset(paths["lmdb"], transform=iotool.transforms.Resize((8, 8)))
    with pytest.raises(TypeError) as caught:
        iotool.Loader(ds, batch_size=2, thread=2)
    assert suggestion(str(caught.value)) == ["threads"]
    assert len(iotool.Loader(ds, batch_size=2, threads=2)) == 2  # the real names pass


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["convert", "imagefolder", "lmbd", "SRC", "DST"], "lmdb"),
        (["convert", "imagefoldr", "lmdb", "SRC", "DST"], "imagefolder"),
        (["convert", "imagefolder", "tar", "SRC", "DST", "-o", "shard_sise=4"], "shard_size"),
        (["convert", "imagefolder", "lmdb", "SRC", "DST", "--encode", "jpg"], "jpeg"),
    ],
    ids=["format", "source", "option", "encoding"],
)
def test_the_cli_answers_typos_with_did_you_mean(datasets, tmp_path, args, expected):
    src, _ = datasets
    argv = [str(src) if a == "SRC" else str(tmp_path / "out") if a == "DST" else a for a in args]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and suggestion(errors[0])[0] == expected, result.stderr
