"""A wake-up from the Loader's threads to the caller waiting for a batch, whose system calls run
with the GIL released on both sides (:class:`Doorbell`).

``threading.Condition.notify`` releases the waiter's lock while holding the GIL, and waking a
sleeping thread is a system call that can cost tens of microseconds (an inter-processor interrupt;
more under a hypervisor): held once a batch, it was the largest single share of a thread's
GIL-held time (``benchmarks/gil_share.py``). A pipe's write and a ``poll`` on it release the GIL
around the call, so the thread that finishes a batch rings without holding it.
"""

from __future__ import annotations

import os
import select
import weakref


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Doorbell:
    """Level-triggered: a ring before the wait is not lost (the wait returns at once), and rings
    while nobody waits are merged. Its pipe is closed when the doorbell is garbage (not at exit,
    when threads still holding it may ring), so a thread can never ring a descriptor reused for
    something else."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()  # not inherited by a child (os.pipe's default)
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._poll = select.poll()  # not select(): a descriptor past 1023 is fine
        self._poll.register(self._read, select.POLLIN)
        closer = weakref.finalize(self, _close, self._read, self._write)
        closer.atexit = False  # at exit a pass's threads may still ring it: the process's end closes it

    def ring(self) -> None:
        """Wake the waiter (now, or its next wait)."""
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:  # rings not yet taken fill the pipe: the waiter wakes anyway
            pass

    def wait(self, timeout: float) -> None:
        """Return once rung (or at once, if rung since the last wait), or after ``timeout`` seconds;
        Ctrl-C raises here as from any wait."""
        if self._poll.poll(max(0, int(timeout * 1000))):
            try:
                os.read(self._read, 65536)
            except BlockingIOError:
                pass
