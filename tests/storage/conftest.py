"""Storage tests keep the default shard cache (``$XDG_CACHE_HOME/iotool/shards``, used where a
server ignores Range requests) in their own temporary folder, never the user's ~/.cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache-home")))
