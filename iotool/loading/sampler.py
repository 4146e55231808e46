"""``iotool.ElasticSampler``: ``DistributedSampler``'s order for a map-style dataset, resumable
mid-epoch through torchdata's ``StatefulDataLoader`` on the same world size or another.

The order is the dataset's global order sliced by :class:`~iotool.loading.order.EpochOrder` (as
``iotool.Loader`` and the sharded datasets slice theirs): with the same ``seed`` and ``epoch`` it
is ``DistributedSampler(shuffle=True)``'s, index for index. Its state is the indices this rank
has yielded, and since synchronous ranks have yielded as many, any rank's state places every rank
(:func:`iotool.loading.split.resume_position`, the rule a sharded dataset's worker state follows).
``StatefulDataLoader`` keeps the sampler's state of the last batch it delivered, however far its
workers have prefetched.
"""

from __future__ import annotations

import operator
from typing import Any, Iterator

from torch.utils.data import Sampler

from ..errors import UsageError
from .mapstyle import ImageDataset
from .order import EpochOrder
from .split import STATE_VERSION, rank_world, resume_position


class ElasticSampler(Sampler[int]):
    """The indices a rank reads of a map-style iotool dataset, epoch by epoch, resumable on any
    world size.

    Example:
        >>> sampler = iotool.ElasticSampler(ds, shuffle=True, seed=0)  # rank from torch.distributed
        >>> loader = StatefulDataLoader(ds, batch_size=256, sampler=sampler, num_workers=8)
        >>> sampler.set_epoch(epoch)

    Args:
        dataset: an :class:`~iotool.ImageDataset` (lmdb, hdf5, bmp).
        shuffle: a new permutation every epoch (``torch.randperm`` seeded with ``seed + epoch``).
        seed: seeds the permutation.
        even: pad every rank to the same length with the epoch's first records (the default, as
            ``DistributedSampler``); False: every record exactly once, the last ranks one shorter.
        rank: this process's rank; None: from torch.distributed, else RANK.
        world_size: the ranks; None: from torch.distributed, else WORLD_SIZE.
    """

    def __init__(
        self,
        dataset: ImageDataset,
        *,
        shuffle: bool = True,
        seed: int = 0,
        even: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ):
        if not isinstance(dataset, ImageDataset):
            raise UsageError(
                f"ElasticSampler orders a map-style iotool dataset (lmdb, hdf5, bmp); got a "
                f"{type(dataset).__name__:.60}. Sharded datasets and mixes order themselves."
            )
        found = rank_world()
        rank = found[0] if rank is None else rank
        world = found[1] if world_size is None else world_size
        if not (isinstance(world, int) and world >= 1 and isinstance(rank, int) and 0 <= rank < world):
            raise UsageError(
                f"ElasticSampler: rank={rank!r:.20} of world_size={world!r:.20}; give 0 <= rank < world_size."
            )
        self.dataset = dataset
        self.order = EpochOrder(bool(shuffle), operator.index(seed), bool(even), rank, world)
        self.yielded = 0  # indices of this epoch's stream handed out
        self._resume: tuple[int, int, int] | None = None  # (epoch, origin, taken) from load_state_dict

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that reseeds the permutation; call before each epoch (the saved one first)."""
        self.order = self.order.at(epoch)
        if self._resume is not None and self._resume[0] != self.order.epoch:
            self._resume = None  # a state of another epoch: this one starts from its start

    def _stream_order(self) -> tuple[EpochOrder, int]:
        if self._resume is not None and self._resume[0] == self.order.epoch:
            return self.order.resumed(self._resume[1]), self._resume[2]
        return self.order.resumed(0), 0

    def __len__(self) -> int:
        order, start = self._stream_order()
        return order.length(len(self.dataset)) - start

    def __iter__(self) -> Iterator[int]:
        order, start = self._stream_order()
        self._resume = None  # a loaded state resumes one pass
        self.order = order
        self.yielded = start
        for index in order.stream(self.dataset.global_order(order), start):
            self.yielded += 1
            yield index

    def _place(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "sampler": "iotool.ElasticSampler",
            **self.dataset.order_key(),
            "seed": self.order.seed,
            "shuffle": self.order.shuffle,
            "even": self.order.even,
            "rank": self.order.rank,
            "world_size": self.order.world_size,
            "worker_id": 0,
            "num_workers": 1,
        }

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is in its epoch (small, JSON-serialisable): the epoch, the global position
        the epoch's streams started from (``origin``) and the indices yielded (``taken``)."""
        if self._resume is not None:
            epoch, origin, taken = self._resume
        else:
            epoch, origin, taken = self.order.epoch, self.order.origin, self.yielded
        return {**self._place(), "epoch": epoch, "origin": origin, "taken": taken}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict` of any rank: on its world size from the next index, on
        another with the rest of the epoch split over the ranks here. Sets the saved epoch.

        Raises:
            UsageError: not such a state, or one saved with other options or on another dataset.
        """
        if not isinstance(state, dict) or state.get("sampler") != "iotool.ElasticSampler":
            raise UsageError("not an iotool.ElasticSampler state; pass what ElasticSampler.state_dict() returned.")
        epoch, origin, taken = resume_position(state, self._place(), len(self.dataset))
        self.order = self.order.at(epoch)
        self._resume = (epoch, origin, taken)
