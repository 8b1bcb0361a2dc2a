"""The run's preflight on a real GPU: it finds the GPU without importing torch, and the memory it
checks shapes against is what torch reports for the GPUs here (NVML's figure, within a few percent:
NVML counts memory the CUDA runtime keeps for itself)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from harness.gpu import preflight


def test_the_preflight_sees_this_gpu_without_importing_torch() -> None:
    code = ("import sys; from harness.gpu import device; device.require_visible_gpu(); "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == ("True" if "CUDA_VISIBLE_DEVICES" in os.environ else "False")


def test_the_memory_checked_is_torchs_within_a_few_percent() -> None:
    totals = [torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())]
    memory = preflight.gpu_memory_bytes()
    assert 0.95 * min(totals) <= memory <= 1.05 * max(totals), (memory, totals)
