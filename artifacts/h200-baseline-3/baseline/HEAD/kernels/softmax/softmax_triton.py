"""Our Triton softmax (FP32, over the last dimension).

    y[r, :] = exp(x[r, :] - max_r) / sum_j exp(x[r, j] - max_r)

`softmax_row`: one program per row, the whole row held in registers as one block of BLOCK_N (the
next power of two >= N) lanes, masked past N with -inf (whose exponential is 0): max, exp, sum and
the normalisation all from registers; one read and one write of the row.

`softmax_online`: one program per row for rows too long for registers, in chunks of BLOCK_N.
Pass 1 keeps a running max (a scalar: the max over everything seen so far) and a per-lane sum of
exp(x - running max), rescaled by exp(old max - new max) whenever the max grows (online softmax,
one exp per element); pass 2 reads the row again (from L2 when it is still there) and stores
exp(x - max) / sum.

`tl.exp` lowers to ex2.approx.f32 of x * log2(e) (a rounding of the argument worth about
|x - max| * 2^-24 relative, as in the CUDA kernels). The normalisation multiplies by one
reciprocal of the row sum.

N is a compile-time constant (`tl.constexpr`): each width is its own specialization, so masks,
row offsets and hence the load and store widths are fixed at compile time and the offline census
(`harness.build`) compiles exactly what the JIT compiles at run time. The pointers are specialized
as 16-byte aligned (the launcher refuses unaligned tensors).
"""

from __future__ import annotations

import triton
import triton.language as tl

MAX_WARPS = 16
"""Most warps one `softmax_row` program uses (512 threads)."""

REGISTER_MAX_N = 8192
"""Widest row `softmax_row` holds in registers (16 floats per thread at 16 warps); wider rows
take `softmax_online`."""

ONLINE_BLOCK_N = 8192
"""Chunk of `softmax_online`: 16 floats (four 128-bit loads) per thread at ONLINE_WARPS."""

ONLINE_WARPS = 16
"""Warps per `softmax_online` program. With ~62 registers per thread two programs fit an SM, so
about 264 rows are in flight at once: for 32768-wide rows (128 KiB each) that is ~34 MB, within
L2, so pass 2 re-reads from L2 (8 warps would put ~528 rows, ~67 MB, in flight)."""

ONLINE_STAGES = 1
"""num_stages of `softmax_online` (given at launch and in the census alike): plain loads, no
software pipelining of the chunk loop through shared memory."""


@triton.jit
def softmax_row(X, Y, N: tl.constexpr, BLOCK_N: tl.constexpr):
    """Softmax of row `program_id(0)` of X [rows, N] into Y, the row held in registers."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))  # masked lanes: exp(-inf) == 0
    inv = 1.0 / tl.sum(e, axis=0)
    tl.store(Y + row * N + cols, e * inv, mask=mask)


@triton.jit
def softmax_online(X, Y, N: tl.constexpr, BLOCK_N: tl.constexpr):
    """Softmax of row `program_id(0)` of X [rows, N] into Y in chunks of BLOCK_N, two passes."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    run_max = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), axis=0)
    run_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(X + row * N + start + cols, mask=mask, other=float("-inf"))
        new_max = tl.maximum(run_max, tl.max(x, axis=0))  # finite: every chunk has an element
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.exp(x - new_max)
        run_max = new_max
    inv = 1.0 / tl.sum(run_sum, axis=0)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(X + row * N + start + cols, mask=mask, other=float("-inf"))
        tl.store(Y + row * N + start + cols, tl.exp(x - run_max) * inv, mask=mask)


def block_n_for(n: int) -> int:
    """BLOCK_N of `softmax_row` for a row of width n: the next power of two >= n."""
    return triton.next_power_of_2(n)


def num_warps_for(block_n: int) -> int:
    """Warps per `softmax_row` program: about 8 floats (two 128-bit vectors) per thread, from 1 warp
    up to MAX_WARPS (BLOCK_N 256 -> 1, 1024 -> 4, 4096 -> 16, 8192 -> 16 with 16 per thread)."""
    return max(1, min(MAX_WARPS, block_n // 256))
