"""Rendering the field note and the issue comment from a small set of tables."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pandas as pd
import pytest

from harness import ROOT, config
from harness.io import write_csv
from harness.measure.spans import summarise
from harness.report import render as report
from harness.tables import derive as tables

SHAPES = ["4096x768", "1024x2048"]
IMPLS = ["cuda", "triton", "torch"]


def make_tables(tmp: Path, seed: int = 7, kernel_name: str = "layernorm_row128") -> dict[str, str]:
    rnd = random.Random(seed)
    cfg = config.validate({"namespace": "test-ns", "operations": {"layernorm": {
        "default": SHAPES[0], "sweep": SHAPES, "tolerance": {"atol": 1e-4, "rtol": 1e-4}}}})
    detail, spans, checks, census = [], [], [], []
    for shape in SHAPES:
        for impl in IMPLS:
            med = rnd.uniform(5000, 20000)
            detail.append({"op": "layernorm", "shape": shape, "impl": impl,
                           "kernel": f"void {kernel_name}<{impl}>(float*)", "short_name": f"{kernel_name}_{impl}",
                           "instances": 100, "per_iteration": 1.0, "total_ns": med * 100, "mean_ns": med,
                           "median_ns": med, "min_ns": med * 0.98, "max_ns": med * 1.05, "stddev_ns": 12.0,
                           "grid": "4096x1x1", "block": "128x1x1", "registers": 32, "static_smem": 64, "dynamic_smem": 0})
            for i in range(6):
                spans.append({"op": "layernorm", "shape": shape, "impl": impl, "round": i % 3, "sample": i,
                              "span_us": rnd.uniform(10, 30)})
            checks.append({"op": "layernorm", "shape": shape, "impl": impl, "passed": True, "max_abs_err": 1e-6,
                           "max_rel_err": 2e-6, "rel_l2_err": 3e-7, "atol": 1e-4, "rtol": 1e-4,
                           "nonfinite_outputs": 0, "unwritten_outputs": 0, "elements": 10})
    census.append({"namespace": "test-ns", "op": "layernorm", "impl": "cuda", "kernel": kernel_name,
                   "specialization": "SLOTS=2", "shapes": ";".join(SHAPES), "block": 128, "registers": 30,
                   "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0, "static_smem": 64, "dynamic_smem": 0,
                   "ld_global_128": 2, "ld_global_64": 0, "ld_global_32": 0, "st_global_128": 2, "st_global_64": 0,
                   "st_global_32": 0, "barriers": 1})
    paths = {k: str(tmp / f"{k}.csv") for k in ("kernel_time", "kernel_time_detail", "span", "check", "sweep", "census", "ceilings")}
    ceilings = [{"ceiling": "copy_bandwidth", "value": rnd.uniform(3000, 4500), "unit": "GB/s", "median_ms": 1.0,
                 "min_ms": 0.9, "max_ms": 1.1, "repeats": 20, "method": "copy_ of 2 GiB"},
                {"ceiling": "fp32_matmul", "value": rnd.uniform(40, 60), "unit": "TFLOP/s", "median_ms": 20.0,
                 "min_ms": 19.0, "max_ms": 21.0, "repeats": 20, "method": "8192^3 FP32 matmul, TF32 off"}]
    ceil = write_csv(ceilings, tables.CEILING_COLUMNS, paths["ceilings"])
    det = write_csv(detail, tables.KERNEL_TIME_DETAIL_COLUMNS, paths["kernel_time_detail"])
    kt = pd.DataFrame(tables.kernel_time_summary(det, 100, "test-ns", "hot", ceil))
    write_csv(kt.to_dict("records"), tables.KERNEL_TIME_COLUMNS, paths["kernel_time"])
    summary = [dict(r, namespace="test-ns", cache_mode="hot", rounds=3) for r in summarise(spans)]
    write_csv(summary, tables.SPAN_COLUMNS, paths["span"])
    write_csv(tables.check_rows([], "test-ns") + [dict(c, namespace="test-ns") for c in checks], tables.CHECK_COLUMNS, paths["check"])
    write_csv(tables.sweep_rows(kt, "test-ns", "hot"), tables.SWEEP_COLUMNS, paths["sweep"])
    write_csv(census, list(census[0]), paths["census"])
    prov = {"git": {"commit": "abc123def4567890", "dirty": False}, "date_utc": "2026-11-29T00:00:00+00:00",
            "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-x"}], "config": cfg, "commands": ["snakemake --cores 1 report"],
            "versions": {"nsys": "2025.3.2", "torch": "2.11", "triton": "3.6", "cupy-cuda13x": "14", "python": "3.12"},
            "gpu_state_before_captures": []}
    paths["provenance"] = str(tmp / "provenance.json")
    Path(paths["provenance"]).write_text(json.dumps(prov))
    paths["cfg"] = cfg  # type: ignore[assignment]
    return paths


def render(tmp: Path, **kw) -> tuple[str, str, dict]:
    paths = make_tables(tmp, **kw)
    cfg = paths.pop("cfg")
    report.render_reports(cfg, paths, tmp / "fn.md", tmp / "ic.md", [str(tmp / "figures" / "layernorm_sweep.svg")])
    return (tmp / "fn.md").read_text(), (tmp / "ic.md").read_text(), paths


def test_every_sweep_figure_comes_from_the_tables(tmp_path: Path) -> None:
    field_note, comment, paths = render(tmp_path)
    sweep = pd.read_csv(paths["sweep"])
    for _, row in sweep.iterrows():
        for col in ("cuda_us", "triton_us", "torch_us"):
            assert report.num(row[col]) in field_note
            assert report.num(row[col]) in comment
        assert report.num(row["cuda_over_triton"], 3) in field_note
    span = pd.read_csv(paths["span"])
    default = span[span["shape"] == SHAPES[0]]
    for v in default["span_median_us"]:
        assert report.num(v) in comment
    assert "Kernel time" in field_note and "Event span" in field_note
    kt = pd.read_csv(paths["kernel_time"])
    for _, row in kt.iterrows():  # the distance from the ceilings, from the kernel-time table
        assert report.num(row["achieved_gbps"], 0) in field_note
        assert report.num(row["copy_bw_fraction"] * 100, 1) + "%" in field_note
    assert "](figures/layernorm_sweep.svg)" in field_note
    assert "What these numbers do not establish" in field_note


def test_different_tables_give_a_different_report(tmp_path: Path) -> None:
    a, _, _ = render(tmp_path / "a", seed=1)
    b, _, _ = render(tmp_path / "b", seed=2)
    assert a != b


def test_claim_direction_follows_the_ratio(tmp_path: Path) -> None:
    field_note, _, paths = render(tmp_path)
    sweep = pd.read_csv(paths["sweep"])
    if (sweep["cuda_over_triton"] < 1).all():
        assert "lower kernel time at every shape" in field_note
    elif (sweep["cuda_over_triton"] > 1).all():
        assert "higher kernel time at every shape" in field_note
    else:
        assert "neither kernel had the lower kernel time" in field_note


@pytest.mark.parametrize("hostile", ["a|b", "x`rm -rf`", "<script>alert(1)</script>", "two\nlines"])
def test_untrusted_names_are_escaped(tmp_path: Path, hostile: str) -> None:
    field_note, _, _ = render(tmp_path, kernel_name=hostile)
    rows = [line for line in field_note.splitlines() if line.startswith("| 4096x768 | cuda |") and "4096x1x1" in line]
    assert len(rows) == 1  # the kernel row stayed one line
    cells = rows[0].replace("\\|", "").split("|")
    assert len(cells) == 12  # 10 columns: no injected cell separator
    assert "<script>" not in field_note
    assert not re.search(r"(?<!\\)`rm", field_note)  # a backtick from a name is always escaped


def test_ratio_interval_and_verdict() -> None:
    def row(kt: float, lo: float, med: float, hi: float) -> dict:
        return {"kernel_time_us": kt, "main_min_us": lo, "main_median_us": med, "main_max_us": hi}

    lo, hi, verdict = tables.ratio_interval(row(5.0, 4.9, 5.0, 5.2), row(10.0, 9.8, 10.0, 10.4))
    assert verdict == "faster" and lo == pytest.approx(4.9 / 10.4) and hi == pytest.approx(5.2 / 9.8)
    assert tables.ratio_interval(row(10.0, 9.8, 10.0, 10.4), row(5.0, 4.9, 5.0, 5.2))[2] == "slower"
    # 2% apart with a 5% spread: no difference
    assert tables.ratio_interval(row(5.1, 4.9, 5.1, 5.4), row(5.0, 4.8, 5.0, 5.3))[2] == "no difference"
    assert tables.ratio_interval(None, row(5.0, 4.9, 5.0, 5.2)) == (None, None, None)


def test_sweep_reports_the_verdict(tmp_path: Path) -> None:
    field_note, _, paths = render(tmp_path)
    sweep = pd.read_csv(paths["sweep"])
    for _, r in sweep.iterrows():
        assert r["cuda_vs_triton"] in ("faster", "slower", "no difference")
        assert f"{report.num(r['cuda_over_triton_lo'], 3)}–{report.num(r['cuda_over_triton_hi'], 3)} | {r['cuda_vs_triton']}" in field_note


def _counters_table(tmp: Path, state: str) -> str:
    from harness.tables import counters

    metrics = config.load(config.ROOT / "config.yaml")["counters"]["metrics"]
    fixtures = Path(__file__).parent / "fixtures" / "ncu"
    rows = []
    for impl in IMPLS:
        if state == "unavailable":
            rows += counters.unavailable_rows("ERR_NVGPUCTRPERM - no permission", metrics, "test-ns", "layernorm", SHAPES[0], impl)
        else:
            kernels = counters.read_raw_csv(fixtures / f"layernorm-4096x768-{impl}.raw.csv")
            rows += counters.counter_rows(kernels, metrics, "test-ns", "layernorm", SHAPES[0], impl)
    path = str(tmp / "counters.csv")
    write_csv(rows, counters.columns(metrics), path)
    return path


def render_with_counters(tmp: Path, state: str, enabled: bool = True) -> tuple[str, dict]:
    paths = make_tables(tmp)
    cfg = paths.pop("cfg")
    cfg["counters"].update(enabled=enabled, iterations=2)  # the fixtures profiled two calls
    paths["counters"] = _counters_table(tmp, state)
    report.render_reports(cfg, paths, tmp / "fn.md", tmp / "ic.md", [str(tmp / "figures" / "layernorm_sweep.svg")])
    return (tmp / "fn.md").read_text(), paths


def test_counters_section_comes_from_the_counters_table(tmp_path: Path) -> None:
    from harness.tables import counters

    note, paths = render_with_counters(tmp_path, "ok")
    assert "not** the kernel times above" in note
    frame = pd.read_csv(paths["counters"])
    for impl in IMPLS:
        s = counters.summarise(frame[frame["impl"] == impl].to_dict("records"), calls=2)
        row = next(line for line in note.splitlines() if line.startswith(f"| {impl} | 1 | "))
        assert f"| {report.num(s['duration_ns'] / 1e3)} |" in row
        assert f"| {report.num(s['achieved_occupancy_pct'], 1)}% |" in row
        assert f"| {report.num(s['l2_hit_rate_pct'], 1)}% |" in row
    cuda = counters.summarise(frame[frame["impl"] == "cuda"].to_dict("records"), calls=2)
    triton = counters.summarise(frame[frame["impl"] == "triton"].to_dict("records"), calls=2)
    assert "Ours (cuda) against triton: they differ in" in note
    for r in counters.compare(cuda, triton):
        if r["differs"]:
            assert f"{r['label']} ({r['ours_text']} vs {r['control_text']}" in note
    # the census row serving the default shape carries the measured columns
    census_line = next(line for line in note.splitlines() if line.startswith("| cuda | layernorm_row128"))
    assert census_line.endswith(f"| {report.num(cuda['achieved_occupancy_pct'], 1)}% | "
                                f"{report.num(cuda['dram_bytes_per_s'] / 1e9, 0)} | {report.num(cuda['l2_hit_rate_pct'], 1)}% |")


def test_counters_unavailable_and_off_are_said(tmp_path: Path) -> None:
    note, _ = render_with_counters(tmp_path / "a", "unavailable")
    assert "Counters unavailable on this host: ERR_NVGPUCTRPERM - no permission." in note
    note, _ = render_with_counters(tmp_path / "b", "ok", enabled=False)
    assert "Counters are off in this run's config" in note


def test_cross_check_flags_a_disagreement_by_name(tmp_path: Path) -> None:
    from harness.tables import cross_check as graph_replay

    paths = make_tables(tmp_path)
    cfg = paths.pop("cfg")
    kt = pd.read_csv(paths["kernel_time"]).to_dict("records")
    rows = []
    for i, k in enumerate(kt):
        g = k["kernel_time_us"] * (1.5 if i == 0 else 1.02)
        graph = {"status": "ok", "graph_median_us": g, "graph_min_us": g * 0.99, "graph_max_us": g * 1.01}
        if i == 1:
            graph = {"status": "not capturable", "reason": "RuntimeError: operation not permitted when stream is capturing"}
        rows.append(graph_replay.compare(k, graph, 0.1, 1.5, "test-ns", "hot"))
    paths["cross_check"] = str(tmp_path / "cross_check.csv")
    write_csv(rows, graph_replay.CROSS_CHECK_COLUMNS, paths["cross_check"])
    report.render_reports(cfg, paths, tmp_path / "fn.md", tmp_path / "ic.md", [str(tmp_path / "figures" / "layernorm_sweep.svg")])
    note = (tmp_path / "fn.md").read_text()
    bad = rows[0]
    assert f"**1 of {len(rows) - 1} disagree**: {bad['op']} {bad['shape']} {bad['impl']} ({report.num(bad['kernel_time_us'])} µs nsys" in note
    assert f"Not compared: {rows[1]['op']} {rows[1]['shape']} {rows[1]['impl']} (not capturable: RuntimeError" in note
    assert note.count("| yes |") >= len(rows) - 2


def test_cross_check_tolerance() -> None:
    from harness.tables import cross_check as graph_replay

    k = {"op": "o", "shape": "1x1", "impl": "cuda", "kernel_time_us": 10.0, "launches_per_iteration": 2}
    ok = graph_replay.compare(k, {"status": "ok", "graph_median_us": 13.9, "graph_min_us": 13, "graph_max_us": 14}, 0.1, 1.5, "n", "hot")
    assert ok["allowed_us"] == pytest.approx(4.0) and ok["agree"] is True
    bad = graph_replay.compare(k, {"status": "ok", "graph_median_us": 14.1, "graph_min_us": 14, "graph_max_us": 15}, 0.1, 1.5, "n", "hot")
    assert bad["agree"] is False and bad["difference_us"] == pytest.approx(4.1)
    none = graph_replay.compare(k, None, 0.1, 1.5, "n", "hot")
    assert none["agree"] is None and none["status"] == "missing"


def test_no_comparison_spans_two_gpus(tmp_path: Path) -> None:
    paths = make_tables(tmp_path)
    cfg = paths.pop("cfg")
    kt = pd.read_csv(paths["kernel_time"])
    # the default shape's cuda was captured on another GPU than its triton and torch
    kt["gpu_uuid"] = "GPU-a"
    kt.loc[(kt["shape"] == SHAPES[0]) & (kt["impl"] == "cuda"), "gpu_uuid"] = "GPU-b"
    write_csv(kt.to_dict("records"), tables.KERNEL_TIME_COLUMNS, paths["kernel_time"])
    sweep = tables.sweep_rows(kt, "test-ns", "hot")
    by = {r["shape"]: r for r in sweep}
    assert by[SHAPES[0]]["cuda_over_triton"] is None and by[SHAPES[0]]["cuda_over_torch"] is None
    assert by[SHAPES[0]]["cuda_vs_triton"] == "different GPUs" and by[SHAPES[0]]["gpus"] == 2
    assert by[SHAPES[1]]["cuda_over_triton"] is not None and by[SHAPES[1]]["gpus"] == 1
    write_csv(sweep, tables.SWEEP_COLUMNS, paths["sweep"])
    report.render_reports(cfg, paths, tmp_path / "fn.md", tmp_path / "ic.md", [str(tmp_path / "figures" / "layernorm_sweep.svg")])
    note = (tmp_path / "fn.md").read_text()
    assert f"**Groups measured on more than one GPU** (their ratios are left out of every table; `python -m harness regroup test-ns`, then the report target, re-measures them): layernorm {SHAPES[0]} (GPU-a, GPU-b)." in note
    assert "2 GPUs measured this namespace (GPU-a, GPU-b)" in note
    assert ("No claim: at the default shape our kernels were captured on different GPUs (GPU-a, GPU-b), "
            "and kernel times are compared only between captures of one GPU.") in note
    assert "lacks a cuda or triton measurement" not in note
    comment = (tmp_path / "ic.md").read_text()
    assert f"| layernorm (captured on more than one GPU: not compared; rerun the group) | {SHAPES[0]} | n/a | n/a | n/a | n/a |" in comment


def test_graph_replays_are_capped_by_time_but_never_below_three() -> None:
    from harness.measure import graph_replay

    assert graph_replay.replays_within(20, 0.001, 1.0) == 20
    assert graph_replay.replays_within(20, 0.42, 1.0) == 3  # matmul 4096^3: 100 calls of 4.2 ms
    assert graph_replay.replays_within(20, 0.2, 1.0) == 5
    assert graph_replay.replays_within(2, 5.0, 1.0) == 2  # never more than asked
    assert graph_replay.replays_within(20, 0.0, 1.0) == 20
    assert graph_replay.replays_within(20, 0.5, float("inf")) == 20  # no cap (the default)


def render_retained(ns: str, tmp: Path) -> tuple[str, str]:
    """Both reports of a committed H200 namespace, re-rendered from its tables with its own config."""
    art = ROOT / "artifacts" / ns
    cfg = json.loads((art / "provenance.json").read_text())["config"]
    report.render_reports(cfg, report.table_inputs(art), tmp / "fn.md", tmp / "ic.md")
    return (tmp / "fn.md").read_text(), (tmp / "ic.md").read_text()


def test_a_loaded_run_is_flagged_at_its_claim_and_in_the_issue_comment(tmp_path: Path) -> None:
    # h200-loaded-1: scripts/gpu_load.py ran beside the captures on the H200 (NVML saw it)
    note, comment = render_retained("h200-loaded-1", tmp_path)
    claim = note.split("### Claim", 1)[1].split("### Shape sweep", 1)[0]
    assert "**Not a quiet GPU.** 3 of this operation's 3 captures were disturbed" in claim
    assert "another compute process ran beside the captured one" in claim
    assert comment.count("**Not a quiet GPU:** layernorm (3 of 3 captures disturbed)") == 1


def test_a_quiet_run_is_not_flagged(tmp_path: Path) -> None:
    # h200-ops-1: the full configuration on a quiet H200 (every control inside its band)
    note, comment = render_retained("h200-ops-1", tmp_path)
    assert "Not a quiet GPU" not in note + comment
    assert note.count("### Claim") == 5


@pytest.mark.parametrize(("exclusive", "commands", "expected"), [
    (None, ["2026-11-29T12:00:00+00:00 snakemake report --cores 8 --resources gpu=3 --keep-going"], {"cores": 8, "gpu_jobs": 3}),
    (False, ["2026-11-29T12:00:00+00:00 snakemake report --cores 4"], {"cores": 4, "gpu_jobs": 1}),
    (None, ["2026-11-29T12:00:00+00:00 snakemake --cores 1 report"], None),
    (True, ["2026-11-29T12:00:00+00:00 snakemake report --cores 8 --resources gpu=3"], None),
])
def test_spans_that_shared_the_cpu_are_said(exclusive: bool | None, commands: list[str], expected: dict | None) -> None:
    span = {"samples": 300} if exclusive is None else {"samples": 300, "exclusive": exclusive}  # None: a config from before the key
    assert report.spans_shared_cpu({"span": span}, {"commands": commands}) == expected


def test_the_full_run_says_its_spans_shared_the_cpu(tmp_path: Path) -> None:
    # h200-ops-1 ran with --cores 8 --resources gpu=3 before spans ran alone: its spans came out up
    # to 1.56x those of h200-ops-solo-1
    note, comment = render_retained("h200-ops-1", tmp_path)
    assert note.count("**These spans shared the CPU with other jobs** (the run allowed 8 jobs at once, 3 of them GPU jobs") == 5
    assert "taken while other jobs shared the CPU" in comment


def test_gpu_label_names_the_model_once() -> None:
    from harness.report.render import gpu_label

    assert gpu_label([{"name": "NVIDIA H200", "uuid": "a"}]) == "NVIDIA H200"
    assert gpu_label([{"name": "NVIDIA H200", "uuid": "a"}, {"name": "NVIDIA H200", "uuid": "b"}]) == "NVIDIA H200 (2 GPUs)"
    assert gpu_label([]) == "unknown GPU"
