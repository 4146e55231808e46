"""What the package says about itself holds: the README's format table names, for each registered
format, the extra it needs (``pip install 'iotool[tfrecord]'``) or that the base install has it,
and every extra it names exists in pyproject.toml; the metadata names no project URL, since no
published repository, documentation site or tracker exists to name."""

from __future__ import annotations

import re
import tomllib

from iotool.formats import all_formats

from ..conftest import REPO


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def format_rows() -> dict[str, list[str]]:
    """The README's "Which format should I use?" table: format name -> its cells."""
    text = (REPO / "README.md").read_text()
    table = text[text.index("## Which format should I use?") :].split("\n\n")[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    header, body = rows[0], rows[2:]
    assert header[:2] == ["format", "install"]
    return {row[0].strip("`"): row for row in body}


def test_the_readme_format_table_names_each_formats_extra():
    rows = format_rows()
    extras = set(pyproject()["project"]["optional-dependencies"])
    for spec in all_formats():
        if spec.name not in ("lmdb", "hdf5", "tar", "tfrecord", "bmp"):
            continue  # a plugin format the test environment registers
        install = rows[spec.name][1]
        named = set(re.findall(r"iotool\[([a-z0-9-]+)\]", install))
        assert named <= extras, (spec.name, named - extras)
        if spec.extra is None:
            assert install.startswith("in the base install"), (spec.name, install)
        else:
            assert spec.extra[0] in named and install.startswith("`pip install"), (spec.name, install)


def test_the_package_metadata_names_no_project_url():
    project = pyproject()["project"]
    assert "urls" not in project and "Homepage" not in (REPO / "pyproject.toml").read_text()
