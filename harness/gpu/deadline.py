"""A deadline for GPU work: a kernel that hangs must not hold the GPU (and its lock) for ever.

`deadline(seconds, what)` starts a timer thread; if the block has not finished when it fires, the
process prints one sentence to stderr and ends at once with exit status 124 (`os._exit`: a thread
stuck in a CUDA synchronise cannot be interrupted otherwise). The driver tears the context down
when the process exits, which stops the hung kernel and leaves the GPU usable for the next job.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator

EXIT_STATUS = 124


def _expire(what: str, seconds: float, stop: Callable[[int], object]) -> None:
    sys.stderr.write(f"{what} did not finish within {seconds:g} s (a hung kernel?); stopping this process so the "
                     f"GPU is released.\n")
    sys.stderr.flush()
    sys.stdout.flush()
    stop(EXIT_STATUS)


@contextlib.contextmanager
def deadline(seconds: float, what: str, stop: Callable[[int], object] = os._exit) -> Iterator[None]:
    """Run the block under a deadline of `seconds` (<= 0: none)."""
    if seconds <= 0:
        yield
        return
    timer = threading.Timer(seconds, _expire, (what, seconds, stop))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
