"""The ``iotool`` command line: a thin Typer layer over the library API."""

from __future__ import annotations

from .app import app, main

__all__ = ["app", "main"]
