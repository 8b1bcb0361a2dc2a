"""scripts/power_cap_effect.py on made-up namespaces: it splits them by whether their gpu_state
table names the software power cap, sets the times and the same-session ratios of the two split
apart, and refuses in one sentence where there is no namespace to read."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from script_module import load_script


def namespace(art: Path, name: str, model: str, flags: str, torch_us: float, triton_us: float) -> None:
    tables = art / name / "tables"
    tables.mkdir(parents=True)
    (art / name / "provenance.json").write_text(json.dumps({"gpus": [{"name": model}], "config": {}}))
    pd.DataFrame([{"op": "transpose", "shape": "64x64", "impl": i, "kernel_time_us": us}
                  for i, us in (("torch", torch_us), ("triton", triton_us), ("cuda", 1.0))]).to_csv(tables / "kernel_time.csv", index=False)
    pd.DataFrame([{"op": "transpose", "shape": "64x64", "impl": "torch", "disturbed": bool(flags), "flags": flags or None}]
                 ).to_csv(tables / "gpu_state.csv", index=False)
    pd.DataFrame(columns=["op", "shape", "variant", "base", "ratio", "ratio_lo", "ratio_hi", "verdict"]
                 ).to_csv(tables / "variants.csv", index=False)
    pd.DataFrame(columns=["op", "shape", "impl", "kernel", "sass_sha256"]).to_csv(tables / "census.csv", index=False)


def test_capped_and_uncapped_namespaces_are_set_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = load_script("power_cap_effect")
    cap = "the GPU throttled during the capture (software power cap)"
    namespace(tmp_path, "a-1", "H", "", 10.0, 5.0)
    namespace(tmp_path, "a-2", "H", cap, 10.2, 5.1)   # both 2% slower: the ratio stays 2.0
    namespace(tmp_path, "a-3", "H", cap, 10.4, 5.1)
    namespace(tmp_path, "b-1", "other GPU", cap, 99.0, 1.0)  # another model: left out
    assert script.main(["--artifacts", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "GPU model: H; torch/triton" in out
    assert "namespaces with the cap flagged (2): a-2 a-3" in out and "namespaces without it (1): a-1" in out
    assert f"transpose 64x64: {10.3 / 10.0:.4f}; {5.1 / 5.0:.4f}" in out  # times: medians, capped over uncapped
    # the same session's ratio: uncapped 2.0, capped 2.0 and 10.4 / 5.1, their median over the uncapped one
    assert "  transpose 64x64: 2.0000 (2.0000-2.0000, 1) | 2.0196 (2.0000-2.0392, 2) | 1.0098" in out
    # NVML told per group: only the group the cap was read in counts as capped, and its clock is said
    cap_row = {"op": "transpose", "shape": "64x64", "impl": "torch", "disturbed": True, "flags": cap,
               "during_extent": "group", "during_busy_sm_clock_min_mhz": 1875, "during_busy_sm_clock_max_mhz": 1980,
               "before_max_sm_clock_mhz": 1980, "during_busy_power_max_w": 674.3, "before_power_limit_w": 700}
    namespace(tmp_path, "a-4", "H", cap, 10.0, 5.0)
    pd.DataFrame([cap_row, {**cap_row, "shape": "128x128", "disturbed": False, "flags": None,
                            "during_busy_sm_clock_min_mhz": 1980, "during_busy_power_max_w": 400.0}]
                 ).to_csv(tmp_path / "a-4" / "tables" / "gpu_state.csv", index=False)
    kt = pd.read_csv(tmp_path / "a-4" / "tables" / "kernel_time.csv")
    pd.concat([kt, kt.assign(shape="128x128")]).to_csv(tmp_path / "a-4" / "tables" / "kernel_time.csv", index=False)
    assert script.capped(tmp_path / "a-4") == {("transpose", "64x64"): True, ("transpose", "128x128"): False}
    assert script.main(["--artifacts", str(tmp_path), "--model", "H"]) == 0
    out = capsys.readouterr().out
    assert "namespaces with the cap flagged (3): a-2 a-3 a-4" in out
    assert "  a-4: 1875-1980 MHz (of 1980), at most 674.3 W (of 700), in 1 of 2 groups flagged" in out
    # 128x128 was measured uncapped only: its ratio stands on the uncapped side, no capped one to set it against
    assert "  transpose 128x128: 2.0000 (2.0000-2.0000, 1) | n/a | n/a" in out
    assert script.main(["--artifacts", str(tmp_path), "--model", "none such"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("power_cap_effect: no namespace") and "\n" not in err
