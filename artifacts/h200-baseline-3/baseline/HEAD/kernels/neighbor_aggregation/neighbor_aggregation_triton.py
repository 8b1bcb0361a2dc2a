"""Our Triton neighbour aggregation (FP32, graph in CSR form, each row listing its in-edges).

    out[i, :] = sum over e in [indptr[i], indptr[i + 1]) of x[indices[e], :]

A CSR gather-sum: `neighbor_sum` runs one program per destination row and loops over the row's
neighbour range BLOCK_E edges at a time, loading the BLOCK_E rows x[j, :] as one [BLOCK_E,
BLOCK_F] block (masked past the range and past F) into an FP32 accumulator of that shape, summed
over the edges once at the end.

Load balance is the CUDA kernels' (kernels/neighbor_aggregation/neighbor_aggregation.cu): a row's own program sums at
most its first CHUNK edges; when the host says long rows exist, the same launch has one more
program per PIECE edges of the edge array (PIECE <= CHUNK), which finds the row holding its first
edge (a 32-ary search of indptr) and sums that row's edges in the piece past its first CHUNK.
Long rows (more than CHUNK edges) are zeroed first by `neighbor_zero_long_rows` and all their
partial sums are added with atomics; other rows are stored.

F, BLOCK_F, BLOCK_E, CHUNK and PIECE are compile-time constants (each width is its own
specialization, so the census compiles exactly what the JIT compiles); the pointers are
specialized as 16-byte aligned (the launcher refuses unaligned tensors); `nodes` and `edges` are
not specialized on their values (`do_not_specialize`), so one compiled kernel serves every graph
of a width.
"""

from __future__ import annotations

import triton
import triton.language as tl

MAX_WARPS = 8
"""Most warps one summing program uses."""

ZERO_WARPS = 4
"""Warps of a zeroing program."""


@triton.jit
def _gather(X, INDICES, begin, end, F: tl.constexpr, BLOCK_F: tl.constexpr,
            BLOCK_E: tl.constexpr):
    """Sum of X[INDICES[e], :F] over e in [begin, end), as a [BLOCK_F] FP32 vector."""
    cols = tl.arange(0, BLOCK_F)
    fmask = cols < F
    acc = tl.zeros([BLOCK_E, BLOCK_F], dtype=tl.float32)
    for e0 in range(begin, end, BLOCK_E):
        offs = e0 + tl.arange(0, BLOCK_E)
        emask = offs < end
        j = tl.load(INDICES + offs, mask=emask, other=0).to(tl.int64)
        ptrs = X + j[:, None] * F + cols[None, :]
        acc += tl.load(ptrs, mask=emask[:, None] & fmask[None, :], other=0.0)
    return tl.sum(acc, axis=0)


@triton.jit(do_not_specialize=["nodes", "edges"])
def neighbor_sum(X, INDPTR, INDICES, OUT, nodes, edges, F: tl.constexpr, BLOCK_F: tl.constexpr,
                 BLOCK_E: tl.constexpr, CHUNK: tl.constexpr, PIECE: tl.constexpr):
    """Programs 0 .. nodes - 1: row `program_id(0)`'s first CHUNK in-edges, stored (added
    atomically if the row is longer). Programs nodes + c: the in-edges of the row r holding edge
    c * PIECE that lie in [c * PIECE, (c + 1) * PIECE) and past r's first CHUNK, added atomically."""
    pid = tl.program_id(0)
    if pid < nodes:
        row = pid
        begin = tl.load(INDPTR + row)
        row_end = tl.load(INDPTR + row + 1)
        end = tl.minimum(row_end, begin + CHUNK)
        atomic = row_end - begin > CHUNK
    else:
        first = (pid - nodes) * PIECE
        # The last r with INDPTR[r] <= first: INDPTR[lo] <= first < INDPTR[hi] throughout.
        lo = nodes * 0
        hi = nodes + 0
        lanes = tl.arange(0, 32)
        while hi - lo > 1:
            step = (hi - lo + 31) // 32
            q = lo + (lanes + 1) * step
            inside = q < hi
            le = inside & (tl.load(INDPTR + q, mask=inside, other=0) <= first)
            lo = lo + tl.sum(le.to(tl.int32), axis=0) * step
            hi = tl.minimum(hi, lo + step)
        row = lo
        begin = tl.maximum(first, tl.load(INDPTR + row) + CHUNK)
        end = tl.minimum(tl.load(INDPTR + row + 1), first + PIECE)
        atomic = first >= 0
    total = _gather(X, INDICES, begin, end, F, BLOCK_F, BLOCK_E)
    cols = tl.arange(0, BLOCK_F)
    ptrs = OUT + row.to(tl.int64) * F + cols
    tl.store(ptrs, total, mask=(cols < F) & (atomic == 0))
    tl.atomic_add(ptrs, total, mask=(cols < F) & atomic & (begin < end), sem="relaxed")


@triton.jit(do_not_specialize=["nodes"])
def neighbor_zero_long_rows(INDPTR, OUT, nodes, F: tl.constexpr, BLOCK_F: tl.constexpr,
                            BLOCK_R: tl.constexpr, CHUNK: tl.constexpr):
    """Zero the rows longer than CHUNK among rows [program_id(0) * BLOCK_R, + BLOCK_R)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    inside = rows < nodes
    degree = tl.load(INDPTR + rows + 1, mask=inside, other=0) - tl.load(INDPTR + rows,
                                                                       mask=inside, other=0)
    cols = tl.arange(0, BLOCK_F)
    ptrs = OUT + rows.to(tl.int64)[:, None] * F + cols[None, :]
    mask = (inside & (degree > CHUNK))[:, None] & (cols < F)[None, :]
    tl.store(ptrs, tl.zeros([BLOCK_R, BLOCK_F], dtype=tl.float32), mask=mask)


def block_f_for(features: int) -> int:
    """BLOCK_F: the next power of two >= F."""
    return triton.next_power_of_2(features)


def block_e_for(block_f: int) -> int:
    """BLOCK_E, edges per loop step: about 1024 floats per step, 2 to 16 edges (16 keeps a
    uniform graph's average row of 16 edges one step)."""
    return max(2, min(16, 1024 // block_f))


def num_warps_for(block_e: int, block_f: int) -> int:
    """Warps per program: one per 512 floats of the [BLOCK_E, BLOCK_F] block (about 16 floats,
    four 128-bit loads, per thread), 1 to MAX_WARPS."""
    return max(1, min(MAX_WARPS, block_e * block_f // 512))


def block_r_for(block_f: int) -> int:
    """BLOCK_R, rows per zeroing program: about 4096 floats, 1 to 64 rows."""
    return max(1, min(64, 4096 // block_f))
