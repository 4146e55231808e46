"""The one byte-size formatter: what the CLI tables and the error messages print for a size."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """A byte count in binary units: 512 -> '512 B', 1536 -> '1.5 KiB', up to TiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
