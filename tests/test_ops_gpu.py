"""One test over every operation (harness/ops/<name>/) and every implementation it has, the
configured variants included: each is checked against its float64 reference at its default shape
and at the operation's TEST_SHAPES (its edge shapes: zero rows, tails, widths not a multiple of 4,
long rows), through the pipeline's own check; its bound call returns its output tensor and
launches again on the same inputs with the same result.

The default-shape cases of each operation's base implementations (ours, the library's, an
external kernel; config.base_implementations) are the smoke tier (`-m smoke`): every operation x
implementation once; the variants, named builds of the same CUDA source, run in the full tier.
A new operation needs nothing here: it is found by its folder."""

from __future__ import annotations

import pytest
import torch

from harness import config, ops
from harness.measure.check import failure, run_check

CFG = config.load(config.ROOT / "config.yaml")


def cases() -> list[tuple[str, str, str]]:
    out = []
    for name in ops.known():
        module = __import__(f"harness.ops.{name}", fromlist=["OP"])
        configured = name in CFG["operations"]
        shapes = ([CFG["operations"][name]["default"]] if configured else []) + list(getattr(module, "TEST_SHAPES", ()))
        impls = config.implementations(CFG, name) if configured else list(module.OP.implementations)
        out += [(name, shape, impl) for shape in shapes for impl in impls]
    return out


def is_default(op: str, shape: str) -> bool:
    return shape == CFG["operations"].get(op, {}).get("default")


def is_smoke(op: str, shape: str, impl: str) -> bool:
    """The smoke tier's case of an operation and implementation (module docstring)."""
    return is_default(op, shape) and impl in config.base_implementations(CFG, op)


def params_of(op: str) -> dict:
    return CFG["operations"].get(op) or {"tolerance": {"atol": 1e-4, "rtol": 1e-4}}


@pytest.mark.parametrize(("op", "shape", "impl"),
                         [pytest.param(*c, marks=pytest.mark.smoke) if is_smoke(*c) else c for c in cases()])
def test_every_implementation_matches_its_reference(op: str, shape: str, impl: str) -> None:
    record = run_check(op, shape, impl, params_of(op), CFG["seed"])
    assert record["passed"], failure(record)
    assert record["unwritten_outputs"] == 0


@pytest.mark.parametrize(("op", "shape", "impl"), [c for c in cases() if is_default(c[0], c[1])])
def test_a_bound_call_returns_its_output_and_launches_again_with_the_same_result(op: str, shape: str, impl: str) -> None:
    """The call `ops.bind` returns is prepared once and returns the tensor holding its result (the
    output it was bound to, for ours; the planted slowdown's view of its larger one): calling it
    again gives the same output, bit for bit for ours (every kernel of ours is deterministic), within
    the check's tolerance for the library, and it says how it launches."""
    call = ops.bind(op, impl, shape, params_of(op), CFG["seed"], "hot")
    inputs, out = call.sets[0]
    first = call()
    assert isinstance(first, torch.Tensor) and first.shape == ops.get(op).reference(inputs, params_of(op)).shape
    if impl in ops.OURS:
        assert first is out
    first = first.clone()
    out.fill_(float("nan"))
    second = call()
    torch.cuda.synchronize()
    if impl in ops.OURS:  # our kernels are deterministic, bit for bit
        assert torch.equal(first, second)
    else:  # a library call may sum in another order (torch.sparse.mm's atomics): within the check's tolerance
        tol = params_of(op)["tolerance"]
        assert torch.allclose(first, second, rtol=float(tol["rtol"]), atol=float(tol["atol"]))
    assert call.launch_path in ("direct", "prepared", "jit", "jit+prepared")


@pytest.mark.parametrize(("op", "impl"), sorted({(c[0], c[2]) for c in cases()}))
def test_the_one_call_seam_returns_the_tensor_the_check_reads(op: str, impl: str) -> None:
    """`ops.run`, the public call tests go through, gives what the pipeline's bound call gives."""
    shape = next(c[1] for c in cases() if c[0] == op)  # its default, or its first edge shape
    operation = ops.get(op)
    inputs = operation.make_inputs(shape, CFG["seed"], params_of(op))
    out = operation.make_output(inputs, shape).fill_(float("nan"))
    got = ops.run(op, impl, inputs, out, params_of(op), shape)
    torch.cuda.synchronize()
    assert isinstance(got, torch.Tensor) and not bool(torch.isnan(got).any())
