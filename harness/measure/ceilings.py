"""Hardware ceilings measured on the GPU in the same session as the kernels they bound.

Each the median of `repeats` timings taken with CUDA events after a warm-up:
  * copy_bandwidth: `dst.copy_(src)` of a 2 GiB FP32 buffer of random data; bytes counted are
    read + write (4 GiB per copy), in GB/s (1e9 bytes per second).
  * fp32_matmul: `torch.matmul` of two 8192 x 8192 FP32 random matrices with TF32 off, so the
    FP32 cores do the work; 2 * n^3 floating-point operations per call, in TFLOP/s.
  * copy_bandwidth@B, the same-size copy ceiling: the same copy moving B bytes in all (a buffer of
    B/2 read, B/2 written), B being a shape's fewest bytes moved, in the run's cache mode (hot: one
    buffer, which a size under the L2 reads from it; cold: buffers rotated so each copy reads from
    device memory). A kernel's fraction of it compares like with like: the same bytes, the same
    launch fill and drain, the same cache.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from harness.gpu.device import require_gpu

COPY_BYTES = 2 * 2**30
"""Size of the copied buffer (far beyond any L2, so the copy streams from device memory)."""

MATMUL_N = 8192
"""Side of the square matrices of the FP32 matmul."""

WARMUP = 3
"""Untimed calls before the timed ones."""

COLUMNS = ("ceiling", "value", "unit", "median_ms", "min_ms", "max_ms", "repeats", "method", "bytes")
"""Keys of every row `measure` returns."""


@contextlib.contextmanager
def fp32_matmul_precision() -> Iterator[None]:
    """TF32 off for CUDA matmuls (full FP32), the previous settings restored afterwards."""
    import torch

    tf32, precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cuda.matmul.allow_tf32 = tf32


def time_ms(call: Callable[[], Any], repeats: int, warmup: int = WARMUP) -> list[float]:
    """Milliseconds of each of `repeats` calls, each timed alone with CUDA events on the current
    stream, after `warmup` untimed calls."""
    import torch

    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _row(ceiling: str, value: float, unit: str, times: list[float], method: str,
         moved: int | None = None) -> dict[str, Any]:
    return {"ceiling": ceiling, "value": value, "unit": unit,
            "median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "repeats": len(times), "method": method, "bytes": moved}


BATCH_US = 500.0
"""A same-size copy is timed over a batch of copies lasting about this long, so the events'
resolution and the launch gaps stay out of a copy of a few microseconds."""

COLD_FOOTPRINT = 240 * 2**20
"""Cold mode rotates same-size buffers totalling at least this (4x the H200's L2)."""


def copy_at(moved: int, repeats: int, cache_mode: str = "hot") -> dict[str, Any]:
    """The same-size copy ceiling (module docstring) for `moved` bytes."""
    import torch

    n = max(1, moved // 8)  # floats per buffer: n read + n written = moved bytes
    sets = 1 if cache_mode == "hot" else max(2, -(-COLD_FOOTPRINT // (8 * n)) + 1)
    gen = torch.Generator(device="cuda").manual_seed(2)
    pairs = [(torch.rand(n, device="cuda", dtype=torch.float32, generator=gen).add_(0.5),
              torch.empty(n, device="cuda", dtype=torch.float32)) for _ in range(sets)]
    turn = [0]

    def one() -> None:
        src, dst = pairs[turn[0]]
        turn[0] = (turn[0] + 1) % sets
        dst.copy_(src)

    try:
        probe = time_ms(one, 3)
        per_batch = max(1, int(BATCH_US / max(statistics.median(probe) * 1000.0, 1e-3)))

        def batch() -> None:
            for _ in range(per_batch):
                one()

        times = [t / per_batch for t in time_ms(batch, repeats)]
        if not all(torch.equal(dst, src) for src, dst in pairs):
            raise RuntimeError("the timed copy did not reproduce its source")
    finally:
        pairs.clear()
        torch.cuda.empty_cache()
    gbs = 8 * n / (statistics.median(times) * 1e-3) / 1e9
    return _row(f"copy_bandwidth@{moved}", gbs, "GB/s", times,
                f"dst.copy_(src) of {4 * n} bytes read and {4 * n} written ({cache_mode} cache, {sets} buffer "
                f"pair(s)), timed with CUDA events over batches of {per_batch}; median of {repeats}.", moved)


def copy_bandwidth(repeats: int) -> dict[str, Any]:
    """Device-to-device copy bandwidth of a 2 GiB FP32 buffer, read + write bytes per second."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    src = torch.rand(COPY_BYTES // 4, device="cuda", dtype=torch.float32, generator=gen).add_(0.5)
    dst = torch.empty_like(src)
    try:
        times = time_ms(lambda: dst.copy_(src), repeats)
        if not torch.equal(dst, src):
            raise RuntimeError("the timed copy did not reproduce its source")
    finally:
        del src, dst
        torch.cuda.empty_cache()
    gbs = 2 * COPY_BYTES / (statistics.median(times) * 1e-3) / 1e9
    return _row("copy_bandwidth", gbs, "GB/s", times,
                f"dst.copy_(src) of a {COPY_BYTES // 2**30} GiB FP32 buffer of random data, timed "
                f"with CUDA events after {WARMUP} warm-up copies; bytes = read + write; median "
                f"of {repeats}.")


def fp32_matmul(repeats: int) -> dict[str, Any]:
    """FP32 matmul throughput of torch.matmul at n = 8192 with TF32 off, 2 n^3 / time."""
    import torch

    n = MATMUL_N
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(n, n, device="cuda", dtype=torch.float32, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.float32, generator=gen)
    c = torch.empty(n, n, device="cuda", dtype=torch.float32)
    try:
        with fp32_matmul_precision():
            times = time_ms(lambda: torch.matmul(a, b, out=c), repeats)
    finally:
        del a, b, c
        torch.cuda.empty_cache()
    tflops = 2 * n**3 / (statistics.median(times) * 1e-3) / 1e12
    return _row("fp32_matmul", tflops, "TFLOP/s", times,
                f"torch.matmul of two {n}x{n} FP32 random matrices with TF32 off "
                f"(allow_tf32=False, float32 matmul precision 'highest'), timed with CUDA events "
                f"after {WARMUP} warm-up calls; 2*n^3 flops; median of {repeats}.")


def measure(repeats: int = 20, same_size: Sequence[int] = (), cache_mode: str = "hot") -> list[dict[str, Any]]:
    """The ceilings on the current GPU, as rows with the keys of COLUMNS: copy bandwidth, the FP32
    matmul rate, and the same-size copy ceiling at each byte count of `same_size`. The memory it
    allocated is returned to the driver before it returns."""
    if repeats < 1:
        raise ValueError(f"repeats is {repeats}, but must be at least 1.")
    require_gpu()
    import torch

    rows = [copy_bandwidth(repeats), fp32_matmul(repeats)]
    rows += [copy_at(int(moved), repeats, cache_mode) for moved in sorted(set(same_size))]
    torch.cuda.empty_cache()  # its buffers (gigabytes) go back to the driver, not to torch's cache
    return rows
