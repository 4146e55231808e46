"""Bar charts of benchmark results (matplotlib is optional: ``pip install 'iotool[plot]'``)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import UsageError

INSTALL_HINT = "pip install matplotlib (the iotool 'plot' extra)"


def require_matplotlib() -> Any:
    """Import matplotlib with a non-interactive backend.

    Raises:
        UsageError: matplotlib is not installed; the message says how to install it.
    """
    try:
        import matplotlib
    except ImportError:
        raise UsageError(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}.") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_bars(
    labels: list[str],
    medians: list[float],
    lows: list[float],
    highs: list[float],
    title: str,
    xlabel: str,
    dest: str | os.PathLike,
) -> None:
    """Horizontal bars with min-max whiskers, fastest on top, written to ``dest``."""
    plt = require_matplotlib()
    order = sorted(range(len(labels)), key=lambda i: medians[i])
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(labels) + 1.5))
    ys = range(len(order))
    med = [medians[i] for i in order]
    err = [[med[k] - lows[i] for k, i in enumerate(order)], [highs[i] - med[k] for k, i in enumerate(order)]]
    ax.barh(list(ys), med, xerr=err, color="#4c72b0", capsize=3)
    ax.set_yticks(list(ys), [labels[i] for i in order])
    for y, i in zip(ys, order):
        ax.text(highs[i], y, f"  {medians[i]:,.0f}", va="center", ha="left", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.margins(x=0.15)
    fig.tight_layout()
    fig.savefig(os.fspath(dest), dpi=120)
    plt.close(fig)


def plot_decode(result: Any, dest: str | os.PathLike) -> None:
    """Images/s per decoder backend (median, min-max over passes) from a DecodeBenchResult."""
    rows = result.results
    plot_bars(
        [r.name for r in rows],
        [r.images_per_s.median for r in rows],
        [r.images_per_s.min for r in rows],
        [r.images_per_s.max for r in rows],
        f"iotool bench decode: {result.images} images, scale 1/{result.scale}, {result.mode}, 1 thread",
        "images/s (median, min-max over passes)",
        dest,
    )


def plot_loader(result: Any, dest: str | os.PathLike) -> None:
    """Images/s per loader pipeline (median, min-max over rounds) from a LoaderBenchResult."""
    rows = result.results
    plot_bars(
        [f"{r.name} ({r.vs_baseline:.2f}x)" if r.vs_baseline else r.name for r in rows],
        [r.images_per_s.median for r in rows],
        [r.images_per_s.min for r in rows],
        [r.images_per_s.max for r in rows],
        f"iotool bench loader: {result.images} images, {result.pipeline} {result.size}, "
        f"{result.workers} workers, batch {result.batch_size}",
        "images/s (median of rounds, each the best of its epochs;\nwhiskers: min-max over rounds)",
        dest,
    )
