"""One measurement group measured for real on the GPU (the measure step, nsys included), for the
GPU tests: the plan and settings come from config.yaml with the test's changes, the group folder
and the lock folder under the test's tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import ROOT, config, tools
from harness.measure import step as measure_step


def cfg_with(**changes: Any) -> dict[str, Any]:
    """config.yaml with top-level sections updated by `changes` (dicts merged one level deep)."""
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return config.validate(raw)


def need_nsys(cfg: dict[str, Any]) -> None:
    try:
        tools.find_nsys(cfg["nsys"]["path"])
    except Exception as exc:  # noqa: BLE001 - any reason nsys is unusable here skips
        pytest.skip(f"no nsys: {exc}")


def measure(tmp: Path, monkeypatch: pytest.MonkeyPatch, cfg: dict[str, Any], op: str, shape: str, impls: list[str],
            **settings: Any) -> tuple[dict[str, Any], Path]:
    """The measure step over (op, shape, impls): (its record, the group folder). The test holds the
    GPU's lock (tests/conftest.py), so the step takes a lock of its own folder."""
    need_nsys(cfg)
    monkeypatch.setenv("EVIDENCE_LOCK_DIR", str(tmp / "locks"))
    folder = tmp / "artifacts" / "ns" / "measure" / op / shape
    record = measure_step.measure(op=op, shape=shape, impls=impls, plan=config.measure_plan(cfg, op), group_dir=folder,
                                  log=str(tmp / "measure.log"), settings={**config.operational(cfg), **settings},
                                  exclusive=False, threads=1)
    return record, folder
