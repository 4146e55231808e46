"""``iotool.Loader(..., isolate=True)``: the same thread pass in one child process, so the training
loop's Python thread does not share the GIL with the loader's threads.

- **Start**: the child is forked on the first ``iter()`` and kept across epochs (as
  ``persistent_workers``): it inherits the dataset, its transform and a :class:`ChildPlan` whose
  ``start`` builds each pass's :class:`~.threadpass.ThreadPass` (nothing is pickled, and nothing
  of the Loader is changed in the child); a RAM cache fills in the child and stays there. Fork needs Linux (``os.fork``,
  ``os.memfd_create``, descriptor passing); elsewhere :func:`check_isolation` refuses.
- **Memory**: batches go into one shared region for the loader's life
  (:mod:`iotool.loading.loader.sharedring`), under the lifetime rule of the in-process loader.
- **Control**: a ``SOCK_SEQPACKET`` socket pair carrying small JSON messages (and the region's
  descriptor once): the parent asks for each batch in turn (``next``), the child answers with its
  slot, or with an error (type, message naming the record, the child's traceback as text).
- **Fields**: fixed-shape fields lie in the shared ring beside the images; list fields (text,
  JSON, bytes, ragged arrays, boxes) travel with each batch as their stored encoding in one
  ``memfd`` of their own, decoded by the parent's bounded codecs (:mod:`.wire`; nothing pickled).
- **Shutdown**: breaking out, ``del`` and garbage collection of the iterator end the pass (the
  child waits for the next; so does a KeyboardInterrupt raised in the loop's body, which drops
  the iterator as ``break`` does); closing or collecting the loader, Ctrl-C while the parent
  waits for a batch, and any failure of the control channel end the child (its socket closes, then SIGKILL after
  :data:`EXIT_WAIT_S`), and it is reaped. A child killed from outside is reported as an error
  naming its pid and signal instead of a hang; the next ``iter()`` starts a new child. The child
  ignores SIGINT (the parent decides) and dies with the parent (``PR_SET_PDEATHSIG`` when forked
  by the main thread; otherwise when its socket closes).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from ...errors import FormatError, InternalError, IotoolError, RecordError, UsageError
from .columns import Layout
from .protocols import Batch, PassPlan
from .sharedring import ParentRing, SharedRing
from .threadpass import ThreadPass
from .wire import pack, unpack

MAX_MESSAGE = 1 << 16  # bytes of one control message; a traceback is cut to fit
EXIT_WAIT_S = 2.0  # how long a closing child may take to exit before SIGKILL
_ERRORS: dict[str, type[IotoolError]] = {
    "RecordError": RecordError,
    "FormatError": FormatError,
    "UsageError": UsageError,
    "InternalError": InternalError,
}
_children: weakref.WeakSet[Child] = weakref.WeakSet()  # this process's children (closed in a new child)


def check_isolation() -> None:
    """Raise :class:`UsageError` where a child cannot be forked with a shared ring."""
    missing = [
        name
        for name, ok in (
            ("os.fork", hasattr(os, "fork")),
            ("os.memfd_create", hasattr(os, "memfd_create")),
            ("socket.send_fds", hasattr(socket, "send_fds")),
        )
        if not ok
    ]
    if not sys.platform.startswith("linux") or missing:
        raise UsageError(
            f"iotool.Loader(isolate=True) forks a child process sharing one memory region, which needs "
            f"Linux (this is {sys.platform}{'; missing: ' + ', '.join(missing) if missing else ''}); "
            f"use isolate=False (threads in this process) or torch.utils.data.DataLoader(num_workers=N)."
        )


@dataclass(frozen=True)
class ChildPlan:
    """What the child is given at the fork (explicit inputs, no Loader).

    Attributes:
        slots, batch_size, keep, layout: the shared ring's shape and columns (as the in-process ring's).
        start: ``start(ring, epoch, first, origin)``: a thread pass over ``epoch`` from batch
            ``first`` of the rank streams that start at global position ``origin``, writing into ``ring``.
        skipped: the bad records skipped so far (reported with each batch).
        warm: open the dataset's handles once, before the threads start.
    """

    slots: int
    batch_size: int
    keep: int
    layout: Layout
    start: Callable[[SharedRing, int, int, int], ThreadPass]
    skipped: Callable[[], int]
    warm: Callable[[], None]

    def ring(self) -> SharedRing:
        return SharedRing(self.slots, self.batch_size, self.keep, self.layout)


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One JSON message (with descriptors) on the control socket."""
    data = json.dumps(message).encode()
    if len(data) > MAX_MESSAGE:
        raise InternalError(f"an iotool.Loader control message of {len(data)} bytes; report this as a bug.")
    socket.send_fds(sock, [data], list(fds)) if fds else sock.sendall(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and the descriptors sent with it; (None, []) when the other side is gone."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
    if not data:
        return None, list(fds)
    try:
        message = json.loads(data) if not flags & socket.MSG_TRUNC else None
    except ValueError:
        message = None
    if not isinstance(message, dict):
        for fd in fds:
            os.close(fd)
        raise InternalError("a malformed iotool.Loader control message; report this as a bug.")
    return message, list(fds)


# -- the child -------------------------------------------------------------------------------------
def _renew_torch_thread_pool() -> None:
    """Renew torch's intra-op thread pool once, in the child's only thread, before any pass starts.

    A fork marks the pool the parent made (``torch.set_num_threads`` makes one) as corrupted; the
    first ``set_num_threads`` in the child replaces it. Every thread's first parallel op makes that
    call, and when several threads make it at once one can find no pool and fail with torch's
    "Invalid thread pool!" (seen under load with ``torch.set_num_threads(1)`` in the parent).
    """
    import torch

    torch.set_num_threads(torch.get_num_threads())


def _child_main(plan: ChildPlan, sock: socket.socket, die_with_parent: bool) -> NoReturn:
    """The child's life: serve passes until the parent closes the socket; never returns.
    ``die_with_parent``: forked by the main thread, so PR_SET_PDEATHSIG (which fires when the
    forking *thread* ends) means the parent's death."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if die_with_parent:
            try:
                ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
        if os.getppid() != 1:
            _renew_torch_thread_pool()
            plan.warm()
            _Server(plan, sock).serve()
    except BaseException as exc:
        code = 1
        try:
            send(sock, {**_error_message(exc, -1, plan.skipped()), "op": "fatal"})
        except BaseException:
            pass
    finally:
        os._exit(code)


class _Server:
    """The child's side of the channel: one thread pass at a time, batch by batch as asked."""

    def __init__(self, plan: ChildPlan, sock: socket.socket):
        self.plan, self.sock = plan, sock
        self.ring = plan.ring()
        self.run: ThreadPass | None = None  # the current (or last) pass
        self.active = False  # the current pass may still deliver
        self.pass_id = -1
        self.next_batch = 0

    def serve(self) -> None:
        while True:
            message, _ = receive(self.sock)
            if message is None:
                return
            op = message.get("op")
            if op == "pass":
                self._start(message)
            elif op == "stop":
                self._stop()
            elif op == "next":
                self._next(message)

    def _stop(self) -> None:
        if self.run is not None:
            self.run.stop(wait=True)
        self.active = False

    def _start(self, message: dict[str, Any]) -> None:
        self._stop()  # one pass at a time
        if self.run is not None and self.run.alive():
            self.ring = self.plan.ring()  # a thread still finishing a sample may write its old slot
        self.pass_id = message["id"]
        self.run = self.plan.start(self.ring, message["epoch"], message["batches"], message["origin"])
        self.next_batch, self.active = self.run.first_owned, True

    def _next(self, message: dict[str, Any]) -> None:
        run, skipped = self.run, self.plan.skipped
        if message.get("id") != self.pass_id or run is None or not self.active:  # never leave it waiting
            error = UsageError(
                f"the iotool.Loader's child has no pass {message.get('id')!r} running; iterate the loader again."
            )
            send(self.sock, _error_message(error, message.get("id", -1), skipped()))
            return
        if message.get("batch") != self.next_batch:
            error = InternalError(
                f"the iotool.Loader's child was asked for batch {message.get('batch')!r}, but builds "
                f"{self.next_batch} next; report this as a bug."
            )
            send(self.sock, _error_message(error, self.pass_id, skipped()))
            return
        for index in message.get("renew", []):
            self.ring.renew_slot(index)
        lists: tuple[int, int] | None = None
        try:
            run.deliver(self.next_batch)
            index, count = self.ring.delivered % self.ring.size, run.count(self.next_batch)
            if self.ring.layout.lists:
                lists = pack(self.ring.layout, self.ring.slots[index].lists, count)
        except BaseException as exc:
            run.stop(wait=True)
            self.active = False
            send(self.sock, _error_message(exc, self.pass_id, skipped()))
            return
        self.next_batch += run.plan.processes
        shape = self.ring.shape or (0, 0, 0)
        names, fds = self.ring.pop_fds(index)
        reply = {"op": "batch", "id": self.pass_id, "slot": index, "count": count, "shape": list(shape)}
        if lists is not None:
            names, fds, reply["lists"] = [*names, "lists"], [*fds, lists[0]], lists[1]
        send(self.sock, {**reply, "fds": names, "skipped": skipped()}, fds)
        for fd in fds:
            os.close(fd)


def escaped_size(text: str) -> int:
    """Bytes of ``text`` in a control message (JSON escapes each non-ASCII character, 6 or 12 bytes)."""
    return len(json.dumps(text)) - 2


def fit(text: str, budget: int, keep: str = "ends") -> str:
    """``text`` cut to at most ``budget`` bytes as the control message encodes it (not ``budget``
    characters: a CJK character takes 6): ``keep="ends"`` keeps its head and its tail (an error
    names the record first and says why last), ``"tail"`` its tail (a traceback's last frames)."""
    if len(text) <= budget and escaped_size(text) <= budget:  # a character is 1 to 12 bytes escaped
        return text
    mark = " [...] "

    def longest(take) -> str:  # the most characters whose escaped form fits, by bisection
        low, high = 0, min(len(text), budget)
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if escaped_size(take(mid)) <= budget - len(mark) else (low, mid - 1)
        return take(low)

    if keep == "tail":
        return mark + longest(lambda n: text[len(text) - n :])
    head = longest(lambda n: text[: n // 2] + text[len(text) - (n - n // 2) :])
    half = len(head) // 2
    return head[:half] + mark + head[half:]


def _error_message(exc: BaseException, pass_id: int, skipped: int) -> dict[str, Any]:
    """The ``error`` message of ``exc``: the message and the traceback cut by their encoded size,
    so that the whole fits :data:`MAX_MESSAGE` whatever characters they hold."""
    return {
        "op": "error",
        "id": pass_id,
        "type": fit(type(exc).__name__, 200),
        "message": fit(str(exc), MAX_MESSAGE // 4),
        "traceback": fit("".join(traceback.format_exception(exc)), MAX_MESSAGE // 2, keep="tail"),
        "skipped": skipped,
    }


# -- the parent ------------------------------------------------------------------------------------
def _end(owner: int, pid: int, sock: socket.socket) -> None:
    """Close the child's socket, let it exit (SIGKILL after EXIT_WAIT_S) and reap it."""
    if os.getpid() != owner:  # a copy of this object in a forked process: not its child
        return
    sock.close()
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        if time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            return
        time.sleep(0.005)


class Child:
    """One isolated loader's child process: its pid, the control socket and the ring's mapping."""

    def __init__(self, plan: ChildPlan):
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        main = threading.current_thread() is threading.main_thread()
        pid = os.fork()
        if pid == 0:
            parent_end.close()
            for other in list(_children):
                other.sock.close()
            _child_main(plan, child_end, main)
        child_end.close()
        self.pid, self.sock = pid, parent_end
        self.ring = ParentRing(plan.slots, plan.batch_size, plan.keep, plan.layout)
        self.passes = 0
        self.status: str | None = None  # how the child ended, once it has
        self._finalizer = weakref.finalize(self, _end, os.getpid(), pid, parent_end)
        _children.add(self)

    def close(self) -> None:
        """End the child now (idempotent) and let go of the ring (batches the caller holds stay valid)."""
        self._finalizer()
        self.ring.close()

    def alive(self) -> bool:
        """Not closed, and the process has not exited (killed while idle between passes, say);
        the check leaves an exited child to be reaped by :meth:`close` or :meth:`gone`."""
        if not self._finalizer.alive:
            return False
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def gone(self, batch: int) -> IotoolError:
        """The error for a child that ended on its own (killed, crashed), reaped here."""
        how = "its control socket closed"
        try:
            done, status = os.waitpid(self.pid, 0)
            if done and os.WIFSIGNALED(status):
                how = f"killed by signal {os.WTERMSIG(status)} ({signal.Signals(os.WTERMSIG(status)).name})"
            elif done:
                how = f"exit status {os.WEXITSTATUS(status)}"
        except ChildProcessError:
            pass
        self.close()
        return IotoolError(
            f"the iotool.Loader's child process {self.pid} ended ({how}) while building batch "
            f"{batch}; iterate the loader again to start a new child, or use isolate=False."
        )


class IsolatedPass:
    """One pass served by the child (a :class:`~.protocols.Pass`).

    Args:
        child: the child process (started by the Loader, kept across passes).
        plan: the pass's epoch, first batch and sizes.
        pinned: hand out pinned copies of the batches.
        on_skipped: called with the child's count of skipped records, as each answer reports it.
    """

    def __init__(self, child: Child, plan: PassPlan, pinned: bool, on_skipped: Callable[[int], None]):
        self.child, self.plan, self.pinned, self.on_skipped = child, plan, pinned, on_skipped
        self.epoch, self.first, self.batches = plan.epoch, plan.first, plan.batches
        self.delivered = plan.first
        child.passes += 1
        self.id = child.passes
        self.stopped = False
        try:
            send(
                child.sock,
                {"op": "pass", "id": self.id, "epoch": plan.epoch, "batches": plan.first, "origin": plan.origin},
            )
        except OSError:  # it ended since the Loader looked (it is replaced on the next iter())
            self.stopped = True
            raise child.gone(plan.first) from None

    def deliver(self, batch: int) -> Batch:
        if self.stopped:
            raise UsageError(
                "this pass over the iotool.Loader was ended (a new iter(loader) started another, "
                "it was closed, or it raised); iterate the new one."
            )
        child = self.child
        try:
            send(child.sock, {"op": "next", "id": self.id, "batch": batch, "renew": child.ring.to_renew()})
        except OSError:
            raise child.gone(batch) from None
        while True:
            try:
                message, fds = receive(child.sock)
            except OSError:  # the connection reset: the child died with messages unread
                message, fds = None, []
            if message is None:
                raise child.gone(batch)
            if message.get("op") == "fatal":  # the child failed outside a pass and exits
                self.stopped = True
                child.close()
                raise _rebuilt(message, child.pid)
            if message.get("id") != self.id:  # the answer to a pass that ended
                for fd in fds:
                    os.close(fd)
                continue
            skipped = message.get("skipped")
            if isinstance(skipped, int):
                self.on_skipped(skipped)
            if message.get("op") == "error":
                self.stopped = True
                raise _rebuilt(message, child.pid)
            return self._batch(message, fds, batch)

    def _batch(self, message: dict[str, Any], fds: list[int], batch: int) -> Batch:
        """The batch a ``batch`` message announces: its memory in the ring, its lists from their file."""
        ring, names = self.child.ring, message.get("fds", [])
        lists: list[list[Any]] = []
        if isinstance(names, list) and names and names[-1] == "lists" and len(fds) == len(names):
            names, fd, fds = names[:-1], fds[-1], fds[:-1]
            count = message.get("count")
            try:
                if not isinstance(count, int) or not 0 < count <= ring.batch_size:
                    raise InternalError(f"the iotool.Loader's child sent a malformed batch message {message!r:.200}.")
                lists = unpack(ring.layout, fd, message.get("lists"), count)
            except BaseException:
                for other in fds:
                    os.close(other)
                raise
        elif ring.layout.lists:
            for fd in fds:
                os.close(fd)
            raise InternalError("the iotool.Loader's child sent a batch without its list fields; report this as a bug.")
        images, columns, _ = ring.receive(message, names, fds)
        self.delivered = batch + 1
        if self.pinned:  # pinned copies: the allocator guards copies in flight
            images, columns = images.pin_memory(), [c.pin_memory() for c in columns]
        return ring.layout.assemble(images, columns, lists)

    def stop(self, wait: bool) -> None:
        """End this pass in the child (the child stays for the next)."""
        if self.stopped:
            return
        self.stopped = True
        if self.child.alive():
            try:
                send(self.child.sock, {"op": "stop"})
            except OSError:
                pass

    def abandon(self) -> None:
        """The caller's wait was interrupted (Ctrl-C, a broken channel): end the child."""
        self.child.close()

    def alive(self) -> bool:
        return False  # nothing of this pass runs in this process


def _rebuilt(message: dict[str, Any], pid: int) -> IotoolError:
    kind = _ERRORS.get(str(message.get("type")), IotoolError)
    text = f"{message.get('message')}"
    if kind is IotoolError:
        text = f"{message.get('type')}: {text}"
    return kind(
        f"{text}\n(raised in the iotool.Loader's child process {pid}; its traceback:\n{message.get('traceback', '')})"
    )
