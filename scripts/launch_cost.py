"""Host time per call of each launch path, at every operation's default shape (GPU needed).

    python scripts/launch_cost.py [--calls 300] [--repeats 7] [--out FILE.csv]

For each operation and implementation (ours in CUDA, ours in Triton, the library), the call the
pipeline times (harness.ops.bind: bound once to its tensors) is made `calls` times in a row without
synchronising, and the host time of that loop is divided by `calls`; the median of `repeats` such
loops is printed. The queue of the stream holds the launches (fewer than its depth), so the loop
measures the host path only. Beside ours in CUDA, a bare CuPy launch of the same kernel (the loaded
`Function` called with the same grid, block and arguments on CuPy's current stream, which is what
`cupy.RawKernel.__call__` does) gives the floor our launcher is judged against. The library call
runs on torch's current stream.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import config, ops  # noqa: E402
from harness.io import write_csv  # noqa: E402


def host_us(call, calls: int, repeats: int, sync) -> float:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        t1 = time.perf_counter()
        sync()
        out.append((t1 - t0) * 1e6 / calls)
    return statistics.median(out)


def bare_cupy(call):  # type: ignore[no-untyped-def]
    """The bare CuPy launch of the kernel a bound CUDA call launches (None where the call is not
    one launch of harness.launch.cuda.bind_function)."""
    import cupy

    code = getattr(call, "__code__", None)
    if code is None:
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in call.__closure__ or ())))
    if not {"function", "grid3", "block3", "argv", "shared_mem"} <= set(cells):
        inner = [bare_cupy(v) for v in cells.values() if callable(v)]  # a wrapper around one launch
        inner = [i for i in inner if i is not None]
        return inner[0] if len(inner) == 1 else None
    function, grid, block, argv, shared = (cells[k] for k in ("function", "grid3", "block3", "argv", "shared_mem"))

    def launch() -> None:
        function(grid, block, argv, shared, cupy.cuda.get_current_stream())

    return launch


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    cfg = config.load()
    rows = []
    for op in cfg["operations"]:
        shape = cfg["operations"][op]["default"]
        params = config.operation_block(cfg, op)
        for impl in ("cuda", "triton", "torch"):
            call = ops.bind(op, impl, shape, params, cfg["seed"], "hot")
            for _ in range(20):
                call()
            us = host_us(call, args.calls, args.repeats, torch.cuda.synchronize)
            row = {"op": op, "shape": shape, "impl": impl, "launch_path": getattr(call, "launch_path", "direct"),
                   "host_us_per_call": round(us, 2), "bare_cupy_us_per_call": None, "over_bare": None}
            if impl == "cuda":
                bare = bare_cupy(call)
                if bare is not None:
                    b = host_us(bare, args.calls, args.repeats, torch.cuda.synchronize)
                    row.update(bare_cupy_us_per_call=round(b, 2), over_bare=round(us / b, 3))
            rows.append(row)
            print(f"{op:22s} {shape:20s} {impl:7s} {row['launch_path']:9s} {us:7.2f} us/call"
                  + (f"  bare CuPy {row['bare_cupy_us_per_call']:.2f} us ({row['over_bare']:.2f}x)"
                     if row["bare_cupy_us_per_call"] else ""), flush=True)
    if args.out:
        write_csv(rows, list(rows[0]), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
