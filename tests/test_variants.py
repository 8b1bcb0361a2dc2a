"""Named kernel variants: config, the compiler options they add, their census from real compiler
output, the comparison with their base (from the rounds of the capture they shared with it, in one
measurement group) and the report's "What was tried and not kept"."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import fake_device
import pandas as pd
import pytest
import yaml

from harness import ROOT, config
from harness.errors import ConfigError, EvidenceError
from harness.io import write_csv
from harness.ops import variants
from harness.report import render as report
from harness.tables import derive, stats
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


def layernorm_census(variant: str | None = None, shapes: tuple[tuple[int, int], ...] = ((4096, 768), (4096, 4096)),
                     *, also: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The census rows of our layer norm, or of its variant `variant` of the repository's config
    with the compiler options `also` after its own, at `shapes`, compiled here (the test skips
    where NVRTC is missing)."""
    from harness.build.build import build_census
    from harness.build.toolchain import load_nvrtc

    if load_nvrtc() is None:
        pytest.skip("NVRTC is not available here")
    params = config.validate(RAW)["operations"]["layernorm"]
    chosen = (variant, (*variants.compiler_options(params, variant), *also)) if variant else None
    return build_census("layernorm", "cuda", list(shapes), variant=chosen)


def test_variant_census_comes_from_the_compiler_with_its_defines() -> None:
    base = layernorm_census()
    full = layernorm_census("cuda.full_occupancy")
    assert [r["impl"] for r in full] == ["cuda.full_occupancy"] * len(base)
    assert all("-DLN_MIN_BLOCKS=-1" in r["options"] for r in full)
    assert not any("-DLN_" in r["options"] for r in base)
    # __launch_bounds__(BLOCK, 2048 / BLOCK) caps registers at 32: seen on the kernel that reads the
    # width at run time, which uses more (the default, the width compiled in, fits 32 already)
    runtime = layernorm_census("cuda.runtime_width")
    capped = layernorm_census("cuda.full_occupancy", also=("-DLN_FIXED_WIDTH=0",))
    assert [r["kernel"] for r in capped] == [r["kernel"] for r in runtime]
    assert all(r["registers"] <= 32 for r in full + capped)
    assert any(r["registers"] > 32 for r in runtime)
    stream = layernorm_census("cuda.cached_stores", ((4096, 768),))
    assert stream[0]["options"] == base[0]["options"].replace("-std=c++17", "-std=c++17 -DLN_STORE_CS=0")
    assert stream[0]["st_global_128"] == base[0]["st_global_128"]  # same stores, without the .cs hint


def test_a_define_that_leaves_an_instance_as_it_was_gives_its_base_s_code() -> None:
    """layernorm.block512 changes the block at widths 2048 and 4096 only: at 768 it compiles to the
    base's code (the census's sass_sha256, which harness.tables.binaries reads), at 4096 to its
    own."""
    base, wide = layernorm_census(), layernorm_census("cuda.block512")
    assert all(len(r["sass_sha256"]) == 64 for r in base + wide)
    code = {name: {r["shapes"]: (r["sass_sha256"], r["sass_instructions"]) for r in rows}
            for name, rows in (("base", base), ("wide", wide))}
    assert code["wide"]["4096x768"] == code["base"]["4096x768"]
    assert code["wide"]["4096x4096"][0] != code["base"]["4096x4096"][0]


def delayed(raw: dict, op: str, cycles: int) -> dict:
    """`raw` with a variant `op`.delayed that plants a delay of `cycles` and is measured."""
    raw = copy.deepcopy(raw)
    raw["operations"][op].setdefault("variants", {})["delayed"] = {
        "base": "cuda", "delay": cycles, "description": "every block waits (planted slowdown)"}
    raw["variants"] = [f"{op}.delayed"]
    return raw


def test_a_delay_becomes_its_define_where_the_source_reads_it() -> None:
    cfg = config.validate(delayed(RAW, "softmax", 320))
    block = config.operation_block(cfg, "softmax")
    assert variants.compiler_options(block, "cuda.delayed") == (f"-D{variants.DELAY_DEFINE}=320",)
    assert config.build_block(cfg, "softmax")["variants"]["delayed"]["defines"] == {variants.DELAY_DEFINE: 320}
    for op in ("layernorm", "softmax", "matmul", "transpose"):  # the kernels that read it
        assert variants.DELAY_DEFINE in (ROOT / "kernels" / op / f"{op}.cu").read_text()
        config.validate(delayed(RAW, op, 320))
    with pytest.raises(ConfigError, match="kernels/neighbor_aggregation/neighbor_aggregation.cu does not read "
                                          f"\\({variants.DELAY_DEFINE}\\)"):
        config.validate(delayed(RAW, "neighbor_aggregation", 320))
    for bad in (0, -5, 1.5):
        with pytest.raises(ConfigError):
            config.validate(delayed(RAW, "softmax", bad))  # type: ignore[arg-type]


@pytest.mark.parametrize("op, shape", [("softmax", (4096, 1024)), ("layernorm", (4096, 768)),
                                       ("matmul", (1024, 1024, 1024)), ("matmul", (4096, 4096, 4096)),
                                       ("transpose", (4096, 4096)), ("transpose", (4096, 4098))])
def test_a_delay_adds_its_wait_to_the_plant_alone(op: str, shape: tuple[int, ...]) -> None:
    """At every kernel a delay can plant (matmul's ring and tiled kernels, transpose's vec4 and
    scalar paths among them)."""
    from harness.build.build import build_census
    from harness.build.toolchain import load_nvrtc

    if load_nvrtc() is None:
        pytest.skip("NVRTC is not available here")
    block = config.operation_block(config.validate(delayed(RAW, op, 320)), op)
    base = build_census(op, "cuda", [shape])
    plant = build_census(op, "cuda", [shape],
                         variant=("cuda.delayed", variants.compiler_options(block, "cuda.delayed")))
    assert [r["kernel"] for r in plant] == [r["kernel"] for r in base]
    # the wait is a loop over the clock: more instructions in the plant, none in the kernel as it ships
    assert plant[0]["sass_instructions"] > base[0]["sass_instructions"]
    assert f"-D{variants.DELAY_DEFINE}=320" in plant[0]["options"] and "PLANT" not in base[0]["options"]


def measured(tmp: Path, shape: str, per_call_ns: dict[str, int], rounds: int = 30) -> derive.Group:
    """A measurement group of layernorm at `shape` as the tables read it back: a synthetic capture
    (tests/fake_device.py) of `rounds` interleaved rounds, each implementation's kernels taking
    about `per_call_ns` (1% noise per launch)."""
    impls = list(per_call_ns)
    plan = {"op": "layernorm", "shape": shape, "capture": {"rounds": rounds, "round_us": 300, "max_calls": 100}, "seed": 0}
    out = fake_device.results(plan, impls, set())
    export = fake_device.synthetic_export(tmp / f"{shape}.sqlite", impls, rounds, out["calls_per_round"],
                                          overrides=per_call_ns, noise=0.01)
    record = {"op": "layernorm", "shape": shape, "impls": impls, "checks": out["checks"], "passed": impls,
              "rounds": rounds, "calls_per_round": out["calls_per_round"], "launch_paths": out["launch_paths"],
              "gpu_uuid": "GPU-1", "gpu": {}, "span": {}}
    launches = pd.DataFrame(derive.launch_rows(export, "layernorm", shape), columns=derive.LAUNCH_COLUMNS)
    return derive.Group(record=record, launches=launches)


def variant_rows(groups: list[derive.Group], cfg: dict) -> list[dict]:
    return derive.namespace_tables(groups, namespace="ns", cache_mode="hot", descriptions=config.variant_descriptions(cfg),
                                   margin=float(cfg["verdict"]["margin"]))["variants"]


def test_variant_rows_and_outcomes(tmp_path: Path) -> None:
    """Each variant against its base, from the rounds of the capture they shared: planted 10% and 20%
    steps come out faster and slower, an unchanged kernel the same; a variant faster somewhere and
    slower nowhere is a candidate, any other is not kept."""
    cfg = config.validate(RAW)
    rows = variant_rows([
        measured(tmp_path, "4096x768", {"cuda": 10000, "cuda.full_occupancy": 9000, "cuda.plain_loads": 10000,
                                        "cuda.cached_stores": 9500, "triton": 9000}),
        measured(tmp_path, "4096x4096", {"cuda": 30000, "cuda.full_occupancy": 36000}),
    ], cfg)
    by = {(r["variant"], r["shape"]): r for r in rows}
    assert set(by) == {("cuda.full_occupancy", "4096x768"), ("cuda.plain_loads", "4096x768"),
                       ("cuda.cached_stores", "4096x768"), ("cuda.full_occupancy", "4096x4096")}  # triton is no variant
    assert by[("cuda.full_occupancy", "4096x768")]["verdict"] == stats.FASTER
    assert by[("cuda.full_occupancy", "4096x4096")]["verdict"] == stats.SLOWER
    assert by[("cuda.full_occupancy", "4096x4096")]["ratio"] == pytest.approx(1.2, rel=0.01)
    assert by[("cuda.full_occupancy", "4096x4096")]["base_us"] == pytest.approx(30.0, rel=0.01)
    assert by[("cuda.plain_loads", "4096x768")]["verdict"] == stats.SAME
    assert by[("cuda.cached_stores", "4096x768")]["verdict"] == stats.FASTER
    assert all(r["base"] == "cuda" for r in rows)
    described = RAW["operations"]["layernorm"]["variants"]["full_occupancy"]["description"]
    assert by[("cuda.full_occupancy", "4096x768")]["description"] == described
    out = {o["variant"]: o for o in variant_table.outcomes(rows)}
    assert out["cuda.full_occupancy"]["outcome"] == "not kept"  # faster at one shape, slower at another
    assert (out["cuda.full_occupancy"]["faster"], out["cuda.full_occupancy"]["slower"]) == (1, 1)
    assert out["cuda.full_occupancy"]["ratio_min"] == pytest.approx(0.9, rel=0.01)
    assert out["cuda.plain_loads"]["outcome"] == "not kept"  # the same everywhere
    assert out["cuda.cached_stores"]["outcome"] == "candidate"


def test_an_older_tables_no_difference_counts_as_cant_tell() -> None:
    (o,) = variant_table.outcomes([{"op": "layernorm", "variant": "cuda.one_pass", "base": "cuda", "shape": "4096x768",
                                    "ratio": 1.003, "verdict": "no difference"}])
    assert o["cant_tell"] == 1 and o["same"] == 0 and o["outcome"] == "not kept"


def test_report_lists_what_was_tried_and_not_kept(tmp_path: Path) -> None:
    """The field note's section on variants, from a namespace (test_report.build_namespace) whose
    variants table holds a planted slower variant and a planted faster one."""
    from test_report import build_namespace, small_config

    cfg = small_config()  # variants block512 and block128 of layernorm
    inputs = build_namespace(tmp_path, cfg)
    rows = variant_rows([measured(tmp_path, "4096x768", {"cuda": 10000, "cuda.block512": 12500, "cuda.block128": 9000})],
                        cfg)
    frame = derive.frames({"variants": rows})["variants"]
    write_csv(frame.to_dict("records"), list(frame.columns), inputs["variants"])
    report.render_reports(cfg, inputs, tmp_path / "fn.md", tmp_path / "ic.md")
    note = (tmp_path / "fn.md").read_text()
    section = note.split("## What was tried and not kept")[1].split("## Cross-check")[0]
    tried = section.split("Faster than the default")[0]
    slow, fast = (next(r for r in rows if r["variant"] == v) for v in ("cuda.block512", "cuda.block128"))
    assert (slow["verdict"], fast["verdict"]) == (stats.SLOWER, stats.FASTER)
    assert "| layernorm | cuda.block512 | " in tried and "cuda.block128" not in tried
    span = f"{report.num(slow['ratio'], 3)}–{report.num(slow['ratio'], 3)}"
    assert f"| 0 / 1 / 0 / 0 | {span} |" in tried  # faster / slower / same / can't tell
    assert "candidates to become the default" in section
    assert f"cuda.block128 ({report.num(fast['ratio'], 3)}–{report.num(fast['ratio'], 3)} of cuda)" in section
    for r in rows:
        assert f"| {report.num(r['base_us'])} | {report.num(r['variant_us'])} | {r['ratio']:.3f} [" in section
