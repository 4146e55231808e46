"""The Loader's arguments: DataLoader's, answered with the Loader's own spelling or why it has
none (a refusal names them), and the check of its counts."""

from __future__ import annotations

from ...errors import UsageError

DATALOADER_ARGUMENTS = {
    "num_workers": "the Loader builds batches in threads, not worker processes: pass threads=N "
    "(and processes=K to run K child processes of N threads each, when the samples run Python).",
    "collate_fn": "the Loader always collates as iotool.fast_collate does (uint8 images, int64 labels, "
    "a tuple or dict in the dataset's fields order); for another collate use torch.utils.data.DataLoader.",
    "persistent_workers": "nothing to keep alive: the Loader's threads (and its isolate=True child) "
    "last across epochs as long as the Loader.",
    "prefetch_factor": "pass prefetch=N: batches prepared ahead in all (DataLoader's is per worker).",
    "sampler": "the Loader orders records itself: shuffle=, seed=, even= and rank=/world_size= (as "
    "DistributedSampler); call loader.set_epoch(epoch) each epoch.",
    "batch_sampler": "the Loader batches in its own order: batch_size=, drop_last= and shuffle=.",
    "generator": "pass seed=N: it seeds the shuffle and each sample's augmentation.",
    "worker_init_fn": "the Loader's threads need no per-worker set-up; the augmentation's random "
    "numbers follow (seed, epoch, record).",
}


def positive(value: object, name: str, minimum: int = 1) -> int:
    """``value``, which must be an int of ``minimum`` or more (``name`` for the refusal)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"Loader: {name}={value!r}; give an integer of {minimum} or more.")
    return value
