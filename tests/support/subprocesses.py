"""Code run in a fresh interpreter (a kind registered there stays registered only there), its
result the JSON it prints last."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def python_json(code: str, *args: str, timeout: float = 120) -> Any:
    """The JSON value ``code`` prints on its last line, run by ``python -c`` with ``args``;
    the test fails with its stderr's tail when it exits non-zero."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
