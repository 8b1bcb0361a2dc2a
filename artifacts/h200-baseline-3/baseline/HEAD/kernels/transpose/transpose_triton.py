"""Our Triton transpose (FP32, out of place): Y [C, R] = X [R, C]^T, both row-major.

One program per BM x BN tile of X: it loads the tile (rows of X, contiguous along BN), transposes
it with `tl.trans` (Triton exchanges the data between threads through shared memory) and stores
it as a BN x BM tile of Y (rows of Y, contiguous along BM). Edge tiles are masked. Only data
moves: the output is bit-exact.

R and C are compile-time constants (`tl.constexpr`): each shape is its own specialization, so the
masks, the row offsets and hence the load and store widths are fixed at compile time and the
offline census (`harness.build`) compiles exactly what the JIT compiles at run time. The pointers
are specialized as 16-byte aligned (the launcher refuses unaligned tensors). The grid is
one-dimensional: program p serves tile (p // tiles_n, p % tiles_n), so consecutive programs read
neighbouring tiles of one band of X's rows.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def transpose_tile(X, Y, R: tl.constexpr, C: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Transpose tile `program_id(0)` of X [R, C] into Y [C, R]."""
    tiles_n = (C + BN - 1) // BN  # constexpr arithmetic
    pid = tl.program_id(0)
    rows = (pid // tiles_n) * BM + tl.arange(0, BM)
    cols = (pid % tiles_n) * BN + tl.arange(0, BN)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    tile = tl.load(X + rows.to(tl.int64)[:, None] * C + cols[None, :], mask=mask)
    out_mask = (cols[:, None] < C) & (rows[None, :] < R)
    tl.store(Y + cols.to(tl.int64)[:, None] * R + rows[None, :], tl.trans(tile), mask=out_mask)


def block_for(dim: int) -> int:
    """Tile edge along a dimension of size dim: 64, or the next power of two >= dim (at least 16)
    when the dimension is shorter."""
    return max(16, min(64, triton.next_power_of_2(dim)))


def num_warps_for(bm: int, bn: int) -> int:
    """Warps per program: 4 for a 64 x 64 tile (32 floats per thread), fewer for smaller tiles
    (at least 1)."""
    return max(1, min(4, bm * bn // 1024))
