"""Stop a run that needs a GPU or nsys on a machine without them, in one sentence, before any
job starts (called from the workflow's onstart with the jobs that will run)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from harness import ops
from harness.config import shapes
from harness.errors import ToolMissing
from harness.gpu.device import nvml_smallest_memory, require_visible_gpu
from harness.tools import find_nsys


def problems(needs: Iterable[tuple[str, int]], cfg: dict[str, Any]) -> list[str]:
    """`needs` is (rule name, gpu resource) per job that will run; returns what blocks them."""
    needs = list(needs)
    found: list[str] = []
    if any(gpu > 0 for _, gpu in needs):
        try:
            require_visible_gpu()
        except ToolMissing as exc:
            found.append(str(exc))
    if any(rule == "measure" for rule, _ in needs):
        try:
            find_nsys(cfg["nsys"]["path"])
        except ToolMissing as exc:
            found.append(str(exc))
    if any(gpu > 0 for _, gpu in needs) and not found:
        found.extend(too_large(cfg, gpu_memory_bytes()))
    return found


MEMORY_FACTOR = 4
"""A check holds the inputs and the output in FP32 and both again in float64 for the reference:
about 4x the bytes a call moves (bytes_moved counts each input and output once)."""


def gpu_memory_bytes() -> int:
    """The GPU memory a job can count on: NVML's smallest GPU, else torch's device 0 (importing
    torch and starting CUDA cost seconds of every run's start)."""
    found = nvml_smallest_memory()
    if found is not None:
        return found
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory)


def too_large(cfg: dict[str, Any], memory: int) -> list[str]:
    """One sentence per configured shape whose check would not fit in the GPU's memory."""

    out = []
    for op_name in cfg["operations"]:
        op = ops.get(op_name)
        for shape in shapes(cfg, op_name):
            need = MEMORY_FACTOR * op.bytes_moved(shape)
            if need > 0.9 * memory:
                out.append(f"config: shape {shape!r} of operation '{op_name}' needs about {need / 2**30:.1f} GiB of GPU "
                           f"memory for its check, more than 90% of this GPU's {memory / 2**30:.1f} GiB; pick a smaller shape.")
    return out


def before_jobs(jobs: Iterable[Any], cfg: dict[str, Any]) -> None:
    needs = [(job.rule.name, int(job.resources.get("gpu", 0) or 0)) for job in jobs]
    found = problems(needs, cfg)
    if found:
        print("\n".join(found), file=sys.stderr)
        sys.exit(1)
