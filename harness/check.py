"""Check one implementation's output against the float64 reference.

Fresh random inputs (never zeros), the output poisoned with NaN before the call, then the max
absolute and max relative error against the tolerance. A failure raises CheckFailed naming the
operation, shape, implementation and error; the workflow's timing rules take the check's output
as input, so nothing that failed is ever timed.
"""

from __future__ import annotations

import zlib
from typing import Any

from harness import ops
from harness.errors import CheckFailed
from harness.gpu import require_gpu


def check_seed(seed: int, op: str, shape: str, impl: str) -> int:
    """A seed of its own per check, so every check draws fresh inputs."""
    return (seed + zlib.crc32(f"{op}/{shape}/{impl}".encode())) % 2**31


def run_check(op_name: str, shape: str, impl: str, params: dict[str, Any], seed: int) -> dict[str, Any]:
    require_gpu()
    import torch

    op = ops.get(op_name)
    launch = ops.launcher(op, impl, params, shape)
    inputs = op.make_inputs(shape, check_seed(seed, op_name, shape, impl), params)
    out = op.make_output(inputs, shape)
    out.fill_(float("nan"))
    result = launch(inputs, out, params)
    torch.cuda.synchronize()
    ref = op.reference(inputs, params)
    got = result.double()
    diff = (got - ref).abs()
    finite = bool(torch.isfinite(got).all())
    unwritten = int(torch.isnan(result).sum())
    atol, rtol = float(params["tolerance"]["atol"]), float(params["tolerance"]["rtol"])
    max_abs = float(diff.max()) if finite else float("nan")
    # relative error measured where the reference is not tiny, so near-zero outputs don't blow it up
    scale = ref.abs().clamp_min(atol)
    max_rel = float((diff / scale).max()) if finite else float("nan")
    rel_norm = float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref)) if finite else float("nan")
    passed = finite and bool((diff <= atol + rtol * ref.abs()).all())
    record = {
        "op": op_name, "shape": shape, "impl": impl,
        "passed": passed, "max_abs_err": max_abs, "max_rel_err": max_rel, "rel_l2_err": rel_norm,
        "atol": atol, "rtol": rtol, "nonfinite_outputs": int((~torch.isfinite(got)).sum()),
        "unwritten_outputs": unwritten, "elements": got.numel(),
    }
    return record


def require_pass(record: dict[str, Any]) -> None:
    if not record["passed"]:
        raise CheckFailed(
            f"check failed for {record['op']} {record['shape']} {record['impl']}: max abs error "
            f"{record['max_abs_err']:.3g}, max rel error {record['max_rel_err']:.3g} against atol "
            f"{record['atol']:g} / rtol {record['rtol']:g}, {record['nonfinite_outputs']} non-finite and "
            f"{record['unwritten_outputs']} unwritten outputs; nothing of it will be timed.")
