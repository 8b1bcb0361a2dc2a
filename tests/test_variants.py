"""Named kernel variants: config, the compiler options they add, their census from real compiler
output, the comparison with their base and the report's "What was tried and not kept"."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness import ROOT, config
from harness.errors import ConfigError, EvidenceError
from harness.io import write_csv
from harness.ops import variants
from harness.report import render as report
from harness.tables import variants as variant_table

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


def test_enabled_variants_become_implementations() -> None:
    raw = copy.deepcopy(RAW)
    raw["variants"] = ["layernorm.cached_stores"]
    cfg = config.validate(raw)
    assert config.implementations(cfg, "layernorm")[-1] == "cuda.cached_stores"
    assert "cuda.full_occupancy" not in config.implementations(cfg, "layernorm")
    assert config.implementations(cfg, "matmul") == ["cuda", "triton", "torch"]
    raw["variants"] = []
    assert config.implementations(config.validate(raw), "layernorm") == ["cuda", "triton", "torch"]


@pytest.mark.parametrize(("entry", "says"), [
    ("layernorm.nope", "not a variant defined"),
    ("matmul.full_occupancy", "not a variant defined"),
    ("LayerNorm.x", "variants"),
])
def test_unknown_variant_is_one_sentence(entry: str, says: str) -> None:
    raw = copy.deepcopy(RAW)
    raw["variants"] = [entry]
    with pytest.raises(ConfigError, match=says):
        config.validate(raw)


def test_a_define_must_be_a_macro_name_and_an_integer() -> None:
    for defines in ({"ln_load_nc": 0}, {"LN_LOAD_NC": "0; rm -rf /"}, {"A B": 1}):
        raw = copy.deepcopy(RAW)
        raw["operations"]["layernorm"]["variants"]["plain_loads"]["defines"] = defines
        with pytest.raises(ConfigError):
            config.validate(raw)


def test_compiler_options_and_names() -> None:
    params = config.validate(RAW)["operations"]["layernorm"]
    assert variants.compiler_options(params, "cuda.full_occupancy") == ("-DLN_MIN_BLOCKS=-1",)
    assert variants.compiler_options(params, "cuda") == ()
    assert variants.split("cuda.plain_loads") == ("cuda", "plain_loads")
    with pytest.raises(EvidenceError, match="not a variant"):
        variants.compiler_options(params, "cuda.absent")


def test_variant_census_comes_from_the_compiler_with_its_defines() -> None:
    from harness.build.build import build_census
    from harness.build.compile import load_nvrtc

    if load_nvrtc() is None:
        pytest.skip("NVRTC is not available here")
    params = config.validate(RAW)["operations"]["layernorm"]
    shapes = [(4096, 768), (4096, 4096)]
    base = build_census("layernorm", "cuda", shapes)
    full = build_census("layernorm", "cuda", shapes,
                        variant=("cuda.full_occupancy", variants.compiler_options(params, "cuda.full_occupancy")))
    assert [r["impl"] for r in full] == ["cuda.full_occupancy"] * len(base)
    assert all("-DLN_MIN_BLOCKS=-1" in r["options"] for r in full)
    assert not any("-DLN_" in r["options"] for r in base)
    # __launch_bounds__(BLOCK, 2048 / BLOCK) caps registers at 32; the base kernel uses more
    assert all(r["registers"] <= 32 for r in full)
    assert any(b["registers"] > 32 for b in base)
    stream = build_census("layernorm", "cuda", shapes[:1],
                          variant=("cuda.cached_stores", variants.compiler_options(params, "cuda.cached_stores")))
    assert stream[0]["options"] == base[0]["options"].replace("-std=c++17", "-std=c++17 -DLN_STORE_CS=0")
    assert stream[0]["st_global_128"] == base[0]["st_global_128"]  # same stores, without the .cs hint


def kt_row(op: str, shape: str, impl: str, us: float, spread: float = 0.01) -> dict:
    return {"op": op, "shape": shape, "impl": impl, "kernel_time_us": us, "main_median_us": us,
            "main_min_us": us * (1 - spread), "main_max_us": us * (1 + spread)}


def test_variant_rows_and_outcomes() -> None:
    cfg = config.validate(RAW)
    kt = [kt_row("layernorm", "4096x768", "cuda", 10.0), kt_row("layernorm", "4096x768", "cuda.full_occupancy", 9.0),
          kt_row("layernorm", "4096x4096", "cuda", 30.0), kt_row("layernorm", "4096x4096", "cuda.full_occupancy", 36.0),
          kt_row("layernorm", "4096x768", "cuda.plain_loads", 10.05),
          kt_row("layernorm", "4096x768", "cuda.cached_stores", 9.5), kt_row("layernorm", "4096x768", "triton", 9.0)]
    rows = variant_table.variant_rows(kt, cfg)
    assert len(rows) == 4
    by = {(r["variant"], r["shape"]): r for r in rows}
    assert by[("cuda.full_occupancy", "4096x768")]["verdict"] == "faster"
    assert by[("cuda.full_occupancy", "4096x4096")]["verdict"] == "slower"
    assert by[("cuda.full_occupancy", "4096x4096")]["ratio"] == pytest.approx(1.2)
    assert by[("cuda.plain_loads", "4096x768")]["verdict"] == "no difference"
    out = {o["variant"]: o for o in variant_table.outcomes(rows)}
    assert out["cuda.full_occupancy"]["outcome"] == "not kept"  # faster at one shape, slower at another
    assert out["cuda.plain_loads"]["outcome"] == "not kept"
    assert out["cuda.cached_stores"]["outcome"] == "candidate"
    assert out["cuda.full_occupancy"]["ratio_min"] == pytest.approx(0.9)


def test_report_lists_what_was_tried_and_not_kept(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_report import make_tables

    paths = make_tables(tmp_path)
    cfg = paths.pop("cfg")
    cfg["operations"]["layernorm"]["variants"] = copy.deepcopy(RAW["operations"]["layernorm"]["variants"])
    kt = [kt_row("layernorm", "4096x768", "cuda", 10.0), kt_row("layernorm", "4096x768", "cuda.full_occupancy", 12.5),
          kt_row("layernorm", "4096x768", "cuda.cached_stores", 9.0)]
    rows = variant_table.variant_rows(kt, cfg)
    paths["variants"] = str(tmp_path / "variants.csv")
    write_csv(rows, variant_table.VARIANT_COLUMNS, paths["variants"])
    report.render_reports(cfg, paths, tmp_path / "fn.md", tmp_path / "ic.md", [str(tmp_path / "figures" / "layernorm_sweep.svg")])
    note = (tmp_path / "fn.md").read_text()
    section = note.split("### What was tried and not kept")[1].split("Faster than the default")[0]
    assert "cuda.full_occupancy" in section and "cuda.cached_stores" not in section
    assert "| 0 / 1 / 0 | 1.250–1.250 |" in section
    assert "candidates to become the default" in note and "cuda.cached_stores (0.900–0.900 of cuda)" in note
    frame = pd.read_csv(paths["variants"])
    for _, r in frame.iterrows():
        assert f"| {report.num(r['base_us'])} | {report.num(r['variant_us'])} | {report.num(r['ratio'], 3)} |" in note
