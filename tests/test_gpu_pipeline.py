"""The GPU path of the pipeline, on a real GPU (marked gpu; skipped without one): the check
passes every implementation and fails a wrong one, the span timer and capture target run, and a
real Nsight Systems capture gives one kernel per call and keeps no secret of the shell."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness import ROOT, config, ops, tools
from harness.errors import CheckFailed
from harness.measure import spans
from harness.measure.check import require_pass, run_check
from harness.tables import derive as tables

pytestmark = pytest.mark.gpu

SHAPE = "256x768"


@pytest.fixture()
def cfg() -> dict:
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["operations"]["layernorm"]["sweep"] = [SHAPE]
    raw["operations"]["layernorm"]["default"] = SHAPE
    raw["capture"].update({"warmup": 2, "iterations": 7})
    raw["span"].update({"samples": 12, "rounds": 3, "warmup": 2})
    return config.validate(raw)


@pytest.mark.parametrize("impl", ["cuda", "triton", "torch"])
def test_check_passes_every_implementation(cfg: dict, impl: str) -> None:
    record = run_check("layernorm", SHAPE, impl, cfg["operations"]["layernorm"], cfg["seed"])
    assert record["passed"], record
    assert record["unwritten_outputs"] == 0 and record["max_abs_err"] < 1e-4
    require_pass(record)


def test_check_fails_an_implementation_that_skips_a_row(cfg: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    op = ops.get("layernorm")
    good = op.implementations["cuda"]

    def off_by_one(inputs, out, params):  # type: ignore[no-untyped-def]
        short = {**inputs, "x": inputs["x"][1:]}
        return good(short, out[1:], params)  # the first row is never written

    monkeypatch.setitem(op.implementations, "cuda", off_by_one)  # type: ignore[index]
    record = run_check("layernorm", SHAPE, "cuda", cfg["operations"]["layernorm"], cfg["seed"])
    assert not record["passed"] and record["unwritten_outputs"] == 768
    with pytest.raises(CheckFailed, match=f"layernorm {SHAPE} cuda"):
        require_pass(record)


def test_span_samples_every_implementation_in_rotated_rounds(cfg: dict) -> None:
    rows = spans.measure(cfg, "layernorm", SHAPE, ["cuda", "triton", "torch"])
    assert len(rows) == 12 * 3
    assert all(r["span_us"] > 0 for r in rows)
    firsts = {r["round"]: r["impl"] for r in reversed(rows)}
    assert sorted(firsts.values()) == ["cuda", "torch", "triton"]


def test_capture_gives_one_kernel_per_call_and_no_secret(cfg: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.measure import capture

    try:
        tools.find_nsys(cfg["nsys"]["path"])
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no nsys: {exc}")
    secret = "ghp_FAKE_SECRET_TOKEN_4242"
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    rep, sqlite = tmp_path / "cap.nsys-rep", tmp_path / "cap.sqlite"
    capture.capture(cfg, "layernorm", SHAPE, "cuda", rep, sqlite, tmp_path / "cap.log")
    assert rep.is_file() and sqlite.is_file()
    assert not list(tmp_path.glob("*.partial*"))
    assert secret.encode() not in sqlite.read_bytes()
    detail = tables.kernel_time_detail(sqlite, cfg["capture"]["range"], cfg["capture"]["iterations"], "layernorm", SHAPE, "cuda")
    assert len(detail) == 1 and detail[0]["instances"] == cfg["capture"]["iterations"]
    assert "layernorm_fwd" in detail[0]["kernel"] and detail[0]["grid"] == "256x1x1"


def test_cold_mode_rotates_input_sets(cfg: dict) -> None:
    call = ops.bind("layernorm", "cuda", SHAPE, cfg["operations"]["layernorm"], cfg["seed"], "cold")
    n = call.input_sets
    assert n >= 2
    outs = [call().data_ptr() for _ in range(n + 1)]
    assert len(set(outs[:n])) == n and outs[n] == outs[0]  # every set once, then round again
