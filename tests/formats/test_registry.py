"""The one registry mechanism (:class:`iotool.registry.Registry`) behind the format and the source
registries: lazy targets, the choices in an unknown name's refusal, targets that cannot load."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iotool.errors import UnknownFormatError, UsageError
from iotool.formats import FORMATS, format_names, get_format, register
from iotool.formats.registry import REGISTRY as FORMAT_REGISTRY
from iotool.formats.spec import FormatSpec
from iotool.pipeline.sources import get_source, source_choices, source_names
from iotool.pipeline.sources.base import SourceKind
from iotool.pipeline.sources.registry import REGISTRY as SOURCE_REGISTRY
from iotool.registry import Registry


def test_both_registries_are_one_mechanism():
    assert isinstance(FORMAT_REGISTRY, Registry) and isinstance(SOURCE_REGISTRY, Registry)
    assert FORMAT_REGISTRY.kind is FormatSpec and SOURCE_REGISTRY.kind is SourceKind
    assert format_names()[:5] == ["lmdb", "hdf5", "tar", "bmp", "tfrecord"]
    assert source_names()[0] == "imagefolder"


def test_an_unknown_format_is_refused_with_every_choice():
    with pytest.raises(UnknownFormatError) as caught:
        get_format("lmbd")
    message = str(caught.value)
    assert "'lmbd'" in message and all(name in message for name in format_names())
    assert "lmbd" not in FORMATS and "lmdb" in FORMATS


def test_an_unknown_source_is_refused_with_the_kinds_and_the_formats():
    with pytest.raises(UsageError) as caught:
        get_source("imagefoldr")
    message = str(caught.value)
    assert message.startswith("Unknown source format 'imagefoldr'; choose one of: ")
    assert all(name in message for name in source_choices())
    assert set(format_names()) <= set(source_choices())


def test_a_format_name_is_a_source_of_that_format():
    kind = get_source("lmdb")
    assert isinstance(kind, SourceKind) and kind.name == "lmdb" and get_source("lmdb") is kind


def test_a_target_that_cannot_load_names_the_entry_and_the_target():
    registry = Registry("format", FormatSpec, "iotool.none", {"gone": "iotool.no_such_module:SPEC"}, "SPEC", UsageError)
    assert registry.names() == ["gone"]  # listed without importing anything
    with pytest.raises(UsageError, match=r"Format 'gone' is registered as 'iotool.no_such_module:SPEC', which cannot"):
        registry.get("gone")


def test_a_target_of_the_wrong_kind_or_name_is_refused():
    wrong_name = Registry("format", FormatSpec, "iotool.none", {"other": "iotool.formats.lmdb"}, "SPEC", UsageError)
    with pytest.raises(UsageError, match=r"'iotool.formats.lmdb' is not a FormatSpec named 'other'"):
        wrong_name.get("other")
    wrong_kind = Registry(
        "source", SourceKind, "iotool.none", {"lmdb": "iotool.formats.lmdb:SPEC"}, "SOURCE", UsageError
    )
    with pytest.raises(UsageError, match=r"is not a SourceKind named 'lmdb'"):
        wrong_kind.get("lmdb")
    assert wrong_kind.find("absent") is None


def test_register_adds_an_entry_after_the_others():
    lmdb = get_format("lmdb")
    registry = Registry("format", FormatSpec, "iotool.none", {}, "SPEC", UnknownFormatError)
    assert registry.register(lmdb, "lmdb") is lmdb
    assert registry.names() == ["lmdb"] and registry.get("lmdb") is lmdb
    assert register(lmdb) is lmdb and get_format("lmdb") is lmdb  # the same spec: nothing else changes
    assert format_names().count("lmdb") == 1


def test_names_import_no_entry():
    code = (
        "import sys; from iotool.formats import format_names; from iotool.pipeline.sources import source_names; "
        "format_names(); source_names(); "
        "print(sorted(m for m in sys.modules if m.startswith(('iotool.formats.lmdb', 'iotool.pipeline.sources.parquet'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
