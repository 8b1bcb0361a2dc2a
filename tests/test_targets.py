"""Performance targets (config `targets`): how each is judged from a namespace's tables
(harness.tables.targets), what the config refuses in one sentence, what the reports print of them
and the offline command `python -m harness targets`."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from harness import ROOT, config
from harness.__main__ import main as cli
from harness.errors import ConfigError
from harness.evidence import rerender
from harness.evidence import verify as verifier
from harness.io import row_dicts, write_csv
from harness.report import step as report_step
from harness.report import targets as report_targets
from harness.report.render import output_paths, table_inputs
from harness.tables import step
from harness.tables import targets as tg

OPS = {"transpose": {"default": "64x64", "sweep": ["64x64", "128x128"], "implementations": ["cuda", "triton", "torch"]}}


def sweep(rows: list[tuple[str, float, float, float, str]], torch: tuple[float, float, float, str] | None = None
          ) -> pd.DataFrame:
    """A sweep table: (shape, cuda/triton ratio, lo, hi, verdict) per row, and optionally the same
    cuda/torch at every row."""
    out = []
    for shape, v, lo, hi, verdict in rows:
        row = {"op": "transpose", "shape": shape, "cuda_over_triton": v, "cuda_over_triton_lo": lo,
               "cuda_over_triton_hi": hi, "cuda_vs_triton": verdict}
        if torch:
            row.update(zip(("cuda_over_torch", "cuda_over_torch_lo", "cuda_over_torch_hi", "cuda_vs_torch"), torch))
        out.append(row)
    return pd.DataFrame(out)


def times(table: str, column: str, values: dict[tuple[str, str], float], **extra: dict[tuple[str, str], float]
          ) -> pd.DataFrame:
    return pd.DataFrame([{"op": "transpose", "shape": s, "impl": i, column: v,
                          **{k: d[(s, i)] for k, d in extra.items() if (s, i) in d}}
                         for (s, i), v in values.items()])


def controls(rankable: dict[str, bool]) -> pd.DataFrame:
    return pd.DataFrame([{"op": "transpose", "shape": s, "status": "inside" if r else "under load", "rankable": r}
                         for s, r in rankable.items()])


RANKED = controls({"64x64": True, "128x128": True})


def target(**asks: Any) -> dict[str, Any]:
    return {"name": "t", "ops": ["transpose"], "shapes": "sweep", "metric": "kernel", "ratio": "cuda/triton", **asks}


def judged(t: dict[str, Any], sw: pd.DataFrame | None, kt: pd.DataFrame | None = None, sp: pd.DataFrame | None = None,
           ctl: pd.DataFrame | None = RANKED) -> list[dict[str, Any]]:
    return row_dicts(tg.evaluate("ns", [t], OPS, sw, kt, sp, ctl))


@pytest.mark.parametrize(("lo", "hi", "status"), [(0.95, 0.97, tg.MET), (0.99, 1.01, tg.MISSED),
                                                  (0.97, 0.99, tg.CANT_TELL)])
def test_a_bound_holds_over_the_whole_interval_or_not_at_all(lo: float, hi: float, status: str) -> None:
    (row, _) = judged(target(at_most=0.98), sweep([("64x64", (lo + hi) / 2, lo, hi, "faster"),
                                                  ("128x128", 0.5, 0.4, 0.6, "faster")]))
    assert row["status"] == status and row["asked"] == "≤ 0.98"
    assert (row["lo"], row["hi"]) == (lo, hi)


def test_a_verdict_not_asked_misses_and_cant_tell_is_no_answer() -> None:
    rows = judged(target(verdict=["faster"]), sweep([("64x64", 1.0, 0.999, 1.001, "same"),
                                                     ("128x128", 1.0, 0.97, 1.03, "can't tell")]))
    assert [(r["status"], r["reason"]) for r in rows] == [(tg.MISSED, "the verdict is same"),
                                                          (tg.CANT_TELL, "the verdict is can't tell")]


def test_same_counts_where_both_run_at_the_same_size_copy() -> None:
    sw = sweep([("64x64", 1.0, 0.999, 1.001, "same"), ("128x128", 1.0, 0.999, 1.001, "same")])
    kt = times("kernel_time", "kernel_time_us", {(s, i): 1.0 for s in ("64x64", "128x128") for i in ("cuda", "triton")},
               same_size_copy_fraction={("64x64", "cuda"): 0.99, ("64x64", "triton"): 1.05,
                                        ("128x128", "cuda"): 0.97, ("128x128", "triton"): 0.99})
    rows = judged(target(verdict=["faster"], or_at_copy=0.02), sw, kt)
    assert [r["status"] for r in rows] == [tg.MET, tg.MISSED]
    assert "within 2% of the same-size copy" in rows[0]["reason"]
    assert rows[1]["reason"] == "the verdict is same"


@pytest.mark.parametrize(("fraction", "status"), [(1.0 + tg.COPY_BOUNDS, tg.MET), (1.0 + tg.COPY_BOUNDS + 0.005, tg.MISSED),
                                                  (1.92, tg.MISSED)])
def test_a_copy_the_kernels_outrun_is_no_ceiling_and_same_is_not_the_limit_there(fraction: float, status: str) -> None:
    sw = sweep([("64x64", 1.0, 0.999, 1.001, "same"), ("128x128", 0.9, 0.89, 0.91, "faster")])
    kt = times("kernel_time", "kernel_time_us", {(s, i): 1.0 for s in ("64x64", "128x128") for i in ("cuda", "triton")},
               same_size_copy_fraction={("64x64", "cuda"): 0.99, ("64x64", "triton"): fraction,
                                        ("128x128", "cuda"): 1.92, ("128x128", "triton"): 1.95})
    rows = judged(target(verdict=["faster"], or_at_copy=0.02), sw, kt)
    assert [r["status"] for r in rows] == [status, tg.MET]  # a verdict asked for needs no ceiling
    if status == tg.MISSED:
        assert rows[0]["reason"] == (f"the verdict is same; the same-size copy does not bound these kernels here "
                                     f"(they ran at 99% and {fraction:.0%} of it)")


def test_a_ratio_the_sweep_holds_the_other_way_round_is_inverted_with_its_verdict() -> None:
    sw = sweep([("64x64", 1.0, 0.99, 1.01, "same"), ("128x128", 1.0, 0.99, 1.01, "same")],
               torch=(1.25, 1.2, 1.3, "slower"))
    (row, _) = judged(target(ratio="torch/cuda", at_least=0.95, verdict=["faster"]), sw)
    assert row["value"] == pytest.approx(0.8) and row["lo"] == pytest.approx(1 / 1.3)
    assert row["hi"] == pytest.approx(1 / 1.2) and row["verdict"] == "faster"
    assert row["status"] == tg.MISSED and "wholly below 0.95" in row["reason"]


def test_an_event_span_target_is_judged_at_its_ratio_without_an_interval() -> None:
    sp = times("span", "span_median_us", {("64x64", "cuda"): 10.0, ("64x64", "torch"): 12.0,
                                          ("128x128", "cuda"): 13.0, ("128x128", "torch"): 12.0})
    rows = judged(target(metric="span", ratio="cuda/torch", at_most=1.0), None, None, sp)
    assert [(r["status"], r["lo"]) for r in rows] == [(tg.MET, None), (tg.MISSED, None)]
    assert rows[1]["value"] == pytest.approx(13 / 12) and rows[1]["reason"] == "1.083 > 1"


def test_a_shape_the_control_does_not_rank_is_not_judged_and_keeps_its_value() -> None:
    sw = sweep([("64x64", 0.9, 0.89, 0.91, "faster"), ("128x128", 0.9, 0.89, 0.91, "faster")])
    rows = judged(target(at_most=0.98), sw, ctl=controls({"64x64": False, "128x128": True}))
    assert [r["status"] for r in rows] == [tg.NOT_JUDGED, tg.MET] and rows[0]["value"] == 0.9
    assert {r["status"] for r in judged(target(at_most=0.98), sw, ctl=None)} == {tg.NOT_JUDGED}


def test_a_missing_time_is_not_measured_and_a_run_without_the_shape_or_impl_gives_no_row() -> None:
    kt = times("kernel_time", "kernel_time_us", {("64x64", "cuda"): 1.0})  # no Triton time, no sweep row
    (row, _) = judged(target(at_most=1.0), None, kt)
    assert row["status"] == tg.NOT_MEASURED and "no kernel time of cuda/triton" in row["reason"]
    assert judged(target(at_most=1.0, shapes=["256x256"]), None, kt) == []
    assert judged(target(at_most=1.0, ratio="cuda/external"), None, kt) == []


def raw() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.mark.parametrize(("change", "said"), [
    ({"ops": ["transposee"]}, "names transposee, which is no operation"),
    ({"ratio": "cuda/cuda"}, "compares cuda with itself"),
    ({"at_most": None}, "asks nothing of its ratio"),
    ({"or_at_copy": 0.02}, "gives or_at_copy without a verdict"),
    ({"verdict": ["faster"], "metric": "span"}, "asks a verdict of the span ratio"),
    ({"verdict": ["faster"], "ratio": "triton/torch"}, "asks a verdict of the kernel ratio triton/torch"),
    ({"shapes": ["64*64"]}, "names the shape '64*64' of transpose"),
    ({"ratio": "cuda/cublas"}, "targets[0].ratio"),
    ({"verdict": ["quicker"]}, "targets[0].verdict[0]"),
])
def test_the_config_refuses_a_target_in_one_sentence(change: dict[str, Any], said: str) -> None:
    cfg = raw()
    t = {"name": "x", "ops": ["transpose"], "ratio": "cuda/triton", "at_most": 1.0, **change}
    cfg["targets"] = [{k: v for k, v in t.items() if v is not None}]
    with pytest.raises(ConfigError) as err:
        config.validate(cfg)
    assert said in str(err.value) and str(err.value).count(". ") == 0, str(err.value)


def test_two_targets_of_one_name_are_refused_and_an_overlay_that_measures_less_is_not() -> None:
    cfg = raw()
    cfg["targets"] = [cfg["targets"][0], copy.deepcopy(cfg["targets"][0])]
    with pytest.raises(ConfigError, match="two targets are named"):
        config.validate(cfg)
    small = raw()
    small["operations"] = {"layernorm": small["operations"]["layernorm"]}
    small["implementations"] = ["cuda", "triton"]
    small["variants"] = []
    assert len(config.validate(small)["targets"]) == len(raw()["targets"])


@pytest.fixture()
def namespace(tmp_path: Path) -> tuple[Path, str]:
    """A namespace folder with a sweep at one transpose shape ranked, the other not."""
    ns = "t-1"
    tdir = tmp_path / ns / "tables"
    tdir.mkdir(parents=True)
    sweep([("64x64", 0.95, 0.94, 0.96, "faster"), ("128x128", 1.01, 1.0, 1.02, "same")]).to_csv(tdir / "sweep.csv",
                                                                                               index=False)
    times("kernel_time", "kernel_time_us", {("64x64", "cuda"): 1.0}).to_csv(tdir / "kernel_time.csv", index=False)
    times("span", "span_median_us", {("64x64", "cuda"): 1.0}).to_csv(tdir / "span.csv", index=False)
    controls({"64x64": True, "128x128": False}).to_csv(tdir / "controls.csv", index=False)
    cfg = config.validate({**raw(), "namespace": ns, "variants": [], "operations": {"transpose": {
        "default": "64x64", "sweep": ["64x64", "128x128"], "tolerance": {"atol": 1e-12, "rtol": 1e-12}}}})
    (tmp_path / ns / "provenance.json").write_text(json.dumps({"config": cfg}))
    return tmp_path, ns


def write_config(tmp_path: Path, targets: list[dict[str, Any]]) -> str:
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump({"targets": targets}))
    return str(path)


def test_the_command_judges_a_namespace_and_strict_exits_by_whether_every_target_is_met(
        namespace: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art, ns = namespace
    all_met = write_config(tmp_path, [{"name": "fast", "ops": ["transpose"], "ratio": "cuda/triton", "at_most": 0.98}])
    assert cli(["targets", ns, "--configfile", all_met, "--artifacts", str(art), "--strict"]) == 0
    out = capsys.readouterr().out
    assert "| fast | transpose | 64x64 | cuda/triton kernel | 0.950 [0.940, 0.960] | ≤ 0.98 | met |" in out
    assert f"{ns}: 1 met (of 1 targets at a shape)." in out
    sweep_too = write_config(tmp_path, [{"name": "fast", "ops": ["transpose"], "shapes": "sweep",
                                         "ratio": "cuda/triton", "at_most": 0.98}])
    assert cli(["targets", ns, "--configfile", sweep_too, "--artifacts", str(art), "--strict"]) == 1
    assert "1 met, 1 not judged" in capsys.readouterr().out
    assert cli(["targets", ns, "--configfile", sweep_too, "--artifacts", str(art)]) == 0  # judged, not a gate
    missed = write_config(tmp_path, [{"name": "slow", "ops": ["transpose"], "ratio": "cuda/triton", "at_most": 0.9}])
    assert cli(["targets", ns, "--configfile", missed, "--artifacts", str(art)]) == 0
    # as the reports print it: how far the ratio lies beyond the bound (0.95 against at most 0.9)
    assert f"| missed, {(0.95 / 0.9 - 1) * 100:.1f}% beyond the bound (" in capsys.readouterr().out


def test_the_command_refuses_a_namespace_without_tables_in_one_sentence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["targets", "none-1", "--artifacts", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("targets: none-1 has no tables/sweep.csv") and err.count("\n") == 0


def test_the_reports_print_each_target_from_the_table(namespace: tuple[Path, str]) -> None:
    art, ns = namespace
    cfg = json.loads((art / ns / "provenance.json").read_text())["config"]
    cfg["targets"] = [{"name": "fast", "ops": ["transpose"], "shapes": "sweep", "metric": "kernel",
                       "ratio": "cuda/triton", "at_most": 0.98}]
    tdir = art / ns / "tables"
    table = tg.evaluate(ns, cfg["targets"], config.targets_plan(cfg), pd.read_csv(tdir / "sweep.csv"),
                        pd.read_csv(tdir / "kernel_time.csv"), pd.read_csv(tdir / "span.csv"),
                        pd.read_csv(tdir / "controls.csv"))
    ctx = report_targets.context(table, pd.read_csv(tdir / "controls.csv"))
    assert ctx is not None and ctx["summary"] == "1 met, 1 not judged" and ctx["missed"] == []
    (block,) = ctx["targets"]
    assert [r["status"] for r in block["rows"]] == ["met", "not judged"]
    assert "under load" in block["rows"][1]["reason"]  # the controls table's reason, in the claims' words
    assert report_targets.rows(table)[0] == {"target": "fast", "op": "transpose", "shape": "64x64", "metric": "kernel",
                                             "ratio": "cuda/triton", "value": 0.95, "lo": 0.94, "hi": 0.96,
                                             "verdict": "faster", "asked": "≤ 0.98",
                                             "gap": pytest.approx(0.95 / 0.98 - 1), "status": "met"}
    assert block["rows"][0]["gap"] == "" and ctx["beside"] == []  # met: inside the bound, nothing set beside it
    assert block["rows"][1]["gap"] == ""  # not judged: the table has the number, the report judges nothing of it
    assert report_targets.context(table.iloc[0:0]) is None


RETAINED = "h200-ops-30"
"""A committed namespace, ranked, from before targets: its reports rendered again with a targets table."""


def test_a_namespace_with_a_targets_table_reports_it_in_every_report(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    shutil.copytree(ROOT / "artifacts" / RETAINED, art / RETAINED)
    ns_dir, cfg = art / RETAINED, raw()
    prov = json.loads((ns_dir / "provenance.json").read_text())
    tdir = ns_dir / "tables"
    step.targets_table(namespace=RETAINED, targets=config.validate(cfg)["targets"],
                       operations=config.targets_plan(prov["config"]), sweep=str(tdir / "sweep.csv"),
                       kernel_time=str(tdir / "kernel_time.csv"), span=str(tdir / "span.csv"),
                       controls=str(tdir / "controls.csv"), out=str(tdir / "targets.csv"))
    table = pd.read_csv(tdir / "targets.csv")
    missed = table[table["status"] == tg.MISSED]
    assert len(missed) and (table["status"] == tg.MET).any()
    out = output_paths(RETAINED, list(prov["config"]["operations"]), art, tmp_path / "report")
    report_step.render(prov["config"], table_inputs(ns_dir), out)
    note, comment = Path(out["field_note"]).read_text(), Path(out["issue_comment"]).read_text()
    page = Path(out["html"]).read_text()
    first = missed.iloc[0]
    value = f"{first['value']:.3f} [{first['lo']:.3f}, {first['hi']:.3f}]"
    assert "## Targets" in note and f"| {first['op']} | {first['shape']} | {value} |" in note
    assert f"- {first['target']}: {first['op']} {first['shape']}, {first['ratio']} {value}, asked" in comment
    # one line a missed row in the comment, each with how far it missed and why
    listed = [x for x in comment.splitlines() if x.startswith("- ") and ", asked " in x]
    assert len(listed) == len(missed) and all(x.count(", asked ") == 1 for x in listed)
    assert all(str(r) in x for x, r in zip(listed, missed["reason"], strict=True))
    # the ask ends before its gap: an ask that ends in a verdict ('≤ 0.98; faster') reads apart from it
    assert all(f", asked {a} — " in x for x, a in zip(listed, missed["asked"], strict=True))
    # each target's block says its ratio, metric and ask outside parentheses (an ask may hold its own)
    said = f"{first['ratio']} by {tg.METRICS[first['metric']]}, asked {first['asked']}. "
    assert f"**{first['target']}**: {said}" in note and f"<b>{first['target']}</b>: {said}" in page
    assert '<h2 id="targets">Targets</h2>' in page and f"<td>{value}</td>" in page
    assert "Contents: [Targets](#targets) · " in note and '<li><a href="#targets">Targets</a></li>' in page
    # a missed bound says by how much, and the shape's other evidence stands beside it
    gap = f"{first['gap'] * 100:.1f}% beyond the bound"
    assert first["gap"] > 0 and gap in note and gap in comment and gap in page
    # every report prints a missed row's gap and reason as one phrase after its status, the same in each
    for r in missed.itertuples():
        why = (f"{r.gap * 100:.1f}% beyond the bound ({r.reason})" if pd.notna(r.gap) and r.gap > 0
               else str(r.reason))
        assert f"| **missed**, {why} |" in note and f"<b>missed</b>, {why}</td>" in page and f" — {why}\n" in comment
    assert any(pd.isna(r.gap) for r in missed.itertuples())  # a verdict missed has a reason and no gap
    # a verdict says whose it is: the library's over ours reads 'torch faster', never a bare 'faster'
    for r in table[table["verdict"].isin(["faster", "slower"])].itertuples():
        value_r = f"{r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}]"
        assert f"| {r.op} | {r.shape} | {value_r} | {str(r.ratio).split('/')[0]} {r.verdict} | **{r.status}**" in note
        assert f"<td>{value_r}</td><td>{str(r.ratio).split('/')[0]} {r.verdict}</td>" in page
    assert (table["ratio"] == "torch/cuda").any() and "| torch faster | **missed**" in note
    kt = pd.read_csv(tdir / "kernel_time.csv").set_index(["op", "shape", "impl"])
    variants = pd.read_csv(tdir / "variants.csv")
    at = variants[(variants["op"] == first["op"]) & (variants["shape"] == first["shape"])]
    (line,) = [x for x in note.splitlines() if x.startswith(f"- **{first['op']} {first['shape']}** (")]
    for impl in str(first["ratio"]).split("/"):
        fraction = kt.loc[(first["op"], first["shape"], impl)]
        said = (f"{impl} {fraction['fp32_peak_fraction'] * 100:.1f}% of the FP32 peak"
                if fraction["fp32_peak_fraction"] > fraction["same_size_copy_fraction"]
                else f"{impl} {fraction['same_size_copy_fraction'] * 100:.1f}% of the same-size copy")
        assert said in line
    assert len(at) and all(f"{v} " in line for v in at["variant"])
    assert f"[kernels/{first['op']}/notebook.md](../../kernels/{first['op']}/notebook.md)" in line
    assert f'<a href="../../kernels/{first["op"]}/notebook.md">' in page
    matmul = kt.loc[("matmul", "4096x4096x4096", "cuda")]  # missed by cuBLAS: its ceiling is the FP32 peak
    assert f"cuda {matmul['fp32_peak_fraction'] * 100:.1f}% of the FP32 peak" in note
    layernorm = kt.loc[("layernorm", "4096x768", "cuda")]  # its flops are far from their peak: the copy binds
    assert f"cuda {layernorm['same_size_copy_fraction'] * 100:.1f}% of the same-size copy" in note
    # a copy the kernels outrun (an L2-sized tensor, hot) is said to bound nothing; one they do not outrun is not
    (ln_line,) = [x for x in note.splitlines() if x.startswith("- **layernorm 4096x768** (")]
    (tr_line,) = [x for x in note.splitlines() if x.startswith("- **transpose 4096x4096** (")]
    bounds_nothing = "(more than 108% of it: the copy does not bound these kernels at this size)"
    assert layernorm["same_size_copy_fraction"] > 1.0 + tg.COPY_BOUNDS and bounds_nothing in ln_line
    assert kt.loc[("transpose", "4096x4096", "cuda")]["same_size_copy_fraction"] < 1.0 + tg.COPY_BOUNDS
    assert "of the same-size copy" in tr_line and bounds_nothing not in tr_line
    summary = json.loads(Path(out["summary"]).read_text())
    assert [r["status"] for r in summary["targets"]] == list(table["status"])
    # without a targets table the reports come out as committed, byte for byte: no section
    assert rerender.renders_as_it_is(RETAINED, ROOT / "artifacts" / RETAINED, prov, ROOT / "report")




def test_verify_judges_the_rederived_tables_as_written_so_an_inverted_ratio_matches(tmp_path: Path) -> None:
    """The pipeline judges its tables as written (six significant digits): torch/cuda inverted from a
    written cuda/torch of 1.12846 is 0.886163, from the exact 1.128464 it would be 0.886160, so
    verify judges its re-derived tables as written too (the bug a device run's verify found)."""
    ns, tdir, work = "t-1", tmp_path / "tables", tmp_path / "work"
    tdir.mkdir()
    exact = sweep([("64x64", 1.0, 0.99, 1.01, "same")], torch=(1.128464, 1.127009, 1.129919, "slower"))
    write_csv(row_dicts(exact), list(exact.columns), tdir / "sweep.csv")
    for name, column in (("kernel_time", "kernel_time_us"), ("span", "span_median_us")):
        times(name, column, {("64x64", "cuda"): 1.0}).to_csv(tdir / f"{name}.csv", index=False)
    controls({"64x64": True}).to_csv(tdir / "controls.csv", index=False)
    cfg: dict[str, Any] = {"targets": [target(ratio="torch/cuda", at_least=0.95, shapes="default")],
                           "operations": {"transpose": {"default": "64x64", "sweep": ["64x64"]}},
                           "implementations": ["cuda", "triton", "torch"]}
    step.targets_table(namespace=ns, targets=cfg["targets"], operations=config.targets_plan(cfg),
                       sweep=str(tdir / "sweep.csv"), kernel_time=str(tdir / "kernel_time.csv"),
                       span=str(tdir / "span.csv"), controls=str(tdir / "controls.csv"), out=str(tdir / "targets.csv"))
    assert "%.6g" % (1 / 1.12846) != "%.6g" % (1 / 1.128464)  # the case is the one the device run met
    rederived = {"sweep": exact, "kernel_time": pd.read_csv(tdir / "kernel_time.csv"),
                 "span": pd.read_csv(tdir / "span.csv")}
    written = {name: work / f"{name}.csv" for name in rederived}  # as _check_tables writes them
    for name, frame in rederived.items():
        write_csv(row_dicts(frame), list(frame.columns), written[name])
    assert verifier._check_targets(tdir, cfg, ns, written, work, []) == []
    edited = pd.read_csv(tdir / "targets.csv")
    edited.loc[0, "value"] = 0.9
    edited.to_csv(tdir / "targets.csv", index=False)
    (problem,) = verifier._check_targets(tdir, cfg, ns, written, work, [])
    assert "column value: 0.9 in the bundle, 0.886163 from the exports" in problem
