"""Our Triton layer-norm forward (FP32, over the last dimension).

    y[r, :] = (x[r, :] - mean_r) * rsqrt(var_r + eps) * w + b      (var_r: biased, over N)

One program per row; the whole row is held in registers as one block of BLOCK_N (the next power
of two >= N) lanes, masked past N. Mean and variance are two passes over those registers (mean
first, then the sum of squared deviations), all in FP32, on the row shifted by its first element
so that a mean far from zero costs no precision (the shift cancels in x - mean).

N is a compile-time constant (`tl.constexpr`): each width is its own specialization, so the
masks, the row offsets and hence the load and store widths are fixed at compile time and the
offline census (`harness.build`) compiles exactly what the JIT compiles at run time. The pointers
are specialized as 16-byte aligned (Triton's default for aligned arguments; the launcher refuses
unaligned tensors), and `eps` is an unspecialized fp32 argument.
"""

from __future__ import annotations

import triton
import triton.language as tl

MAX_WARPS = 16
"""Most warps one program uses (512 threads)."""


@triton.jit
def layernorm_fwd(X, W, B, Y, eps, N: tl.constexpr, BLOCK_N: tl.constexpr):
    """Normalise row `program_id(0)` of X [rows, N] into Y, scaled by W [N] and shifted by B [N]."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    shift = tl.load(X + row * N)  # the row's first element: sums stay at the spread's scale
    x = tl.where(mask, tl.load(X + row * N + cols, mask=mask, other=0.0) - shift, 0.0)
    mean = tl.sum(x, axis=0) / N  # of the shifted row; the shift cancels in x - mean
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / N
    rstd = tl.rsqrt(var + eps)
    w = tl.load(W + cols, mask=mask, other=0.0)
    b = tl.load(B + cols, mask=mask, other=0.0)
    tl.store(Y + row * N + cols, diff * rstd * w + b, mask=mask)


def block_n_for(n: int) -> int:
    """BLOCK_N for a row of width n: the next power of two >= n."""
    return triton.next_power_of_2(n)


def num_warps_for(block_n: int) -> int:
    """Warps per program for BLOCK_N: about 8 floats (two 128-bit vectors) per thread, from 1 warp
    up to MAX_WARPS (BLOCK_N 256 -> 1, 1024 -> 4, 4096 -> 16, 8192 -> 16 with 16 per thread)."""
    return max(1, min(MAX_WARPS, block_n // 256))
