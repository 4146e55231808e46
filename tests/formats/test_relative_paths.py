"""Every format opened, converted and verified by relative paths, from the dataset's parent folder.

Parametrized over the registry. Each test changes into a folder beside the data (as a user in a
shell would) and names the dataset as a bare name, ``./name``, ``sub/name``, ``../name``, with the
trailing slash tab completion adds, and through a symlinked folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from torch.utils.data import IterableDataset
from typer.testing import CliRunner

import iotool
from iotool.cli import app

from ..conftest import FORMATS, options_for, write_tree

runner = CliRunner()


def first_sample(ds):
    return next(iter(ds)) if isinstance(ds, IterableDataset) else ds[0]


def spellings(name: str, is_dir: bool) -> list[str]:
    """The ways a user in the dataset's parent folder names it."""
    names = [name, f"./{name}", f"link-{name}"]
    return names + ([f"{name}/", f"./{name}/", f"link-{name}/"] if is_dir else [])


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    """One small dataset of every format, each with a symlink beside it."""
    root = tmp_path_factory.mktemp("relative")
    write_tree(root / "src", {"cat": 2, "dog": 3}, seed=7)
    out = {}
    for fmt in FORMATS:
        dst = root / "data" / f"{fmt}-ds"
        iotool.convert(root / "src", dst, fmt, order="source", **options_for(fmt))
        (root / "data" / f"link-{fmt}-ds").symlink_to(dst.name)
        out[fmt] = dst
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_open_by_relative_names(fmt, datasets, monkeypatch):
    dst = datasets[fmt]
    expected = iotool.open_reader(dst).read(0)
    monkeypatch.chdir(dst.parent)
    for name in spellings(dst.name, dst.is_dir()):
        reader = iotool.open_reader(name)
        assert reader.read(0) == expected, name
        assert reader.labels == [0, 0, 1, 1, 1], name
        img, label = first_sample(iotool.open_dataset(name))
        assert img.ndim == 3 and label in (0, 1), name
        assert iotool.verify(name).ok, name
        assert first_sample(iotool.open_dataset(Path(name), decoder=None))[0] is not None, name


@pytest.mark.parametrize("fmt", FORMATS)
def test_open_from_a_sub_folder_and_from_above(fmt, datasets, monkeypatch):
    dst = datasets[fmt]
    (dst.parent / "sub").mkdir(exist_ok=True)
    monkeypatch.chdir(dst.parent / "sub")
    assert len(iotool.open_reader(f"../{dst.name}")) == 5
    monkeypatch.chdir(dst.parent.parent)
    assert len(iotool.open_reader(f"data/{dst.name}")) == 5
    assert iotool.verify(f"data/{dst.name}").ok


@pytest.mark.parametrize("fmt", FORMATS)
def test_convert_between_relative_paths(fmt, datasets, tmp_path, monkeypatch):
    """A relative SRC (ImageFolder and an iotool dataset) and a relative DST."""
    write_tree(tmp_path / "images", {"a": 2, "b": 1}, seed=3)
    monkeypatch.chdir(tmp_path)
    iotool.convert("images/", f"out-{fmt}", fmt, order="source", **options_for(fmt))
    assert len(iotool.open_reader(f"./out-{fmt}")) == 3
    os.symlink(datasets[fmt], "linked")
    iotool.convert("linked/" if datasets[fmt].is_dir() else "linked", "again", "lmdb", src_format=fmt)
    assert iotool.open_reader("again").keys == iotool.open_reader(datasets[fmt]).keys


def cli_options(fmt: str) -> list[str]:
    """``options_for(fmt)`` spelled as CLI flags."""
    args = []
    for key, value in options_for(fmt).items():
        args += ["--resize", str(value)] if key == "resize" else ["-o", f"{key}={value}"]
    return args


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_by_relative_paths(fmt, datasets, tmp_path, monkeypatch):
    dst = datasets[fmt]
    monkeypatch.chdir(dst.parent)
    for name in spellings(dst.name, dst.is_dir()):
        for args in (["info", name], ["info", name, "--json"], ["verify", name]):
            result = runner.invoke(app, args)
            assert result.exit_code == 0, (args, result.output)
    write_tree(tmp_path / "images", {"a": 2}, seed=4)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["convert", "imagefolder", fmt, "images", "out", "-q", *cli_options(fmt)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["verify", "./out"])
    assert result.exit_code == 0 and "every checksum matches" in result.output, result.output
