"""The field note and the issue comment, rendered from synthetic tables of the current format (made
by harness.tables.derive from fake measurement groups, with controls and drift from
harness.tables.trust) and from a committed namespace of the older format.

`build_namespace` is shared by the other report tests (test_summary, test_report_html)."""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from harness import ROOT, config
from harness.io import write_csv
from harness.report import render as report
from harness.report import safe, trust_context
from harness.tables import counters as ctr
from harness.tables import derive, stats, trust
from harness.tables import variants as variants_table

NS = "test-ns"
SHAPES = ["4096x768", "8192x768", "1024x2048", "4096x4096"]
CEILING_GBPS = 4000.0
REASON = "ERR_NVGPUCTRPERM: the user does not have permission to access NVIDIA GPU Performance Counters."

# (ours over the control, noise per round): faster, slower, same, can't tell, repeated over the shapes
PATTERN = [(0.90, 0.004), (1.10, 0.004), (1.0, 0.0008), (1.0, 0.05)]


def small_config(**extra: Any) -> dict[str, Any]:
    """One operation (layernorm) at four shapes, two variants enabled."""
    raw = config._read(ROOT / "config.yaml")
    block = raw["operations"]["layernorm"]
    cfg = {"namespace": NS, "operations": {"layernorm": {**block, "default": SHAPES[0], "sweep": SHAPES}},
           "variants": ["layernorm.block512", "layernorm.block128"], "counters": {"enabled": True}}
    cfg.update(extra)
    return config.validate(cfg)


def full_config() -> dict[str, Any]:
    """config.yaml's operations, shapes and variants, under the test namespace."""
    cfg = config.load(ROOT / "config.yaml")
    cfg["namespace"] = NS
    return cfg


def _group(op: str, shape: str, impls: list[str], index: int, rnd: random.Random, *, kernel: str, rounds: int,
           failed: Mapping[tuple[str, str, str], str], disturbed: Collection[tuple[str, str]], exclusive: bool,
           flags_text: str, idle: bool = False) -> derive.Group:
    factor, noise = PATTERN[index % len(PATTERN)]
    base = 5.0 + 3.0 * index + rnd.uniform(0, 2)
    means = {}
    for impl in impls:
        if impl == "triton":
            means[impl] = base
        elif impl == "cuda":
            means[impl] = base * factor
        elif impl == "torch":
            means[impl] = base * 1.8
        elif impl == "external":
            means[impl] = base * 4.0
        else:  # a variant of cuda
            means[impl] = base * factor * rnd.choice([0.95, 1.0, 1.15])
    passed = [i for i in impls if (op, shape, i) not in failed]
    calls = {i: 2 for i in passed}
    launches, spans, graph = [], [], []
    for r in range(rounds):
        drift = 1 + rnd.gauss(0, noise)  # what moved every implementation of the round alike
        for impl in passed:
            for _ in range(calls[impl]):
                d = means[impl] * drift * (1 + rnd.gauss(0, noise)) * 1000.0
                launches.append({"op": op, "shape": shape, "impl": impl, "round": r,
                                 "kernel": f"void {kernel}<{impl}>(const float *, float *)", "short_name": f"{kernel}",
                                 "duration_ns": int(d), "grid": "4096x1x1", "block": "128x1x1", "registers": 32,
                                 "static_smem": 0, "dynamic_smem": 0})
    for impl in passed:
        for i in range(6):
            spans.append({"op": op, "shape": shape, "impl": impl, "round": i % 3, "sample": i,
                          "span_us": means[impl] + 20 + rnd.uniform(0, 5)})
        graph.append({"op": op, "shape": shape, "impl": impl, "status": "ok", "reason": "", "calls_per_replay": 20,
                      "replays": 20, "graph_median_us": means[impl] * 1.01, "graph_min_us": means[impl],
                      "graph_max_us": means[impl] * 1.02,
                      # idle starts: the kernel and a fixed 2.5 µs of events and start, per call
                      **({"idle_status": "ok", "idle_median_us": means[impl] + 2.5, "idle_slots": 20} if idle else {})})
    checks = {i: {"op": op, "shape": shape, "impl": i, "passed": (op, shape, i) not in failed, "max_abs_err": 1e-6,
                  "max_rel_err": 2e-6, "rel_l2_err": 3e-7, "atol": 1e-4, "rtol": 1e-4, "nonfinite_outputs": 0,
                  "unwritten_outputs": 0, "elements": 10, "error": failed.get((op, shape, i), "")} for i in impls}
    reading = {"utilization_pct": 0, "power_w": 120.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 3201,
               "temperature_c": 40, "compute_processes": 0}
    flags = [flags_text] if (op, shape) in disturbed else []
    record = {"op": op, "shape": shape, "impls": impls, "rounds": rounds, "calls_per_round": calls, "checks": checks,
              "passed": passed, "launch_paths": {i: ("jit" if i == "triton" else "prepared" if i.startswith("cuda") else "direct")
                                                 for i in passed},
              "gpu_uuid": "GPU-aaaa", "span": {"exclusive": exclusive, "threads": 16},
              "gpu": {"before": reading, "waited_s": 0.0,
                      "during": {"samples": 5, "throttle_reasons": 0, "max_compute_processes": 1 if flags else 0,
                                 "flags": flags}, "after": reading}}
    return derive.Group(record=record, launches=pd.DataFrame(launches, columns=derive.LAUNCH_COLUMNS),
                        spans=pd.DataFrame(spans, columns=derive.SPAN_SAMPLE_COLUMNS),
                        graph=pd.DataFrame(graph, columns=derive.GRAPH_COLUMNS))


def build_namespace(root: Path, cfg: Mapping[str, Any], *, seed: int = 7, kernel: str = "layernorm_fwd_vec4",
                    rounds: int = 12, failed: Mapping[tuple[str, str, str], str] | None = None,
                    disturbed: Collection[tuple[str, str]] = (), above: Collection[tuple[str, str]] = (),
                    split: Collection[tuple[str, str]] = (), exclusive: bool = True, counters: str = "unavailable",
                    flags_text: str = "another compute process ran beside the captured one",
                    reason: str = REASON, specialization: str = "rows128 vec4",
                    code_of: Mapping[str, str] | None = None) -> dict[str, str]:
    """A namespace folder `root/artifacts/NS` with every table a report reads, derived as the
    pipeline derives them, and its provenance; returns the render's inputs (render.table_inputs).

    `failed` (op, shape, impl) -> error: checks that failed; `disturbed` (op, shape): groups NVML
    flagged; `above` (op, shape): the control comes back above the band of the earlier namespace;
    `split` (op, shape): ours recorded on another GPU than the control; `exclusive`: what the
    measuring step recorded of the spans; `counters`: 'unavailable' (with `reason`) or 'ok' (the
    ncu fixtures, layernorm at 4096x768 only); `code_of` impl -> the impl whose code (SASS) it
    compiles to: with it, the census has sass_sha256 (else, as before the column, none)."""
    rnd = random.Random(seed)
    failed = dict(failed or {})
    ns_dir = root / "artifacts" / NS
    tdir = ns_dir / "tables"
    tdir.mkdir(parents=True, exist_ok=True)
    groups = []
    for op in cfg["operations"]:
        for index, shape in enumerate(config.shapes(cfg, op)):
            groups.append(_group(op, shape, config.implementations(cfg, op), index, rnd, kernel=kernel, rounds=rounds,
                                 failed=failed, disturbed=disturbed, exclusive=exclusive, flags_text=flags_text,
                                 idle=bool(cfg["cross_check"].get("idle_starts"))))
    moved = sorted({int(derive.ops.get(op).bytes_moved(s)) for op in cfg["operations"] for s in config.shapes(cfg, op)})
    ceilings = pd.DataFrame([{"ceiling": "copy_bandwidth", "value": CEILING_GBPS, "unit": "GB/s", "median_ms": 1.0,
                              "min_ms": 0.9, "max_ms": 1.1, "repeats": 20, "method": "copy", "bytes": 2 ** 31},
                             {"ceiling": "fp32_matmul", "value": 50.0, "unit": "TFLOP/s", "median_ms": 20.0,
                              "min_ms": 19.0, "max_ms": 21.0, "repeats": 20, "method": "matmul", "bytes": None}]
                            + [{"ceiling": f"copy_bandwidth@{b}", "value": 3000.0 + b % 997, "unit": "GB/s", "median_ms": 1.0,
                                "min_ms": 1.0, "max_ms": 1.0, "repeats": 5, "method": "copy", "bytes": b} for b in moved],
                            columns=derive.CEILING_COLUMNS)
    rows = derive.namespace_tables(groups, namespace=NS, cache_mode="hot", descriptions=config.variant_descriptions(cfg),
                                   ceilings=ceilings, cross_check={"rtol": 0.05, "atol_us_per_kernel": 0.5},
                                   margin=float(cfg["verdict"]["margin"]))
    frames = derive.frames(rows)
    kt = frames["kernel_time"]
    for op, shape in split:
        kt.loc[(kt["op"] == op) & (kt["shape"] == shape) & (kt["impl"] == "cuda"), "gpu_uuid"] = "GPU-bbbb"
    census = []
    for op in cfg["operations"]:
        for impl in config.implementations(cfg, op):
            if impl == "torch":
                continue
            census.append({"namespace": NS, "op": op, "impl": impl, "kernel": f"{kernel}<{impl}>", "specialization": specialization,
                           "shapes": ";".join(config.shapes(cfg, op)), "arch": "sm_90", "block": 128, "registers": 31,
                           "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0, "static_smem": 48, "dynamic_smem": 0,
                           "ld_global_32": 0, "ld_global_64": 0, "ld_global_128": 2, "st_global_32": 0, "st_global_64": 0,
                           "st_global_128": 2, "barriers": 1, "source_sha256": f"{abs(hash((op, impl))) % 10**12:064d}",
                           "compiler": "NVRTC 13.0", "options": "-std=c++17 -arch=sm_90"})
            if code_of is not None:
                census[-1]["sass_sha256"] = hashlib.sha256(f"{op}/{code_of.get(impl, impl)}".encode()).hexdigest()
    census_df = pd.DataFrame(census)
    # an earlier namespace with the same kernels: the control's band, ours' own range, and the drift bound
    earlier_kt = kt.copy()
    for op, shape in above:
        sel = (earlier_kt["op"] == op) & (earlier_kt["shape"] == shape)
        earlier_kt.loc[sel, "kernel_time_us"] = earlier_kt.loc[sel, "kernel_time_us"] * 0.6
    earlier_kt["kernel_time_us"] = earlier_kt["kernel_time_us"] * 1.01
    quiet = frames["gpu_state"].copy()
    quiet["disturbed"], quiet["flags"] = False, ""
    earlier = trust.Retained("earlier-ns", earlier_kt, census=census_df, gpu="NVIDIA H200", gpu_state=quiet,
                             date="2026-11-01T00:00:00+00:00")
    current = trust.Retained(NS, kt, census=census_df, gpu="NVIDIA H200", gpu_state=frames["gpu_state"],
                             date="2026-11-29T00:00:00+00:00")
    bands = trust.control_bands([earlier], "triton", 0.05, current_census=census_df, gpu="NVIDIA H200", cache_mode="hot")
    ours = trust.control_bands([earlier], "cuda", 0.05, current_census=census_df, gpu="NVIDIA H200", cache_mode="hot")
    controls = trust.classify_controls(kt, bands, "triton", gpu_state=frames["gpu_state"], ours="cuda",
                                       ours_bands=ours, margin=0.05)
    drift = trust.drift(current, earlier, control="triton", controls=controls)
    metrics = cfg["counters"]["metrics"]
    crows: list[dict[str, Any]] = []
    for op in cfg["operations"]:
        default = cfg["operations"][op]["default"]
        for impl in config.implementations(cfg, op):
            if counters == "ok" and op == "layernorm" and impl in ("cuda", "triton", "torch"):
                kernels = ctr.read_raw_csv(ROOT / "tests" / "fixtures" / "ncu" / f"layernorm-4096x768-{impl}.raw.csv")
                crows += ctr.counter_rows(kernels, metrics, NS, op, default, impl)
            else:
                crows += ctr.unavailable_rows(reason, metrics, NS, op, default, impl)
    out = {name: frames[name] for name in derive.TABLES}
    out.update(census=census_df, ceilings=ceilings, controls=controls, drift=drift,
               counters=pd.DataFrame(crows, columns=ctr.columns(metrics)))
    for name, frame in out.items():
        write_csv(frame.to_dict("records"), list(frame.columns), tdir / f"{name}.csv")
    prov = {"namespace": NS, "date_utc": "2026-11-29T12:00:00+00:00", "host": "h200-host",
            "git": {"commit": "abc123def4567890abc123def4567890abc123de", "dirty": False, "source": "git"},
            "config_sha256": "f" * 64, "config": cfg, "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-aaaa"}],
            "versions": {"nsys": "2025.3.2", "torch": "2.11.0", "triton": "3.6.0", "python": "3.12.3"},
            "gpu_state_before_captures": [],
            "commands": [{"command": "snakemake report --cores 16", "start": "2026-11-29T11:00:00+00:00", "jobs": 30,
                          "end": "2026-11-29T11:50:00+00:00", "status": "success", "seconds": 3000.0}]}
    (ns_dir / "provenance.json").write_text(json.dumps(prov, indent=1))
    return report.table_inputs(ns_dir)


def render(root: Path, cfg: Mapping[str, Any] | None = None, **kw: Any) -> tuple[str, str, dict[str, str]]:
    """Build a namespace under `root`, render both reports (and the figures) under root/report."""
    cfg = cfg or small_config()
    inputs = build_namespace(root, cfg, **kw)
    out = root / "report" / NS
    report.render_reports(cfg, inputs, out / "field_note.md", out / "issue_comment.md",
                          [str(out / "figures" / f"{op}_sweep.svg") for op in cfg["operations"]],
                          overview=out / "figures" / "overview.svg")
    return (out / "field_note.md").read_text(), (out / "issue_comment.md").read_text(), inputs


def tables_of(inputs: Mapping[str, str]) -> dict[str, pd.DataFrame]:
    return report.load_tables(inputs)


def first_screen(note: str) -> list[str]:
    lines = note.splitlines()
    return lines[: next(i for i, line in enumerate(lines) if line.startswith("<details>"))]


# ------------------------------------------------------------------------------ the first screen


def test_the_first_screen_holds_the_claims_counts_flags_and_contents(tmp_path: Path) -> None:
    note, _, inputs = render(tmp_path, failed={("layernorm", "1024x2048", "cuda.block128"): "planted mismatch"})
    screen = first_screen(note)
    assert len(screen) <= 60
    text = "\n".join(screen)
    assert "[docs/reading-a-report.md](../../docs/reading-a-report.md)" in screen[2]
    sweep = tables_of(inputs)["sweep"].set_index("shape")
    d = sweep.loc[SHAPES[0]]
    assert d["cuda_vs_triton"] == "faster"  # the pattern's first shape
    claim = (f"- **layernorm {SHAPES[0]}**: ours {report.num(d['cuda_us'])} µs against the control's "
             f"{report.num(d['triton_us'])} µs, cuda/triton {d['cuda_over_triton']:.3f} "
             f"[{d['cuda_over_triton_lo']:.3f}, {d['cuda_over_triton_hi']:.3f}], **faster**.")
    assert claim in screen
    assert "95% bootstrap interval over interleaved rounds (12 rounds)" in text and "1 ± 1%" in text
    # counts: one shape of each verdict
    assert "| layernorm | 4 | 1 | 1 | 1 | 1 | 0 | 0 |" in screen
    assert "| all | 4 | 1 | 1 | 1 | 1 | 0 | 0 |" in screen
    # every flag of the trust module, one line each
    expected = trust.flags(*(tables_of(inputs)[t] for t in ("controls", "drift", "counters", "check", "kernel_time",
                                                             "gpu_state")))
    assert any(f.startswith("Check failed: layernorm 1024x2048 cuda.block128 (planted mismatch)") for f in expected)
    for flag in expected:
        assert f"- {safe.md_text(flag)}" in screen
    # contents link every section, and every link has its heading
    contents = next(line for line in screen if line.startswith("Contents: "))
    for title in ["layernorm", "Controls and drift", "What was tried and not kept", "Cross-check against graph replay",
                  "GPU state", "Method and provenance", "What these numbers do not establish"]:
        slug = report.anchor(title)
        assert f"[{title}](#{slug})" in contents
        assert f"## {title}" in note.splitlines()


def test_every_figure_comes_from_the_tables(tmp_path: Path) -> None:
    note, comment, inputs = render(tmp_path)
    t = tables_of(inputs)
    for _, r in t["sweep"].iterrows():
        ratio = f"{r['cuda_over_triton']:.3f} [{r['cuda_over_triton_lo']:.3f}, {r['cuda_over_triton_hi']:.3f}]"
        assert ratio in note and ratio in comment
        for col in ("cuda_us", "triton_us", "torch_us"):
            assert report.num(r[col]) in note and report.num(r[col]) in comment
        row = next(line for line in comment.splitlines() if line.startswith(f"| layernorm | {r['shape']}"))
        assert row.endswith(f"| {ratio} | {r['cuda_vs_triton']} |")
    for _, r in t["kernel_time"].iterrows():
        line = next(x for x in note.splitlines() if x.startswith(f"| {r['shape']} | {r['impl']} | ")
                    and "% |" in x and "GB" not in x)
        assert f"| {report.num(r['kernel_time_us'])} [{r['kernel_time_lo_us']:,.2f}, {r['kernel_time_hi_us']:,.2f}] |" in line
        assert f"| {report.num(r['achieved_gbps'], 0)} | {r['copy_bw_fraction'] * 100:.1f}% | " \
               f"{r['same_size_copy_fraction'] * 100:.1f}% |" in line
        assert line.endswith(f"| {r['launch_path']} |")
    for _, r in t["span"].iterrows():
        assert (f"| {r['shape']} | {r['impl']} | {report.num(r['span_median_us'])} | {report.num(r['span_mean_us'])} |"
                in note)
    assert "](figures/layernorm_sweep.svg)" in note and "](figures/overview.svg)" in note


def test_sections_fold_as_github_renders_them(tmp_path: Path) -> None:
    note, _, _ = render(tmp_path)
    lines = note.splitlines()
    opens = [i for i, line in enumerate(lines) if line.startswith("<details><summary>")]
    closes = [i for i, line in enumerate(lines) if line == "</details>"]
    assert len(opens) == len(closes) == 1 + 6  # one operation, six sections
    for i in opens:
        assert lines[i].endswith("</summary>") and lines[i + 1] == ""
        assert re.fullmatch(r"<details><summary>[^<>]+</summary>", lines[i])
    for i in closes:
        assert lines[i - 1] == ""
    assert all(o < c for o, c in zip(opens, closes, strict=True))
    summary = lines[opens[0]]
    assert summary == ("<details><summary>layernorm: 4 shapes: 1 faster, 1 slower, 1 same, 1 can't tell; "
                       "every check passed</summary>")
    # every table the field note had is still there, only folded
    for heading in ["### Shape sweep", "### Distance from the ceilings", "### Kernel time per kernel", "### Event span per call",
                    "### Checks against the float64 reference", "### Census of the kernels", "### Hardware counters at",
                    "## Controls and drift", "## What was tried and not kept", "## Cross-check against graph replay",
                    "## GPU state", "## Method and provenance"]:
        assert any(line.startswith(heading) for line in lines[opens[0]:]), heading


def test_same_tables_same_report_different_tables_different_report(tmp_path: Path) -> None:
    a = render(tmp_path / "a", seed=1)
    b = render(tmp_path / "b", seed=1)
    c = render(tmp_path / "c", seed=2)
    assert a[:2] == b[:2]
    assert a[0] != c[0]


# ------------------------------------------------------------------------------ trust in the claims


def test_a_control_above_its_band_quotes_the_band_not_a_ratio(tmp_path: Path) -> None:
    note, comment, inputs = render(tmp_path, above=[("layernorm", SHAPES[0])])
    controls = tables_of(inputs)["controls"].set_index("shape")
    row = controls.loc[SHAPES[0]]
    assert row["status"] == "above" and not row["rankable"]
    claim = next(line for line in first_screen(note) if line.startswith(f"- **layernorm {SHAPES[0]}**"))
    assert claim == f"- **layernorm {SHAPES[0]}**: {safe.md_text(row['claim_note'].replace('->', '→'))}"
    assert "against the control's band of" in claim and "cuda/triton" not in claim
    flag = next(f for f in trust.flags(controls.reset_index()) if f.startswith("Control above its band"))
    assert f"- {safe.md_text(flag)}" in first_screen(note)
    assert comment.index(safe.md_text(flag)) < comment.index("| operation | shape |")
    assert "| layernorm | 4 | 0 | 1 | 1 | 1 | 1 | 0 |" in note  # the shape is not ranked, not faster
    row_line = next(line for line in comment.splitlines() if line.startswith(f"| layernorm | {SHAPES[0]}"))
    assert row_line.endswith("| not ranked (the control came back above its band, a suspect capture) |")
    assert "probably ran under load" not in note + comment
    assert safe.md_text(row["note"]) in note  # the row's note under the controls table


def test_a_flag_with_its_own_parentheses_nests_as_brackets_wherever_a_report_puts_it_in_parentheses(tmp_path: Path) -> None:
    """NVML's flag for the power cap holds parentheses of its own ('the GPU throttled during the
    capture (software power cap)'); the claim line, the not-ranked cells of the sweep table and the
    issue comment, and the control's note under the controls table put it inside parentheses, where
    it read '(... (software power cap))'. Each nests it as '[software power cap]' (as markdown
    writes brackets: entities, so no link can open)."""
    flag = "the GPU throttled during the capture (software power cap)"
    note, comment, inputs = render(tmp_path, disturbed=[("layernorm", SHAPES[1])], flags_text=flag)
    row = tables_of(inputs)["controls"].set_index("shape").loc[SHAPES[1]]
    assert not row["rankable"] and row["nvml_flags"] == flag
    flagged = safe.md_text("the GPU throttled during the capture [software power cap]")
    claim = next(line for line in note.splitlines() if line.startswith(f"- {SHAPES[1]}: Ours"))
    controls_note = next(line for line in note.splitlines() if line.startswith(f"- triton's layernorm {SHAPES[1]} came back"))
    cells = [line for text in (note, comment) for line in text.splitlines()
             if line.startswith((f"| {SHAPES[1]} |", f"| layernorm | {SHAPES[1]} |")) and "not ranked" in line]
    assert len(cells) == 2 and all(f"| not ranked (NVML flagged the captures there: {flagged}) |" in line for line in cells)
    assert claim.endswith(f"captures at this shape ({flagged}).") and f"captures at this shape ({flagged}): not a clean" in controls_note
    assert "power cap))" not in note + comment


def test_flags_lead_the_issue_comment(tmp_path: Path) -> None:
    failed = {("layernorm", SHAPES[2], "cuda"): "check failed for layernorm 1024x2048 cuda: planted"}
    note, comment, inputs = render(tmp_path, failed=failed, disturbed=[("layernorm", SHAPES[1])],
                                   split=[("layernorm", SHAPES[3])])
    t = tables_of(inputs)
    flags = trust.flags(t["controls"], t["drift"], t["counters"], t["check"], t["kernel_time"], t["gpu_state"])
    starts = {f.split(":")[0] for f in flags}
    assert {"Counters unavailable", "Measured on two GPUs", "Check failed", "Disturbed capture"} <= starts
    lines = comment.splitlines()
    table_at = next(i for i, line in enumerate(lines) if line.startswith("| operation | shape |"))
    for flag in flags:
        at = lines.index(f"- {safe.md_text(flag)}")
        assert at < table_at
        assert not flag.endswith("..")
    assert f"**Flags** ({len(flags)}):" in comment
    assert "report/test-ns/field\\_note.md" not in comment  # paths are code spans, not escaped text
    assert ("Field note: `report/test-ns/field_note.md` (the page: `report/test-ns/index.html`); evidence bundle: "
            "`bundles/test-ns.evidence.tar.gz`, made by `python -m harness bundle test-ns`") in comment
    # the failed shape has no ratio, and says why
    row = next(line for line in lines if line.startswith(f"| layernorm | {SHAPES[2]}"))
    assert row.endswith("| n/a | no verdict |")
    assert "- layernorm 1024x2048: No ratio: cuda's check failed at this shape" in comment
    assert "**Not every implementation passed its check; see the checks below.**" in note


def test_counters_unavailable_is_one_sentence_and_read_counters_are_not_denied(tmp_path: Path) -> None:
    note, _, _ = render(tmp_path / "a")
    assert f"Counters unavailable at this shape: {safe.md_text(REASON)}" in note
    assert ".." not in note.replace("../../", "")  # the links to docs/ and the notebooks aside
    assert "no hardware counters were read in this namespace (unavailable)" in note
    note, _, _ = render(tmp_path / "b", counters="ok")
    assert "no hardware counters were read" not in note
    assert "From ncu kernel replay" in note
    assert "Ours (cuda) against triton:" in note


# ------------------------------------------------------------------------------ spans, drift, variants


def test_span_facts_are_read_from_the_table(tmp_path: Path) -> None:
    note, _, inputs = render(tmp_path / "a", exclusive=True)
    assert "The measuring step recorded that every span ran with the CPU to itself (16 threads)" in note
    span = tables_of(inputs)["span"]
    assert set(span["launch_path"]) == {"prepared", "jit", "direct"}
    note, _, _ = render(tmp_path / "b", exclusive=False)
    assert "**These spans shared the CPU with other work**: the measuring step recorded" in note
    assert f"{SHAPES[0]} cuda" in note.split("**These spans shared the CPU")[1].split("\n")[0]


def test_span_facts_are_never_inferred_from_the_commands(tmp_path: Path) -> None:
    _, _, inputs = render(tmp_path, exclusive=True)
    prov = json.loads(Path(inputs["provenance"]).read_text())
    prov["commands"] = ["2026-11-29T12:00:00+00:00 snakemake report --cores 8 --resources gpu=3"]
    Path(inputs["provenance"]).write_text(json.dumps(prov))
    out = tmp_path / "again"
    report.render_reports(prov["config"], inputs, out / "fn.md", out / "ic.md")
    again = (out / "fn.md").read_text()
    assert "shared the CPU" not in again
    assert "snakemake report --cores 8 --resources gpu=3 (started 2026-11-29T12:00:00+00:00)" in again


def test_drift_and_controls_are_printed_from_the_trust_tables(tmp_path: Path) -> None:
    note, _, inputs = render(tmp_path)
    t = tables_of(inputs)
    ctx = trust_context.report_context(t["controls"], t["drift"])
    sentence = ctx["bound"]["sentence"].replace("->", "→")
    assert sentence.endswith(".") and safe.md_text(sentence) + " Only our kernels" in note
    lines = note.splitlines()
    for r in t["drift"].to_dict("records"):
        expected = "yes" if r["role"] == "bound" else f"no, {r['role']}"
        line = next(x for x in lines if x.startswith(f"| {r['op']} | {r['shape']} | {r['impl']} | ") and "%" in x)
        assert line.split(" | ")[-1].startswith(expected), line
    assert any(x.endswith("| no, library: library baseline |") for x in lines)
    assert any(x.endswith("| no, control |") for x in lines)  # the reason 'control' is the role: said once
    assert not any("control: control" in x for x in lines)


def test_variants_that_were_not_kept_use_the_four_verdicts(tmp_path: Path) -> None:
    note, _, inputs = render(tmp_path)
    section = note.split("## What was tried and not kept")[1].split("## Cross-check")[0]
    variants = tables_of(inputs)["variants"]
    assert set(variants["verdict"]) <= set(stats.VERDICTS)
    for o in variants_table.outcomes(variants.to_dict("records")):
        if o["outcome"] == "not kept":
            counts = " / ".join(str(o["counts"][v]) for v in stats.VERDICTS)
            assert f"| {o['op']} | {o['variant']} | " in section and f"| {counts} |" in section
    assert "faster / slower / same / can't tell" in section
    for _, r in variants.iterrows():
        assert f"| {report.num(r['base_us'])} | {report.num(r['variant_us'])} | {r['ratio']:.3f} [" in section
    # each operation with a variant links its notebook, and the link resolves from report/<namespace>/
    links = re.findall(r"\[kernels/(\w+)/notebook\.md\]\((\.\./\.\./kernels/\w+/notebook\.md)\)", section)
    assert [op for op, _ in links] == list(dict.fromkeys(variants["op"]))
    for _, link in links:
        assert (ROOT / "report" / "some-namespace" / link).resolve().is_file(), link


def test_the_cross_check_gives_ours_over_the_control_by_kernel_time_and_by_replay(tmp_path: Path) -> None:
    """From the cross-check table alone: at each shape where both were compared, the two ratios
    and the gap a call between them, and "differ" exactly where the ratios part by over the margin."""
    cfg = small_config()
    note, comment, inputs = render(tmp_path, cfg)
    section = note.split("## Cross-check against graph replay")[1].split("## GPU state")[0]
    cc = tables_of(inputs)["cross_check"]
    cc = cc[cc["status"] == "ok"]
    margin, seen, differ = float(cfg["verdict"]["margin"]), 0, []
    for (op, shape), grp in cc.groupby(["op", "shape"], sort=False):
        g = grp.set_index("impl")
        if "cuda" not in g.index or "triton" not in g.index:
            continue
        k = g.loc["cuda", "kernel_time_us"] / g.loc["triton", "kernel_time_us"]
        r = g.loc["cuda", "graph_median_us"] / g.loc["triton", "graph_median_us"]
        gap = (g.loc["cuda", "graph_median_us"] - g.loc["cuda", "kernel_time_us"]) - (
            g.loc["triton", "graph_median_us"] - g.loc["triton", "kernel_time_us"])
        row = next(line for line in section.splitlines() if line.startswith(f"| {op} | {shape} | {k:.3f} | {r:.3f} |"))
        assert f"{abs(gap):.2f}" in row
        assert ("| yes, by" in row) == (abs(r / k - 1) > margin), row
        if abs(r / k - 1) > margin:
            differ.append(f"{op} {shape} ({k:.3f} by kernel time, {r:.3f} by replay")
        seen += 1
    assert seen > 0
    line = next((x for x in comment.splitlines() if x.startswith("By graph replay a call")), None)
    if differ:
        assert all(d in section for d in differ) and "**they differ by more than 1%**" in section
        assert line is not None and all(d in line for d in differ), line
    else:
        assert "they agree within 1% at every shape compared" in section and line is None


def test_a_signed_difference_that_rounds_to_zero_has_no_sign() -> None:
    from harness.report.sections import signed

    assert (signed(0.254), signed(-0.13), signed(-0.001), signed(0.004)) == ("+0.25", "-0.13", "0.00", "0.00")


# ------------------------------------------------------------------------------ the full configuration


def test_the_issue_comment_of_the_full_default_configuration_fits_one_comment(tmp_path: Path) -> None:
    cfg = full_config()
    failed = {(op, cfg["operations"][op]["default"], "cuda"): "x" * 400 for op in cfg["operations"]}
    _, comment, inputs = render(tmp_path, cfg, failed=failed, disturbed=[(op, s) for op in cfg["operations"]
                                                                        for s in config.shapes(cfg, op)])
    assert len(comment) < report.COMMENT_LIMIT
    assert len(comment.encode()) < report.COMMENT_LIMIT
    for op in cfg["operations"]:
        for shape in config.shapes(cfg, op):
            assert any(line.startswith(f"| {safe.md_text(op)} | {shape}") for line in comment.splitlines()), (op, shape)
    assert report.comment_length(cfg, tables_of(inputs), json.loads(Path(inputs["provenance"]).read_text())) == len(comment)


def test_the_first_screen_of_the_full_configuration_fits(tmp_path: Path) -> None:
    cfg = full_config()
    note, _, _ = render(tmp_path, cfg, above=[("matmul", "2048x2048x2048")], disturbed=[("softmax", "8192x4096")],
                        failed={("transpose", "8192x8192", "torch"): "planted"})
    screen = first_screen(note)
    assert len(screen) <= 60
    assert sum(1 for line in screen if line.startswith("- **")) == len(cfg["operations"])
    assert sum(1 for line in screen if line.startswith(("- Control above its band", "- Check failed", "- Disturbed capture",
                                                         "- Counters unavailable"))) == 4


# ------------------------------------------------------------------------------ an older namespace


def copy_namespace(ns: str, tmp: Path) -> Path:
    """A committed namespace's artifacts copied under tmp (never rendered in place)."""
    dest = tmp / "artifacts" / ns
    shutil.copytree(ROOT / "artifacts" / ns, dest)
    return dest


def render_retained(ns: str, tmp: Path) -> tuple[str, str, Path]:
    art = copy_namespace(ns, tmp)
    cfg = json.loads((art / "provenance.json").read_text())["config"]
    out = tmp / "report" / ns
    report.render_reports(cfg, report.table_inputs(art), out / "field_note.md", out / "issue_comment.md",
                          [str(out / "figures" / f"{op}_sweep.svg") for op in cfg["operations"]],
                          overview=out / "figures" / "overview.svg")
    return (out / "field_note.md").read_text(), (out / "issue_comment.md").read_text(), art


def test_an_older_namespace_says_its_intervals_are_envelopes(tmp_path: Path) -> None:
    note, comment, art = render_retained("h200-ops-3", tmp_path)
    sweep = pd.read_csv(art / "tables" / "sweep.csv")
    assert "margin" not in sweep and set(sweep["cuda_vs_triton"]) == {"faster", "slower", "no difference"}
    screen = "\n".join(first_screen(note))
    assert len(first_screen(note)) <= 60
    assert "each interval is the min–max envelope of the launches, not a bootstrap interval" in screen
    assert screen.count('"no difference" is counted as can\'t tell') == 1
    assert "bootstrap interval over" not in note + comment
    counts = sweep["cuda_vs_triton"].map(lambda v: "can't tell" if v == "no difference" else v).value_counts()
    assert (f"| all | {len(sweep)} | {counts.get('faster', 0)} | {counts.get('slower', 0)} | 0 | "
            f"{counts.get(stats.CANT_TELL, 0)} | 0 | 0 |") in screen
    for _, r in sweep.iterrows():  # the envelope as the table has it, never another interval
        assert f"{r['cuda_over_triton']:.3f} [{r['cuda_over_triton_lo']:.3f}, {r['cuda_over_triton_hi']:.3f}]" in comment
    kt = pd.read_csv(art / "tables" / "kernel_time.csv")
    assert "kernel_time_lo_us" not in kt
    assert f"| 4096x768 | cuda | 25.2 | 0.03 | {report.num(kt['kernel_time_us'].iloc[0])} | " in note
    assert "Whether these spans had the CPU to themselves is not recorded" in note
    assert "min-max envelope of the launches" in (art.parent.parent / "report" / "h200-ops-3" / "figures" / "overview.svg").read_text()


def test_a_loaded_older_namespace_is_flagged_at_the_top(tmp_path: Path) -> None:
    note, comment, art = render_retained("h200-loaded-1", tmp_path)
    gpu_state = pd.read_csv(art / "tables" / "gpu_state.csv")
    flags = trust.flags(art / "tables" / "controls.csv", art / "tables" / "drift.csv", art / "tables" / "counters.csv",
                        art / "tables" / "check.csv", art / "tables" / "kernel_time.csv", art / "tables" / "gpu_state.csv")
    assert any(f.startswith("Disturbed capture: layernorm") for f in flags) and gpu_state["disturbed"].any()
    for f in flags:
        assert f"- {safe.md_text(f)}" in first_screen(note)
        assert f"- {safe.md_text(f)}" in comment.split("| operation | shape |")[0]


def test_the_controls_fold_says_whether_drift_was_bounded(tmp_path: Path) -> None:
    """The fold's one-line summary agrees with the section: a namespace whose kernels of ours were
    all excluded from the bound says 'drift not bounded', though it names an earlier namespace."""
    note, _, _ = render(tmp_path / "clean")
    assert "<details><summary>Controls and drift: 4 control rows, 0 above the band; drift against earlier-ns</summary>" in note
    loaded, _, _ = render_retained("h200-loaded-1", tmp_path / "loaded")
    assert "<details><summary>Controls and drift: 1 control row, 0 above the band; drift not bounded</summary>" in loaded
    assert "so drift between them is not bounded by any kernel" in loaded


def test_gpu_label_names_the_model_once() -> None:
    assert report.gpu_label([{"name": "NVIDIA H200", "uuid": "a"}]) == "NVIDIA H200"
    assert report.gpu_label([{"name": "NVIDIA H200", "uuid": "a"}, {"name": "NVIDIA H200", "uuid": "b"}]) == "NVIDIA H200 (2 GPUs)"
    assert report.gpu_label([]) == "unknown GPU"


def test_anchors_follow_github() -> None:
    assert report.anchor("What was tried and not kept") == "what-was-tried-and-not-kept"
    assert report.anchor("neighbor_aggregation") == "neighbor_aggregation"
    taken: set[str] = set()
    assert [report.anchor("GPU state", taken), report.anchor("GPU state", taken)] == ["gpu-state", "gpu-state-1"]


# ------------------------------------------------------------------------------ hostile strings

HOSTILE = "![x](https://evil.example/beacon.png) [click](javascript:alert(1)) <img src=x onerror=alert(1)> `code` \x1b[31m |pipe| two\nlines @octocat #12 \u202eevil www.evil.example"


def test_hostile_strings_stay_text_in_markdown(tmp_path: Path) -> None:
    cfg = small_config()
    for block in cfg["operations"]["layernorm"]["variants"].values():
        block["description"] = HOSTILE
    note, comment, _ = render(tmp_path, cfg, kernel=HOSTILE, specialization=HOSTILE, reason=HOSTILE, flags_text=HOSTILE,
                              failed={("layernorm", SHAPES[1], "triton"): HOSTILE}, disturbed=[("layernorm", SHAPES[2])])
    for text in (note, comment):
        assert HOSTILE.split(" ")[0] not in text
        assert "](http" not in text and "](javascript" not in text
        assert "<img" not in text and "<script" not in text
        assert "\x1b" not in text and "\u202e" not in text
        assert "https://evil" not in text and "www.evil" not in text
        assert "@octocat" not in text and "#12" not in text
        assert not re.search(r"(?<!\\)`code", text)  # a backtick from a name is always escaped
        assert "\\x1b" in text  # made visible
    assert "\\`code\\`" in note and "&lt;img src=x onerror=alert(1)&gt;" in note
    # tables keep their columns: every row of a table has as many unescaped pipes as its header
    lines = note.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            width = len(re.findall(r"(?<!\\)\|", lines[i - 1]))
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                assert len(re.findall(r"(?<!\\)\|", lines[j])) == width, lines[j]
                j += 1
    kernel_rows = [line for line in lines if "two\\\\nlines" in line and line.startswith(f"| {SHAPES[0]} | cuda |")]
    assert kernel_rows  # the kernel name with a newline stayed on its row, the break made visible (rendered as \n)
    summaries = [line for line in lines if line.startswith("<details><summary>")]
    assert all(re.fullmatch(r"<details><summary>[^<>]*</summary>", s) for s in summaries)


def test_a_run_without_ceilings_says_they_were_not_measured(tmp_path: Path) -> None:
    cfg = small_config(ceilings={"enabled": False})
    inputs = build_namespace(tmp_path, cfg)
    Path(inputs.pop("ceilings")).unlink()  # no ceilings job ran
    out = tmp_path / "report" / NS
    report.render_reports(cfg, inputs, out / "field_note.md", out / "issue_comment.md")
    note = (out / "field_note.md").read_text()
    assert "- **Ceilings**: not measured in this run (`ceilings.enabled: false`)" in note
    assert "The ceilings were not measured in this run" in note and "copy_bandwidth " not in note
    measured, _, _ = render(tmp_path / "measured")
    assert "- **Ceilings**: measured in this session on this GPU: copy_bandwidth" in measured
    assert "not measured in this run" not in measured
