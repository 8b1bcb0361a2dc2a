"""What the GPU side needs: a visible CUDA device, and a description of it for provenance."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from harness.errors import ToolMissing

T = TypeVar("T")

NO_TORCH = "torch is not installed, so no GPU work can run; run the README's set-up command."
NO_GPU = ("no CUDA GPU is visible here (torch.cuda.is_available() is False): the check, capture and "
          "span rules need one; run the workflow on a GPU machine, or read the retained evidence "
          "committed under artifacts/ and report/.")


def require_gpu() -> None:
    """Raise ToolMissing with one sentence unless torch sees a CUDA GPU."""
    try:
        import torch
    except ImportError:
        raise ToolMissing(NO_TORCH) from None
    if not torch.cuda.is_available():
        raise ToolMissing(NO_GPU)


def require_visible_gpu() -> None:
    """require_gpu's answer without importing torch (which takes seconds), for a process that only
    starts the GPU work in a child (the run's preflight, the measure step before nsys): ToolMissing
    unless torch is installed as a CUDA build (its version module, read alone) and NVML lists a
    GPU. Where CUDA_VISIBLE_DEVICES is set (NVML does not heed it), or NVML or the version module
    cannot answer, torch itself is asked (require_gpu)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise ToolMissing(NO_TORCH)
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return require_gpu()
    build = torch_cuda_build(Path(next(iter(spec.submodule_search_locations))))
    if build is None:
        raise ToolMissing(NO_GPU)
    count = None if build is False else nvml_device_count()
    if count is None:
        return require_gpu()
    if count == 0:
        raise ToolMissing(NO_GPU)
    return None


def torch_cuda_build(package: Path) -> str | None | bool:
    """The CUDA version torch at `package` was built for, from its version module loaded on its
    own: None for a build with neither CUDA nor ROCm (torch.cuda is never available there), False
    where the module cannot be read so or names a ROCm build (torch itself is asked)."""
    try:
        spec = importlib.util.spec_from_file_location("_evidence_torch_version", package / "version.py")
        if spec is None or spec.loader is None:
            return False
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cuda, hip = getattr(module, "cuda"), getattr(module, "hip", None)
    except Exception:  # any failure to read it so is answered by importing torch
        return False
    if hip is not None or not (cuda is None or isinstance(cuda, str)):
        return False
    return cuda


def nvml(read: Callable[[Any], T]) -> T:
    """`read(pynvml)` between nvmlInit and nvmlShutdown, NVML shut down however it ends. Reads
    only; never changes a setting, never creates a CUDA context. Any failure propagates (no
    pynvml, no driver, a call NVML refuses): each caller says what its absence means."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return read(pynvml)
    finally:
        pynvml.nvmlShutdown()


def nvml_device_count() -> int | None:
    """How many GPUs NVML lists; None without NVML (no driver, no pynvml)."""
    try:
        return nvml(lambda n: int(n.nvmlDeviceGetCount()))
    except Exception:
        return None


def nvml_smallest_memory() -> int | None:
    """The total memory in bytes of the smallest GPU NVML lists (a job may be given any of them);
    None without NVML or where CUDA_VISIBLE_DEVICES is set (NVML does not heed it)."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    try:
        totals = nvml(lambda n: [int(n.nvmlDeviceGetMemoryInfo(n.nvmlDeviceGetHandleByIndex(i)).total)
                                 for i in range(n.nvmlDeviceGetCount())])
    except Exception:
        return None
    return min(totals) if totals else None


def has_gpu() -> bool:
    try:
        require_gpu()
    except ToolMissing:
        return False
    return True


def device_info() -> dict[str, Any]:
    """Name, UUID, compute capability, SM count, L2 size and driver of device 0."""
    import torch

    props = torch.cuda.get_device_properties(0)
    info: dict[str, Any] = {
        "gpu_name": props.name,
        "gpu_uuid": str(getattr(props, "uuid", "")),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "memory_bytes": props.total_memory,
        "cuda_runtime": torch.version.cuda,
    }

    def read(n: Any) -> dict[str, Any]:
        handle = n.nvmlDeviceGetHandleByIndex(0)
        return {"driver": n.nvmlSystemGetDriverVersion(),
                "gpu_utilization_pct": n.nvmlDeviceGetUtilizationRates(handle).gpu,
                "power_w": round(n.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
                "sm_clock_mhz": n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM),
                "mem_clock_mhz": n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_MEM)}

    try:
        info.update(nvml(read))
    except Exception as exc:  # NVML is informative only; its absence never stops a run
        info["nvml"] = f"unavailable: {type(exc).__name__}"
    return info


def _optional(read: Callable[[], T]) -> T | None:
    """`read()`, or None where NVML does not answer it (a reading NVML lacks on some GPUs or
    drivers; the rest of the state stands)."""
    try:
        return read()
    except Exception:  # any NVMLError: not supported, no permission
        return None


def gpu_state(index: int = 0) -> dict[str, Any]:
    """NVML reading of the GPU's state (utilisation, memory, power, clocks, temperature, throttle
    reasons, other processes; the enforced power limit and the SM clock's maximum, None where NVML
    does not give them). Reads only; never changes a setting. Does not create a CUDA context."""

    def read(n: Any) -> dict[str, Any]:
        h = n.nvmlDeviceGetHandleByIndex(index)
        util, mem = n.nvmlDeviceGetUtilizationRates(h), n.nvmlDeviceGetMemoryInfo(h)
        procs = n.nvmlDeviceGetComputeRunningProcesses(h)
        return {
            "name": n.nvmlDeviceGetName(h),
            "uuid": n.nvmlDeviceGetUUID(h),
            "driver": n.nvmlSystemGetDriverVersion(),
            "utilization_pct": util.gpu,
            "memory_used_mib": round(mem.used / 2**20),
            "power_w": round(n.nvmlDeviceGetPowerUsage(h) / 1000, 1),
            "sm_clock_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "mem_clock_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            "temperature_c": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "throttle_reasons": int((getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
                                     or n.nvmlDeviceGetCurrentClocksThrottleReasons)(h)),
            "compute_processes": len(procs),
            "pids": sorted(int(p.pid) for p in procs),
            # what a software power cap caps to, and the clock it holds the GPU under
            "power_limit_w": _optional(lambda: round(n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, 1)),
            "max_sm_clock_mhz": _optional(lambda: int(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))),
        }

    try:
        return nvml(read)
    except Exception as exc:
        return {"nvml": f"unavailable: {type(exc).__name__}: {exc}"}
