"""Every variant defined in config.yaml computes the right answer at every layer-norm shape the
config measures (the check the pipeline runs), through the base launcher with its defines."""

from __future__ import annotations

import pytest

from harness import config
from harness.measure.check import run_check

CFG = config.load(config.ROOT / "config.yaml")
CASES = [(op, shape, f"{spec['base']}.{name}")
         for op, op_cfg in CFG["operations"].items()
         for name, spec in (op_cfg.get("variants") or {}).items()
         for shape in config.shapes(CFG, op)]


@pytest.mark.parametrize(("op", "shape", "impl"), CASES, ids=[f"{o}-{s}-{i}" for o, s, i in CASES])
def test_variant_passes_its_check(op: str, shape: str, impl: str) -> None:
    record = run_check(op, shape, impl, CFG["operations"][op], 11)
    assert record["passed"], record


def test_a_group_launches_on_shared_buffers_at_its_placements() -> None:
    """ops.bind_group, as the group process binds: cuda, triton and the twin write into one output
    per placement, the plant reads the others' inputs as the first part of its grown ones, and
    the placements lie at other addresses and compute the same result."""
    from harness import ops

    params = {**CFG["operations"]["layernorm"], "variants": {
        "twin": {"base": "cuda", "defines": {}, "description": "twin"},
        "planted": {"base": "cuda", "grow": 0.02, "defines": {}, "description": "plant"}}}
    shape = CFG["operations"]["layernorm"]["default"]
    impls = ["cuda", "triton", "cuda.twin", "cuda.planted"]
    calls = ops.bind_group("layernorm", impls, shape, params, 5, "hot", placements=3)
    assert {c.placements for c in calls.values()} == {3}
    results = []
    for p in range(3):
        for c in calls.values():
            c.select(p)
        outs = {impl: calls[impl]() for impl in impls}
        assert outs["cuda"].data_ptr() == outs["triton"].data_ptr() == outs["cuda.twin"].data_ptr()
        inputs, out = calls["cuda"].sets[p]
        assert out.data_ptr() == outs["cuda"].data_ptr()
        assert outs["cuda.planted"].data_ptr() == out.data_ptr()  # the plant's result is the first rows of its output
        results.append((inputs["x"].data_ptr(), outs["cuda"].clone()))
    assert len({ptr for ptr, _ in results}) == 3
    assert all(bool((r == results[0][1]).all()) for _, r in results[1:])
