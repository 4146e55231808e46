"""A process that forks while its threads read a dataset gives a child that reads too.

DataLoader's workers, ``Loader(isolate=True)`` and ``processes=K`` fork the training process,
and its other threads may be inside a reader at that moment (an in-process Loader building
batches ahead). py-lmdb counts the calls in flight on an environment and its ``close`` waits for
them: a child that inherited a count from a thread that does not exist in it hung for ever on
its first read (found as a docs snippet hanging: an isolated Loader made after a thread one).
The gate that holds a fork for the reads in flight is pinned here too: a fork is not starved by
threads that read without pause, waits for a read that never ends only a bounded time, and the
child does not count its parent's threads.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import iotool
from iotool.formats import get_format

from ..conftest import FORMATS, SAMPLE, options_for
from ..support.fields import convert_fields, schema_of

FORKS = 40  # without the fork gate, about one fork in four hung on lmdb: 40 clean forks is proof

CHILD = textwrap.dedent(
    """
    import os, sys, threading, time
    import iotool

    reader = iotool.open_reader(sys.argv[1])
    names = [n for n in sys.argv[3].split(",") if n]
    n = len(reader)
    read = (lambda i: reader.read_record(i, names)) if names else reader.read
    expected = [read(i) for i in range(n)]
    stop = threading.Event()

    def read_on():
        i = 0
        while not stop.is_set():
            read(i % n)
            i += 1

    threads = [threading.Thread(target=read_on) for _ in range(2)]
    for t in threads:
        t.start()
    for k in range(int(sys.argv[2])):
        time.sleep(0.001 * (k % 3))
        pid = os.fork()
        if pid == 0:
            ok = all(read(i) == expected[i] for i in (0, n - 1))
            os._exit(0 if ok else 3)
        deadline = time.monotonic() + 5
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) != 0:
                    print(f"child {k} read wrong values or failed: {status}", flush=True)
                    sys.exit(1)
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                print(f"child {k} hung", flush=True)
                os._exit(2)
            time.sleep(0.005)
    stop.set()
    for t in threads:
        t.join()
    print("none hung", flush=True)
    """
)


@pytest.mark.slow  # forty forks beside two reading threads: a few seconds a format
@pytest.mark.parametrize("fields", [False, True], ids=["image", "fields"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_child_forked_while_threads_read_reads_too(fmt: str, fields: bool, tmp_path: Path):
    """Each record read with two stored fields where asked (LMDB reads them with the image, in
    one transaction), else the image alone."""
    dst, names = tmp_path / f"d.{fmt}", ["txt", "count"] if fields else []
    if not fields:
        iotool.convert(SAMPLE, dst, fmt, workers=0, **options_for(fmt))
    elif get_format(fmt).reader.fields_version is None:
        pytest.skip(f"{fmt} stores no fields")
    else:
        convert_fields(dst, fmt, schema_of(*names), 8)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(dst), str(FORKS), ",".join(names)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{fmt}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert done.stdout.strip() == "none hung"


# A gate of its own (registered for forks like the module's), WAIT_S 1 s, in a fresh interpreter.
GATE = textwrap.dedent(
    """
    import os, sys, threading, time
    from iotool.formats.lmdb.env import ForkGate

    gate = ForkGate()
    gate.WAIT_S = 1.0
    os.register_at_fork(before=gate.before_fork, after_in_parent=gate.after_fork_in_parent,
                        after_in_child=gate.after_fork_in_child)

    def timed_fork(child):
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os._exit(child())
        took = time.monotonic() - start
        return took, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    """
)

BUSY = GATE + textwrap.dedent(
    """
    stop = threading.Event()

    def busy():  # enters again at once: some thread is always inside
        while not stop.is_set():
            with gate:
                time.sleep(0.002)

    threads = [threading.Thread(target=busy) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    took = [timed_fork(lambda: 0)[0] for _ in range(10)]
    stop.set()
    for t in threads:
        t.join()
    print(max(took))
    """
)

STUCK = GATE + textwrap.dedent(
    """
    stuck = threading.Event()

    def never_ends():
        with gate:
            stuck.wait()

    threading.Thread(target=never_ends, daemon=True).start()
    time.sleep(0.05)

    def grandchild():  # the child's own fork: no thread of the child is inside
        took, code = timed_fork(lambda: 0)
        return 0 if took < 0.5 and code == 0 else 4

    took, code = timed_fork(grandchild)
    print(took, code)
    stuck.set()
    """
)


def run_gate(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_threads_that_read_without_pause_do_not_starve_a_fork():
    """A fork closes the gate to new reads and waits for those in flight only (2 ms each), not
    until the readers happen to pause (with four threads, never: it would wait the full bound)."""
    assert float(run_gate(BUSY)) < 0.5


def test_a_read_that_never_ends_holds_a_fork_for_the_bound_only_and_not_in_the_child():
    took, code = run_gate(STUCK).split()
    assert 0.9 <= float(took) < 5, "the fork waits for the read in flight, up to WAIT_S (1 s here)"
    assert code == "0", "in the child the stuck thread does not exist: its own forks do not wait for it"
