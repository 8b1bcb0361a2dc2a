"""`python -m harness compare`: two namespaces kernel by kernel, each change judged against the
spread of the launches, with the evidence rules (one GPU; the library only with one torch version)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.__main__ import main as cli
from harness.evidence import compare
from harness.io import write_csv

GPU_A, GPU_B = "GPU-aaaa", "GPU-bbbb"


def row(impl: str, us: float, spread: float = 0.02, gpu: str = GPU_A, shape: str = "4096x768") -> dict:
    return {"op": "layernorm", "shape": shape, "impl": impl, "kernel_time_us": us, "main_median_us": us,
            "main_min_us": us * (1 - spread), "main_max_us": us * (1 + spread), "gpu_uuid": gpu}


def test_the_same_figures_are_no_difference() -> None:
    a = pd.DataFrame([row("cuda", 5.66), row("triton", 5.40)])
    out = compare.compare_frames(a, a.copy(), library_comparable=True)
    assert list(out["verdict"]) == ["no difference", "no difference"]
    assert (out["change_pct"] == 0).all()
    assert (out["b_over_a_lo"] < 1).all() and (out["b_over_a_hi"] > 1).all()


def test_a_move_beyond_both_spreads_is_named_and_one_inside_is_not() -> None:
    a = pd.DataFrame([row("cuda", 10.0), row("triton", 10.0)])
    b = pd.DataFrame([row("cuda", 11.0), row("triton", 10.3)])  # +10% (spreads of 2%) and +3%
    out = compare.compare_frames(a, b, library_comparable=True).set_index("impl")
    assert out.loc["cuda", "verdict"] == "slower" and out.loc["cuda", "change_pct"] == pytest.approx(10.0)
    assert out.loc["triton", "verdict"] == "no difference"
    faster = compare.compare_frames(b, a, library_comparable=True).set_index("impl")
    assert faster.loc["cuda", "verdict"] == "faster"
    assert "1 moved beyond" in compare.summary(out.reset_index(), "a", "b")


def test_rows_of_two_gpus_get_no_verdict() -> None:
    a = pd.DataFrame([row("cuda", 10.0)])
    b = pd.DataFrame([row("cuda", 20.0, gpu=GPU_B)])
    out = compare.compare_frames(a, b, library_comparable=True)
    assert out["verdict"].isna().all() and "different GPUs" in out.loc[0, "reason"]


def test_the_library_is_compared_only_with_one_torch_version() -> None:
    a = pd.DataFrame([row("torch", 12.5), row("cuda", 5.7)])
    b = pd.DataFrame([row("torch", 14.0), row("cuda", 5.7)])
    out = compare.compare_frames(a, b, library_comparable=False).set_index("impl")
    assert pd.isna(out.loc["torch", "verdict"]) and "torch version" in out.loc["torch", "reason"]
    assert out.loc["cuda", "verdict"] == "no difference"
    assert compare.compare_frames(a, b, library_comparable=True).set_index("impl").loc["torch", "verdict"] == "slower"


def test_only_rows_in_both_namespaces_are_compared() -> None:
    a = pd.DataFrame([row("cuda", 5.0), row("cuda", 30.0, shape="4096x4096")])
    b = pd.DataFrame([row("cuda", 5.0)])
    assert list(compare.compare_frames(a, b, True)["shape"]) == ["4096x768"]


def write_ns(root: Path, name: str, rows: list[dict], torch_version: str) -> None:
    folder = root / name
    write_csv(rows, list(rows[0]), folder / "tables" / "kernel_time.csv")
    (folder / "provenance.json").write_text(json.dumps({"namespace": name, "versions": {"torch": torch_version}}))


def test_the_command_reads_two_retained_namespaces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_ns(tmp_path, "one", [row("cuda", 10.0), row("torch", 12.0)], "2.11.0")
    write_ns(tmp_path, "two", [row("cuda", 10.1), row("torch", 15.0)], "2.12.0")
    out_csv = tmp_path / "ab.csv"
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path), "--out", str(out_csv)]) == 0
    text = capsys.readouterr().out
    assert "| layernorm | 4096x768 | cuda | 10.00 | 10.10 | +1.0% |" in text
    assert "two against one: 1 kernel times compared, 0 moved" in text and "1 not compared" in text
    assert list(pd.read_csv(out_csv)["impl"]) == ["cuda", "torch"]


def test_a_namespace_without_tables_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_ns(tmp_path, "one", [row("cuda", 10.0)], "2.11.0")
    assert cli(["compare", "one", "missing", "--artifacts", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"compare: missing has no tables/kernel_time.csv under {tmp_path}."
