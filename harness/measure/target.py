"""The process Nsight Systems captures: warm up, then the captured iterations in one NVTX range.

`python -m harness target --config C --op OP --shape S --impl I` builds fresh inputs, calls the
implementation `capture.warmup` times, synchronises, then opens the NVTX range `capture.range`,
calls it `capture.iterations` times, closes the range and synchronises. Kernel time per iteration
is later computed from the kernels whose launch falls inside that range.
"""

from __future__ import annotations

import argparse

from harness import config, ops
from harness.gpu.deadline import deadline
from harness.gpu.device import require_gpu


def run(cfg: dict, op_name: str, shape: str, impl: str) -> None:
    require_gpu()
    import torch


    cap = cfg["capture"]
    with deadline(0.9 * float(cfg.get("timeouts", {}).get("capture_s", 900)), f"the capture target {op_name} {shape} {impl}"):
        _run(cfg, op_name, shape, impl, torch)


def _run(cfg: dict, op_name: str, shape: str, impl: str, torch) -> None:  # type: ignore[no-untyped-def]
    cap = cfg["capture"]
    call = ops.bind(op_name, impl, shape, cfg["operations"][op_name], cfg["seed"], cfg["cache_mode"])
    for _ in range(cap["warmup"]):
        call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(cap["range"])
    for _ in range(cap["iterations"]):
        call()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"target: {op_name} {shape} {impl}: {cap['warmup']} warm-up and {cap['iterations']} captured calls done, "
          f"{cfg['cache_mode']} cache, {call.input_sets} input set(s)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness target")
    parser.add_argument("--config", default=str(config.ROOT / "config.yaml"))
    parser.add_argument("--op", required=True)
    parser.add_argument("--shape", required=True)
    parser.add_argument("--impl", required=True)
    args = parser.parse_args(argv)
    run(config.load(args.config), args.op, args.shape, args.impl)
    return 0
