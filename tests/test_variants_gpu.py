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
