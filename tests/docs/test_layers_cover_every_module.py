"""Every module of a layered package sits in one of its layers (pyproject's import-linter contracts).

import-linter checks the imports between the layers a contract names and says nothing of a module
that no layer names: such a module may import anything and be imported by anything. So a layered
package (the root, or a contract's container) has each of its modules and subpackages in a layer,
and a layer names only modules that exist.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"


def contracts() -> list[dict]:
    """The layers contracts of pyproject.toml's [tool.importlinter]."""
    config = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]
    return [c for c in config["contracts"] if c["type"] == "layers"]


def layered_names(contract: dict) -> dict[str, bool]:
    """The modules a contract's layers name ("a | b" independent, "a : b" not), each -> whether it
    is optional (written "(a)")."""
    names = (name.strip() for layer in contract["layers"] for name in re.split(r"[|:]", layer))
    return {name.strip("()"): name.startswith("(") for name in names}


def children(package: str) -> set[str]:
    """The modules and subpackages directly inside `package` (Python sources only: the compiled
    extensions import no module of the package)."""
    folder = ROOT.joinpath(*package.split("."))
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    return modules | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def unplaced() -> dict[str, list[str]]:
    """Each layered package -> its modules that no layer names, and the names of no module."""
    root = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["root_package"]
    found: dict[str, list[str]] = {}
    for contract in contracts():
        named = layered_names(contract)
        required = {name for name, optional in named.items() if not optional}
        for container in contract.get("containers", [None]):
            # the root contract names modules in full (iotool.cli), a container's relative to it
            present = {f"{root}.{name}" for name in children(root)} if container is None else children(container)
            wrong = sorted(present - set(named)) + sorted(f"{name} (no such module)" for name in required - present)
            if wrong:
                found[container or root] = wrong
    return found


def test_the_layered_packages_are_the_root_and_the_containers():
    packages = {c for contract in contracts() for c in contract.get("containers", ["iotool"])}
    assert {
        "iotool",
        "iotool.pipeline",
        "iotool.pipeline.sources",
        "iotool.loading",
        "iotool.loading.loader",
    } <= packages


def test_every_module_of_a_layered_package_is_in_a_layer():
    assert unplaced() == {}


def test_a_module_left_out_of_the_layers_is_found(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "new.py", "sub/__init__.py"):
        (package / name).write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    config = tmp_path / "pyproject.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "pkg"\n'
        '[[tool.importlinter.contracts]]\nname = "x"\ntype = "layers"\ncontainers = ["pkg"]\n'
        'layers = ["a | sub", "b", "gone", "(maybe)"]\n'
    )
    monkeypatch.setattr(sys.modules[__name__], "CONFIG", config)
    assert unplaced() == {"pkg": ["new", "gone (no such module)"]}
