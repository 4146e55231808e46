"""What the iterable datasets share: one global order per epoch (:mod:`iotool.loading.order`),
each (rank, DataLoader worker) reading its cut of its rank's stream, the epoch in shared memory
and a resumable place (:meth:`OrderedStream.state_dict`).

A subclass says what its epoch is (:meth:`~OrderedStream.global_order`, :meth:`~OrderedStream.order_key`)
and how it turns its stream of record indices into samples (:meth:`~OrderedStream.samples_of`).
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any, Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import UsageError
from .order import EpochOrder, GlobalOrder, RecordOrder
from .split import STATE_VERSION, ShardEnv, WorkerStream, current_env, distributed_rank, resume_position


class OrderedStream(IterableDataset):
    """An iterable dataset over one topology-free order per epoch, split over ranks and workers,
    resumable mid-epoch (torchdata's ``StatefulDataLoader``) and read by :class:`iotool.Loader`."""

    def init_order(self, shuffle: bool, seed: int, even: bool, env: ShardEnv | None) -> None:
        """Set the order's options and the place (``env``; None: from torch.distributed and the DataLoader)."""
        self._order = EpochOrder(shuffle=bool(shuffle), seed=operator.index(seed), even=bool(even))
        self.env = env
        # In shared memory, so DataLoader workers that persist across epochs
        # (persistent_workers=True) see set_epoch too; their copy of the dataset is made once.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._dist = distributed_rank()
        self._loaded: dict[str, Any] | None = None  # from load_state_dict, for the next pass
        self._pending: dict[str, Any] | None = None  # the state the next pass starts from
        self._pass: tuple[dict[str, Any], WorkerStream] | None = None  # the running (or last) pass

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the running pass (a DataLoader worker starts its own) and without a
        cached epoch order (a worker makes the one it reads)."""
        state = self.__dict__.copy()
        state["_pass"] = None
        state.pop("_cached", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_cached", None)

    # -- what a subclass says ------------------------------------------------------------------
    def global_order(self, order: EpochOrder) -> GlobalOrder:
        """``order``'s epoch as one sequence of record indices, the same on every rank."""
        raise NotImplementedError

    def order_key(self) -> dict[str, Any]:
        """What, beside shuffle and seed, makes the global order (checked when a state is loaded)."""
        raise NotImplementedError

    def positions(self) -> int:
        """Positions in an epoch's global order."""
        raise NotImplementedError

    def samples_of(self, stream: WorkerStream, env: ShardEnv, epoch: int) -> Iterator[Any]:
        """The samples of ``stream``'s records, counting each one handed out in ``stream.consumed``."""
        raise NotImplementedError

    # -- the epoch and the place -------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch that seeds shuffling (see :meth:`set_epoch`)."""
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds shuffling; call before each epoch's iteration.

        Works with ``persistent_workers=True``: the value lives in shared memory, and a
        persistent worker starts its next epoch's pass only when the next ``iter(loader)`` begins.
        """
        self._epoch.fill_(operator.index(epoch))
        self._dist = distributed_rank() or self._dist

    def _env(self) -> ShardEnv:
        if self.env is not None:
            return self.env
        if get_worker_info() is None:  # the main process: remember the rank for the workers
            self._dist = distributed_rank() or self._dist
        return current_env(self._dist)

    # -- order: what iotool.Loader asks of every dataset kind --------------------------------------
    @property
    def epoch_order(self) -> EpochOrder:
        """This dataset's own order options (shuffle, seed, even) in its current epoch."""
        return self._order.at(self.epoch)

    @property
    def shuffle(self) -> bool:
        return self._order.shuffle

    @shuffle.setter
    def shuffle(self, value: bool) -> None:
        self._order = replace(self._order, shuffle=value)

    @property
    def seed(self) -> int:
        return self._order.seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._order = replace(self._order, seed=value)

    @property
    def even(self) -> bool:
        return self._order.even

    @even.setter
    def even(self, value: bool) -> None:
        self._order = replace(self._order, even=value)

    def epoch_length(self, order: EpochOrder) -> int:
        """Records ``order``'s rank reads per epoch (its whole stream, as one worker)."""
        return order.length(self.positions())

    def record_order(self, order: EpochOrder, start: int = 0) -> RecordOrder:
        """``order``'s rank stream from position ``start``, drawn lazily (indices only, nothing read)."""
        return RecordOrder(order.stream(self.global_order(order), start), start)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all workers together)."""
        env = self._env()
        return self.epoch_length(self.epoch_order.placed(env.rank, env.world_size))

    def _stream(self, env: ShardEnv, epoch: int, origin: int = 0) -> WorkerStream:
        """This process's record stream for ``epoch`` from global position ``origin``."""
        order = self.epoch_order.placed(env.rank, env.world_size).at(epoch).resumed(origin)
        return self.order_stream(order, env.worker_id, env.num_workers)

    def epoch_stream(self, env: ShardEnv, epoch: int, even: bool | None = None) -> WorkerStream:
        """The record stream of the place ``env`` in ``epoch`` (indices only, nothing read);
        ``even`` overrides the dataset's."""
        order = self.epoch_order.overridden(None, None, even).placed(env.rank, env.world_size).at(epoch)
        return self.order_stream(order, env.worker_id, env.num_workers)

    def order_stream(self, order: EpochOrder, worker_id: int = 0, num_workers: int = 1) -> WorkerStream:
        """The record stream ``order`` gives one worker of its rank (indices only, nothing read)."""
        return WorkerStream(self.global_order(order), order, worker_id, num_workers)

    def iter_indices(self) -> Iterator[int]:
        """The record indices this process yields this epoch, in order (shuffled if asked)."""
        yield from self._stream(self._env(), self.epoch)

    # -- resume ---------------------------------------------------------------------------------
    def _place(self, env: ShardEnv) -> dict[str, Any]:
        """What a saved state must match to resume in this process (all but the epoch)."""
        return {
            "version": STATE_VERSION,
            **self.order_key(),
            "seed": self.seed,
            "shuffle": self.shuffle,
            "even": self.even,
            "rank": env.rank,
            "world_size": env.world_size,
            "worker_id": env.worker_id,
            "num_workers": env.num_workers,
        }

    def state_dict(self) -> dict[str, Any]:
        """This process's place in its epoch, as small plain data (JSON-serialisable).

        torchdata's ``StatefulDataLoader`` calls this in each worker and keeps one state per
        worker in ``loader.state_dict()``: the epoch, the global position its pass started from
        (``"origin"``), the options and place, and the records this worker has handed out
        (``"taken"``). Before a pass starts it is the state that pass will start from (a loaded
        one, or the epoch's start).
        """
        waiting = self._loaded if self._loaded is not None else self._pending
        if waiting is not None:
            return dict(waiting)
        if self._pass is not None:
            place, stream = self._pass
            return {**place, **stream.position()}
        env = self._env()
        return {**self._place(env), "epoch": self.epoch, "origin": 0, **self._stream(env, self.epoch).position()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict`: the next pass continues where it was saved, reading
        none of the records before that point.

        A state saved with the same world size and worker count continues that worker's stream
        (synchronous ranks have taken as many, so any rank's state fits every rank). A state saved
        with one worker per rank (``num_workers=0``) resumes on any world size: the rest of the
        epoch is every record no rank had consumed, split over the ranks here. Raises
        :class:`~iotool.UsageError` naming the mismatch when the state was saved with other
        options, with several workers in another place (each worker's state holds only its own
        progress), or (when the pass starts) in another epoch: call ``set_epoch`` with the saved
        epoch before iterating.
        """
        resume_position(state, self._place(self._env()), self.positions())
        self._loaded = dict(state)

    def __iter__(self) -> Iterator[Any]:
        loaded, self._loaded = self._loaded, None  # a loaded state resumes this pass only
        self._pass, self._pending = None, loaded
        return self._samples(loaded)

    def _samples(self, loaded: dict[str, Any] | None) -> Iterator[Any]:
        env, epoch = self._env(), self.epoch  # read when the pass starts (set_epoch may come late)
        origin, taken = 0, 0
        if loaded is not None:
            saved_epoch, origin, taken = resume_position(loaded, self._place(env), self.positions())
            if saved_epoch != epoch:
                raise UsageError(
                    f"cannot resume from this state: it was saved with epoch={saved_epoch} (here {epoch}); "
                    f"call set_epoch({saved_epoch}) before iterating the resumed loader."
                )
        place = {**self._place(env), "epoch": epoch, "origin": origin}
        stream = self._stream(env, epoch, origin)
        stream.restore({"taken": taken})
        self._pass, self._pending = (place, stream), None
        yield from self.samples_of(stream, env, epoch)
