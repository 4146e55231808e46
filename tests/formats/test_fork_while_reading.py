"""A process that forks while its threads read a dataset gives a child that reads too.

DataLoader's workers, ``Loader(isolate=True)`` and ``processes=K`` fork the training process,
and its other threads may be inside a reader at that moment (an in-process Loader building
batches ahead). py-lmdb counts the calls in flight on an environment and its ``close`` waits for
them: a child that inherited a count from a thread that does not exist in it hung for ever on
its first read (found as a docs snippet hanging: an isolated Loader made after a thread one).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import iotool

from ..conftest import FORMATS, SAMPLE, options_for

FORKS = 40  # without the fork gate, about one fork in four hung on lmdb: 40 clean forks is proof

CHILD = textwrap.dedent(
    """
    import os, sys, threading, time
    import iotool

    reader = iotool.open_reader(sys.argv[1])
    n = len(reader)
    expected = [reader.read(i) for i in range(n)]
    stop = threading.Event()

    def read_on():
        i = 0
        while not stop.is_set():
            reader.read(i % n)
            i += 1

    threads = [threading.Thread(target=read_on) for _ in range(2)]
    for t in threads:
        t.start()
    for k in range(int(sys.argv[2])):
        time.sleep(0.001 * (k % 3))
        pid = os.fork()
        if pid == 0:
            ok = all(reader.read(i) == expected[i] for i in (0, n - 1))
            os._exit(0 if ok else 3)
        deadline = time.monotonic() + 5
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) != 0:
                    print(f"child {k} read wrong labels or failed: {status}", flush=True)
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
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_child_forked_while_threads_read_reads_too(fmt: str, tmp_path: Path):
    dst = tmp_path / f"d.{fmt}"
    iotool.convert(SAMPLE, dst, fmt, workers=0, **options_for(fmt))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(dst), str(FORKS)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{fmt}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert done.stdout.strip() == "none hung"
