"""The seam between the Loader's runs and their dataset (``iotool.loading.loader.protocols.RunSource``):
the run modules read a dataset's records only through ``dataset.run_source()`` and name no
concrete reader, dataset or cache class; and a run over a real LMDB dataset made from
``sample_data/`` gives the batches the per-sample path gives (a chain no run takes: the same crop
and flip with a pixel-only step after them), from stored JPEGs and from the RAM cache."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import iotool
import iotool.loading.loader.runs as runs_module
from iotool.loading.loader.columns import layout_of
from iotool.loading.loader.runs import JPEGS, PIXELS, sample_runs
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, draws, pixel_only
from iotool.transforms.runs import jpeg_runs_available, run_op

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DATA = ROOT / "sample_data" / "imagefolder"
RUN_MODULES = ("runs", "fieldruns", "reading")
CONCRETE = {"FormatReader", "ImageDataset", "RamCache", "RunReads", "ShardedIterableDataset", "LmdbReader"}
CONCRETE_MODULES = ("iotool.formats", "iotool.loading.mapstyle", "iotool.loading.ramcache", "iotool.loading.runreads")
SEED, EPOCH = 5, 2


def _tree(module: str) -> ast.Module:
    return ast.parse((ROOT / "iotool" / "loading" / "loader" / f"{module}.py").read_text())


def _imported(tree: ast.Module, module: str) -> list[tuple[str, str]]:
    """(module, name) of every import of ``tree`` (``module``'s relative imports resolved)."""
    package = ["iotool", "loading", "loader"]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            out += [(source, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names]
    return out


def _annotation_names(tree: ast.Module) -> set[str]:
    """Every name an annotation of ``tree`` mentions (a string annotation parsed too)."""
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            annotations += [a.annotation for a in every if a is not None and a.annotation is not None]
            annotations += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    names: set[str] = set()
    for annotation in annotations:
        for part in ast.walk(annotation):
            if isinstance(part, ast.Name):
                names.add(part.id)
            elif isinstance(part, ast.Attribute):
                names.add(part.attr)
            elif isinstance(part, ast.Constant) and isinstance(part.value, str):
                names |= _annotation_names(ast.parse(f"x: {part.value}"))
    return names


@pytest.mark.parametrize("module", RUN_MODULES)
def test_a_run_module_reaches_no_reader_or_cache_of_its_dataset(module):
    tree = _tree(module)
    reached = [
        f"line {node.lineno}: .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("reader", "cache")
    ]
    assert reached == [], f"{module}.py reaches past the RunSource protocol: {reached}"


@pytest.mark.parametrize("module", RUN_MODULES)
def test_a_run_module_imports_and_annotates_no_concrete_class(module):
    tree = _tree(module)
    imports = _imported(tree, module)
    concrete = [(m, n) for m, n in imports if n in CONCRETE or m.startswith(CONCRETE_MODULES)]
    assert concrete == [], f"{module}.py imports concrete classes or their modules: {concrete}"
    assert _annotation_names(tree) & CONCRETE == set()


def test_the_ast_checks_see_what_they_look_for():
    """The checks above fail on the code they refuse (so they are not vacuous)."""
    tree = ast.parse(
        "from ..mapstyle import ImageDataset\n"
        "def f(ds: 'ImageDataset', n: int) -> None:\n"
        "    ds.reader.read_views([n])\n"
    )
    assert ("iotool.loading.mapstyle", "ImageDataset") in _imported(tree, "runs")
    assert "ImageDataset" in _annotation_names(tree)
    assert any(isinstance(node, ast.Attribute) and node.attr == "reader" for node in ast.walk(tree))


@pytest.fixture(scope="module")
def lmdb_path(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("run-source") / "sample.lmdb"
    iotool.convert(SAMPLE_DATA, dst, "lmdb", workers=0)
    return dst


class Written:
    """Counts the samples the runs' C calls wrote (the runs module's own functions, wrapped)."""

    def __init__(self, monkeypatch):
        self.samples = 0
        for name in ("run_jpeg_samples", "run_cached_samples"):
            monkeypatch.setattr(runs_module, name, self._counting(getattr(runs_module, name)))

    def _counting(self, real):
        def counted(*args, **keywords):
            status = real(*args, **keywords)
            self.samples += list(status).count(0)
            return status

        return counted


def _chain(per_sample: bool) -> Compose:
    """A crop and a flip; with ``per_sample``, an identity pixel-only step after them: the same
    pixels, but a chain no run takes."""
    steps = [RandomResizedCrop((24, 20), scale=(0.3, 1.0)), RandomHorizontalFlip()]
    return Compose([*steps, pixel_only(lambda image: image)] if per_sample else steps)


def _epoch(ds) -> list[tuple[torch.Tensor, torch.Tensor]]:
    loader = iotool.Loader(ds, batch_size=5, threads=2, seed=SEED)
    loader.set_epoch(EPOCH)
    return [(images.clone(), labels.clone()) for images, labels in loader]


@pytest.mark.parametrize("ram_cache", [False, True], ids=["stored-jpegs", "ram-cache"])
def test_runs_through_the_run_source_equal_the_per_sample_path(lmdb_path, ram_cache, monkeypatch):
    def batches(per_sample: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
        ds = iotool.open_dataset(lmdb_path, transform=_chain(per_sample), ram_cache=ram_cache)
        runs = sample_runs(ds, layout_of(ds))
        if per_sample:
            assert runs is None
        else:
            if not ram_cache and not jpeg_runs_available(run_op(ds.transform)):
                pytest.skip("JPEG runs need the region decoder, not built here")
            assert runs is not None and runs.kind == (PIXELS if ram_cache else JPEGS)
        if ram_cache:
            _epoch(ds)  # the first epoch fills the cache, per sample
        return _epoch(ds)

    written = Written(monkeypatch)
    alone = batches(per_sample=True)
    assert written.samples == 0
    got = batches(per_sample=False)
    # every JPEG (all but sample_data's one PNG, left to the per-sample path), or every cached image
    assert written.samples >= 23
    assert len(got) == len(alone) == 5
    for b, ((images, labels), (want_images, want_labels)) in enumerate(zip(got, alone)):
        assert torch.equal(images, want_images), b
        assert torch.equal(labels, want_labels), b
