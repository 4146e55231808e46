"""``iotool verify`` says what it proved and what it did not: matching checksums prove the bytes
are those written, not that they are images; a truncated JPEG stored with --no-validate passes
them, and the OK says that images were not decoded and how to decode them."""

from __future__ import annotations

from typer.testing import CliRunner

import iotool
from iotool.cli.app import app

from ..conftest import write_tree


def test_verify_without_decode_says_images_were_not_decoded(tmp_path):
    write_tree(tmp_path / "src", {"a": 2, "b": 1}, seed=11)
    broken = sorted((tmp_path / "src" / "a").iterdir())[0]
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])  # a truncated JPEG
    dst = tmp_path / "d.lmdb"
    iotool.convert(tmp_path / "src", dst, "lmdb", workers=0, validate=False)

    checked = CliRunner().invoke(app, ["verify", str(dst)], env={"COLUMNS": "200"})
    assert checked.exit_code == 0, checked.output
    text = " ".join(checked.stdout.split())  # as read, however the console wrapped it (long tmp paths)
    said, note = text.split("images not decoded:")
    assert said.startswith("OK ") and "every checksum matches" in said
    assert "every image decodes" not in text
    assert "--decode" in note, text

    decoded = CliRunner().invoke(app, ["verify", str(dst), "--decode"], env={"COLUMNS": "200"})
    assert decoded.exit_code == 1  # the truncated JPEG, found by decoding
    assert "1 problem(s)" in decoded.stderr and broken.name in decoded.stderr


def test_verify_with_decode_says_every_image_decodes(tmp_path):
    write_tree(tmp_path / "src", {"a": 1, "b": 1}, seed=12)
    dst = tmp_path / "d.lmdb"
    iotool.convert(tmp_path / "src", dst, "lmdb", workers=0)
    result = CliRunner().invoke(app, ["verify", str(dst), "--decode"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "every image decodes" in result.stdout and "not decoded" not in result.stdout
