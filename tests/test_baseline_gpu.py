"""Ours at a baseline revision on the GPU, through the pipeline's own check (harness.ops.launcher
with `params['baselines']`, as a measurement group binds it): every operation's CUDA and Triton
kernels, from a copy of kernels/ and of the dispatches standing in for a revision's extracted
sources, compute the right answer; the revision's own dispatch chooses the kernel launched; and the copy's sources are the ones compiled and loaded, not this checkout's cached ones,
since a copy whose kernel no longer compiles (CUDA) or loads (Triton) cannot be measured and says
so in one sentence naming the implementation and the revision."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from harness import ROOT, baseline, config, ops
from harness.launch import cuda as cuda_launch
from harness.measure.check import run_check

CFG = config.load(config.ROOT / "config.yaml")
OURS = ("cuda", "triton")
BROKEN = {"cuda": ("layernorm/layernorm.cu", '#error "changed at the revision"\n'),
          "triton": ("layernorm/layernorm_triton.py", 'raise RuntimeError("changed at the revision")\n')}


def _revision(tmp: Path, broken: str | None = None, name: str = "rev") -> Path:
    """A folder laid out as harness.baseline.extract leaves one: kernels/, each operation's dispatch
    (harness/ops/<op>/kernels.py) and COMMIT."""
    root = tmp / name
    shutil.copytree(ROOT / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__", "data"))
    for op in CFG["operations"]:
        dispatch = ops.dispatch_file(op, root)
        dispatch.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ops.dispatch_file(op), dispatch)
    (root / "COMMIT").write_text("0" * 40 + "\n")
    if broken is not None:
        path, line = BROKEN[broken]
        source = root / "kernels" / path
        source.write_text(line + source.read_text())
    return root


def _params(op: str, root: Path) -> dict[str, Any]:
    return {**config.operation_block(CFG, op), "baselines": {root.name: str(root)}}


@pytest.mark.parametrize("impl", OURS)
@pytest.mark.parametrize("op", sorted(CFG["operations"]))
def test_ours_at_a_revision_passes_its_check(op: str, impl: str, tmp_path: Path) -> None:
    shape = CFG["operations"][op]["default"]
    record = run_check(op, shape, f"{impl}{baseline.SEPARATOR}rev", _params(op, _revision(tmp_path)), 11)
    assert record["passed"], record


@pytest.mark.parametrize("impl", OURS)
def test_the_revisions_own_source_is_the_one_built(impl: str, tmp_path: Path) -> None:
    shape = CFG["operations"]["layernorm"]["default"]
    params = _params("layernorm", _revision(tmp_path, broken=impl))
    assert run_check("layernorm", shape, impl, params, 11)["passed"]  # this checkout's kernel is fine
    with pytest.raises(baseline.CannotMeasure, match=rf"^{impl}@rev cannot be measured at rev: "):
        run_check("layernorm", shape, f"{impl}@rev", params, 11)


def test_the_revisions_own_dispatch_chooses_the_kernel_launched(tmp_path: Path) -> None:
    """A revision whose layer-norm dispatch reads the width at run time: cuda@rev passes its check
    launching layernorm_fwd_vec4 (the revision's choice), where this checkout launches the kernel
    with the width compiled in."""
    root = _revision(tmp_path, name="runtime")
    dispatch = ops.dispatch_file("layernorm", root)
    dispatch.write_text(dispatch.read_text().replace("DEFAULT_FIXED_WIDTH = True", "DEFAULT_FIXED_WIDTH = False", 1))
    shape = CFG["operations"]["layernorm"]["default"]
    assert run_check("layernorm", shape, "cuda@runtime", _params("layernorm", root), 11)["passed"]
    assert run_check("layernorm", shape, "cuda", _params("layernorm", root), 11)["passed"]
    launched = {(row["at"], row["kernel"].split("<")[0]) for row in cuda_launch.loaded()
                if row["source"] == "layernorm/layernorm.cu" and "-DLN_" not in row["options"]}
    assert {k for at, k in launched if at == "runtime"} == {"layernorm_fwd_vec4"}
    assert ("", "layernorm_fwd_vec4_fixed") in launched
