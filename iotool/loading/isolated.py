"""``iotool.Loader(..., isolate=True)``: the same thread pass in one child process, so the training
loop's Python thread does not share the GIL with the loader's threads.

- **Start**: the child is forked on the first ``iter()`` and kept across epochs (as
  ``persistent_workers``): it inherits the dataset, its transform and the loader (nothing is
  pickled); a RAM cache fills in the child and stays there. Fork needs Linux (``os.fork``,
  ``os.memfd_create``, descriptor passing); elsewhere :func:`check_isolation` refuses.
- **Memory**: batches go into one shared region for the loader's life
  (:mod:`iotool.loading.sharedring`), under the lifetime rule of the in-process loader.
- **Control**: a ``SOCK_SEQPACKET`` socket pair carrying small JSON messages (and the region's
  descriptor once): the parent asks for each batch in turn (``take``), the child answers with its
  slot, or with an error (type, message naming the record, the child's traceback as text).
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
from typing import Any, Iterator

import torch

from ..errors import FormatError, IotoolError, RecordError, UsageError
from .sharedring import ParentRing, SharedRing
from .threadpass import Batches

MAX_MESSAGE = 1 << 16  # bytes of one control message; a traceback is cut to fit
EXIT_WAIT_S = 2.0  # how long a closing child may take to exit before SIGKILL
_ERRORS = {"RecordError": RecordError, "FormatError": FormatError, "UsageError": UsageError}
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


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] = ()) -> None:
    """One JSON message (with descriptors) on the control socket."""
    data = json.dumps(message).encode()
    if len(data) > MAX_MESSAGE:
        raise UsageError(f"an iotool.Loader control message of {len(data)} bytes; report this as a bug.")
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
        raise UsageError("a malformed iotool.Loader control message; report this as a bug.")
    return message, list(fds)


# -- the child -------------------------------------------------------------------------------------
def _child_main(loader: Any, sock: socket.socket, die_with_parent: bool) -> None:
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
        if os.getppid() == 1:
            return
        _serve(loader, sock)
    except BaseException as exc:
        code = 1
        try:
            send(sock, {**_error_message(exc, -1, loader.skipped), "op": "fatal"})
        except BaseException:
            pass
    finally:
        os._exit(code)


def _reopen(loader: Any) -> None:
    """Reopen the handles inherited across the fork (an LMDB environment, an HDF5 file) in this one
    thread: the readers open them lazily once per process, and threads racing to do it collide."""
    if len(loader.samples):
        try:
            loader.samples.reader.read(0)
        except Exception:
            pass


def _serve(loader: Any, sock: socket.socket) -> None:
    _reopen(loader)
    loader.isolate = False
    loader._child = None
    loader.new_ring = lambda: SharedRing(loader.prefetch + loader.keep + 1, loader.batch_size, loader.keep)
    batches: Iterator | None = None
    pass_id = -1
    while True:
        message, _ = receive(sock)
        if message is None:
            return
        op = message.get("op")
        if op == "pass":
            batches = None
            pass_id = message["id"]
            loader.set_epoch(message["epoch"])
            state = loader.state_dict()
            state.update(epoch=message["epoch"], batches=message["batches"])
            loader.load_state_dict(state)
            batches = iter(loader)
        elif op == "stop":
            if batches is not None:
                batches.close()
            batches = None
        elif op == "take" and (message.get("id") != pass_id or batches is None):  # never leave it waiting
            send(
                sock,
                _error_message(
                    UsageError(
                        f"the iotool.Loader's child has no pass {message.get('id')!r} "
                        f"running; iterate the loader again."
                    ),
                    message.get("id", -1),
                    loader.skipped,
                ),
            )
        elif op == "take":
            for index in message.get("renew", []):
                loader.ring.renew_slot(index)
            try:
                images, labels = next(batches)
            except BaseException as exc:
                batches = None
                send(sock, _error_message(exc, pass_id, loader.skipped))
                continue
            index, count = loader.ring.taken % loader.ring.size, len(images)
            del images, labels
            names, fds = loader.ring.take_fds(index)
            send(
                sock,
                {
                    "op": "batch",
                    "id": pass_id,
                    "slot": index,
                    "count": count,
                    "shape": list(loader.ring.shape),
                    "fds": names,
                    "skipped": loader.skipped,
                },
                fds,
            )
            for fd in fds:
                os.close(fd)


def _error_message(exc: BaseException, pass_id: int, skipped: int) -> dict[str, Any]:
    text = "".join(traceback.format_exception(exc))[-MAX_MESSAGE // 2 :]
    return {
        "op": "error",
        "id": pass_id,
        "type": type(exc).__name__,
        "message": str(exc)[: MAX_MESSAGE // 4],
        "traceback": text,
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

    def __init__(self, loader: Any):
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        main = threading.current_thread() is threading.main_thread()
        pid = os.fork()
        if pid == 0:
            parent_end.close()
            for other in list(_children):
                other.sock.close()
            _child_main(loader, child_end, main)
        child_end.close()
        self.pid, self.sock = pid, parent_end
        self.ring = ParentRing(loader.prefetch + loader.keep + 1, loader.batch_size, loader.keep)
        self.passes = 0
        self.status: str | None = None  # how the child ended, once it has
        self._finalizer = weakref.finalize(self, _end, os.getpid(), pid, parent_end)
        _children.add(self)

    def close(self) -> None:
        """End the child now (idempotent) and let go of the ring (batches the caller holds stay valid)."""
        self._finalizer()
        self.ring.close()

    def alive(self) -> bool:
        return self._finalizer.alive

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
    """One pass served by the child; the loader holds it as it holds a thread pass."""

    def __init__(self, loader: Any, first: int):
        if loader._child is None or not loader._child.alive():
            loader._child = Child(loader)
        self.loader, self.child, self.epoch, self.first = loader, loader._child, loader.epoch, first
        self.batches = len(loader)
        self.child.passes += 1
        self.id = self.child.passes
        self.stopped = False
        send(self.child.sock, {"op": "pass", "id": self.id, "epoch": self.epoch, "batches": first})

    def take(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        child = self.child
        try:
            send(child.sock, {"op": "take", "id": self.id, "batch": batch, "renew": child.ring.to_renew()})
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
            self.loader.skipped = message.get("skipped", self.loader.skipped)
            if message.get("op") == "error":
                self.stopped = True
                raise _rebuilt(message, child.pid)
            images, labels = child.ring.receive(message, message.get("fds", []), fds)
            self.loader.batches_taken = batch + 1
            if self.loader.pin_memory:  # pinned copies: the allocator guards copies in flight
                images, labels = images.pin_memory(), labels.pin_memory()
            return images, labels

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

    def alive(self) -> bool:
        return False  # nothing of this pass runs in this process


def _rebuilt(message: dict[str, Any], pid: int) -> IotoolError:
    kind = _ERRORS.get(message.get("type"), IotoolError)
    text = f"{message.get('message')}"
    if kind is IotoolError:
        text = f"{message.get('type')}: {text}"
    return kind(
        f"{text}\n(raised in the iotool.Loader's child process {pid}; its traceback:\n{message.get('traceback', '')})"
    )


class IsolatedBatches(Batches):
    """The iterator of one isolated pass: :class:`~iotool.loading.threadpass.Batches`, taking
    each batch from the child; a broken channel closes the child."""

    _run: IsolatedPass

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        run = self._run
        if self._next >= run.batches:
            run.stop(wait=True)
            raise StopIteration
        if run.stopped:
            raise UsageError(
                "this pass over the iotool.Loader was ended (a new iter(loader) started another, "
                "it was closed, or it raised); iterate the new one."
            )
        try:
            batch = run.take(self._next)
        except IotoolError:
            run.stop(wait=True)
            raise
        except BaseException:  # Ctrl-C while waiting, a broken channel: no child left behind
            run.child.close()
            raise
        self._next += 1
        return batch
