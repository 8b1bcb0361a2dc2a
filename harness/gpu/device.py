"""What the GPU side needs: a visible CUDA device, and a description of it for provenance."""

from __future__ import annotations

from typing import Any

from harness.errors import ToolMissing


def require_gpu() -> None:
    """Raise ToolMissing with one sentence unless torch sees a CUDA GPU."""
    try:
        import torch
    except ImportError:
        raise ToolMissing("torch is not installed, so no GPU work can run; run the README's set-up command.") from None
    if not torch.cuda.is_available():
        raise ToolMissing(
            "no CUDA GPU is visible here (torch.cuda.is_available() is False): the check, capture and "
            "span rules need one; run the workflow on a GPU machine, or read the retained evidence "
            "committed under artifacts/ and report/.")


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
    try:
        import pynvml

        pynvml.nvmlInit()
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        util = pynvml.nvmlDeviceGetUtilizationRates(handle)
        info["gpu_utilization_pct"] = util.gpu
        info["power_w"] = round(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1)
        info["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        info["mem_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        pynvml.nvmlShutdown()
    except Exception as exc:  # NVML is informative only; its absence never stops a run
        info["nvml"] = f"unavailable: {type(exc).__name__}"
    return info


def gpu_state(index: int = 0) -> dict[str, Any]:
    """NVML reading of the GPU's state (utilisation, memory, power, clocks, temperature, throttle
    reasons, other processes). Reads only; never changes a setting. Does not create a CUDA context."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        return {"nvml": f"unavailable: {type(exc).__name__}"}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        util = pynvml.nvmlDeviceGetUtilizationRates(h)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        return {
            "name": pynvml.nvmlDeviceGetName(h),
            "uuid": pynvml.nvmlDeviceGetUUID(h),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "utilization_pct": util.gpu,
            "memory_used_mib": round(mem.used / 2**20),
            "power_w": round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000, 1),
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "throttle_reasons": int((getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                                     or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)(h)),
            "compute_processes": len(procs),
            "pids": sorted(int(p.pid) for p in procs),
        }
    except Exception as exc:
        return {"nvml": f"error: {type(exc).__name__}: {exc}"}
    finally:
        pynvml.nvmlShutdown()
