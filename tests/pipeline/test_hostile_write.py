"""The write side against careless commands and hostile sources:
``--overwrite`` replaces only what iotool wrote, and never the source; writers never write
outside DST, whatever names a source holds; ``--resume`` leaves nothing behind.

Real folders of a user's files, real symlinks, tampered datasets made by ``iotool convert`` (the
index re-signed, as an attacker would), foreign TFRecord files, real subprocesses killed with
SIGKILL; exit codes through the CLI (Typer's CliRunner).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

import iotool
from iotool.cli import app
from iotool.errors import ConversionError, DestinationExistsError, FormatError, Interrupted, IotoolError
from iotool.pipeline.destination import TMP_MARKER
from iotool.records import Record

from ..conftest import (
    FORMATS,
    formats_where,
    get_format,
    make_image,
    options_for,
    options_with_units,
    rewrite_columns,
    write_tree,
)

runner = CliRunner()
RESUMABLE = formats_where(lambda s: s.resumable)


def cli(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.split())


def option_args(fmt: str) -> list[str]:
    """``options_for(fmt)`` as CLI arguments."""
    args = []
    for key, value in options_for(fmt).items():
        args += ["--resize", str(value)] if key == "resize" else ["-o", f"{key}={value}"]
    return args


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: file bytes, link targets, folders (nothing followed)."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            out[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes()
    return out


@pytest.fixture
def myfiles(tmp_path: Path) -> Path:
    """A folder of a user's own files, as ``~/myfiles`` would be."""
    home = tmp_path / "myfiles"
    (home / "photos").mkdir(parents=True)
    (home / "thesis.docx").write_bytes(b"six years of work")
    (home / "photos" / "cat.jpg").write_bytes(make_image(3))
    return home


# --- --overwrite replaces only what iotool wrote -------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_overwrite_refuses_a_folder_of_the_users_files(fmt, imagefolder, myfiles, tmp_path):
    before = snapshot(tmp_path)
    result = cli("convert", "imagefolder", fmt, imagefolder, myfiles, "--overwrite", *option_args(fmt))
    text = flat(result.stderr)
    assert result.exit_code == 2, result.output
    assert "is not a dataset iotool wrote" in text and "thesis.docx" in text and "photos/" in text
    assert "--overwrite replaces only" in text
    assert snapshot(tmp_path) == before  # nothing deleted, nothing written (no temporary, no lock)


def test_without_overwrite_a_foreign_folder_is_refused_without_suggesting_overwrite(imagefolder, myfiles):
    result = cli("convert", "imagefolder", "lmdb", imagefolder, myfiles)
    assert result.exit_code == 2 and "not a dataset iotool wrote" in flat(result.stderr)
    assert "Pass --overwrite" not in result.stderr


@pytest.mark.parametrize("make", ["file", "broken symlink", "symlink to my files", "foreign lmdb-like folder"])
def test_overwrite_refuses_anything_else_that_is_not_a_dataset(make, imagefolder, myfiles, tmp_path):
    dst = tmp_path / "dst"
    if make == "file":
        dst.write_bytes(b"not a dataset")
    elif make == "broken symlink":
        dst.symlink_to(tmp_path / "nowhere")
    elif make == "symlink to my files":
        dst.symlink_to(myfiles)
    else:  # a folder that looks like an LMDB environment iotool did not write
        dst.mkdir()
        (dst / "data.mdb").write_bytes(b"\0" * 8192)
    before = snapshot(tmp_path)
    with pytest.raises(DestinationExistsError, match="is not a dataset iotool wrote") as caught:
        iotool.convert(imagefolder, dst, "tar", workers=0, overwrite=True)
    assert str(dst) in str(caught.value)
    assert snapshot(tmp_path) == before


def test_dst_that_holds_the_source_is_refused_and_the_source_kept(tmp_path):
    project = tmp_path / "proj"
    write_tree(project / "images", {"a": 2, "b": 2})
    before = snapshot(tmp_path)
    result = cli("convert", "imagefolder", "tar", project / "images", project, "--overwrite")
    assert result.exit_code == 2 and "holds the source" in flat(result.stderr), result.output
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "relation", ["same", "same through ..", "inside", "parent through a symlink", "inside through a symlink"]
)
def test_dst_is_kept_apart_from_the_source_whatever_the_spelling(relation, tmp_path):
    project = tmp_path / "proj"
    source = project / "images"
    write_tree(source, {"a": 2, "b": 2})
    (tmp_path / "link").symlink_to(project)
    dst = {
        "same": source,
        "same through ..": source / "a" / "..",
        "inside": source / "out",
        "parent through a symlink": tmp_path / "link",
        "inside through a symlink": tmp_path / "link" / "images" / "b" / "out",
    }[relation]
    before = snapshot(tmp_path)
    result = cli("convert", "imagefolder", "lmdb", source, dst, "--overwrite")
    assert result.exit_code == 2, result.output
    assert any(words in flat(result.stderr) for words in ("is the source", "holds the source", "is inside the source"))
    assert snapshot(tmp_path) == before


def test_a_dataset_file_as_source_and_its_folder_as_dst_is_refused(imagefolder, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    iotool.convert(imagefolder, folder / "d.h5", "hdf5", workers=0)
    with pytest.raises(IotoolError, match="holds the source"):
        iotool.convert(folder / "d.h5", folder, "lmdb", src_format="hdf5", workers=0, overwrite=True)
    assert iotool.verify(folder / "d.h5").ok


@pytest.mark.parametrize("fmt", FORMATS)
def test_overwrite_replaces_a_dataset_of_another_format(fmt, imagefolder, tmp_path):
    other = FORMATS[(FORMATS.index(fmt) + 1) % len(FORMATS)]
    dst = tmp_path / "out"
    iotool.convert(imagefolder, dst, other, workers=0, **options_for(other))
    result = cli("convert", "imagefolder", fmt, imagefolder, dst, "--overwrite", "-q", *option_args(fmt))
    assert result.exit_code == 0, result.output
    assert iotool.open_reader(dst).meta.format == fmt and iotool.verify(dst).ok
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]


def test_overwrite_fills_an_empty_folder(imagefolder, tmp_path):
    dst = tmp_path / "empty"
    dst.mkdir()
    result = cli("convert", "imagefolder", "tar", imagefolder, dst, "--overwrite", "-q")
    assert result.exit_code == 0, result.output
    assert len(iotool.open_reader(dst)) == 13


def test_help_says_what_overwrite_replaces():
    result = runner.invoke(app, ["convert", "--help"], env={"COLUMNS": "200"})
    assert "only if iotool wrote it" in flat(result.output)


# --- URL destinations ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on loopback; yields (s3fs filesystem, storage options)."""
    pytest.importorskip("s3fs", reason="s3:// needs the s3 extra")
    pytest.importorskip("moto.server", reason="needs moto's server: pip install 'moto[server]'")
    import s3fs

    from tests.support.servers import moto_s3_server

    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    with open(tmp_path_factory.mktemp("moto") / "moto.log", "wb") as log, moto_s3_server(log) as options:
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("hostile-write")
        yield fs, options


@pytest.mark.slow
@pytest.mark.parametrize("foreign", ["notes.txt", "shard-000000.tar"])
def test_a_url_folder_of_other_files_is_refused_and_kept(foreign, s3, imagefolder):
    fs, options = s3
    prefix = f"hostile-write/{foreign.replace('.', '-')}"
    fs.pipe(f"{prefix}/{foreign}", b"the user's own bytes")
    for overwrite in (False, True):
        with pytest.raises(DestinationExistsError, match="is not a dataset iotool wrote") as caught:
            iotool.convert(
                imagefolder, f"s3://{prefix}", "tar", workers=0, overwrite=overwrite, storage_options=options
            )
        assert foreign in str(caught.value)
    assert fs.ls(prefix, refresh=True) == [f"{prefix}/{foreign}"]
    assert fs.cat_file(f"{prefix}/{foreign}") == b"the user's own bytes"


# --- names never climb out -----------------------------------------------------------------------

BAD_KEYS = {"climbs": "../../escape/evil.jpg", "absolute": "/tmp/escape/evil.jpg", "backslash": "a\\..\\..\\evil.jpg"}


def tampered_tar(imagefolder: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """A tar dataset made by iotool whose keys were replaced by climbing ones (index re-signed)."""
    path = tmp_path / "tampered"
    iotool.convert(imagefolder, path, "tar", workers=0)
    keys = list(iotool.open_reader(path).keys)
    bad = list(BAD_KEYS.values())
    keys[1 : 1 + len(bad)] = bad
    rewrite_columns(path, keys=keys)
    return path, bad


def foreign_tfrecords(tmp_path: Path) -> tuple[str, list[str]]:
    """TFRecord files (written by the ``tfrecord`` package) whose ``image/filename`` climb out."""
    pytest.importorskip("tfrecord")
    from tfrecord.writer import TFRecordWriter

    folder = tmp_path / "foreign"
    folder.mkdir(parents=True)
    writer = TFRecordWriter(str(folder / "train-00000-of-00001"))
    # the source reads Windows and absolute file names as relative POSIX ones ("\\" -> "/", no
    # leading "/"), so these are the names that stay unsafe after that
    climbing = ["../../escape/evil.jpg", "x/../../../evil.jpg", "a\\..\\..\\evil.jpg"]
    names = ["ok/a.jpg", *climbing, "ok/b.jpg"]
    for i, name in enumerate(names):
        writer.write(
            {
                "image/encoded": (make_image(40 + i), "byte"),
                "image/class/label": (1 + i % 2, "int"),
                "image/filename": (name.encode(), "byte"),
            }
        )
    writer.close()
    return str(folder / "train-*"), [name.replace("\\", "/") for name in climbing]


SOURCES = ["tar dataset", "tfrecord-files"]


def hostile_source(kind: str, imagefolder: Path, tmp_path: Path) -> tuple[str, str, list[str]]:
    if kind == "tfrecord-files":
        pattern, bad = foreign_tfrecords(tmp_path)
        return "tfrecord-files", pattern, bad
    path, bad = tampered_tar(imagefolder, tmp_path)
    return "tar", str(path), bad


@pytest.mark.parametrize("to", ["bmp", "tar"])
@pytest.mark.parametrize("kind", SOURCES)
def test_climbing_keys_are_bad_records_and_nothing_is_written_outside(kind, to, imagefolder, tmp_path):
    work = tmp_path / "work"
    src_format, src, bad = hostile_source(kind, imagefolder, work)
    resize = ["--resize", "32"] if get_format(to).needs_resize else []
    before = snapshot(tmp_path)
    dst = work / "out"
    result = cli("convert", src_format, to, src, dst, *resize, "-w", "0")
    assert result.exit_code == 1 and "unsafe key" in flat(result.stderr), result.output
    assert snapshot(tmp_path) == before
    result = cli("convert", src_format, to, src, dst, *resize, "-w", "0", "--on-error", "skip", "--json", "-")
    assert result.exit_code == 0, result.output
    skipped = json.loads(result.stdout)["skipped"]
    assert sorted(s["key"] for s in skipped) == sorted(bad) and all("unsafe key" in s["reason"] for s in skipped)
    after = snapshot(tmp_path)
    new = {rel for rel in after if rel not in before}
    assert new and all(rel == "work/out" or rel.startswith("work/out/") for rel in new), sorted(new)
    assert not any("escape" in rel or "evil" in rel for rel in new)
    reader = iotool.open_reader(dst)
    assert not set(bad) & set(reader.keys) and sorted(s["key"] for s in reader.meta.skipped) == sorted(bad)
    if to == "tar":
        for shard in reader.shard_urls():
            with tarfile.open(shard) as tar:
                assert not [m.name for m in tar if m.name.startswith("/") or ".." in m.name.split("/")]


def bmp_record(key: str) -> Record:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (9, 8, 7)).save(buf, "BMP")
    return Record(0, key, 0, buf.getvalue(), "bmp", "0" * 64, shape=(3, 4))


@pytest.mark.parametrize("key", [*BAD_KEYS.values(), "a/./b.jpg", "a//b.jpg", "nul\0.jpg"])
def test_the_bmp_writer_refuses_a_name_that_would_leave_dst(key, tmp_path):
    """The writer's own check, behind the one where keys enter a conversion."""
    from iotool.formats.bmp import BmpWriter

    writer = BmpWriter(str(tmp_path / "out"), get_format("bmp").options())
    with pytest.raises(ConversionError) as caught:
        writer.add(bmp_record(key))
    assert repr(key) in str(caught.value) or key in str(caught.value)
    writer.abort()
    assert [p.name for p in tmp_path.rglob("*.bmp")] == []


def test_the_bmp_writer_refuses_a_symlink_on_the_way_out(tmp_path):
    from iotool.formats.bmp import BmpWriter

    outside = tmp_path / "outside"
    outside.mkdir()
    writer = BmpWriter(str(tmp_path / "out"), get_format("bmp").options())
    (tmp_path / "out" / "cls").symlink_to(outside)
    with pytest.raises(ConversionError, match="cls/x.jpg.*outside the destination"):
        writer.add(bmp_record("cls/x.jpg"))
    writer.abort()
    assert os.listdir(outside) == []


@pytest.mark.parametrize(
    "name", ["../../escape/evil.jpg", "/etc/evil.jpg", "a\\b.jpg", "a/../../b.jpg", "new\nline.jpg"]
)
def test_the_tar_shard_writer_never_emits_an_unsafe_member(name, tmp_path):
    from iotool.formats.tar.shardfile import ShardFile

    shard = ShardFile(str(tmp_path / "s.tar"))
    with pytest.raises(ConversionError, match="the record/key.jpg: refused to write the tar member"):
        shard.add(name, b"data", key="the record/key.jpg")
    with pytest.raises(ConversionError):
        shard.add_sample(name.rsplit(".", 1)[0], "jpg", b"data", 3, key="k")
    shard.close()
    with tarfile.open(tmp_path / "s.tar") as tar:
        assert tar.getnames() == []
    assert shard.dali.samples == []  # and no DALI index line either


def test_a_dali_index_is_never_written_for_an_unsafe_member(tmp_path):
    """``iotool index --dali`` on shards from someone else: a climbing member is refused by name."""
    from iotool.formats.tar.dali import scan_shard

    shard = tmp_path / "shard-000000.tar"
    with tarfile.open(shard, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("ok/a.jpg", "../../escape/evil.jpg"):
            info = tarfile.TarInfo(name)
            info.size = 4
            tar.addfile(info, io.BytesIO(b"data"))
    with pytest.raises(FormatError, match="shard-000000.tar.*'../../escape/evil.jpg'.*climbs out"):
        scan_shard(str(shard))


# --- --resume leaves nothing behind --------------------------------------------------------------


def killed_run(src: Path, dst: Path, fmt: str, at: int, unit: int) -> None:
    """A ``--resume`` conversion SIGKILLed after ``at`` source files (units of ``unit`` records), in
    a forked child: what a killed run leaves, under the temporary name of a dead process."""
    pid = os.fork()
    if pid == 0:  # the child: killed by itself in the progress callback

        def progress(p):
            if p.done >= at:
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            iotool.convert(
                src, dst, fmt, workers=0, resume=True, progress=progress, **options_with_units(fmt, unit, resize=16)
            )
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def unit_args(fmt: str, unit: int) -> list[str]:
    args = []
    for key, value in options_with_units(fmt, unit, resize=16).items():
        args += ["--resize", str(value)] if key == "resize" else ["-o", f"{key}={value}"]
    return args


def temporaries(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if TMP_MARKER in n]


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_resume_with_nothing_to_resume_warns_and_leaves_nothing(fmt, imagefolder, tmp_path, caplog):
    dst = tmp_path / "out"
    killed_run(imagefolder, dst, fmt, 3, unit=1000)  # killed before its first commit
    assert len(temporaries(tmp_path)) == 1
    report = iotool.convert(imagefolder, dst, fmt, workers=0, resume=True, **options_with_units(fmt, 1000, resize=16))
    assert report.resumed_from == 0 and report.count == 13 and iotool.verify(dst).ok
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("--resume: nothing to resume" in w and "starting from the beginning" in w for w in warnings)
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]  # the dead run's temporary is gone


@pytest.mark.slow
def test_the_cli_says_there_was_nothing_to_resume(imagefolder, tmp_path):
    """A log warning reaches the user of the CLI on stderr (Python's last-resort handler)."""
    dst = tmp_path / "out"
    killed_run(imagefolder, dst, "lmdb", 3, unit=1000)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "iotool",
            "convert",
            "imagefolder",
            "lmdb",
            str(imagefolder),
            str(dst),
            "--resume",
            "-q",
            "-w",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--resume: nothing to resume" in flat(proc.stderr) and "starting from the beginning" in flat(proc.stderr)
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_resume_removes_every_temporary_it_found(fmt, imagefolder, tmp_path, caplog):
    dst = tmp_path / "out"
    killed_run(imagefolder, dst, fmt, 2, unit=4)  # before its first commit
    killed_run(imagefolder, dst, fmt, 10, unit=4)  # after two commits: the one to resume
    assert len(temporaries(tmp_path)) == 2
    report = iotool.convert(imagefolder, dst, fmt, workers=0, resume=True, **options_with_units(fmt, 4, resize=16))
    assert report.resumed_from >= 8 and report.count == 13
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]
    assert "nothing to resume" not in caplog.text


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_an_interrupted_resume_run_with_no_commit_keeps_nothing(fmt, imagefolder, tmp_path):
    def stop(p):
        if p.done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as caught:
        iotool.convert(
            imagefolder, tmp_path / "out", fmt, workers=0, resume=True, progress=stop, **options_with_units(fmt, 1000)
        )
    assert caught.value.kept is None
    assert sorted(os.listdir(tmp_path)) == ["src"]
