"""Check one implementation's output against the float64 reference.

Fresh random inputs (never zeros), the output poisoned with NaN before the call, then the max
absolute and max relative error against the tolerance. The check's record is written whether it
passed or not, with the failure in words (`error`); the workflow's check is a checkpoint, and the
captures, spans, counters and tables take only the implementations whose check passed, so nothing
that failed is ever timed, and the report lists it as failed. A kernel that crashes (a CUDA error)
fails the check job itself (`crash_message`).
"""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path
from typing import Any

from harness import ops
from harness.errors import CheckFailed, EvidenceError
from harness.gpu.device import require_gpu
from harness.launch import triton as triton_launch


def check_seed(seed: int, op: str, shape: str, impl: str) -> int:
    """A seed of its own per check, so every check draws fresh inputs."""
    return (seed + zlib.crc32(f"{op}/{shape}/{impl}".encode())) % 2**31


def run_check(op_name: str, shape: str, impl: str, params: dict[str, Any], seed: int) -> dict[str, Any]:
    """The check record of one implementation (module docstring), with `seconds`: what each part
    took, `inputs` (fresh inputs and the poisoned output), `call` (binding and the first call,
    which may load or compile the kernel), `reference` (the float64 result) and `compare`."""
    require_gpu()
    import torch

    times: dict[str, float] = {}
    t = time.perf_counter()
    op = ops.get(op_name)
    bind = ops.launcher(op, impl, params, shape)
    inputs = op.make_inputs(shape, check_seed(seed, op_name, shape, impl), params)
    out = op.make_output(inputs, shape)
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    times["inputs"] = time.perf_counter() - t
    t = time.perf_counter()
    result = bind(inputs, out, params)()
    torch.cuda.synchronize()
    times["call"] = time.perf_counter() - t
    t = time.perf_counter()
    ref = op.reference(inputs, params)
    torch.cuda.synchronize()
    times["reference"] = time.perf_counter() - t
    t = time.perf_counter()
    atol, rtol = float(params["tolerance"]["atol"]), float(params["tolerance"]["rtol"])
    record = {"op": op_name, "shape": shape, "impl": impl, **compare(torch, result, ref, atol, rtol)}
    times["compare"] = time.perf_counter() - t
    record["seconds"] = times
    return record


def compare(torch: Any, result: Any, ref: Any, atol: float, rtol: float) -> dict[str, Any]:
    """The comparison of a check: `result` (the call's output) against `ref` (the float64
    reference) within atol + rtol * |ref| everywhere, every figure computed on the GPU and read back
    at once; `passed` is False where any output is not finite or outside the tolerance."""
    got = result.double()
    diff = (got - ref).abs()
    empty = got.numel() == 0  # a problem of zero rows: nothing to be wrong, nothing unwritten
    zero = torch.zeros((), dtype=torch.float64, device=got.device)
    # relative error measured where the reference is not tiny, so near-zero outputs don't blow it up
    scale = ref.abs().clamp_min(atol)
    stats = torch.stack([
        torch.isfinite(got).all().double(), (~torch.isfinite(got)).sum().double(), torch.isnan(result).sum().double(),
        zero if empty else diff.max(), zero if empty else (diff / scale).max(),
        zero if empty else torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref),
        (diff <= atol + rtol * ref.abs()).all().double(),
    ]).tolist()
    finite, nonfinite, unwritten = bool(stats[0]), int(stats[1]), int(stats[2])
    max_abs, max_rel, rel_norm = (float(v) if finite else float("nan") for v in stats[3:6])
    return {"passed": finite and bool(stats[6]), "max_abs_err": max_abs, "max_rel_err": max_rel, "rel_l2_err": rel_norm,
            "atol": atol, "rtol": rtol, "nonfinite_outputs": nonfinite, "unwritten_outputs": unwritten,
            "elements": got.numel()}


FIRST_USE_ELEMENTS = 4096
"""The size of the stand-in problem `first_use` checks (a few kernels' worth of work)."""


def first_use(torch: Any, triton: bool = False) -> list[str]:
    """Pay once, at a process's start, what its first check would otherwise pay: the first draw of
    torch's generator on the device, the first poisoned output, the check's own float64 comparison
    (`compare`, the kernels of each of its steps loaded), and with `triton` the first launch through
    Triton's JIT (its driver and launcher set up, a tiny kernel compiled or read from its cache).
    Then each group's checks time its checks, not the process's start. The reference of each
    operation and each kernel's own first load stay in its group. Returns what it warmed, in order."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(FIRST_USE_ELEMENTS, device="cuda", dtype=torch.float32, generator=gen)
    out = torch.empty_like(x)
    out.fill_(float("nan"))
    out.copy_(x)
    if not compare(torch, out, x.double(), 1e-6, 1e-6)["passed"]:
        raise EvidenceError("the stand-in check at the process's start failed: a copy differs from itself.")
    warmed = ["torch"]
    if triton:
        from kernels import first_use_triton as kernel

        y = torch.empty_like(x)
        launch = triton_launch.bind(kernel.copy, (-(-x.numel() // kernel.BLOCK),), (x, y, x.numel()),
                                    {"BLOCK": kernel.BLOCK}, {"num_warps": 4}, torch.cuda.current_device(), out=y)
        y.fill_(float("nan"))
        if not torch.equal(launch(), x):
            raise EvidenceError("the stand-in Triton launch at the process's start did not copy its input.")
        warmed.append("triton")
    torch.cuda.synchronize()
    return warmed


def unmeasured_record(op: str, shape: str, impl: str, message: str, **facts: Any) -> dict[str, Any]:
    """The check record of an implementation that could not be checked (it crashed the GPU, or it
    cannot be bound at its baseline revision): failed, with the sentence that says why, neither
    captured nor timed; `facts` are added (crashed=True)."""
    return {"op": op, "shape": shape, "impl": impl, "passed": False, "max_abs_err": None, "max_rel_err": None,
            "rel_l2_err": None, "atol": None, "rtol": None, "nonfinite_outputs": None, "unwritten_outputs": None,
            "elements": None, "error": message, **facts}


def failure(record: dict[str, Any]) -> str:
    """The one-sentence reason a check failed ('' when it passed)."""
    if record["passed"]:
        return ""
    return (f"check failed for {record['op']} {record['shape']} {record['impl']}: max abs error "
            f"{record['max_abs_err']:.3g}, max rel error {record['max_rel_err']:.3g} against atol "
            f"{record['atol']:g} / rtol {record['rtol']:g}, {record['nonfinite_outputs']} non-finite and "
            f"{record['unwritten_outputs']} unwritten outputs; nothing of it is captured or timed.")


def require_pass(record: dict[str, Any]) -> None:
    if not record["passed"]:
        raise CheckFailed(failure(record))


def read_check(path: str | Path) -> dict[str, Any]:
    """A check record as the check step wrote it; EvidenceError (one sentence) if it is not one."""

    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise EvidenceError(f"cannot read the check record {path}: {exc}.") from None
    if not isinstance(record, dict) or not isinstance(record.get("passed"), bool):
        raise EvidenceError(f"{path} is not a check record (no boolean 'passed').")
    return record


def passed(path: str | Path) -> bool:
    return bool(read_check(path)["passed"])


CUDA_FAULT_MARKERS = ("illegal memory access", "illegal address", "an illegal instruction", "misaligned address",
                      "unspecified launch failure", "CUDA error", "CUDA_ERROR", "cudaError", "cuda runtime error")


def crash_message(exc: BaseException, op: str, shape: str, impl: str) -> str | None:
    """One sentence for an exception that is a GPU fault (the kernel crashed), else None."""
    text = f"{type(exc).__name__}: {exc}"
    if not any(marker.lower() in text.lower() for marker in CUDA_FAULT_MARKERS):
        return None
    first = text.strip().splitlines()[0][:300]
    return (f"{op} {shape} {impl} crashed on the GPU ({first}); this job stops, the implementation is neither "
            "captured nor timed, and the GPU is released when this process exits.")
