"""A tiny Triton kernel, a copy, that a session launches once at its start
(harness.measure.check.first_use) through the same launcher as our Triton kernels, so that Triton's
first launch in the process (its driver and launcher set up, the JIT's first compile or cache read)
is paid there and not by the first group's check. Not an operation: it is never measured."""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def copy(X, Y, n, BLOCK: tl.constexpr):
    """Y[i] = X[i] for i < n, one program per BLOCK elements."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(Y + offsets, tl.load(X + offsets, mask=mask), mask=mask)
