"""One test over every operation (harness/ops/<name>/) and every implementation it has, the
configured variants included: each is checked against its float64 reference at its default shape
and at the operation's TEST_SHAPES (odd sizes that exercise the tails), through the pipeline's own
check, and its bound call launches again on the same inputs with the same result.

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


@pytest.mark.parametrize(("op", "shape", "impl"), cases())
def test_every_implementation_matches_its_reference(op: str, shape: str, impl: str) -> None:
    params = CFG["operations"].get(op) or {"tolerance": {"atol": 1e-4, "rtol": 1e-4}}
    record = run_check(op, shape, impl, params, CFG["seed"])
    assert record["passed"], failure(record)
    assert record["unwritten_outputs"] == 0


@pytest.mark.parametrize(("op", "shape", "impl"), [c for c in cases() if c[1] == CFG["operations"].get(c[0], {}).get("default")])
def test_a_bound_call_launches_again_with_the_same_result(op: str, shape: str, impl: str) -> None:
    """The call `ops.bind` returns is prepared once: calling it again gives the same output, bit
    for bit (every kernel here is deterministic), and it says how it launches."""
    params = CFG["operations"][op]
    call = ops.bind(op, impl, shape, params, CFG["seed"], "hot")
    inputs, out = call.sets[0]
    first = ops.result(call(), out).clone()
    out.fill_(float("nan"))
    second = ops.result(call(), out)
    torch.cuda.synchronize()
    assert torch.equal(first, second)
    assert call.launch_path in ("direct", "prepared", "jit", "jit+prepared")
