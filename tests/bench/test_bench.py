"""`iotool bench decode|read|loader`: the library results and the CLI's JSON, on tiny inputs."""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import iotool
from iotool.bench import bench_decode, bench_loader, bench_read, parse_scale
from iotool.bench.common import collect_images, rotated, summarize
from iotool.bench.contestants import DaliCPU
from iotool.bench.tjbench import parse_fps, tjbench_path
from iotool.cli.app import app
from iotool.decode import BACKENDS, available
from iotool.errors import UsageError
from iotool.formats import FORMATS

runner = CliRunner()
FAST = ["--min-time", "0.01", "--repeat", "2", "--quiet"]
STATS_KEYS = {"median", "min", "max", "values", "spread"}


def _image(seed: int, size=(64, 48), fmt="JPEG", mode="RGB") -> bytes:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    im = Image.fromarray(arr).convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
    return buf.getvalue()


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """An ImageFolder of 2 classes x 3 JPEGs (one progressive-free, varied sizes)."""
    root = tmp_path / "tiny"
    for c, cls in enumerate(("ant", "bee")):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            (root / cls / f"{i}.jpg").write_bytes(_image(10 * c + i, (64 + 8 * i, 48)))
    return root


@pytest.fixture
def mixed(tiny: Path) -> Path:
    """``tiny`` plus a PNG and a CMYK JPEG, which the JPEG-only backends do not decode natively."""
    (tiny / "bee" / "z.png").write_bytes(_image(99, fmt="PNG"))
    (tiny / "bee" / "cmyk.jpg").write_bytes(_image(98, mode="CMYK"))
    return tiny


def run_json(args: list[str], tmp_path: Path) -> dict:
    """Run the CLI with --json FILE and return the parsed JSON."""
    out = tmp_path / "out.json"
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def check_stats(obj: dict) -> None:
    assert STATS_KEYS <= set(obj) and obj["min"] <= obj["median"] <= obj["max"]


# --- helpers -----------------------------------------------------------------------------


def test_summarize_and_rotation():
    s = summarize([3.0, 1.0, 2.0])
    assert (s.median, s.min, s.max) == (2.0, 1.0, 3.0) and s.spread == pytest.approx(1.0)
    assert rotated(["a", "b", "c"], 4) == ["b", "c", "a"]


@pytest.mark.parametrize("text,want", [("1", 1), ("1/2", 2), ("1/4", 4), ("1/8", 8), (4, 4)])
def test_parse_scale(text, want):
    assert parse_scale(text) == want


def test_parse_scale_rejects_other_values():
    with pytest.raises(UsageError, match=r"'1/3'.*1/2, 1/4, 1/8"):
        parse_scale("1/3")


def test_collect_images(tiny):
    files = collect_images([tiny, tiny / "ant" / "0.jpg"])
    assert len(files) == 7 and files[0].endswith("ant/0.jpg")
    with pytest.raises(UsageError, match="does not exist"):
        collect_images([tiny / "nope"])


TJBENCH_OUTPUT = """
Warmup time = 0.1 seconds

>>>>>  JPEG 4:2:0 --> RGB (Top-down)  <<<<<

Image size: 405 x 354
Decompress    --> Frame rate:         3138.521395 fps
                  Throughput:         449.969812 Megapixels/sec
"""


def test_parse_tjbench_output():
    assert parse_fps(TJBENCH_OUTPUT) == pytest.approx(3138.521395)
    with pytest.raises(ValueError, match="Frame rate"):
        parse_fps("Usage: tjbench ...")


# --- bench decode --------------------------------------------------------------------------


def test_bench_decode_library_returns_data_and_never_prints(tiny, capsys):
    seen = []
    result = bench_decode(
        [str(tiny)],
        ["pil"],
        min_time=0.01,
        repeat=2,
        tjbench=False,
        progress=lambda what, done, total: seen.append((what, done, total)),
    )
    assert capsys.readouterr() == ("", "")
    assert seen and seen[-1][1] == seen[-1][2]
    row = result.row("pil")
    assert row.images == 6 and len(row.images_per_s.values) == 2 and row.vs_pil == pytest.approx(1.0)


def test_bench_decode_json_schema(mixed, tmp_path):
    data = run_json(["bench", "decode", str(mixed), *FAST], tmp_path)
    assert data["benchmark"] == "decode" and data["mode"] == "memory" and data["scale"] == "1/1"
    assert data["files"] == 8 and data["images"] == 6  # the PNG and the CMYK JPEG are listed
    usable = [n for n in BACKENDS if available()[n].available]
    names = [r["name"] for r in data["results"]]
    assert set(usable) <= set(names)
    for row in data["results"]:
        for key in ("images_per_s", "megapixels_per_s", "mb_per_s"):
            check_stats(row[key])
        assert {"name", "version", "jpeg_library", "images", "vs_pil", "vs_fastest", "note"} <= set(row)
        assert 0 < row["vs_fastest"] <= 1.0 + 1e-9
    assert max(r["vs_fastest"] for r in data["results"]) == pytest.approx(1.0)
    skipped = {(Path(s["path"]).name, s["backend"]) for s in data["skipped"]}
    for name in ("simplejpeg", "jpeg4py"):
        if name in usable:
            assert ("z.png", name) in skipped and ("cmyk.jpg", name) in skipped
    env = data["environment"]
    assert {"cpu_model", "cpus_logical", "threads", "libraries", "decoders", "python", "region_decoder"} <= set(env)
    assert env["region_decoder"].startswith(("libjpeg", "not built", "built, but"))
    libraries = data["jpeg_libraries"]  # the JPEG library of every path, the region decoder's included
    assert set(BACKENDS) | {"region"} <= set(libraries) and libraries["region"] == env["region_decoder"]
    for name in usable:
        assert libraries[name] == env["decoders"][name]["jpeg_library"]
    assert libraries["pil"].startswith("libjpeg")
    assert "numpy" in env["libraries"] and "pil" in env["decoders"]
    assert env["decoders"]["pil"]["jpeg_library"]
    assert data["auto"]["jpeg"] in BACKENDS


@pytest.mark.skipif(tjbench_path() is None, reason="tjbench not installed (apt-get install libjpeg-turbo-progs)")
def test_bench_decode_has_a_tjbench_row(tiny, tmp_path):
    data = run_json(["bench", "decode", str(tiny / "ant"), "--backends", "pil", *FAST], tmp_path)
    row = next(r for r in data["results"] if r["name"] == "tjbench")
    assert row["images"] == 3 and row["images_per_s"]["median"] > 0


def test_bench_decode_scale_and_file_mode(tiny, tmp_path):
    full = run_json(["bench", "decode", str(tiny), "--backends", "pil,opencv", "--no-tjbench", *FAST], tmp_path)
    half = run_json(
        [
            "bench",
            "decode",
            str(tiny),
            "--backends",
            "pil,opencv",
            "--no-tjbench",
            "--scale",
            "1/2",
            "--mode",
            "file",
            *FAST,
        ],
        tmp_path,
    )
    assert half["scale"] == "1/2" and half["mode"] == "file"
    assert half["megapixels"] == pytest.approx(full["megapixels"] / 4, rel=0.05)
    assert [r["name"] for r in half["results"]] == ["pil", "opencv"]


def test_bench_decode_table_output(tiny):
    result = runner.invoke(app, ["bench", "decode", str(tiny), "--backends", "pil", "--no-tjbench", *FAST])
    assert result.exit_code == 0, result.output
    assert "iotool bench decode" in result.output and "pil" in result.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--backends", "nope"], "nope"),
        (["--scale", "1/3"], "1/3"),
        (["--repeat", "0"], "repeat"),
    ],
)
def test_bench_decode_usage_errors_exit_2(tiny, args, needle):
    result = runner.invoke(app, ["bench", "decode", str(tiny), *args, *FAST[:2]])
    assert result.exit_code == 2
    assert needle in result.output


def test_bench_decode_missing_path_exits_2(tmp_path):
    result = runner.invoke(app, ["bench", "decode", str(tmp_path / "nope"), *FAST])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_bench_decode_plot(tiny, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "decode.png"
    result = runner.invoke(
        app, ["bench", "decode", str(tiny), "--backends", "pil,opencv", "--no-tjbench", "--plot", str(png), *FAST]
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_decode_plot_without_matplotlib_says_how(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = runner.invoke(app, ["bench", "decode", str(tiny), "--plot", str(tmp_path / "x.png"), *FAST])
    assert result.exit_code == 2
    assert "pip install matplotlib" in result.output


# --- bench read ----------------------------------------------------------------------------


@pytest.fixture
def tiny_lmdb(tiny, tmp_path) -> Path:
    dst = tmp_path / "tiny.lmdb"
    iotool.convert(tiny, dst, "lmdb", workers=0)
    return dst


def test_bench_read_raw_bytes_json(tiny_lmdb, tmp_path):
    data = run_json(
        ["bench", "read", str(tiny_lmdb), "--decoder", "none", "--batch-size", "4", "--epochs", "2", "--quiet"],
        tmp_path,
    )
    assert data["benchmark"] == "read" and data["format"] == "lmdb" and data["decoder"] == "none"
    assert data["count"] == 6 and data["bytes"] > 0
    assert [e["epoch"] for e in data["epochs"]] == [1, 2]
    for e in data["epochs"]:
        assert e["images"] == 6 and e["images_per_s"] > 0 and e["mb_per_s"] > 0
    check_stats(data["images_per_s"])
    assert "cpu_model" in data["environment"]


def test_bench_read_decoded_with_a_worker(tiny_lmdb):
    result = bench_read(tiny_lmdb, decoder="auto", workers=1, batch_size=4, epochs=1)
    assert result.epochs[0].images == 6 and result.workers == 1


def test_bench_read_bad_decoder_exits_2(tiny_lmdb):
    result = runner.invoke(app, ["bench", "read", str(tiny_lmdb), "--decoder", "nope"])
    assert result.exit_code == 2 and "nope" in result.output


# --- bench loader --------------------------------------------------------------------------


def test_bench_loader_covers_every_format_json(tiny, tmp_path):
    data = run_json(
        ["bench", "loader", str(tiny), "--rounds", "1", "--batch-size", "4", "--size", "32", "--quiet"], tmp_path
    )
    assert data["benchmark"] == "loader" and data["images"] == 6 and data["size"] == 32
    rows = {r["name"]: r for r in data["results"]}
    baseline = data["results"][0]
    assert baseline["name"].startswith("torchvision") and baseline["vs_baseline"] == pytest.approx(1.0)
    covered = {r["format"] for r in data["results"][1:]} | set(data["failed"])
    assert covered == set(FORMATS) | {"webdataset"} | ({"dali"} if DaliCPU.available() else set())
    assert not data["failed"], data["failed"]
    assert data["pipeline"] == "rrc" and data["epochs"] == 1
    for row in rows.values():
        check_stats(row["images_per_s"])
        assert row["images"] == 6 and row["vs_baseline"] > 0
        assert row["vs_baseline_per_round"] == pytest.approx(row["vs_baseline"])  # one round: the same ratio
    costs = data["ceiling"]  # the one-core ceiling of every built format, from the same run
    assert set(costs["ceiling"]) == set(FORMATS) and all(v > 0 for v in costs["ceiling"].values())
    ms = costs["ms_per_image"]
    assert costs["baseline_ms"] == pytest.approx(ms["pil"] + ms["resize torch"] + ms["collate"])
    assert costs["feed_ms"]["lmdb"] == pytest.approx(ms["read lmdb"] + ms["fused"] + ms["collate"])


def test_per_round_ratio_pairs_the_rounds():
    from iotool.bench.common import Stats
    from iotool.bench.loader import per_round_ratio

    base = Stats(100.0, 50.0, 200.0, [100.0, 50.0, 200.0])
    fast = Stats(200.0, 150.0, 300.0, [200.0, 150.0, 300.0])  # 2x, 3x, 1.5x round by round
    assert per_round_ratio(fast, base) == pytest.approx(2.0)
    assert per_round_ratio(fast, Stats(0.0, 0.0, 0.0, [])) is None


def baseline_name() -> str:
    """torchvision's own pipeline when it imports (also beside a CPU torch), else the reimplementation."""
    from iotool.bench.contestants import BASELINE, TORCHVISION
    from iotool.bench.tvimport import import_torchvision

    try:
        import_torchvision()
    except ImportError:
        return BASELINE
    return TORCHVISION


def test_bench_loader_library_same_batches(tiny):
    result = bench_loader(tiny, formats=["lmdb"], rounds=1, batch_size=3, size=16, webdataset=False, ceiling_rounds=0)
    assert [r.name for r in result.results] == [baseline_name(), "iotool lmdb"]
    assert result.ceiling is None  # ceiling_rounds=0 skips the step timing


def test_bench_loader_center_pipeline_and_epochs(tiny, tmp_path):
    result = bench_loader(tiny, formats=["tar", "bmp"], rounds=2, epochs=2, batch_size=4, size=16, pipeline="center")
    dali = ["DALI (CPU)"] if DaliCPU.available() else []  # iotool.loading.dali's CPU pipeline, when installed
    assert [r.name for r in result.results] == [
        baseline_name(),
        "webdataset (PIL)",
        *dali,
        "iotool tar",
        "iotool bmp",
    ]
    assert all(len(r.images_per_s.to_dict()) > 0 and r.images_per_s.median > 0 for r in result.results)
    assert result.results[2 + len(dali)].options == {}  # tar with its default options: one shard here
    assert result.baseline == baseline_name() and result.to_dict()["baseline"] == result.baseline
    assert result.results[1].bytes > 0 and result.results[1].convert_seconds is not None
    assert result.ceiling is None  # the step costs are those of the rrc pipeline


def test_bench_loader_puts_each_format_through_the_thread_loader_beside_its_dataloader(tiny, tmp_path):
    data = run_json(
        [
            "bench",
            "loader",
            str(tiny),
            "--formats",
            "lmdb,tar",
            "--threads",
            "2",
            "--rounds",
            "2",
            "--batch-size",
            "4",
            "--size",
            "16",
            "--ceiling-rounds",
            "0",
            "--no-webdataset",
            "--quiet",
        ],
        tmp_path,
    )
    rows = {r["name"]: r for r in data["results"]}
    assert data["threads"] == 2
    assert [(r["name"], r["feed"]) for r in data["results"] if r["format"] in ("lmdb", "tar")] == [
        ("iotool lmdb", "DataLoader"),
        ("iotool lmdb Loader(2 threads)", "Loader"),
        ("iotool tar", "DataLoader"),
        ("iotool tar Loader(2 threads)", "Loader"),
    ]
    assert all(r["feed"] == "DataLoader" for r in data["results"] if r["format"] not in ("lmdb", "tar"))
    for fmt in ("lmdb", "tar"):
        ours, theirs = rows[f"iotool {fmt} Loader(2 threads)"], rows[f"iotool {fmt}"]
        assert ours["format"] == fmt and ours["images"] == 6 and theirs["vs_dataloader"] is None
        pairs = zip(ours["images_per_s"]["values"], theirs["images_per_s"]["values"])
        assert ours["vs_dataloader"] == pytest.approx(statistics.median(a / b for a, b in pairs))
    # without workers or --threads there is no Loader row
    data = run_json(
        [
            "bench",
            "loader",
            str(tiny),
            "--formats",
            "lmdb",
            "--rounds",
            "1",
            "--batch-size",
            "4",
            "--size",
            "16",
            "--ceiling-rounds",
            "0",
            "--no-webdataset",
            "--quiet",
        ],
        tmp_path,
    )
    assert [r["feed"] for r in data["results"]] == ["DataLoader", "DataLoader"] and data["threads"] == 0


def test_bench_loader_unknown_format_exits_2(tiny):
    result = runner.invoke(app, ["bench", "loader", str(tiny), "--formats", "zip"])
    assert result.exit_code == 2 and "zip" in result.output


# --- bench decode: the table at 80 columns, and the bundled default images ----------------


def _row(name: str, median: float, version: str = "", jpeg_library: str = "", note: str = ""):
    """A BackendResult whose passes spread +-10% around ``median``."""
    from iotool.bench import BackendResult

    stats = summarize([median * 0.9, median, median * 1.1])
    return BackendResult(
        name,
        version,
        jpeg_library,
        1000,
        stats,
        summarize([m / 7 for m in stats.values]),
        summarize([m / 30 for m in stats.values]),
        vs_pil=median / 1234.5,
        vs_fastest=median / 12345.0,
        note=note,
    )


@pytest.fixture
def wide_decode_result():
    """A DecodeBenchResult with every backend, large figures, long library names and a long note."""
    from iotool.bench import DecodeBenchResult

    rows = [
        _row("pil", 1234.5, "13.0.0", "libjpeg-turbo 3.2.0"),
        _row("opencv", 2345.6, "4.12.0.88", "build-libjpeg-turbo (ver 3.1.2-70)"),
        _row("simplejpeg", 12345.0, "1.9.0", "libjpeg-turbo 3.1.2"),
        _row("jpeg4py", 3456.7, "0.1.4", "system libturbojpeg.so.0 (libjpeg-turbo 2.1.5)"),
        _row(
            "tjbench",
            9876.5,
            "",
            "libjpeg-turbo 3.0.4",
            note="C loop, reused buffer; from memory; 64 of 50000 JPEGs (seeded sample)",
        ),
    ]
    env = {
        "cpu_model": "AMD EPYC 9654 96-Core Processor with a very long model name",
        "cpus_usable": 192,
        "load_average": [12.25, 10.5, 9.75],
    }
    return DecodeBenchResult(
        mode="memory",
        scale=1,
        min_time=1.0,
        repeat=5,
        files=50000,
        images=49998,
        bytes=6_400_000_000,
        megapixels=9876.5,
        auto={"jpeg": "simplejpeg", "png": "opencv"},
        results=rows,
        environment=env,
    )


def _render(table, width: int) -> list[str]:
    """The lines a terminal of ``width`` columns shows for ``table``."""
    from rich.console import Console

    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def _render_decode(result, width: int, wide: bool = False) -> list[str]:
    """The lines ``iotool bench decode`` prints for ``result``: title, table, notes."""
    from rich.console import Console

    from iotool.cli.bench_cmd import _decode_notes, _decode_title, decode_table, print_report

    console = Console(width=width, record=True, color_system=None)
    print_report(_decode_title(result), decode_table(result, wide), _decode_notes(result, wide), out=console)
    return console.export_text().splitlines()


def test_decode_table_fits_80_columns_without_splitting_cells(wide_decode_result):
    lines = _render_decode(wide_decode_result, 80)
    assert max(map(len, lines)) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    whole = [
        "backend",
        "images/s",
        "MP/s",
        "vs PIL",
        "vs fastest",  # headers
        "pil",
        "opencv",
        "simplejpeg",
        "jpeg4py",
        "tjbench",  # backend names
        "1,234 ±10%",
        "2,346 ±10%",
        "12,345 ±10%",
        "3,457 ±10%",
        "9,876 ±10%",  # images/s
        "1,763.6 ±10%",
        "1.00x",
        "10.00x",
        "0.10x",
    ]  # MP/s of simplejpeg, vs PIL, vs fastest
    for cell in whole:
        assert any(cell in line for line in lines), f"{cell!r} split or missing:\n{text}"
    # versions and libjpeg variants, and the note, sit under the table (words may wrap there)
    flat = " ".join(line.strip() for line in lines)
    assert "versions: pil 13.0.0 (libjpeg-turbo 3.2.0)" in flat
    assert "tjbench: C loop, reused buffer" in flat
    header = next(line for line in lines if "backend" in line)
    assert "version" not in header and "note" not in header  # header row: short columns only
    assert "--wide" in flat


def test_decode_table_wide_has_version_and_libjpeg_columns(wide_decode_result):
    from iotool.cli.bench_cmd import decode_table

    lines = _render(decode_table(wide_decode_result, wide=True), 200)
    header = next(line for line in lines if "backend" in line)
    for col in ("version", "libjpeg", "MB/s", "images/s", "vs fastest"):
        assert col in header
    assert any(
        "opencv" in line and "4.12.0.88" in line and "build-libjpeg-turbo (ver 3.1.2-70)" in line for line in lines
    )


def test_bench_decode_cli_wide_flag(tiny):
    result = runner.invoke(
        app,
        ["bench", "decode", str(tiny), "--backends", "pil", "--no-tjbench", "--wide", *FAST],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "backend" in line)
    assert "version" in header and "libjpeg" in header and "MB/s" in header
    short = runner.invoke(
        app, ["bench", "decode", str(tiny), "--backends", "pil", "--no-tjbench", *FAST], env={"COLUMNS": "200"}
    )
    header = next(line for line in short.output.splitlines() if "backend" in line)
    assert "version" not in header and "versions: pil" in short.output


def test_bench_decode_real_run_fits_80_columns(tiny):
    from iotool.cli.bench_cmd import decode_table

    result = bench_decode([str(tiny)], min_time=0.01, repeat=1, tjbench=False)
    lines = _render(decode_table(result), 80)
    assert max(map(len, lines)) <= 80, "\n".join(lines)
    for r in result.results:
        assert any(f" {r.name} " in line for line in lines)
        assert any(f"{r.images_per_s.median:,.0f} ±" in line for line in lines)


def test_bench_decode_default_uses_bundled_images_from_any_folder(tmp_path, monkeypatch):
    from iotool.bench.decode import sample_images
    from iotool.cli import app as cli_app

    bundled = sample_images()
    names = sorted(p.name for p in bundled.iterdir() if p.suffix in (".jpg", ".png"))
    assert len(names) == 5 and sum((bundled / n).stat().st_size for n in names) < 450_000
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "decode.json"
    result = runner.invoke(
        cli_app,
        ["bench", "decode", "--min-time", "0.01", "--repeat", "1", "--no-tjbench", "--quiet", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["bundled_sample_images"] is True and data["files"] == 5
    assert data["images"] >= 4  # the 4 JPEGs; the PNG too when every selected backend reads PNG
    assert all(r["images"] == data["images"] and r["images_per_s"]["median"] > 0 for r in data["results"])
    flat = " ".join(result.output.split())
    assert "bundled sample images" in flat and "time your own: iotool bench decode /path/to/images" in flat


def test_bench_decode_names_missing_bundled_images(monkeypatch):
    from iotool.bench import decode as decode_mod

    monkeypatch.setattr(decode_mod, "SAMPLE_IMAGES", "no_such_folder")
    with pytest.raises(UsageError, match="bundled sample images are missing.*iotool bench decode /path"):
        bench_decode(None, ["pil"], min_time=0.01, repeat=1, tjbench=False)


WITHOUT_WEBDATASET = (
    "import sys; sys.modules['webdataset'] = None; sys.argv[0] = 'iotool'; from iotool.cli import main; main()"
)


def test_bench_loader_names_a_missing_optional_contestant_as_not_installed(tiny, tmp_path):
    """webdataset missing (its import blocked in the child) is a note with the pip command, not a failure."""
    out = tmp_path / "loader.json"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_WEBDATASET,
            "bench",
            "loader",
            str(tiny),
            "--formats",
            "tar",
            "--rounds",
            "1",
            "--batch-size",
            "3",
            "--size",
            "16",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "failed" not in result.stderr
    assert "not installed: webdataset (PIL); pip install webdataset" in " ".join(result.stderr.split())
    data = json.loads(out.read_text())
    assert data["not_installed"] == {"webdataset (PIL)": "pip install webdataset"} and data["failed"] == {}
