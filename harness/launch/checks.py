"""The launch-argument checks our kernel launchers share: which tensors a launch accepts (type,
dtype, one CUDA device, layout, alignment) and whether an output overlaps an input.

Each refusal is one EvidenceError sentence naming the operation (`what`, e.g. "Softmax") and the
argument. These run on every launch, so they do nothing beyond the checks themselves; torch is
imported only when they run (the census works without it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.errors import EvidenceError

__all__ = ["ALIGNMENT", "check_tensors", "check_apart", "overlaps"]

ALIGNMENT = 16
"""Byte alignment our kernels need of every tensor (128-bit accesses; Triton's aligned
specialization)."""


def check_tensors(what: str, named: Mapping[str, Any], *, dtypes: Mapping[str, Any] | None = None,
                  alignment: int = ALIGNMENT, matrices: bool = False,
                  types_first: bool = False) -> None:
    """EvidenceError with one sentence unless every tensor of `named` (argument name -> value,
    the first the device reference) is a torch.Tensor of its dtype, on the first tensor's CUDA
    device, a matrix where `matrices`, contiguous, and starting at an `alignment`-byte aligned
    address.

    Dtypes: float32 for every tensor unless `dtypes` is given, and then `dtypes[name]` for each
    (named in the sentence as torch prints it, e.g. torch.int32). The checks run tensor by tensor
    in that order; with `types_first`, type and dtype of every tensor before the rest."""
    import torch

    if types_first:
        for name, t in named.items():
            _check_type(what, name, t, torch.Tensor, torch.float32, dtypes)
    first, device = "", None
    for name, t in named.items():
        if not types_first:
            _check_type(what, name, t, torch.Tensor, torch.float32, dtypes)
        if device is None:
            first, device = name, t.device
        if t.device.type != "cuda" or t.device != device:
            tensors = "both tensors" if len(named) == 2 else "all tensors"
            raise EvidenceError(f"{what} argument {name} is on {t.device}, but {tensors} must be "
                                f"on one CUDA device ({first} is on {device}).")
        if matrices and t.dim() != 2:
            raise EvidenceError(f"{what} argument {name} has shape {tuple(t.shape)}, but must be a "
                                f"matrix.")
        if not t.is_contiguous():
            raise EvidenceError(f"{what} argument {name} is not contiguous.")
        if t.data_ptr() % alignment:
            raise EvidenceError(f"{what} argument {name} does not start at a {alignment}-byte "
                                f"aligned address.")


def _check_type(what: str, name: str, t: Any, tensor: type[Any], float32: Any,
                dtypes: Mapping[str, Any] | None) -> None:
    """EvidenceError unless `t` is a `tensor` of dtypes[name] (float32 without `dtypes`)."""
    if not isinstance(t, tensor):
        raise EvidenceError(f"{what} argument {name} is a {type(t).__name__}, not a tensor.")
    dtype = float32 if dtypes is None else dtypes[name]
    if t.dtype != dtype:
        raise EvidenceError(f"{what} argument {name} is {t.dtype}, but must be "
                            f"{'float32' if dtypes is None else dtype}.")


def check_apart(what: str, out: Any, inputs: Mapping[str, Any]) -> None:
    """EvidenceError with one sentence if `out` shares bytes with one of `inputs` (name -> tensor,
    all contiguous): our kernels declare their pointers __restrict__."""
    for name, t in inputs.items():
        if overlaps(out, t):
            raise EvidenceError(f"{what} output overlaps input {name} in memory; it must be a "
                                f"separate tensor.")


def overlaps(a: Any, b: Any) -> bool:
    """Whether two contiguous tensors' bytes overlap."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    return a.numel() > 0 and b.numel() > 0 and a0 < b1 and b0 < a1
