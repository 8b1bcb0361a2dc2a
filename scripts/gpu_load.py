#!/usr/bin/env python3
"""Put deliberate load on the GPU, to show that the pipeline flags a loaded capture.

Runs FP32 matrix products back to back on the visible GPU for --seconds (default 300) in its own
process; start it beside a run, e.g.

    python3 scripts/gpu_load.py --seconds 600 &  snakemake --cores 1 report

The run's gpu_state table and field note then show the other compute process and the busy GPU
(a capture that finds the GPU busy waits up to gpu_state.busy_wait_s, then fails), and a control
whose kernel time rises above its band is classified as taken under load. It never changes a
setting of the GPU; stop it with Ctrl-C or let it end.
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--n", type=int, default=8192, help="matrix size of each product")
    args = parser.parse_args()
    import torch

    gen = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(args.n, args.n, device="cuda", generator=gen)
    b = torch.randn(args.n, args.n, device="cuda", generator=gen)
    end, done = time.monotonic() + args.seconds, 0
    while time.monotonic() < end:
        for _ in range(8):
            a = torch.matmul(a, b) / args.n**0.5
        torch.cuda.synchronize()
        done += 8
    print(f"gpu_load: {done} products of {args.n}x{args.n} in {args.seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
