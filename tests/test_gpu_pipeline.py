"""The GPU path of the pipeline, on a real GPU (marked gpu; skipped without one): the check passes
every implementation and fails a wrong one; one group process checks, captures interleaved rounds
and times spans and graph replay. The capture under a real Nsight Systems (every call of every
round one kernel attributed to its range, no value of the shell's environment kept, intervals and
verdicts in the tables) is shown by the end-to-end run (tests/test_end_to_end_gpu.py), which
captures and profiles a group as the pipeline does."""

from __future__ import annotations

from pathlib import Path

import gpu_group
import pandas as pd
import pytest
import torch

from harness import config, ops
from harness.errors import CheckFailed
from harness.measure import group
from harness.measure.check import require_pass, run_check

pytestmark = pytest.mark.gpu

SHAPE = "256x768"


@pytest.fixture()
def cfg() -> dict:
    return gpu_group.cfg_with(capture={"warmup": 3, "rounds": 6, "round_us": 100, "max_calls": 20},
                              span={"samples": 12, "rounds": 3, "warmup": 2})


@pytest.mark.parametrize("impl", ["cuda", "triton", "torch"])
def test_check_passes_every_implementation(cfg: dict, impl: str) -> None:
    record = run_check("layernorm", SHAPE, impl, cfg["operations"]["layernorm"], cfg["seed"])
    assert record["passed"], record
    assert record["unwritten_outputs"] == 0 and record["max_abs_err"] < 1e-4
    require_pass(record)


def test_check_fails_an_implementation_that_skips_a_row(cfg: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    op = ops.get("layernorm")
    good = op.implementations["cuda"]

    def off_by_one(inputs: ops.Tensors, out: torch.Tensor, params: ops.Params) -> ops.Call:
        launch = good({**inputs, "x": inputs["x"][1:]}, out[1:], params)  # the first row is never written

        def call() -> torch.Tensor:
            launch()
            return out

        return call

    monkeypatch.setitem(op.implementations, "cuda", off_by_one)  # type: ignore[index]
    record = run_check("layernorm", SHAPE, "cuda", cfg["operations"]["layernorm"], cfg["seed"])
    assert not record["passed"] and record["unwritten_outputs"] == 768
    with pytest.raises(CheckFailed, match=f"layernorm {SHAPE} cuda"):
        require_pass(record)


def test_one_process_checks_captures_and_times_every_implementation(cfg: dict) -> None:
    """The group process without nsys (the profiler range is skipped): rounds, spans in rotated
    rounds, one graph row per implementation, a planted variant bound to its larger problem."""
    plan = {**config.measure_plan(cfg, "layernorm"), "op": "layernorm", "shape": SHAPE, "profile": False,
            "impls": ["cuda", "triton", "torch", "cuda.planted"]}
    plan["params"]["variants"]["planted"] = {"base": "cuda", "defines": {}, "grow": 0.025}
    out = group.run(plan)
    assert out["passed"] == plan["impls"]
    assert all(1 <= k <= 20 for k in out["calls_per_round"].values())
    assert out["launch_paths"]["triton"] == "prepared"
    spans = pd.DataFrame(out["spans"])
    assert len(spans) == 4 * 12 and (spans["span_us"] > 0).all()
    firsts = spans.sort_values(["round", "sample"]).groupby("round")["impl"].first().tolist()
    assert firsts == ["cuda", "triton", "torch"]  # the order rotates from round to round
    assert [g["status"] for g in out["graphs"]] == ["ok"] * 4
    phases = [p for p in out["seconds"] if p in ("checks", "spans", "graph_replay", "capture")]
    assert phases == ["checks", "spans", "graph_replay", "capture"]  # the capture last: the process's exit closes it


def test_idle_starts_time_a_planted_delay_as_extra_time(cfg: dict) -> None:
    """With cross_check.idle_starts the group also times every implementation's calls one by one on
    an idle GPU (harness.measure.idle_start), after the graph replay and before the capture: a
    planted delay adds its wait to each call, an A/A twin adds nothing."""
    plan = {**config.measure_plan(cfg, "softmax"), "op": "softmax", "shape": "4096x1024", "profile": False,
            "impls": ["cuda", "cuda.twin", "cuda.delayed"]}
    plan["params"]["variants"].update(twin={"base": "cuda", "defines": {}},
                                      delayed={"base": "cuda", "defines": {}, "delay": 4096})
    plan["cross_check"] = {**plan["cross_check"], "idle_starts": True}
    out = group.run(plan)
    rows = {g["impl"]: g for g in out["graphs"]}
    assert all(r["idle_status"] == "ok" and r["idle_slots"] >= 3 for r in rows.values())
    base, twin, delayed = (float(rows[i]["idle_median_us"]) for i in ("cuda", "cuda.twin", "cuda.delayed"))
    # 4096 clock cycles at the H200's 1.2-2.0 GHz: 2-3.5 µs more a call (one wave: every block
    # waits at once); the kernel and the fixed part of an idle start are the twin's as well
    assert 1.5 < delayed - base < 5.0, (base, delayed)
    assert abs(twin - base) < 0.05 * base, (base, twin)
    assert base < float(rows["cuda"]["graph_median_us"]) + 5.0  # no launch path inside the events
    phases = [p for p in out["seconds"] if p in ("graph_replay", "idle_starts", "capture")]
    assert phases == ["graph_replay", "idle_starts", "capture"]


def test_cold_mode_rotates_input_sets(cfg: dict) -> None:
    call = ops.bind("layernorm", "cuda", SHAPE, cfg["operations"]["layernorm"], cfg["seed"], "cold")
    n = call.input_sets
    assert n >= 2
    outs = [call().data_ptr() for _ in range(n + 1)]
    assert len(set(outs[:n])) == n and outs[n] == outs[0]  # every set once, then round again
