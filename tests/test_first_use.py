"""What a session pays once at its start so that each group's checks time its checks
(harness.measure.check.first_use), and the check's comparison it runs there (check.compare): the
comparison itself is tested on the CPU with torch's CPU build, the first use where a session
calls it with a stand-in, and on the GPU through the same call the session makes."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from harness.measure import check, group


def test_the_comparison_passes_a_close_result_and_names_what_fails() -> None:
    torch = pytest.importorskip("torch")
    ref = torch.linspace(-2.0, 2.0, 64, dtype=torch.float64)
    close = (ref * (1 + 1e-7)).float()
    got = check.compare(torch, close, ref, 1e-5, 1e-5)
    assert got["passed"] and got["elements"] == 64 and got["nonfinite_outputs"] == 0 and got["unwritten_outputs"] == 0
    assert 0 < got["max_abs_err"] < 1e-5 and got["rel_l2_err"] < 1e-5

    off = close.clone()
    off[7] += 0.5  # one output outside the tolerance
    bad = check.compare(torch, off, ref, 1e-5, 1e-5)
    assert not bad["passed"] and bad["max_abs_err"] == pytest.approx(0.5, rel=1e-3)

    unwritten = close.clone()
    unwritten[3] = float("nan")  # an output the kernel never wrote keeps the poison
    nan = check.compare(torch, unwritten, ref, 1e-5, 1e-5)
    assert not nan["passed"] and nan["unwritten_outputs"] == 1 and nan["nonfinite_outputs"] == 1
    assert math.isnan(nan["max_abs_err"])


def test_the_comparison_of_an_empty_problem_passes_with_zero_errors() -> None:
    torch = pytest.importorskip("torch")
    got = check.compare(torch, torch.empty(0, 8), torch.empty(0, 8, dtype=torch.float64), 1e-5, 1e-5)
    assert got["passed"] and got["elements"] == 0 and got["max_abs_err"] == 0.0


def _session(monkeypatch: Any, checking: list[bool], impls: list[str]) -> list[tuple[str, ...]]:
    """run_session over groups that check or not, each group's preparation (its checks first) stood
    in: what happened, in order."""
    from types import SimpleNamespace

    log: list[tuple[str, ...]] = []
    torch = SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(group, "require_gpu", lambda: None)
    monkeypatch.setattr(group, "import_libraries", lambda plans: ["triton"] if "triton" in impls else [])
    monkeypatch.setattr(group, "first_use", lambda t, triton=False: log.append(("first use", str(triton))))

    def prepare(t: Any, plan: Any, progress: Any) -> Any:
        log.append(("group", plan["op"]))
        return group._Prepared(plan)

    monkeypatch.setattr(group, "_prepare", prepare)
    base = {"params": {}, "seed": 1, "cache_mode": "hot", "spans": False, "impls": impls,
            "capture": {"warmup": 1, "rounds": 1, "round_us": 30.0, "max_calls": 1, "placements": 1},
            "span": {}, "cross_check": {"enabled": False}}
    plans = [{**base, "op": f"op{k}", "shape": "1x1", "check": c} for k, c in enumerate(checking)]
    group.run_session({"groups": plans, "profile": False})
    return log


def test_a_session_whose_groups_check_pays_the_first_use_once_before_its_first_group(monkeypatch: Any) -> None:
    log = _session(monkeypatch, [True, True], ["cuda", "triton"])
    assert log == [("first use", "True"), ("group", "op0"), ("group", "op1")]


def test_the_first_use_launches_triton_only_where_an_implementation_launches_through_it(monkeypatch: Any) -> None:
    assert _session(monkeypatch, [True], ["cuda", "torch"]) == [("first use", "False"), ("group", "op0")]


def test_a_session_that_checks_nothing_pays_no_first_use(monkeypatch: Any) -> None:
    """The counters' session: the measure step checked these groups already."""
    assert _session(monkeypatch, [False, False], ["cuda", "triton"]) == [("group", "op0"), ("group", "op1")]


@pytest.mark.gpu
def test_the_first_use_on_the_gpu_warms_torch_and_triton_through_the_checks_own_calls() -> None:
    import torch

    assert check.first_use(torch, triton=True) == ["torch", "triton"]
    assert check.first_use(torch) == ["torch"]
