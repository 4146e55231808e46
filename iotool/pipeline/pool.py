"""The local worker processes of a conversion: chunks of tasks in, results out in task order."""

from __future__ import annotations

import multiprocessing as mp
from collections import deque
from typing import Any, Callable, Iterator, Sequence

from ..errors import ConversionError
from .prepare import PayloadOptions, init_worker, preload_decoder, process_chunk

CHUNK = 16  # samples per task sent to a worker


def results(
    load: Callable, state: Any, tasks: Sequence, options: PayloadOptions, workers: int, first: int = 0
) -> Iterator[tuple[int, Any, int]]:
    """Process tasks[first:] in order, in ``workers`` processes (0 or 1: in this process)."""
    chunks = (
        [(i, tasks[i]) for i in range(start, min(start + CHUNK, len(tasks)))]
        for start in range(first, len(tasks), CHUNK)
    )
    if workers <= 1:
        init_worker(load, state, options)
        for chunk in chunks:
            yield from process_chunk(chunk)
        return
    pool = WorkerPool(workers, load, state, options)
    try:
        yield from pool.run(chunks)
    except BaseException:
        pool.stop(wait=False)
        raise
    pool.stop(wait=True)


def _worker_main(conn: Any, load: Callable, state: Any, options: PayloadOptions, inherited: Sequence = ()) -> None:
    """A pool worker: process chunks from ``conn`` and send back each result, until None.
    ``inherited``: the main process's ends of the pipes, which a forked worker holds copies of and
    closes, so that a main process killed by SIGKILL leaves no worker waiting on itself (holding
    the destination's lock) but one that reads EOF and exits."""
    import signal

    for end in inherited:
        end.close()

    # The main process handles Ctrl-C and SIGTERM (also when a scheduler signals the whole
    # process group) and stops us with SIGKILL; a worker never dies half-way on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    init_worker(load, state, options)
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        try:
            result: tuple[str, Any] = ("ok", process_chunk(chunk))
        except BaseException as exc:  # an unexpected failure: hand it to the main process
            result = ("error", exc)
        try:
            conn.send(result)
        except (OSError, ValueError):
            return  # the main process has gone or stopped listening
        except Exception as exc:  # e.g. an exception that cannot be pickled
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))


class WorkerPool:
    """``workers`` processes, each fed over its own pipe; chunk k goes to worker k % workers.

    Results are read as soon as any worker has one and yielded in chunk order, with at most
    ``IN_FLIGHT`` chunks per worker outstanding. The main process runs no helper threads
    (multiprocessing.Pool's task, result and worker threads cost it CPU that the workers need),
    and a worker that dies is an error naming the files it was converting, never a hang.
    """

    IN_FLIGHT = 4

    def __init__(self, workers: int, load: Callable, state: Any, options: PayloadOptions):
        ctx = mp.get_context()
        if ctx.get_start_method() == "fork" and (options.validate or options.encode != "keep"):
            preload_decoder()
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        try:
            for _ in range(workers):
                parent, child = ctx.Pipe()
                inherited = [parent, *self.conns] if ctx.get_start_method() == "fork" else []
                proc = ctx.Process(target=_worker_main, args=(child, load, state, options, inherited), daemon=True)
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
        except BaseException:
            self.stop(wait=False)
            raise

    def run(self, chunks: Iterator[list]) -> Iterator[tuple[int, Any, int]]:
        """Yield every result of every chunk, in order."""
        from multiprocessing.connection import wait

        workers = len(self.conns)
        outstanding: list[deque] = [deque() for _ in range(workers)]  # per worker: (number, chunk)
        ready: dict[int, list] = {}
        sent = received = 0
        exhausted = False
        while True:
            while not exhausted and sent - received < self.IN_FLIGHT * workers:
                chunk = next(chunks, None)
                if chunk is None:
                    exhausted = True
                    break
                self._send(sent % workers, chunk, outstanding)
                outstanding[sent % workers].append((sent, chunk))
                sent += 1
            if received == sent:
                return
            while received not in ready:
                busy = [self.conns[w] for w in range(workers) if outstanding[w]]
                for conn in wait(busy):
                    w = self.conns.index(conn)
                    number, chunk = outstanding[w].popleft()
                    ready[number] = self._receive(w, chunk)
            yield from ready.pop(received)
            received += 1

    def _send(self, w: int, chunk: list, outstanding: list[deque]) -> None:
        try:
            self.conns[w].send(chunk)
        except OSError:
            lost = outstanding[w][0][1] if outstanding[w] else chunk
            raise self._died(w, lost) from None

    def _receive(self, w: int, chunk: list) -> list:
        try:
            status, value = self.conns[w].recv()
        except (EOFError, OSError):
            raise self._died(w, chunk) from None
        if status == "error":
            raise value
        return value

    def _died(self, w: int, chunk: list) -> ConversionError:
        """The error for a worker that exited (killed, out of memory, a crash in a decoder)."""
        proc = self.procs[w]
        proc.join(timeout=1)
        names = [task.path for _, task in chunk]
        where = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        return ConversionError(
            f"A worker process (pid {proc.pid}) exited with code {proc.exitcode} while "
            f"converting {where}; a decoder may have crashed on one of these files.",
            names[0],
            "worker process died",
        )

    def stop(self, wait: bool) -> None:
        """Stop every worker: let idle ones exit (``wait``), kill the rest (they ignore SIGTERM)."""
        for conn in self.conns:
            if wait:
                try:
                    conn.send(None)
                except OSError:
                    pass
        for proc in self.procs:
            if wait:
                proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
            proc.join()
        for conn in self.conns:
            conn.close()
