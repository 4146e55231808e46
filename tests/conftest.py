"""Shared fixtures: seeded generated images and ImageFolder trees (real files, no mocks)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_data" / "imagefolder"

# A third-party format (tests/plugins/iotool_example_format, registered through the
# "iotool.formats" entry-point group by its .dist-info folder), visible to this process and to
# every process it starts, so the shared suites below run on it like on the built-in formats.
PLUGINS = Path(__file__).resolve().parent / "plugins"
sys.path.insert(0, str(PLUGINS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))

from iotool.formats import format_names, get_format  # noqa: E402  (after the plugin path is set)

FORMATS = format_names()  # every registered format: built-in and plugins


def formats_where(capable: Callable[[Any], bool]) -> list[str]:
    """The registered formats whose spec has a capability, e.g. ``lambda s: s.resumable``."""
    return [name for name in FORMATS if capable(get_format(name))]


def options_for(fmt: str, resize: int = 40, **extra: Any) -> dict[str, Any]:
    """Conversion options that make a tiny dataset of ``fmt`` with several units (the format's
    ``example_options``), plus ``resize`` where the format stores resized images only."""
    spec = get_format(fmt)
    return {**spec.example_options, **({"resize": resize} if spec.needs_resize else {}), **extra}


def format_builder(factory: pytest.TempPathFactory, tree: Path) -> Callable[..., Path]:
    """``make(fmt, **options)``: ``tree`` converted to ``fmt`` (``options_for(fmt)`` plus
    ``options``), once per format and options, in a folder of ``factory``'s."""
    import iotool

    cache: dict[str, Path] = {}

    def make(fmt: str, **options: Any) -> Path:
        key = f"{fmt}{sorted(options.items())}"
        if key not in cache:
            cache[key] = factory.mktemp(fmt) / f"d.{fmt}"
            iotool.convert(tree, cache[key], fmt, workers=0, **options_for(fmt), **options)
        return cache[key]

    return make


def options_with_units(fmt: str, unit: int, resize: int = 40, **extra: Any) -> dict[str, Any]:
    """``options_for(fmt)`` with every integer example option set to ``unit``.

    A format's example options are its unit sizes (records per commit, per shard, ...), so this
    gives any format, built-in or plugin, units of ``unit`` records without naming its options
    (lmdb: commit_every, tar: shard_size; a format without units is unchanged)."""
    spec = get_format(fmt)
    units = {k: unit for k, v in spec.example_options.items() if isinstance(v, int) and not isinstance(v, bool)}
    return options_for(fmt, resize=resize, **{**units, **extra})


def dataset_files(path: Path) -> list[Path]:
    """Every file a local dataset consists of: the file itself, or every file under its folder."""
    path = Path(path)
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def make_image(seed: int, size: tuple[int, int] = (96, 64), fmt: str = "JPEG", **save) -> bytes:
    """A seeded, smooth-ish RGB image (width, height) encoded as ``fmt``."""
    rng = np.random.default_rng(seed)
    w, h = size
    base = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    img = Image.fromarray(base).resize((w, h), Image.Resampling.BILINEAR)
    noise = rng.integers(-12, 13, size=(h, w, 3))
    arr = np.clip(np.asarray(img, dtype=np.int16) + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    if fmt == "JPEG":
        save.setdefault("quality", 90)
    Image.fromarray(arr).save(buf, fmt, **save)
    return buf.getvalue()


def write_tree(root: Path, layout: dict[str, int], seed: int = 0, png_every: int = 0) -> list[str]:
    """Create root/<class>/<i>.jpg for each class; every ``png_every``-th image is a PNG."""
    keys = []
    n = seed
    for cls, count in layout.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            n += 1
            is_png = png_every and i % png_every == png_every - 1
            name = f"img_{i:03d}.{'png' if is_png else 'jpg'}"
            size = (64 + 8 * (n % 5), 48 + 4 * (n % 3))
            (root / cls / name).write_bytes(make_image(n, size, "PNG" if is_png else "JPEG"))
            keys.append(f"{cls}/{name}")
    return keys


@pytest.fixture
def imagefolder(tmp_path: Path) -> Path:
    """A small generated ImageFolder: 3 classes, 13 images, one PNG per class."""
    root = tmp_path / "src"
    write_tree(root, {"ant": 4, "bee": 5, "cat": 4}, png_every=4)
    return root


@pytest.fixture(scope="session")
def sample_lmdb(tmp_path_factory) -> Path:
    """sample_data converted once to LMDB for read-side tests."""
    import iotool

    dst = tmp_path_factory.mktemp("sample") / "sample.lmdb"
    iotool.convert(SAMPLE, dst, "lmdb", workers=0)
    return dst


def listdir_all(path: Path) -> list[str]:
    """Every entry (hidden ones too) of a folder, sorted."""
    return sorted(os.listdir(path))


def rewrite_meta(fmt: str, path: Path, **changes) -> None:
    """Change stored metadata fields and re-sign them, as a (future) writer would."""
    import hashlib
    import json

    import h5py
    import lmdb

    from iotool.formats.sharded.index import write_index

    if fmt == "lmdb":
        env = lmdb.open(str(path), lock=False)
        with env.begin(write=True) as txn:
            meta = {**json.loads(txn.get(b"__iotool_meta__")), **changes}
            raw = json.dumps(meta).encode()
            integrity = {
                **json.loads(txn.get(b"__iotool_integrity__")),
                "__iotool_meta__": hashlib.sha256(raw).hexdigest(),
            }
            txn.put(b"__iotool_meta__", raw)
            txn.put(b"__iotool_integrity__", json.dumps(integrity).encode())
        env.close()
    elif fmt == "hdf5":
        with h5py.File(path, "a") as f:
            raw = json.dumps({**json.loads(f.attrs["iotool_meta"]), **changes})
            integrity = {**json.loads(f.attrs["iotool_integrity"]), "meta": hashlib.sha256(raw.encode()).hexdigest()}
            f.attrs["iotool_meta"] = raw
            f.attrs["iotool_integrity"] = json.dumps(integrity)
    else:
        index = json.loads((path / "index.json").read_text())
        index.pop("integrity")
        index["meta"].update(changes)
        write_index(str(path), index)


def rewrite_columns(path: Path, **values: list) -> None:
    """Replace whole index columns of a directory dataset (as a future or hostile writer would)
    and re-sign index.json, so only the readers' own checks can catch what the values hold."""
    import json

    from iotool.formats.sharded.columns import write_columns
    from iotool.formats.sharded.index import write_index

    index = json.loads((path / "index.json").read_text())
    index.pop("integrity")
    kinds = {name: index["columns"][name]["kind"] for name in values}
    count = len(next(iter(values.values())))
    table = write_columns(str(path), kinds, ({n: v[i] for n, v in values.items()} for i in range(count)))
    index["columns"].update(table)
    write_index(str(path), index)


def downgrade_to_v1(path: Path) -> None:
    """Rewrite a directory dataset's index as format version 1 wrote it: every column as a JSON
    list inside index.json (no column files)."""
    import json

    import iotool
    from iotool.formats.sharded.index import write_index

    reader = iotool.open_reader(path)
    index = json.loads((path / "index.json").read_text())
    index.pop("integrity")
    for name, entry in index.pop("columns").items():
        column = reader.column(name)
        index[name] = [
            row.tolist() if hasattr(row, "tolist") else row
            for row in (column if name in ("keys", "member_keys", "files", "checksums") else list(column))
        ]
        for file in entry["files"]:
            (path / file).unlink()
    index["meta"]["format_version"] = 1
    write_index(str(path), index)


def indices_by_place(ds, world: int, workers: int) -> dict[tuple[int, int], list[int]]:
    """The record indices each (rank, worker) of a sharded dataset reads this epoch, by setting its env."""
    from iotool.loading.split import ShardEnv

    out = {}
    for rank in range(world):
        for w in range(workers):
            ds.env = ShardEnv(rank, world, w, workers)
            out[(rank, w)] = list(ds.iter_indices())
    return out


@pytest.hookimpl(tryfirst=True)  # before -m selects: `-m serial` must see the mark added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on a CUDA device run in the serial part: one device, and their timings need it quiet."""
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(pytest.mark.serial)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Captured output, logs and failures as UTF-8 a pytest-xdist worker can send: hostile tests
    log names read from mutated files, whose undecodable bytes Python holds as lone surrogates."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, _utf8(text)) for title, text in report.sections]
    if report.longrepr is not None and _utf8(text := str(report.longrepr)) != text:
        report.longrepr = _utf8(text)  # the failure as text: the worker could not send it otherwise


def _utf8(text: str) -> str:
    """``text`` with lone surrogates as backslash escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
