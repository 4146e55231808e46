"""The plot of ``iotool tune``: images/s against num_workers (and the Loader's threads) of a
:class:`~iotool.tune.tuner.TuneResult`."""

from __future__ import annotations

import os
from typing import Any

from .measure import describe_trial


def plot_tune(result: Any, dest: str | os.PathLike) -> None:
    """Draw :func:`tune_figure` to ``dest`` (a PNG)."""
    from ..bench.plot import require_matplotlib

    plt = require_matplotlib()
    fig = tune_figure(result)
    fig.savefig(os.fspath(dest), dpi=120)
    plt.close(fig)


def tune_figure(result: Any) -> Any:
    """Epoch images/s against num_workers (the ladder as a line, other trials as points, the
    choice starred), as a matplotlib figure."""
    from ..bench.plot import require_matplotlib

    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(7, 4))
    ladder = [t for t in result.trials if t.stage == "workers"]
    ax.plot(
        [t.num_workers for t in ladder],
        [t.epoch_images_per_s for t in ladder],
        "o-",
        color="#4c72b0",
        label="prefetch_factor=2, persistent workers",
    )
    threads = result.trials_of("Loader")
    if threads:
        ax.plot(
            [t.threads for t in threads],
            [t.epoch_images_per_s for t in threads],
            "^--",
            color="#55a868",
            label="iotool.Loader (x: threads)",
        )
    for t in result.trials:
        if t.stage not in ("workers", "threads"):
            ax.plot([t.num_workers], [t.epoch_images_per_s], "s", label=describe_trial(t))
    if result.chosen is not None:
        ax.plot(
            [result.chosen.num_workers],
            [result.chosen.epoch_images_per_s],
            "*",
            color="#dd8452",
            markersize=16,
            label="recommended",
        )
    ax.set_xlabel("num_workers" + (" or threads" if threads else ""))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # worker counts are whole numbers
    ax.set_ylabel("images/s over an epoch")
    ax.set_title(
        f"iotool tune: {os.path.basename(result.path.rstrip('/'))}, batch {result.batch_size}, "
        f"{result.cpus} usable CPUs",
        fontsize=10,
    )
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
