"""The resolution section: variants whose answer is known before the run (an A/A twin, "same"
expected; a planted slowdown, "slower" expected) get a section of their own in the field note and
the page, and summary.json carries the same rows under `resolution`, each figure read from the
variants table and the cross-check's graph replay. CPU only: a namespace derived as the pipeline
derives one (tests/test_report.py's build_namespace)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_report import NS, build_namespace, small_config

from harness import config
from harness.report import render as report
from harness.report import resolution

TWIN = {"base": "cuda", "description": "our CUDA kernel under another name (A/A pair)"}
PLANT = {"base": "cuda", "grow": 0.025, "description": "our CUDA kernel on a problem 2.5% larger (planted slowdown)"}
DELAY = {"base": "cuda", "delay": 256, "description": "our CUDA kernel with every block waiting 256 cycles (planted slowdown)"}


def resolution_config() -> dict[str, Any]:
    cfg = copy.deepcopy(small_config())
    variants = cfg["operations"]["layernorm"].setdefault("variants", {})
    variants.update(twin=TWIN, planted=PLANT, delayed=DELAY)
    cfg["variants"] = ["layernorm.block512", "layernorm.twin", "layernorm.planted", "layernorm.delayed"]
    return config.validate(cfg)


def rendered(root: Path, cfg: dict[str, Any], **namespace: Any) -> tuple[str, str, dict[str, Any], dict[str, pd.DataFrame]]:
    inputs = build_namespace(root, cfg, **namespace)
    out = root / "report" / NS
    report.render_reports(cfg, inputs, out / "field_note.md", out / "issue_comment.md", html=out / "index.html",
                          summary=out / "summary.json")
    return ((out / "field_note.md").read_text(), (out / "index.html").read_text(),
            json.loads((out / "summary.json").read_text()), report.load_tables(inputs))


def test_roles_come_from_the_variant_definitions() -> None:
    assert resolution.role(TWIN) == "A/A twin"
    assert resolution.role(PLANT) == "planted slowdown"
    assert resolution.role(DELAY) == "planted slowdown"
    assert resolution.role({"base": "cuda", "defines": {"LN_BLOCK": 512}, "description": "tried"}) is None
    assert resolution.role(None) is None
    assert resolution.known(resolution_config()) == {("layernorm", "cuda.twin"): ("A/A twin", None, None),
                                                     ("layernorm", "cuda.planted"): ("planted slowdown", 0.025, None),
                                                     ("layernorm", "cuda.delayed"): ("planted slowdown", None, 256)}


@pytest.mark.parametrize("idle", [False, True], ids=["replay", "idle-starts"])
def test_the_known_answers_have_their_own_section_and_summary_rows(tmp_path: Path, idle: bool) -> None:
    cfg = resolution_config()
    cfg["cross_check"]["idle_starts"] = idle
    note, page, summary, tables = rendered(tmp_path, cfg)
    variants, cross = tables["variants"], tables["cross_check"]
    replay = {(r.shape, r.impl): r.graph_median_us for r in cross.itertuples() if r.status == "ok"}
    starts = {(r.shape, r.impl): r.idle_median_us for r in cross.itertuples() if r.status == "ok"}
    assert all(pd.isna(v) for v in starts.values()) != idle
    rows = summary["resolution"]
    known = variants[variants["variant"].isin(["cuda.twin", "cuda.planted", "cuda.delayed"])]
    assert len(rows) == len(known) > 0
    for row, (_, v) in zip(rows, known.iterrows(), strict=True):
        assert (row["shape"], row["variant"], row["verdict"]) == (v["shape"], v["variant"], v["verdict"])
        assert row["ratio"] == v["ratio"] and (row["lo"], row["hi"]) == (v["ratio_lo"], v["ratio_hi"])
        size = row["idle_ratio"] if idle else row["replay_ratio"]
        small = row["variant"] != "cuda.twin" and size - 1 < cfg["verdict"]["margin"]
        assert row["below_margin"] is small
        assert row["expected"] == ("same" if row["variant"] == "cuda.twin" else "same or slower" if small else "slower")
        assert row["as_expected"] == (row["verdict"] in ("same", "slower") if small else row["verdict"] == row["expected"])
        assert row["replay_ratio"] == replay[(row["shape"], row["variant"])] / replay[(row["shape"], "cuda")]
        # the extra time of idle starts over the base's replayed time; the fixed part of each idle start cancels
        assert row["idle_ratio"] == (pytest.approx(1 + (starts[(row["shape"], row["variant"])] - starts[(row["shape"], "cuda")])
                                                   / replay[(row["shape"], "cuda")]) if idle else None)
        assert row["planted_growth"] == (0.025 if row["variant"] == "cuda.planted" else None)
        assert row["planted_delay_cycles"] == (256 if row["variant"] == "cuda.delayed" else None)
    section = note.split("## Resolution: A/A pairs and planted slowdowns")[1].split("## What was tried and not kept")[0]
    for role, expected in (("A/A twin", "same"), ("planted slowdown", "slower")):
        mine = [r for r in rows if r["role"] == role and not r["below_margin"]]
        assert f"{role}s: {sum(r['as_expected'] for r in mine)} of {len(mine)} {expected}" in section
    small = [r for r in rows if r["below_margin"]]
    assert (f"and {len(small)} more sized below the 1% margin" in section) == bool(small)
    for r in rows:
        idle_text = f"{r['idle_ratio']:.3f}" if idle else "not timed"
        assert (f"| {r['op']} | {r['shape']} | {r['variant']} | {r['role']} | {r['expected']} | {r['ratio']:.3f} "
                f"[{r['lo']:.3f}, {r['hi']:.3f}] | {r['verdict']} | {'yes' if r['as_expected'] else 'NO'} | "
                f"{'+2.5%' if r['planted_growth'] else 'delay 256 cycles' if r['planted_delay_cycles'] else 'none'} | "
                f"{r['replay_ratio']:.3f} | {idle_text} | "
                f"{'' if r['role'] == 'A/A twin' else 'yes' if r['replay_sized'] else 'NO'} |") in section
        size = r["idle_ratio"] if idle else r["replay_ratio"]
        assert r["replay_sized"] == (None if r["role"] == "A/A twin" else 0.02 <= round(size - 1, 6) <= 0.03)
        # the capture's size against the idle starts', where they were timed
        alike = None if r["role"] == "A/A twin" or not idle else abs(r["ratio"] - r["idle_ratio"]) <= cfg["verdict"]["margin"]
        assert r["size_alike"] == alike
        alike_text = ("" if r["role"] == "A/A twin" else "not timed" if not idle else
                      f"{(r['ratio'] - r['idle_ratio']) * 100:+.2f} pt{'' if alike else ', NO'}")
        assert f"| {'yes' if r['replay_sized'] else 'NO' if r['replay_sized'] is False else ''} | {alike_text} |" in section
    plants = [r for r in rows if r["role"] == "planted slowdown"]
    by = "by idle-start timing" if idle else "by the replay"
    assert (f"{sum(r['replay_sized'] for r in plants)} of {len(plants)} sized 2–3% {by}") in section
    assert (f"{sum(bool(r['size_alike']) for r in plants)} of {len(plants)} sized alike by the capture and the idle "
            "starts (within the 1% margin)" in section) == idle
    assert "Resolution: A/A pairs and planted slowdowns" in page and "replay ratio" in page
    tried = note.split("## What was tried and not kept")[1].split("## Cross-check")[0].split("Every variant at every shape")[0]
    assert not any(v in tried for v in ("cuda.twin", "cuda.planted", "cuda.delayed"))  # not tried for their own sake


def test_a_variant_that_runs_its_base_s_binary_is_an_aa_pair_there(tmp_path: Path) -> None:
    """block512 compiles to cuda's code (the census says so): at every shape its ratio is an A/A
    pair, "same" expected, in the resolution section and summary.json, and the variants section
    counts none of it in block512's outcome; block128 (its own binary) is tried as before."""
    cfg = resolution_config()
    cfg["variants"] = ["layernorm.block512", "layernorm.block128", "layernorm.twin"]
    note, page, summary, tables = rendered(tmp_path, cfg, code_of={"cuda.block512": "cuda", "cuda.twin": "cuda"})
    variants = tables["variants"]
    shapes = list(variants.loc[variants["variant"] == "cuda.block512", "shape"])
    assert shapes
    same = [r for r in summary["resolution"] if r["role"] == "same binary"]
    assert [(r["shape"], r["variant"], r["expected"]) for r in same] == [(s, "cuda.block512", "same") for s in shapes]
    for r in same:
        v = variants[(variants["variant"] == "cuda.block512") & (variants["shape"] == r["shape"])].iloc[0]
        assert (r["ratio"], r["verdict"], r["as_expected"]) == (v["ratio"], v["verdict"], v["verdict"] == "same")
    # the twin keeps the role its config gives it
    assert {r["role"] for r in summary["resolution"] if r["variant"] == "cuda.twin"} == {"A/A twin"}
    section = note.split("## Resolution: A/A pairs and planted slowdowns")[1].split("## What was tried and not kept")[0]
    assert f"variants of the same binary: {sum(r['as_expected'] for r in same)} of {len(same)} same" in section
    assert "A variant of the same binary is a variant tried for its own sake" in section
    tried = note.split("## What was tried and not kept")[1].split("## Cross-check")[0]
    head, every = tried.split("Every variant at every shape")
    assert f"At {len(shapes)} variant-shape pairs the variant ran its base's binary" in head
    assert "The base's binary at every shape measured, so nothing of their own was measured: cuda.block512." in head
    assert "| cuda.block512 |" not in head and ("| cuda.block128 |" in head or "cuda.block128 (" in head)
    assert "| op | variant | shape | base µs | variant µs | variant/base | verdict | binary |" in every
    for s in shapes:
        assert f"| layernorm | cuda.block512 | {s} |" in every
    assert every.count("| the base's (cuda) |") == len(shapes) + len(variants[variants["variant"] == "cuda.twin"])
    assert "Variants of the same binary" not in note  # the count sits after the twins' in one sentence
    assert "ran its base's binary" in page and '<th class="txt">binary</th>' in page
    # the A/A pairs that missed are a flag, first in every report
    pairs = [r for r in summary["resolution"] if r["role"] in ("A/A twin", "same binary")]
    missed = [r for r in pairs if r["verdict"] in ("faster", "slower")]
    assert missed  # this synthetic session times block512 and the twin apart from cuda at some shapes
    (flag,) = [f for f in summary["flags"] if f.startswith("Known answers:")]
    assert flag.startswith(f"Known answers: {len(missed)} of {len(pairs)} A/A pairs came out faster or slower (")
    assert all(f"{r['op']} {r['shape']} {r['variant']}: {r['verdict']}, {r['ratio']:.3f}" in flag for r in missed)


def test_known_answers_flag_only_what_was_missed() -> None:
    def row(role: str, verdict: str, expected: str) -> dict[str, Any]:
        return {"op": "softmax", "shape": "4096x1024", "variant": "cuda.v", "role": role, "verdict": verdict,
                "as_expected": verdict in expected.split(" or "), "ratio": 0.99, "lo": 0.985, "hi": 0.995}

    assert resolution.flags([row("A/A twin", "same", "same"), row("planted slowdown", "slower", "slower"),
                             row("A/A twin", "can't tell", "same"), row("planted slowdown", "can't tell", "slower")]
                            ) == []  # an interval too wide is no wrong verdict
    (aa, planted) = resolution.flags([row("same binary", "faster", "same"), row("A/A twin", "same", "same"),
                                      row("planted slowdown", "same", "slower")])
    assert aa == ("Known answers: 1 of 2 A/A pairs came out faster or slower (softmax 4096x1024 cuda.v: faster, "
                  "0.990 [0.985, 0.995]), so a verdict of this session no further from 1 than these ratios may be "
                  "its own bias.")
    assert planted == ("Known answers: 1 of 1 planted slowdowns came out same or faster (softmax 4096x1024 cuda.v: "
                       "same, 0.990 [0.985, 0.995]), so this session can miss a change of that size.")
    # a plant sized below the margin another way is right to come out same, and wrong to come out faster
    small = [{**row("planted slowdown", v, "same or slower"), "below_margin": True} for v in ("same", "faster")]
    (faster,) = resolution.flags(small)
    assert faster.startswith("Known answers: 1 of 2 planted slowdowns came out same or faster (softmax 4096x1024 "
                             "cuda.v: faster, ")


def test_a_plant_sized_below_the_margin_expects_same_or_slower() -> None:
    """A plant-sizes run's smallest candidates: by idle starts 0.4% and 2.5%; the margin is 1%."""
    cfg = resolution_config()
    cfg["operations"]["layernorm"]["variants"]["small"] = {**DELAY, "delay": 16}
    variants = pd.DataFrame([{"op": "layernorm", "shape": "4096x768", "variant": v, "base": "cuda", "ratio": ratio,
                              "ratio_lo": ratio - 0.002, "ratio_hi": ratio + 0.002, "verdict": verdict}
                             for v, ratio, verdict in (("cuda.small", 1.004, "same"), ("cuda.delayed", 1.004, "same"))])
    cross = pd.DataFrame([{"op": "layernorm", "shape": "4096x768", "impl": impl, "status": "ok", "graph_median_us": 5.0,
                           "idle_median_us": 7.6 + extra} for impl, extra in (("cuda", 0.0), ("cuda.small", 0.02),
                                                                             ("cuda.delayed", 0.125))])
    small, delayed = resolution.rows(cfg, variants, cross)
    assert small["below_margin"] and small["expected"] == "same or slower" and small["as_expected"]
    assert small["idle_ratio"] == pytest.approx(1.004)
    assert not delayed["below_margin"] and delayed["expected"] == "slower" and not delayed["as_expected"]
    # the 256-cycle delay: 2.5% by idle starts, 0.4% by the capture, so it is also sized unlike them
    assert (small["size_alike"], delayed["size_alike"]) == (True, False)
    assert [f.split(" (")[0] for f in resolution.flags([small, delayed])] == [
        "Known answers: 1 of 2 planted slowdowns came out same or faster",
        "Known answers: 1 of 2 planted slowdowns were sized unlike the idle starts, beyond the verdicts' margin"]
    ctx = resolution.context(cfg, variants, cross)
    assert ctx is not None and [c["below"] for c in ctx["counts"]] == [1]


def test_a_report_without_flags_counts_the_known_answers_it_checked(tmp_path: Path) -> None:
    """The "No flags" line says what was checked: the known answers by kind (one clause, counted),
    none where the run had none; the other checks by what the run measured."""
    def row(role: str) -> dict[str, Any]:
        return {"op": "softmax", "shape": "4096x1024", "variant": "cuda.v", "role": role, "verdict": "same"}

    assert resolution.checked([]) is None
    assert resolution.checked([row("A/A twin"), row("same binary"), row("planted slowdown")]) == (
        "no known answer wrong (2 A/A pairs, 1 planted slowdown)")
    assert resolution.checked([row("same binary")]) == "no known answer wrong (1 A/A pair)"
    _, _, summary, _ = rendered(tmp_path, small_config())
    assert summary["checked"][:4] == ["no control above its band", "no group measured on two GPUs", "no failed check",
                                      "no disturbed capture"]
    assert not any(c.startswith("no known answer") for c in summary["checked"])


def test_a_run_without_known_answers_has_no_such_section(tmp_path: Path) -> None:
    note, page, summary, _ = rendered(tmp_path, small_config())
    assert "resolution" not in summary
    assert "Resolution: A/A pairs" not in note and "Resolution: A/A pairs" not in page


def test_without_a_replay_the_replay_ratio_is_not_timed() -> None:
    cfg = resolution_config()
    variants = pd.DataFrame([{"op": "layernorm", "shape": "4096x768", "variant": "cuda.planted", "base": "cuda",
                              "ratio": 1.03, "ratio_lo": 1.02, "ratio_hi": 1.04, "verdict": "slower"}])
    (row,) = resolution.rows(cfg, variants, None)
    assert row["replay_ratio"] is None and row["as_expected"] is True
    ctx = resolution.context(cfg, variants, None)
    assert ctx is not None and ctx["rows"][0]["replay_text"] == "not timed" and ctx["replayed"] is False
    assert row["replay_sized"] is None and ctx["rows"][0]["sized_text"] == "not timed"
    assert "sized" not in ctx["rows"][0]["verdict_text"]


def test_a_plant_is_sized_by_its_replay_within_two_to_three_percent() -> None:
    assert resolution.SIZED == (0.02, 0.03)
    assert [resolution.sized("planted slowdown", r) for r in (1.0199, 1.02, 1.025, 1.03, 1.0301)] == [
        False, True, True, True, False]
    assert resolution.sized("A/A twin", 1.025) is None and resolution.sized("planted slowdown", None) is None


def test_a_plant_the_capture_sizes_unlike_the_idle_starts_is_flagged() -> None:
    """The capture's size of a plant and the idle starts' agree within the verdicts' margin (1%),
    both ends included; beyond it the plant is a flag whatever its verdict, and a twin or a plant
    without idle starts is never compared."""
    assert [resolution.alike("planted slowdown", 1.02 + d, 1.02, 0.01) for d in (-0.0101, -0.01, 0.0, 0.01, 0.0101)] == [
        False, True, True, True, False]
    assert resolution.alike("A/A twin", 1.05, 1.0, 0.01) is None
    assert resolution.alike("planted slowdown", 1.03, None, 0.01) is None
    assert resolution.alike("planted slowdown", None, 1.03, 0.01) is None

    cfg = resolution_config()
    variants = pd.DataFrame([{"op": "layernorm", "shape": "4096x768", "variant": v, "base": "cuda", "ratio": ratio,
                              "ratio_lo": ratio - 0.002, "ratio_hi": ratio + 0.002, "verdict": "slower"}
                             for v, ratio in (("cuda.planted", 1.0245), ("cuda.delayed", 1.0355))])
    cross = pd.DataFrame([{"op": "layernorm", "shape": "4096x768", "impl": impl, "status": "ok", "graph_median_us": 5.0,
                           "idle_median_us": 7.6 + extra} for impl, extra in (("cuda", 0.0), ("cuda.planted", 0.12),
                                                                             ("cuda.delayed", 0.1))])
    planted, delayed = resolution.rows(cfg, variants, cross)
    assert planted["idle_ratio"] == pytest.approx(1.024) and planted["size_alike"] is True
    assert delayed["idle_ratio"] == pytest.approx(1.020) and delayed["size_alike"] is False
    assert planted["as_expected"] and delayed["as_expected"]  # both verdicts right: the size alone is wrong
    assert resolution.flags([planted, delayed]) == [
        "Known answers: 1 of 2 planted slowdowns were sized unlike the idle starts, beyond the verdicts' margin "
        "(layernorm 4096x768 cuda.delayed: 1.036 [1.034, 1.038] by the capture, 1.020 by idle starts), so this "
        "session's ratios may be off by as much."]
    ctx = resolution.context(cfg, variants, cross)
    assert ctx is not None and [r["alike_text"] for r in ctx["rows"]] == ["+0.05 pt", "+1.55 pt, NO"]
    assert ctx["counts"][0]["alike"] == 1 and ctx["counts"][0]["compared"] == 2

