"""The measure and counters steps on the CPU, as the workflow's rules run them, for the tests that
port the old per-job steps (test_capture_step, test_faults, test_counters_step, test_gpulock): the
measure step over the stand-in nsys (tests/fake_device.py), the counters step over that group's
record (with the stand-in ncu of tests/standin_ncu.py, or none). Nothing here is part of the
product."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fake_device
import pytest

from harness import ROOT, config
from harness.measure import step as measure_step

OP, SHAPE, NS = "layernorm", "4096x768", "ns"


def use_standin_nsys(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in nsys first on PATH, a private lock folder, and a GPU the step believes in."""
    fake_device.install(tmp / "bin")
    monkeypatch.setenv("PATH", f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("EVIDENCE_LOCK_DIR", str(tmp / "locks"))
    monkeypatch.setattr(measure_step.device, "require_visible_gpu", lambda: None)
    return tmp


def cfg() -> dict[str, Any]:
    return config.load(ROOT / "config.yaml")


def settings(**extra: Any) -> dict[str, Any]:
    """The operational settings of config.yaml, with a short wait for a quiet GPU."""
    out = {**config.operational(cfg()), "nsys_path": None, **extra}
    out["gpu_state"] = {**out["gpu_state"], "busy_wait_s": 0.1}
    return out


def group_dir(tmp: Path, op: str = OP, shape: str = SHAPE) -> Path:
    return tmp / "artifacts" / NS / "measure" / op / shape


def variants_plan(variants: Mapping[str, Mapping[str, Any]], op: str = OP) -> dict[str, Any]:
    """The operation's measure plan with extra variants defined (e.g. {'wrong': {'base': 'cuda', ...}})."""
    plan = config.measure_plan(cfg(), op)
    plan["params"]["variants"].update(variants)
    return plan


def run_measure(tmp: Path, impls: list[str], *, plan: dict[str, Any] | None = None, op: str = OP, shape: str = SHAPE,
                **extra_settings: Any) -> dict[str, Any]:
    """The measure step over the group `impls` of (op, shape), as the workflow's measure rule runs it."""
    return measure_step.measure(op=op, shape=shape, impls=impls, plan=plan or config.measure_plan(cfg(), op),
                                group_dir=group_dir(tmp, op, shape), log=str(tmp / f"measure-{op}-{shape}.log"),
                                settings=settings(**extra_settings), exclusive=True, threads=4)


def counter_outputs(tmp: Path, op: str = OP, shape: str = SHAPE) -> tuple[str, str, str]:
    """The counters rule's raw export, table and log of (op, shape)."""
    base = tmp / "artifacts" / NS / "counters" / op
    return str(base / f"{shape}.raw.csv"), str(base / f"{shape}.csv"), str(tmp / f"counters-{op}-{shape}.log")


def run_counters(tmp: Path, impls: list[str], *, ncu: str | None, op: str = OP, shape: str = SHAPE) -> tuple[str, str, str]:
    """The counters step over the group's record, as the workflow's counters rule runs it."""
    raw, table, log = counter_outputs(tmp, op, shape)
    c = cfg()
    measure_step.counters(op=op, shape=shape, impls=impls, plan=config.counters_plan(c, op),
                          metrics=c["counters"]["metrics"], namespace=NS,
                          record_json=str(group_dir(tmp, op, shape) / "record.json"), raw_out=raw, table_out=table,
                          log=log, settings=settings(ncu_path=ncu))
    return raw, table, log
