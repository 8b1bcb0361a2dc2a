#!/usr/bin/env python3
"""Probe: counters of a few implementations of one (operation, shape), launched back to back as
the capture launches them, for Nsight Compute with the caches left as the previous call left them.

    ncu --cache-control none --clock-control none --nvtx --nvtx-include "probe/" \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \\
        python3 scripts/probe_ncu.py --op transpose --shape 4096x4096 --impls cuda triton --variants transpose.wide_rows

The implementations are bound together on one input set (harness.ops.bind_group, hot cache), each
warmed up, then called `--calls` times in a row inside the NVTX range "probe"; the order of the
launches (one kernel per call) is printed as `order: impl impl ...`, so the n-th profiled kernel
is the n-th name. Without ncu it only runs. Screening numbers for a kernel notebook, not evidence.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import config, ops  # noqa: E402


def group_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that name one group of a probe: the config, the operation, the shape, the
    implementations and the variants they need (scripts/probe_spacing.py takes them too)."""
    parser.add_argument("--config", default=str(config.ROOT / "config.yaml"))
    parser.add_argument("--op", required=True)
    parser.add_argument("--shape", required=True)
    parser.add_argument("--impls", nargs="+", required=True, help="implementations or 'cuda.<variant>' names")
    parser.add_argument("--variants", nargs="*", default=[], help="'op.variant' names from the config")


def group_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config with the listed variants in place of its own, validated like any config."""
    return config.validate({**config.load(args.config), "variants": args.variants})


def warm_group(args: argparse.Namespace, cfg: dict[str, Any]) -> dict[str, Any]:
    """The implementations bound together on one input set (hot cache), each called three times."""
    bound = ops.bind_group(args.op, args.impls, args.shape, cfg["operations"][args.op], cfg["seed"], "hot")
    for impl in args.impls:
        for _ in range(3):
            bound[impl]()
    return bound


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group_arguments(parser)
    parser.add_argument("--calls", type=int, default=4)
    args = parser.parse_args()
    import torch

    bound = warm_group(args, group_config(args))
    torch.cuda.synchronize()
    order = []
    torch.cuda.nvtx.range_push("probe")
    for impl in args.impls:
        for _ in range(args.calls):
            bound[impl]()
            order.append(impl)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("order:", " ".join(order), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
