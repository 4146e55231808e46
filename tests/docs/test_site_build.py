"""The site builds without a warning, and CI's build command fails on one.

``mkdocs build --strict`` aborts on a warning only where the warning is logged: ``--quiet`` hides
them and the build passes. These tests run the real mkdocs of the docs extra (they skip without it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def ci_site_command() -> str:
    """The line of ``.ci/run`` that builds the site."""
    lines = [line for line in (REPO / ".ci/run").read_text().splitlines() if re.search(r"\bmkdocs build\b", line)]
    assert len(lines) == 1, f"expected one `mkdocs build` line in .ci/run, found {lines}"
    return lines[0].strip()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_site_builds_without_a_warning(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=280,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output, output


@pytest.mark.timeout(120)
def test_the_ci_site_check_fails_on_a_docstring_warning(tmp_path):
    """CI's command, run on a tiny site whose one docstring names a parameter the signature lacks."""
    pytest.importorskip("mkdocstrings_handlers.python")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/index.md").write_text("# Home\n\n::: broken.area\n")
    (tmp_path / "broken.py").write_text(
        textwrap.dedent('''\
            def area(width: float) -> float:
                """The area.

                Args:
                    width, height: the sides.
                """
                return width
            ''')
    )
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: broken\nplugins:\n  - mkdocstrings:\n      handlers:\n        python:\n          paths: [.]\n"
    )
    bin_dir = str(Path(sys.executable).parent)  # the mkdocs of this interpreter
    env = {**ENV, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", ci_site_command()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, f"CI's site check passed a build with a warning:\n{output}"
    assert "width, height" in output
