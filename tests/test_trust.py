"""Control bands, their verdicts, drift between namespaces, the choice of the earlier namespace and
the flags a report must not hide (CPU only). Synthetic histories are written in the retained
formats (kernel_time.csv, census.csv, gpu_state.csv, provenance.json), with numbers of their own."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness import ROOT
from harness.errors import EvidenceError
from harness.report import trust_context
from harness.tables import derive, history, trust
from harness.gpu.watch import POWER_CAP_FLAG

REAL = ROOT / "artifacts"
OLD, NEW = "h200-layernorm-1", "h200-ops-defaults-1"  # retained before NVML was recorded (no gpu_state.csv)
SRC = {"cuda": "a" * 64, "triton": "b" * 64, "external": "c" * 64, "torch": "d" * 64}
PROCESS = "another compute process ran beside the captured one"


def kt(op: str, shape: str, impl: str, us: float | None, gpu_uuid: str | None = None) -> dict:
    row = {"op": op, "shape": shape, "impl": impl, "kernel_time_us": us}
    if gpu_uuid is not None:
        row["gpu_uuid"] = gpu_uuid
    return row


def census_row(op: str, impl: str, shapes: str, **over: str) -> dict:
    row = {"op": op, "impl": impl, "kernel": f"{op}_{impl}", "specialization": "BLOCK=128", "shapes": shapes,
           "source_sha256": SRC[impl], "compiler": "NVRTC 13.0" if impl == "cuda" else "triton 3.6.0 / ptxas 12.8.93",
           "options": "-arch=sm_90" if impl == "cuda" else "num_warps=4 num_stages=3 target=cuda:90"}
    row.update(over)
    return row


def census_of(rows: list[dict], **over: dict[str, str]) -> list[dict]:
    """A census serving every (op, impl) of these kernel-time rows (library baselines have none);
    over={'cuda': {'source_sha256': ...}} changes one implementation's kernel."""
    served: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r["impl"] not in trust.LIBRARY_IMPLS:
            served.setdefault((r["op"], r["impl"]), []).append(r["shape"])
    return [census_row(op, impl, ";".join(shapes), **over.get(impl, {})) for (op, impl), shapes in served.items()]


def state_rows(name: str, kernel_time: list[dict], flagged: dict[tuple[str, str, str], str] | None = None,
               extent: str | None = None) -> list[dict]:
    """gpu_state.csv rows (derive.GPU_STATE_COLUMNS) for every capture: quiet unless `flagged`
    names it, with the NVML flag sentence the watcher writes; `extent`: its during_extent
    ("group": read in the group's own windows)."""
    flagged = flagged or {}
    out = []
    for r in kernel_time:
        flag = flagged.get((r["op"], r["shape"], r["impl"]), "")
        row: dict[str, Any] = {c: None for c in derive.GPU_STATE_COLUMNS}
        row.update({"namespace": name, "op": r["op"], "shape": r["shape"], "impl": r["impl"],
                    "gpu_uuid": r.get("gpu_uuid", f"GPU-{name}"), "before_utilization_pct": 0, "before_power_w": 75.0,
                    "before_sm_clock_mhz": 1980, "before_compute_processes": 0, "during_samples": 40,
                    "during_throttle_reasons": 1, "during_max_compute_processes": 2 if flag.startswith("another") else 1,
                    "disturbed": bool(flag), "flags": flag, "during_extent": extent})
        out.append(row)
    return out


def write_namespace(artifacts: Path, name: str, date: str | None, kernel_time: list[dict], census: list[dict] | None = None,
                    gpu: str = "NVIDIA H200", cache_mode: str = "hot", controls: list[dict] | None = None,
                    nvml: bool = True, flagged: dict[tuple[str, str, str], str] | None = None,
                    extent: str | None = None) -> Path:
    ns = artifacts / name
    (ns / "tables").mkdir(parents=True)
    pd.DataFrame([{"namespace": name, "cache_mode": cache_mode, **r} for r in kernel_time]).to_csv(
        ns / "tables" / "kernel_time.csv", index=False)
    if census is not None:
        pd.DataFrame([{"namespace": name, **r} for r in census]).to_csv(ns / "tables" / "census.csv", index=False)
    if controls is not None:
        pd.DataFrame(controls).to_csv(ns / "tables" / "controls.csv", index=False)
    if nvml:
        pd.DataFrame(state_rows(name, kernel_time, flagged, extent), columns=derive.GPU_STATE_COLUMNS).to_csv(
            ns / "tables" / "gpu_state.csv", index=False)
    if date is not None:
        (ns / "provenance.json").write_text(json.dumps({
            "namespace": name, "date_utc": date, "git": {"commit": "abc", "dirty": False},
            "gpus": [{"name": gpu, "uuid": f"uuid-{name}"}], "config": {"cache_mode": cache_mode}}))
    return ns


def frame(rows: list[dict], cache_mode: str = "hot") -> pd.DataFrame:
    return pd.DataFrame([{"cache_mode": cache_mode, **r} for r in rows])


def quiet(name: str, rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(state_rows(name, rows))


def day(n: int) -> str:
    return f"2026-12-{n:02d}T00:00:00+00:00"


def tables(art: Path, name: str) -> dict:
    return trust.trust_tables(art, name, art / name / "tables" / "controls.csv", art / name / "tables" / "drift.csv")


def sentences_of(out: dict) -> list[str]:
    """Every sentence trust.py produced for one namespace's tables."""
    c, d, b = out["controls"], out["drift"], out["bound"]
    found = [s for s in [*c["note"], *c["claim_note"], *d["note"]] if s]
    for key in ("summary", "sentence", "changed_summary", "excluded_summary"):
        if b.get(key):
            found.append(b[key])
    if b.get("control"):
        found.append(b["control"]["summary"])
    return found


def assert_one_period(texts: list[str]) -> None:
    for text in texts:
        assert text.endswith(".") and not text.endswith(".."), text
        assert ".." not in text, text
        assert "\n" not in text, text


LN, SM = ("layernorm", "4096x768"), ("softmax", "4096x1024")


# ---------------------------------------------------------------------------------------------
# Control bands


def two_sessions() -> list[tuple]:
    s1 = [kt(*LN, "triton", 5.0), kt(*LN, "cuda", 6.0), kt(*LN, "torch", 12.0)]
    s2 = [kt(*LN, "triton", 5.4), kt(*LN, "cuda", 6.1)]
    return [("s1", frame(s1), None, None, quiet("s1", s1)), ("s2", frame(s2), None, None, quiet("s2", s2))]


def test_band_is_min_max_widened_by_margin() -> None:
    bands = trust.control_bands(two_sessions(), control="triton", margin=0.05)
    assert len(bands) == 1
    b = bands.iloc[0]
    assert (b["op"], b["shape"], b["control"]) == LN + ("triton",)
    assert b["observed_min_us"] == 5.0 and b["observed_max_us"] == 5.4
    assert b["band_lo_us"] == pytest.approx(5.0 * 0.95) and b["band_hi_us"] == pytest.approx(5.4 * 1.05)
    assert b["n_namespaces"] == 2 and b["namespaces"] == "s1;s2" and b["set_aside"] == ""
    assert (b["min_namespace"], b["max_namespace"]) == ("s1", "s2")
    cuda = trust.control_bands(two_sessions(), control="cuda", margin=0.1).iloc[0]
    assert cuda["band_lo_us"] == pytest.approx(5.4) and cuda["band_hi_us"] == pytest.approx(6.1 * 1.1)
    zero = trust.control_bands(two_sessions(), margin=0.0).iloc[0]
    assert (zero["band_lo_us"], zero["band_hi_us"]) == (5.0, 5.4)
    with pytest.raises(EvidenceError):
        trust.control_bands(two_sessions(), margin=1.5)


def test_band_excludes_namespaces() -> None:
    b = trust.control_bands(two_sessions(), exclude="s2").iloc[0]
    assert b["namespaces"] == "s1" and b["observed_max_us"] == 5.0
    assert trust.control_bands(two_sessions(), exclude=["s1", "s2"]).empty


def test_a_namespace_without_an_nvml_record_is_unknown_not_set_aside() -> None:
    """A namespace without an NVML record of its control capture enters the band, and the band says
    it rests on it; one whose captures NVML flagged there is set aside, with its reason."""
    s1 = [kt(*LN, "triton", 5.0), kt(*SM, "triton", 7.0)]
    s3 = [kt(*LN, "triton", 9.0), kt(*LN, "cuda", 9.5), kt(*SM, "triton", 7.2)]
    hist = [("s1", frame(s1), None, None, quiet("s1", s1)),
            ("s2", frame([kt(*LN, "triton", 5.2)])),  # no gpu_state.csv at all
            ("s3", frame(s3), None, None, pd.DataFrame(state_rows("s3", s3, {(*LN, "cuda"): f"{PROCESS} (2 at once; pids seen [7, 9])"})))]
    bands = trust.control_bands(hist).set_index(["op", "shape"])
    ln = bands.loc[LN]
    assert ln["namespaces"] == "s1;s2" and ln["unrecorded"] == "s2" and ln["observed_max_us"] == 5.2
    assert ln["set_aside"] == f"s3 (NVML flagged its captures there: {PROCESS})"
    sm = bands.loc[SM]  # s3 was quiet at softmax: it enters that band
    assert sm["namespaces"] == "s1;s3" and sm["observed_max_us"] == 7.2 and sm["set_aside"] == "" and sm["unrecorded"] == ""
    cur = [kt(*LN, "triton", 5.1)]
    note = trust.classify_controls(frame(cur), trust.control_bands(hist), gpu_state=quiet("now", cur)).iloc[0]["note"]
    assert "across 2 namespaces NVML did not flag, 1 of them without an NVML record" in note


def test_a_capture_with_no_nvml_samples_is_unknown_never_quiet() -> None:
    """NVML could not be read during the capture: its gpu_state row has 0 samples and disturbed
    False. That is no record, so the control is judged 'unknown', and with no band it is not ranked."""
    cur = [kt(*LN, "triton", 5.1), kt(*LN, "cuda", 5.0)]
    blind = quiet("now", cur).assign(during_samples=0)
    row = trust.classify_controls(frame(cur), trust.control_bands([]), gpu_state=blind).iloc[0]
    assert row["nvml"] == "unknown" and row["status"] == "establishing" and not bool(row["rankable"])
    assert "NVML recorded nothing for its capture" in row["claim_note"]
    seen = trust.classify_controls(frame(cur), trust.control_bands([]), gpu_state=quiet("now", cur)).iloc[0]
    assert seen["nvml"] == "quiet" and bool(seen["rankable"])  # the same row with samples is quiet
    # an earlier namespace whose rows have no samples enters a band as unrecorded, not as quiet
    earlier = [kt(*LN, "triton", 5.0)]
    bands = trust.control_bands([("e", frame(earlier), None, None, quiet("e", earlier).assign(during_samples=0))])
    assert bands.iloc[0]["unrecorded"] == "e"


STUDY_CONTROL = {"s1": 71.94, "s2": 84.10, "s3": 90.09, "s4": 77.52}
"""The study's Triton matmul control in four earlier sessions (71.94-90.09 µs); the host had no NVML."""
STUDY_LN = {"s1": 7.99, "s2": 8.32, "s3": 8.10, "s4": 8.21}
"""Its layer-norm control in the same sessions (7.99-8.32 µs)."""
MM = ("matmul", "1024x1024x1024")


def study(tmp_path: Path) -> Path:
    """The study replayed as retained namespaces without gpu_state.csv, and the current session
    (no NVML either): the control at 100.80 µs on matmul, and layer norm with ours at 8.97 µs
    against the control's 8.32 µs."""
    art = tmp_path / "artifacts"
    for i, name in enumerate(STUDY_CONTROL):
        rows = [kt(*MM, "triton", STUDY_CONTROL[name]), kt(*MM, "cuda", STUDY_CONTROL[name] * 1.1),
                kt(*LN, "triton", STUDY_LN[name]), kt(*LN, "cuda", STUDY_LN[name] * 1.08)]
        write_namespace(art, name, day(i + 1), rows, census=census_of(rows), nvml=False)
    now = [kt(*MM, "triton", 100.80), kt(*MM, "cuda", 88.0), kt(*LN, "triton", 8.32), kt(*LN, "cuda", 8.97)]
    write_namespace(art, "now", day(9), now, census=census_of(now), nvml=False)
    return art


def test_the_replayed_study_reaches_the_careful_humans_conclusions(tmp_path: Path) -> None:
    art = study(tmp_path)
    out = tables(art, "now")
    c = out["controls"].set_index(["op", "shape"])
    mm, ln = c.loc[MM], c.loc[LN]
    # the 100.80 µs control is above its band from the four earlier sessions: flagged, not ranked
    assert mm["n_namespaces"] == 4 and mm["unrecorded"] == "s1;s2;s3;s4" and mm["set_aside"] == ""
    assert (mm["observed_min_us"], mm["observed_max_us"]) == (71.94, 90.09)
    assert mm["status"] == "above" and mm["nvml"] == "unknown" and not bool(mm["rankable"])
    assert "across 4 namespaces without an NVML record" in mm["note"]
    flagged = trust.flags(out["controls"])
    assert len(flagged) == 1 and flagged[0].startswith("Control above its band: triton at matmul 1024x1024x1024 came back "
                                                       "at 100.80 µs against its band of 68.34-94.59 µs")
    # layer norm: the control inside its earlier 7.99-8.32 µs, so ours is ranked against it
    assert ln["status"] == "inside" and bool(ln["rankable"]) and ln["n_namespaces"] == 4
    # drift: bounded by ours, which did not change (no NVML record in either is no flag)
    assert out["bound"]["count"] == 2 and out["earlier"] == "s4"


def test_one_loaded_session_without_a_record_cannot_widen_the_band(tmp_path: Path) -> None:
    """A session without an NVML record far above the median of the others is taken for load and
    set aside, with its reason; the band is the others', whatever the order of the history."""
    hist = []
    for i, (name, us) in enumerate({**STUDY_CONTROL, "s5": 160.0}.items()):
        hist.append((name, frame([kt(*MM, "triton", us)]), None, None, None, day(i + 1)))
    band = trust.control_bands(hist).iloc[0]
    assert band["namespaces"] == "s1;s2;s3;s4" and band["observed_max_us"] == 90.09
    assert band["set_aside"] == "s5 (no NVML record, and at 160.00 µs far above the other sessions, as load would put it)"
    for perm in itertools.permutations(hist):
        pd.testing.assert_frame_equal(trust.control_bands(list(perm)), trust.control_bands(hist))
    # the same session seen quiet by NVML is vouched for: it widens the band
    s5 = [kt(*MM, "triton", 160.0)]
    vouched = [*hist[:4], ("s5", frame(s5), None, None, quiet("s5", s5), day(5))]
    assert trust.control_bands(vouched).iloc[0]["observed_max_us"] == 160.0


def test_band_does_not_depend_on_the_order_of_the_history() -> None:
    rows = {"a": 61.0, "b": 76.5, "c": 68.0, "d": 64.5}
    hist: list[Any] = []
    for name, us in rows.items():
        r = [kt(*LN, "triton", us), kt(*SM, "triton", us / 10)]
        hist.append((name, frame(r), None, None, quiet(name, r), day(len(hist) + 1)))
    first = trust.control_bands(hist)
    for perm in itertools.permutations(hist):
        pd.testing.assert_frame_equal(trust.control_bands(list(perm)), first)
    b = first.set_index(["op", "shape"]).loc[LN]
    assert (b["observed_min_us"], b["observed_max_us"], b["namespaces"]) == (61.0, 76.5, "a;b;c;d")


def test_band_filters_gpu_cache_mode_and_changed_control(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    write_namespace(art, "h200-a", day(1), [kt(*LN, "triton", 5.0)], census=[census_row("layernorm", "triton", "4096x768")])
    write_namespace(art, "a100-b", day(2), [kt(*LN, "triton", 9.0)], census=[census_row("layernorm", "triton", "4096x768")],
                    gpu="NVIDIA A100")
    write_namespace(art, "h200-c", day(3), [kt(*LN, "triton", 5.2)],
                    census=[census_row("layernorm", "triton", "4096x768", source_sha256="d" * 64)])
    write_namespace(art, "h200-d", day(4), [kt(*LN, "triton", 5.1)], census=[census_row("layernorm", "triton", "4096x768")],
                    cache_mode="cold")
    current_census = pd.DataFrame([census_row("layernorm", "triton", "4096x768")])
    all_b = trust.control_bands(art).iloc[0]
    assert all_b["n_namespaces"] == 4 and all_b["set_aside"] == ""
    b = trust.control_bands(art, gpu="NVIDIA H200", cache_mode="hot", current_census=current_census).iloc[0]
    assert b["namespaces"] == "h200-a" and b["observed_max_us"] == 5.0
    assert b["set_aside"] == ("a100-b (another GPU model: NVIDIA A100); h200-c (triton kernel changed its source); "
                              "h200-d (cold cache mode)")
    # every earlier capture set aside: the band is being established again, and says why
    changed = pd.DataFrame([census_row("layernorm", "triton", "4096x768", options="num_warps=8")])
    only = trust.control_bands(art, gpu="NVIDIA H200", current_census=changed, cache_mode="hot")
    assert only.iloc[0]["n_namespaces"] == 0 and pd.isna(only.iloc[0]["band_lo_us"])
    cur = [kt(*LN, "triton", 5.1)]
    row = trust.classify_controls(frame(cur), only, gpu_state=quiet("now", cur)).iloc[0]
    assert row["status"] == "establishing" and bool(row["rankable"])
    assert "h200-a (triton kernel changed its options)" in row["note"] and row["set_aside"].startswith("h200-a (triton kernel changed its options); a100-b (")


def test_band_from_index_equals_band_from_folders(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    for n in ("h200-validate-1", "h200-ops-1", "h200-loaded-1"):
        shutil.copytree(REAL / n, art / n)
    index = history.build_index(art, tmp_path / "history.sqlite")
    from_dirs = trust.control_bands(art)
    from_index = trust.control_bands(index)
    pd.testing.assert_frame_equal(from_dirs, from_index, check_dtype=False)
    ln = from_dirs.set_index(["op", "shape"]).loc[LN]
    assert "h200-loaded-1 (NVML flagged its captures there" in ln["set_aside"]  # read from the index's gpu_state too


# ---------------------------------------------------------------------------------------------
# Verdicts on the current namespace's control


def test_classify_statuses_and_sentences() -> None:
    bands = trust.control_bands(two_sessions(), margin=0.05)
    hi = 5.4 * 1.05
    cur = [kt(*LN, "triton", 6.10), kt(*LN, "cuda", 5.9), kt(*SM, "triton", 5.9), kt("matmul", "64x64x64", "cuda", 3.0)]
    out = trust.classify_controls(frame(cur), bands, "triton", gpu_state=quiet("now", cur)).set_index(["op", "shape"])
    above = out.loc[LN]
    assert above["status"] == "above" and not above["under_load"] and not above["rankable"]
    assert above["nvml"] == "quiet" and above["suspect"] == "control" and above["ours_position"] == "no range"
    assert above["note"] == (
        f"triton's layernorm 4096x768 came back at 6.10 µs, above its band of 4.75-{hi:.2f} µs (observed 5.00-5.40 µs "
        "across 2 quiet namespaces, widened by 5%), while NVML saw no other process and no throttling during the "
        "captures at this shape: the control's capture is suspect (above its band, not shown to be under load). "
        "Ours (cuda) came back at 5.90 µs, but no earlier quiet namespace captured the same kernel at this shape, so "
        "whether the slowdown hit it too is unknown. No ranking follows from triton's pairings at this shape.")
    new = out.loc[SM]
    assert new["status"] == "establishing" and bool(new["rankable"]) and new["claim_note"] == ""
    assert new["note"].startswith("No earlier quiet namespace measured triton's softmax 4096x1024: its band is being established")
    none = out.loc[("matmul", "64x64x64")]
    assert none["status"] == "missing" and not none["rankable"]
    assert none["claim_note"] == "No ranking against triton follows at matmul 64x64x64, because this run did not measure triton at this shape."
    for value in (5.2, 5.0 * 0.95, hi):  # inside, both edges included
        r = [kt(*LN, "triton", value)]
        row = trust.classify_controls(frame(r), bands, gpu_state=quiet("now", r)).iloc[0]
        assert row["status"] == "inside" and bool(row["rankable"]), value
        assert row["note"].endswith(": a clean capture. Ours can be ranked against triton at this shape.")
    r = [kt(*LN, "triton", 4.0)]
    below = trust.classify_controls(frame(r), bands, gpu_state=quiet("now", r)).iloc[0]
    assert below["status"] == "below" and bool(below["rankable"]) and "load cannot cause" in below["note"]
    assert_one_period([*out["note"], *[c for c in out["claim_note"] if c], below["note"]])


def test_margin_decides_the_edge() -> None:
    r = [kt(*LN, "triton", 5.6)]  # 3.7% above the highest observed 5.4
    assert trust.classify_controls(frame(r), trust.control_bands(two_sessions(), margin=0.05), gpu_state=quiet("x", r)).iloc[0]["status"] == "inside"
    assert trust.classify_controls(frame(r), trust.control_bands(two_sessions(), margin=0.03), gpu_state=quiet("x", r)).iloc[0]["status"] == "above"


WANDER = {"w1": 61.0, "w2": 76.5, "w3": 68.0, "w4": 64.5}
"""A quiet control wandering 25% from session to session; ours steady at ~50 µs."""
WS = ("softmax", "2048x512")


def wandering_history(art: Path, order: list[str]) -> None:
    for i, name in enumerate(order):
        rows = [kt(*WS, "triton", WANDER[name]), kt(*WS, "cuda", 50.0 + i * 0.1)]
        write_namespace(art, name, day(i + 1), rows, census=census_of(rows))
    rows = [kt(*WS, "triton", 70.0), kt(*WS, "cuda", 50.1)]
    write_namespace(art, "w5", day(9), rows, census=census_of(rows))


@pytest.mark.parametrize("order", [["w1", "w2", "w3", "w4"], ["w4", "w3", "w2", "w1"]])
def test_a_wandering_quiet_control_is_never_load_in_either_order(tmp_path: Path, order: list[str]) -> None:
    art = tmp_path / "artifacts"
    wandering_history(art, order)
    verdicts = {name: tables(art, name)["controls"].iloc[0] for name in [*order, "w5"]}
    for name, row in verdicts.items():
        assert row["status"] != "under load" and not row["under_load"], name
        assert row["set_aside"] == "", name  # ordinary spread never sets a namespace aside
        assert row["nvml"] == "quiet"
    last = verdicts["w5"]
    assert (last["observed_min_us"], last["observed_max_us"]) == (61.0, 76.5)
    assert last["band_lo_us"] == pytest.approx(57.95) and last["band_hi_us"] == pytest.approx(80.325)
    assert sorted(last["namespaces"].split(";")) == ["w1", "w2", "w3", "w4"]
    assert last["status"] == "inside" and bool(last["rankable"])
    statuses = [verdicts[n]["status"] for n in order]
    if order[0] == "w1":
        # against w1 alone (57.95-64.05 µs) w2's 76.5 µs is above its band: suspect, not load, and it still
        # enters every later band
        assert statuses == ["establishing", "above", "inside", "inside"]
        w2 = verdicts["w2"]
        assert w2["suspect"] == "control" and not w2["rankable"] and w2["ours_position"] == "inside"
        assert "the control's capture is suspect (above its band, not shown to be under load)" in w2["note"]
        assert ("whatever slowed the control's capture did not slow ours, so it hit the control's capture, not the "
                "whole operation.") in w2["note"]
        assert verdicts["w3"]["namespaces"] == "w1;w2"
    else:
        assert statuses == ["establishing", "above", "above", "below"]
        assert verdicts["w1"]["namespaces"] == "w4;w3;w2"


def loaded_history(art: Path, ours_now: float, flag: str | None) -> None:
    """Three quiet sessions (control 40.0-41.0 µs, ours 30.0-30.6 µs), then one whose control came
    back at 52.0 µs; NVML flagged the control's capture when `flag` is given."""
    for name, (ctl, ours) in {"q1": (40.0, 30.0), "q2": (40.6, 30.4), "q3": (41.0, 30.6)}.items():
        rows = [kt(*LNX, "triton", ctl), kt(*LNX, "cuda", ours), kt(*LNX, "torch", 33.0)]
        write_namespace(art, name, day(int(name[1])), rows, census=census_of(rows))
    rows = [kt(*LNX, "triton", 52.0), kt(*LNX, "cuda", ours_now), kt(*LNX, "torch", 33.1)]
    write_namespace(art, "busy", day(5), rows, census=census_of(rows),
                    flagged={(*LNX, "triton"): f"{flag} (2 at once; pids seen [4100, 4242])"} if flag else None)


LNX = ("layernorm", "2048x1536")
OURS_RANGE = "its own earlier range of 28.50-32.13 µs (the same kernel in 3 quiet namespaces, widened by the margin)"


def test_a_loaded_control_with_ours_steady(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    loaded_history(art, 30.3, PROCESS)
    out = tables(art, "busy")
    row = out["controls"].iloc[0]
    assert row["status"] == "under load" and row["under_load"] and row["nvml"] == "disturbed"
    assert row["suspect"] == "control" and not row["rankable"] and row["ours_position"] == "inside"
    assert (row["band_lo_us"], row["band_hi_us"]) == (pytest.approx(38.0), pytest.approx(43.05))
    assert not trust.rankable(out["controls"], *LNX)
    assert row["note"] == (
        "triton's layernorm 2048x1536 came back at 52.00 µs, above its band of 38.00-43.05 µs (observed 40.00-41.00 µs "
        f"across 3 quiet namespaces, widened by 5%), and NVML flagged the triton capture at this shape ({PROCESS}): it "
        f"ran under load. Ours (cuda) came back at 30.30 µs, inside {OURS_RANGE}: the load hit the control's capture, "
        "not the whole operation. No ranking follows from triton's pairings at this shape.")
    assert row["claim_note"] == (
        "Ours (cuda) at 30.30 µs against the control's band of 38.00-43.05 µs; no ranking follows from this pairing, "
        "because triton's capture (52.00 µs) came back above its band under load. Ours (cuda) came back at 30.30 µs, "
        f"inside {OURS_RANGE}: the load hit the control's capture, not the whole operation.")
    # drift: ours' capture was quiet and in its range, so it still bounds; the control is beside it, judged
    by = out["drift"].set_index("impl")
    assert out["earlier"] == "q3"
    assert by.loc["cuda", "role"] == "bound" and "the slowdown hit the control's capture alone" in by.loc["cuda", "note"]
    assert by.loc["triton", "role"] == "control" and by.loc["triton", "band_status"] == "under load"
    assert by.loc["torch", "role"] == "library"
    bound = out["bound"]
    assert bound["summary"] == ("Drift between q3 and busy is at most 1.0% (cuda at layernorm 2048x1536: 30.60 -> 30.30 µs), "
                                "from 1 kernel of ours that did not change.")
    assert bound["control"]["summary"] == ("The control (triton) moved +26.8% at layernorm 2048x1536 (41.00 -> 52.00 µs), "
                                           "above its band, under load, so that move is not drift.")
    assert not bound["control"]["inside_band"]
    assert trust.flags(out["controls"])[0] == (
        "Control above its band: triton at layernorm 2048x1536 came back at 52.00 µs against its band of 38.00-43.05 µs "
        f"(under load: {PROCESS}); no ranking follows from its pairings there.")
    assert_one_period(sentences_of(out))


def test_a_control_above_its_band_on_a_quiet_gpu_is_suspect_not_load(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    loaded_history(art, 30.3, None)
    row = tables(art, "busy")["controls"].iloc[0]
    assert row["status"] == "above" and not row["under_load"] and row["nvml"] == "quiet"
    assert row["suspect"] == "control" and not row["rankable"]
    assert row["claim_note"].startswith("Ours (cuda) at 30.30 µs against the control's band of 38.00-43.05 µs; no ranking "
                                        "follows from this pairing, because triton's capture (52.00 µs) came back above "
                                        "its band, a suspect capture.")
    assert trust.flags(art / "busy" / "tables" / "controls.csv") == [
        ("Control above its band: triton at layernorm 2048x1536 came back at 52.00 µs against its band of 38.00-43.05 µs "
        "(NVML saw nothing, so the capture is suspect); no ranking follows from its pairings there.")]
    # the suspect namespace still enters a later band: it was quiet
    rows = [kt(*LNX, "triton", 41.5), kt(*LNX, "cuda", 30.2)]
    write_namespace(art, "after", day(7), rows, census=census_of(rows))
    later = tables(art, "after")
    assert later["controls"].iloc[0]["namespaces"] == "q1;q2;q3;busy" and later["earlier"] == "q3"


def test_the_load_hit_the_whole_operation(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    loaded_history(art, 36.0, PROCESS)
    out = tables(art, "busy")
    row = out["controls"].iloc[0]
    assert row["status"] == "under load" and row["suspect"] == "group" and row["ours_position"] == "above"
    assert (f"Ours (cuda) came back at 36.00 µs, above {OURS_RANGE} too: ours moved with the control, so the whole "
            "operation's captures at this shape are suspect.") in row["note"]
    cuda = out["drift"].set_index("impl").loc["cuda"]
    assert cuda["role"] == "excluded" and cuda["reason"] == "suspect group"
    assert out["bound"]["count"] == 0
    assert out["bound"]["summary"] == ("No kernel of ours that did not change was captured cleanly in both q3 and busy, "
                                       "so drift between them is not bounded by any kernel.")
    assert_one_period(sentences_of(out))


def test_groups_on_two_gpus_are_not_ranked() -> None:
    bands = trust.control_bands(two_sessions())
    rows = [kt(*LN, "triton", 5.2, "GPU-b"), kt(*LN, "cuda", 6.0, "GPU-a")]
    row = trust.classify_controls(frame(rows), bands, gpu_state=quiet("x", rows)).iloc[0]
    assert row["status"] == "inside" and row["split_gpus"] and not row["rankable"] and row["suspect"] == ""
    assert "Ours (cuda) ran on GPU-a and triton on GPU-b, so this pairing compares two devices." in row["note"]
    assert row["claim_note"].endswith("because ours ran on GPU-a and triton on GPU-b.")


def capped_history(art: Path, control_now: float = 40.5, extent: str = "group", also: str | None = None,
                   impls: tuple[str, ...] = ("triton", "cuda", "torch"), earlier: bool = True) -> dict:
    """Three quiet sessions (control 40.0-41.0 µs; none unless `earlier`), then one whose captures at
    LNX NVML flagged (the software power cap, with `also` beside it where given) in `impls`, read
    over `extent`; its tables."""
    for name, ctl in ({"q1": 40.0, "q2": 40.6, "q3": 41.0} if earlier else {}).items():
        rows = [kt(*LNX, "triton", ctl), kt(*LNX, "cuda", 30.0), kt(*LNX, "torch", 33.0)]
        write_namespace(art, name, day(int(name[1])), rows, census=census_of(rows), extent="group")
    rows = [kt(*LNX, "triton", control_now), kt(*LNX, "cuda", 30.2), kt(*LNX, "torch", 33.1)]
    flag = "; ".join([POWER_CAP_FLAG, *([also] if also else [])])
    write_namespace(art, "capped", day(5), rows, census=census_of(rows), extent=extent,
                    flagged={(*LNX, impl): flag for impl in impls})
    return tables(art, "capped")


def test_a_group_under_its_own_power_cap_ranks_with_its_control_inside_its_band(tmp_path: Path) -> None:
    """The software power cap, read in the group's own windows at every capture and nothing else
    with it: it came in the group's time, so it holds the clock down under every implementation
    alike, and the pairing ranks where the control came back inside its band."""
    row = capped_history(tmp_path / "artifacts")["controls"].iloc[0]
    assert row["status"] == "inside" and row["nvml"] == "disturbed" and bool(row["own_power_cap"])
    assert bool(row["rankable"]) and row["suspect"] == "" and row["claim_note"] == ""
    assert row["note"] == (
        "triton's layernorm 2048x1536 came back at 40.50 µs, inside its band of 38.00-43.05 µs (observed 40.00-41.00 µs "
        "across 3 quiet namespaces, widened by 5%); NVML flagged the cuda, torch and triton captures at this shape "
        "(the GPU throttled during the capture [software power cap]), read in the group's own windows and for nothing else: a cap there holds the clock down "
        "under every implementation of its interleaved rounds alike (docs/method.md#a-quiet-gpu-watched). "
        "Ours can be ranked against triton at this shape.")


@pytest.mark.parametrize("case", ["session watch", "another process too", "one capture", "control above its band",
                                  "no band yet"])
def test_a_power_cap_ranks_only_alone_in_the_groups_own_windows_with_the_control_in_its_band(tmp_path: Path,
                                                                                            case: str) -> None:
    """Not ranked: the cap read by a watch over the whole session (another group's work may have
    drawn it), another process beside it, a cap read in one capture of the group only (it slowed
    that implementation, not the others), the control above its band even so, or no band yet to
    tell (the captures stay suspect)."""
    cases: dict[str, dict[str, Any]] = {"session watch": {"extent": "session"}, "another process too": {"also": PROCESS},
                                        "one capture": {"impls": ("cuda",)}, "control above its band": {"control_now": 44.0},
                                        "no band yet": {"earlier": False}}
    kwargs = cases[case]
    row = capped_history(tmp_path / "artifacts", **kwargs)["controls"].iloc[0]
    own = case in ("control above its band", "no band yet")
    status = {"control above its band": "under load", "no band yet": "establishing"}.get(case, "inside")
    assert not row["rankable"] and row["claim_note"] != "" and row["suspect"] == "group"
    assert bool(row["own_power_cap"]) == own and row["status"] == status


def test_rankable_reads_old_and_new_tables() -> None:
    new = pd.DataFrame([{"op": "a", "shape": "1", "status": "inside", "rankable": False}])
    old = pd.DataFrame([{"op": "a", "shape": "1", "status": "outside", "side": "above", "under_load": True},
                        {"op": "a", "shape": "2", "status": "inside", "side": None, "under_load": False}])
    assert not trust.rankable(new, "a", "1")
    assert not trust.rankable(old, "a", "1") and trust.rankable(old, "a", "2")
    assert not trust.rankable(old, "a", "3") and not trust.rankable(None, "a", "1")


# ---------------------------------------------------------------------------------------------
# Drift


def test_drift_is_bounded_by_ours_not_the_control_nor_a_disturbed_capture(tmp_path: Path) -> None:
    """The issue's case: our untouched kernels moved 1.2%, 0.4% and 0.0%, the control 4% inside its
    band, and one control capture came back 20% high; one capture of ours NVML flagged."""
    art = tmp_path / "artifacts"
    NA, MM = ("neighbor_aggregation", "1024x8192x32"), ("matmul", "512x512x512")
    TR = ("transpose", "4096x4096")
    e1 = [kt(*LN, "cuda", 10.0), kt(*LN, "triton", 8.0), kt(*SM, "cuda", 5.0), kt(*SM, "triton", 6.0),
          kt(*TR, "cuda", 20.0), kt(*TR, "triton", 30.0), kt(*MM, "cuda", 25.0), kt(*MM, "triton", 40.0),
          kt(*NA, "cuda", 3.0), kt(*NA, "triton", 4.0)]
    e2 = [kt(*LN, "cuda", 10.12), kt(*LN, "triton", 8.32), kt(*SM, "cuda", 5.02), kt(*SM, "triton", 6.05),
          kt(*TR, "cuda", 20.0), kt(*TR, "triton", 30.3), kt(*MM, "cuda", 25.1), kt(*MM, "triton", 48.0),
          kt(*NA, "cuda", 3.3), kt(*NA, "triton", 4.04)]
    write_namespace(art, "e1", day(1), e1, census=census_of(e1))
    write_namespace(art, "e2", day(2), e2, census=census_of(e2),
                    flagged={(*NA, "cuda"): "the GPU throttled during the capture (software power cap)"})
    out = tables(art, "e2")
    c = out["controls"].set_index(["op", "shape"])
    assert c.loc[MM, "status"] == "above" and c.loc[MM, "suspect"] == "control" and c.loc[MM, "ours_position"] == "inside"
    assert c.loc[NA, "status"] == "inside" and c.loc[NA, "suspect"] == "group" and not c.loc[NA, "rankable"]
    d = out["drift"].set_index(["op", "shape", "impl"])
    assert list(out["drift"].columns) == trust.DRIFT_COLUMNS
    assert {k[2] for k in d.index[d["role"] == "bound"]} == {"cuda"}
    assert d.loc[(*NA, "cuda"), "role"] == "excluded" and d.loc[(*NA, "cuda"), "reason"] == "disturbed"
    assert "software power cap" in d.loc[(*NA, "cuda"), "note"]
    assert d.loc[(*MM, "triton"), "role"] == "control" and d.loc[(*MM, "triton"), "band_status"] == "above"
    assert (d["role"] == "control").sum() == 5 and bool(d.loc[(*MM, "triton"), "unchanged_kernel"])
    bound = out["bound"]
    assert bound["count"] == 4 and bound["max_abs_change_pct"] == pytest.approx(1.2)
    assert bound["kernel"]["op"] == "layernorm" and bound["kernel"]["impl"] == "cuda"
    assert bound["summary"] == ("Drift between e1 and e2 is at most 1.2% (cuda at layernorm 4096x768: 10.00 -> 10.12 µs), "
                                "from 4 kernels of ours that did not change.")
    assert bound["control"]["summary"] == (
        "The control (triton) moved by at most 4.0% (layernorm 4096x768: 8.00 -> 8.32 µs), inside its band at 4 shapes; "
        "it moved +20.0% at matmul 512x512x512 (40.00 -> 48.00 µs), above its band, a suspect capture, so that move is "
        "not drift.")
    assert bound["sentence"] == f"{bound['summary']} {bound['control']['summary']}"
    assert bound["excluded_summary"] == "1 capture of ours left out of the bound: cuda at neighbor_aggregation 1024x8192x32 (disturbed)."
    ctx = trust_context.report_context(art / "e2" / "tables" / "controls.csv", art / "e2" / "tables" / "drift.csv",
                               gpu_state=art / "e2" / "tables" / "gpu_state.csv")
    assert ctx["bound"]["summary"] == bound["summary"] and ctx["earlier"] == "e1"
    assert [r["shape"] for r in ctx["above"]] == [MM[1]] and ctx["under_load"] == []
    assert ctx["rankable"] == {"layernorm 4096x768": True, "softmax 4096x1024": True, "transpose 4096x4096": True,
                               "matmul 512x512x512": False, "neighbor_aggregation 1024x8192x32": False}
    assert ctx["flags"] == [
        ("Control above its band: triton at matmul 512x512x512 came back at 48.00 µs against its band of 38.00-42.00 µs "
        "(NVML saw nothing, so the capture is suspect); no ranking follows from its pairings there."),
        "Disturbed capture: neighbor_aggregation 1024x8192x32 cuda: the GPU throttled during the capture (software power cap).",
    ]
    assert_one_period([*sentences_of(out), *ctx["flags"]])


def test_ours_changed_and_a_library_baseline_moved_while_the_control_held(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    TR = ("transpose", "2048x2048")
    c1 = [kt(*TR, "cuda", 20.0), kt(*TR, "triton", 22.0), kt(*TR, "external", 9.0), kt(*TR, "torch", 30.0)]
    c2 = [kt(*TR, "cuda", 14.0), kt(*TR, "triton", 22.3), kt(*TR, "external", 9.09), kt(*TR, "torch", 39.0)]
    write_namespace(art, "c1", day(1), c1, census=census_of(c1))
    write_namespace(art, "c2", day(2), c2, census=census_of(c2, cuda={"source_sha256": "f" * 64}))
    out = tables(art, "c2")
    assert out["controls"].iloc[0]["status"] == "inside" and out["controls"].iloc[0]["ours_position"] == "no range"
    d = out["drift"].set_index("impl")
    assert (d.loc["cuda", "role"], d.loc["cuda", "reason"]) == ("changed", "changed source")
    assert d.loc["cuda", "change_pct"] == pytest.approx(-30.0) and not d.loc["cuda", "unchanged_kernel"]
    assert (d.loc["torch", "role"], d.loc["torch", "reason"]) == ("library", "library baseline")
    assert d.loc["torch", "change_pct"] == pytest.approx(30.0) and "never compared across namespaces" in d.loc["torch", "note"]
    assert (d.loc["external", "role"], d.loc["triton", "role"]) == ("bound", "control")
    bound = out["bound"]
    assert bound["count"] == 1 and bound["max_abs_change_pct"] == pytest.approx(1.0)
    assert bound["roles"] == {"bound": 1, "control": 1, "library": 1, "changed": 1}
    assert bound["summary"] == ("Drift between c1 and c2 is at most 1.0% (external at transpose 2048x2048: 9.00 -> 9.09 µs), "
                                "from 1 kernel of ours that did not change.")
    assert bound["control"]["summary"] == "The control (triton) moved by at most 1.4% (transpose 2048x2048: 22.00 -> 22.30 µs), inside its band."
    assert bound["changed_summary"] == ("1 kernel of ours changed between c1 and c2 and does not bound drift: cuda at "
                                        "transpose 2048x2048 (changed source).")
    assert_one_period(sentences_of(out))


def test_drift_changed_compiler_and_specialization(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    a = write_namespace(art, "a", day(1), [kt(*LN, "cuda", 1.0), kt(*LN, "triton", 1.0)],
                        census=[census_row("layernorm", "cuda", "4096x768"), census_row("layernorm", "triton", "4096x768")])
    b = write_namespace(art, "b", day(2), [kt(*LN, "cuda", 1.0), kt(*LN, "triton", 1.0)],
                        census=[census_row("layernorm", "cuda", "4096x768", compiler="NVRTC 13.1"),
                                census_row("layernorm", "triton", "4096x768", specialization="BLOCK=256")])
    by = trust.drift(b, a).set_index("impl")
    assert (by.loc["cuda", "role"], by.loc["cuda", "reason"]) == ("changed", "changed compiler")
    assert (by.loc["triton", "role"], by.loc["triton", "reason"]) == ("control", "changed specialization")
    bound = trust.drift_bound(trust.drift(b, a))
    assert bound["count"] == 0 and bound["max_abs_change_pct"] is None
    assert "not bounded" in bound["summary"]
    assert bound["control"]["summary"] == "The control (triton) is not compared at layernorm 4096x768 (changed specialization)."


def test_drift_across_gpu_models_bounds_nothing(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    rows = [kt(*LN, "cuda", 1.0), kt(*LN, "triton", 2.0), kt(*LN, "torch", 3.0)]
    a = write_namespace(art, "a", day(1), rows, census=census_of(rows))
    b = write_namespace(art, "b", day(2), rows, census=census_of(rows), gpu="NVIDIA A100")
    d = trust.drift(b, a)
    assert not (d["role"] == "bound").any()
    assert set(zip(d["role"], d["reason"])) == {("library", "library baseline"), ("excluded", "different gpu")}


def test_drift_without_census(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    a = write_namespace(art, "a", day(1), [kt(*LN, "cuda", 1.0)])
    b = write_namespace(art, "b", day(2), [kt(*LN, "cuda", 1.1)])
    d = trust.drift(b, a).iloc[0]
    assert (d["role"], d["reason"]) == ("excluded", "no census") and not d["unchanged_kernel"]
    assert d["change_pct"] == pytest.approx(10.0) and "a or b" in d["note"]


def test_drift_bound_reads_a_drift_table_written_before_roles() -> None:
    old = pd.DataFrame([
        {"earlier": "x", "current": "y", "op": "a", "shape": "1", "impl": "cuda", "before_us": 1.0, "after_us": 1.02,
         "change_pct": 2.0, "unchanged_kernel": True, "reason": "", "note": "n"},
        {"earlier": "x", "current": "y", "op": "a", "shape": "1", "impl": "torch", "before_us": 1.0, "after_us": 2.0,
         "change_pct": 100.0, "unchanged_kernel": False, "reason": "torch", "note": "n"}])
    bound = trust.drift_bound(old)
    assert bound["count"] == 1 and bound["max_abs_change_pct"] == 2.0 and bound["control"] is None


# ---------------------------------------------------------------------------------------------
# The retained H200 namespaces (expectations derived from their files, never typed in)


def identity(ns: str, op: str, impl: str, shape: str) -> set[tuple[str, ...]]:
    """The census rows of (op, impl) serving `shape`, read straight from the retained CSV."""
    census = pd.read_csv(REAL / ns / "tables" / "census.csv", dtype=str)
    rows = census[(census["op"] == op) & (census["impl"] == impl)]
    return {(r.kernel, r.specialization, r.source_sha256, r.compiler, r.options)
            for r in rows.itertuples() if shape in str(r.shapes).split(";")}


def test_real_namespaces_drift() -> None:
    old_kt = pd.read_csv(REAL / OLD / "tables" / "kernel_time.csv", dtype={"shape": str})
    new_kt = pd.read_csv(REAL / NEW / "tables" / "kernel_time.csv", dtype={"shape": str})
    both = old_kt.merge(new_kt, on=["op", "shape", "impl"], suffixes=("_old", "_new"))
    assert ("layernorm", "4096x768") in set(zip(both["op"], both["shape"]))
    d = trust.drift(REAL / NEW, REAL / OLD)
    assert len(d) == len(both)
    for rec in both.to_dict("records"):
        row = d[(d["op"] == rec["op"]) & (d["shape"] == rec["shape"]) & (d["impl"] == rec["impl"])].iloc[0]
        assert row["before_us"] == pytest.approx(rec["kernel_time_us_old"])
        assert row["after_us"] == pytest.approx(rec["kernel_time_us_new"])
        assert row["change_pct"] == pytest.approx((rec["kernel_time_us_new"] / rec["kernel_time_us_old"] - 1) * 100)
        if rec["impl"] == "torch":
            assert row["role"] == "library"
            continue
        same = identity(OLD, rec["op"], rec["impl"], rec["shape"]) == identity(NEW, rec["op"], rec["impl"], rec["shape"])
        same = same and bool(identity(OLD, rec["op"], rec["impl"], rec["shape"]))
        assert bool(row["unchanged_kernel"]) is same, (rec["op"], rec["impl"])
        if rec["impl"] == "triton":
            assert row["role"] == "control"
        else:
            assert row["role"] == ("bound" if same else "changed"), (rec["op"], rec["impl"])
    bounding = d[d["role"] == "bound"]
    bound = trust.drift_bound(d)
    assert bound["count"] == len(bounding)
    if len(bounding):
        top = bounding.loc[bounding["change_pct"].abs().idxmax()]
        assert bound["max_abs_change_pct"] == pytest.approx(abs(top["change_pct"]))
        assert bound["summary"] == (f"Drift between {OLD} and {NEW} is at most {abs(top['change_pct']):.1f}% ({top['impl']} "
                                    f"at {top['op']} {top['shape']}: {top['before_us']:.2f} -> {top['after_us']:.2f} µs), "
                                    f"from {len(bounding)} kernel{'s' if len(bounding) != 1 else ''} of ours that did not change.")


WATCHED = ("h200-validate-1", "h200-ops-1", "h200-ops-solo-1")


def test_real_namespaces_controls_and_choice(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"  # three watched namespaces alone, without those retained later
    for name in (OLD, *WATCHED):
        shutil.copytree(REAL / name, art / name)
    cur = WATCHED[-1]
    assert trust.choose_earlier(art, cur) == WATCHED[1]
    assert trust.choose_earlier(art, OLD) is None  # nothing retained before it
    out = trust.namespace_controls(art, cur).set_index(["op", "shape"])
    new_kt = pd.read_csv(REAL / cur / "tables" / "kernel_time.csv", dtype={"shape": str})
    # h200-layernorm-1 has no gpu_state.csv: what NVML would have seen is unknown, so it enters the
    # bands (none of its sessions lies far above the others) and the band names it as unrecorded
    earlier = pd.concat([pd.read_csv(REAL / n / "tables" / "kernel_time.csv", dtype={"shape": str}) for n in (OLD, *WATCHED[:2])])
    earlier = earlier[earlier["impl"] == "triton"].groupby(["op", "shape"])["kernel_time_us"]
    unwatched = pd.read_csv(REAL / OLD / "tables" / "kernel_time.csv", dtype={"shape": str})
    unwatched = set(zip(unwatched[unwatched["impl"] == "triton"]["op"], unwatched[unwatched["impl"] == "triton"]["shape"]))
    for (op, shape), row in out.iterrows():
        assert (str(row["unrecorded"]) == OLD) is ((op, shape) in unwatched) and row["set_aside"] == ""
        lo, hi = earlier.min()[(op, shape)] * 0.95, earlier.max()[(op, shape)] * 1.05
        value = new_kt[(new_kt["op"] == op) & (new_kt["shape"] == shape) & (new_kt["impl"] == "triton")]["kernel_time_us"].iloc[0]
        assert row["status"] == ("inside" if lo <= value <= hi else "above" if value > hi else "below")
        assert row["band_lo_us"] == pytest.approx(lo) and row["band_hi_us"] == pytest.approx(hi)
        assert row["nvml"] == "quiet" and bool(row["rankable"]) is (row["status"] != "above")


def test_real_loaded_namespace(tmp_path: Path) -> None:
    """h200-loaded-1 ran beside another compute process (NVML saw it at every capture): its control
    came back inside its band, but no ranking follows, its cuda capture does not bound drift, and
    the flags say so."""
    art = tmp_path / "artifacts"
    for name in (OLD, *WATCHED, "h200-loaded-1"):
        shutil.copytree(REAL / name, art / name)
    out = tables(art, "h200-loaded-1")
    row = out["controls"].iloc[0]
    assert (row["status"], row["nvml"], row["suspect"], bool(row["rankable"])) == ("inside", "disturbed", "group", False)
    assert row["namespaces"] == ";".join((OLD, *WATCHED)) and row["unrecorded"] == OLD
    d = out["drift"].set_index("impl")
    assert out["earlier"] == "h200-ops-solo-1"
    assert (d.loc["cuda", "role"], d.loc["cuda", "reason"]) == ("excluded", "disturbed")
    t = art / "h200-loaded-1" / "tables"
    state = pd.read_csv(t / "gpu_state.csv")
    assert state["disturbed"].all() and len(state) == 3
    got = trust.flags(out["controls"], out["drift"], t / "counters.csv", t / "check.csv", t / "kernel_time.csv", state)
    impls = state["impl"].tolist()
    assert got == [f"Disturbed capture: layernorm 4096x768 {impls[0]}, {impls[1]} and {impls[2]}: {PROCESS}.",
                   f"Drift not bounded: {out['bound']['summary']}"]
    ctx = trust_context.report_context(t / "controls.csv", t / "drift.csv")
    assert ctx["set_aside_summary"] == ""  # h200-layernorm-1, unrecorded, is in the band, not left out of it
    assert_one_period([*sentences_of(out), *got])


def test_real_split_namespace_flags_two_gpus() -> None:
    """h200-ops-2 ran its matmul groups over two H200s: cuda on one, the rest on the other."""
    kt_path = REAL / "h200-ops-2" / "tables" / "kernel_time.csv"
    k = pd.read_csv(kt_path, dtype={"shape": str})
    split = k.groupby(["op", "shape"], sort=False)["gpu_uuid"].nunique()
    split = [key for key, n in split.items() if n > 1]
    got = trust.flags(kernel_time=kt_path)
    assert len(got) == len(split) > 0
    for (op, shape), text in zip(split, got):
        grp = k[(k["op"] == op) & (k["shape"] == shape)]
        assert text.startswith(f"Measured on two GPUs: {op} {shape} ran ")
        for uuid in grp["gpu_uuid"].unique():
            assert uuid in text
    assert_one_period(got)


def test_flags_in_their_fixed_order() -> None:
    ours = [kt(*LN, "cuda", 1.0, "GPU-1"), kt(*LN, "triton", 1.0, "GPU-2"), kt(*LN, "torch", 1.0, "GPU-2"),
            kt(*SM, "cuda", 1.0, "GPU-1"), kt(*SM, "triton", 1.0, "GPU-1")]
    counters = pd.DataFrame([
        {"namespace": "n", "op": op, "shape": shape, "impl": impl, "status": "unavailable",
         "reason": "ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."}
        for op, shape, impl in ((*LN, "cuda"), (*LN, "triton"), (*SM, "cuda"))] +
        [{"namespace": "n", "op": SM[0], "shape": SM[1], "impl": "triton", "status": "ok", "reason": None}])
    check = pd.DataFrame([
        {"op": LN[0], "shape": LN[1], "impl": "cuda", "passed": True, "max_abs_err": 1e-6, "error": None},
        {"op": SM[0], "shape": SM[1], "impl": "cuda", "passed": False, "max_abs_err": 0.5, "max_rel_err": 2.0,
         "atol": 1e-4, "rtol": 1e-4, "error": None},
        {"op": SM[0], "shape": SM[1], "impl": "triton", "passed": "False", "error": "CheckFailed: 12 outputs were not finite."}])
    state = pd.DataFrame(state_rows("n", ours, {(*SM, "triton"): "the GPU throttled during the capture (hardware slowdown)"}))
    controls = pd.DataFrame([{"op": SM[0], "shape": SM[1], "control": "triton", "kernel_time_us": 9.0, "band_lo_us": 5.0,
                              "band_hi_us": 6.0, "status": "under load", "nvml_flags": "the GPU throttled during the capture (hardware slowdown)"}])
    got = trust.flags(controls, None, counters, check, frame(ours), state)
    assert got == [
        ("Control above its band: triton at softmax 4096x1024 came back at 9.00 µs against its band of 5.00-6.00 µs "
        "(under load: the GPU throttled during the capture (hardware slowdown)); no ranking follows from its pairings there."),
        ("Counters unavailable: layernorm 4096x768 cuda and triton; softmax 4096x1024 cuda (ERR_NVGPUCTRPERM - The user "
        "does not have permission to access NVIDIA GPU Performance Counters on the target device 0)."),
        ("Measured on two GPUs: layernorm 4096x768 ran cuda on GPU-1 and triton and torch on GPU-2, so a ratio between "
        "captures on different GPUs compares two devices."),
        "Check failed: softmax 4096x1024 cuda (max abs error 0.5, max rel error 2, atol 0.0001, rtol 0.0001).",
        "Check failed: softmax 4096x1024 triton (CheckFailed: 12 outputs were not finite).",
        "Disturbed capture: softmax 4096x1024 triton: the GPU throttled during the capture (hardware slowdown).",
    ]
    assert_one_period(got)
    every = counters.assign(status="unavailable", reason="ERR_NVGPUCTRPERM")
    assert trust.flags(counters=every) == ["Counters unavailable: all 4 captures (ERR_NVGPUCTRPERM)."]
    assert trust.flags() == []



def test_each_check_says_it_was_clean_only_where_it_ran_and_raised_no_flag() -> None:
    """review(): the clean clause of a check is said where its table has rows and it raised no flag;
    a check that flagged says nothing clean (a flagged run's summary must not claim "no disturbed
    capture"), and one whose table is absent or empty says nothing at all."""
    ours = [kt(*LN, "cuda", 1.0, "GPU-1"), kt(*LN, "triton", 1.0, "GPU-1"), kt(*SM, "cuda", 1.0, "GPU-1")]
    counters = pd.DataFrame([{"namespace": "n", "op": op, "shape": shape, "impl": impl, "status": "ok", "reason": None}
                             for op, shape, impl in ((*LN, "cuda"), (*SM, "cuda"))])
    check = pd.DataFrame([{"op": LN[0], "shape": LN[1], "impl": "cuda", "passed": True, "error": None}])
    state = pd.DataFrame(state_rows("n", ours))
    controls = pd.DataFrame([{"op": SM[0], "shape": SM[1], "control": "triton", "kernel_time_us": 5.5, "band_lo_us": 5.0,
                              "band_hi_us": 6.0, "status": "inside"}])
    drift = pd.DataFrame([{"earlier": "a", "current": "b", "op": LN[0], "shape": LN[1], "impl": "cuda", "before_us": 1.0,
                           "after_us": 1.01, "change_pct": 1.0, "unchanged_kernel": True, "role": "bound"}])
    clean = trust.review(controls, drift, counters, check, frame(ours), state)
    assert clean.flags == []
    assert clean.clean == [c.clean for c in trust.CHECKS] == [
        "no control above its band", "no counters missing", "no group measured on two GPUs", "no failed check",
        "no disturbed capture", "drift bounded by our unchanged kernels"]
    # each check flagged in turn: its clause leaves, the others stay
    flagged = {
        "controls": controls.assign(status="above", nvml="quiet"),
        "drift": drift.assign(role="excluded", reason="disturbed"),
        "counters": counters.assign(status="unavailable", reason="ERR_NVGPUCTRPERM"),
        "check": check.assign(passed=False, error="CheckFailed: 1 output was not finite."),
        "kernel_time": frame([*ours, kt(*LN, "torch", 1.0, "GPU-2")]),
        "gpu_state": pd.DataFrame(state_rows("n", ours, {(*LN, "cuda"): "the GPU throttled during the capture (software power cap)"})),
    }
    tables = {"controls": controls, "drift": drift, "counters": counters, "check": check, "kernel_time": frame(ours),
              "gpu_state": state}
    for c in trust.CHECKS:
        got = trust.review(**{**tables, c.table: flagged[c.table]})
        assert len(got.flags) == 1 and got.flags == c.raise_flags(flagged[c.table]), c.table
        assert got.clean == [o.clean for o in trust.CHECKS if o is not c], c.table
        # absent, or present without rows: the check ran on nothing and says nothing
        for nothing in (None, flagged[c.table].iloc[0:0]):
            got = trust.review(**{**tables, c.table: nothing})
            assert got.flags == [] and got.clean == [o.clean for o in trust.CHECKS if o is not c], c.table
    assert trust.review() == trust.Review([], [])

def test_trust_tables_on_retained_copy(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    for n in (OLD, *WATCHED):
        shutil.copytree(REAL / n, art / n)
    cur = WATCHED[-1]
    c_out, d_out = art / cur / "tables" / "controls.csv", art / cur / "tables" / "drift.csv"
    out = trust.trust_tables(art, cur, c_out, d_out)
    assert out["earlier"] == WATCHED[1]
    controls, drifted = pd.read_csv(c_out), pd.read_csv(d_out)
    assert list(controls.columns) == trust.CONTROL_COLUMNS and list(drifted.columns) == trust.DRIFT_COLUMNS
    new_kt = pd.read_csv(art / cur / "tables" / "kernel_time.csv")
    assert len(controls) == len(new_kt[["op", "shape"]].drop_duplicates())
    assert set(controls["status"]) <= set(trust.STATUSES) and set(drifted["role"]) <= set(trust.ROLES)
    ctx = trust_context.report_context(c_out, d_out)
    assert ctx["earlier"] == WATCHED[1] and ctx["bound"]["summary"] == out["bound"]["summary"]
    assert len(ctx["controls"]) == len(controls)
    assert ctx["set_aside"] == [] and set(controls["unrecorded"].dropna()) == {OLD}
    assert_one_period(sentences_of(out))
    # the oldest namespace has nothing before it: every control establishing, drift header only
    first = trust.trust_tables(art, OLD, tmp_path / "c.csv", tmp_path / "d.csv")
    assert first["earlier"] is None and set(first["controls"]["status"]) == {"establishing"}
    assert pd.read_csv(tmp_path / "d.csv").empty
    assert trust_context.report_context(tmp_path / "c.csv", tmp_path / "d.csv")["bound"] is None
    assert trust_context.report_context(None, tmp_path / "absent.csv")["controls"] == []
    # trust tables enter the history index like any other table
    db = history.build_index(art, tmp_path / "h.sqlite")
    import sqlite_utils

    assert sqlite_utils.Database(db)["controls"].count_where("namespace = ?", [cur]) == len(controls)
    files = trust.retained_inputs(art, cur)
    assert (art / WATCHED[0] / "tables" / "gpu_state.csv").as_posix() in files
    assert not any(f"/{cur}/" in f for f in files)
    assert trust.retained_inputs(art, OLD) == []  # a later namespace is never an input of an older one


# ---------------------------------------------------------------------------------------------
# Choosing the earlier namespace


def test_choose_earlier(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    write_namespace(art, "old-shared", day(1), [kt(*LN, "cuda", 1.0)])
    write_namespace(art, "mid-shared", day(2), [kt(*LN, "triton", 1.0)])
    write_namespace(art, "late-other-op", day(3), [kt(*SM, "cuda", 1.0)])
    write_namespace(art, "late-other-gpu", day(4), [kt(*LN, "cuda", 1.0)], gpu="NVIDIA A100")
    write_namespace(art, "current", day(5), [kt(*LN, "cuda", 1.0), kt(*LN, "torch", 1.0)])
    write_namespace(art, "future", day(6), [kt(*LN, "cuda", 1.0)])
    assert trust.choose_earlier(art, "current") == "mid-shared"
    assert trust.choose_earlier(art, "current", configured="old-shared") == "old-shared"
    assert trust.choose_earlier(art, "old-shared") is None
    with pytest.raises(EvidenceError):
        trust.choose_earlier(art, "current", configured="no-such")
    with pytest.raises(EvidenceError):
        trust.choose_earlier(art, "current", configured="current")
    assert trust.earlier_namespaces(art, "current") == ["old-shared", "mid-shared", "late-other-op", "late-other-gpu"]


def test_retained_accepts_tuples_and_rejects_nonsense(tmp_path: Path) -> None:
    hist = trust.retained([("x", frame([kt(*LN, "triton", 1.0)]))])
    assert hist[0].namespace == "x" and hist[0].census is None and hist[0].gpu_state is None
    with pytest.raises(EvidenceError):
        trust.retained(tmp_path / "nothing-here")


def test_choose_earlier_skips_loaded_and_disturbed_namespaces(tmp_path: Path) -> None:
    """Drift is bounded against a clean run: a later namespace whose captures NVML flagged
    (h200-loaded-1 was one) or whose control came back above its band is passed over. Whether its
    control was above its band is derived now, not read from its own (possibly older) controls.csv."""
    art = tmp_path / "artifacts"
    write_namespace(art, "quiet", day(1), [kt(*LN, "triton", 1.0)])
    write_namespace(art, "slow", day(2), [kt(*LN, "triton", 1.4)],
                    controls=[{"op": LN[0], "shape": LN[1], "status": "inside", "under_load": False}])
    ns = write_namespace(art, "disturbed", day(3), [kt(*LN, "triton", 1.0), kt(*LN, "cuda", 1.0)],
                         flagged={(*LN, "triton"): PROCESS})
    write_namespace(art, "current", day(4), [kt(*LN, "triton", 1.0)])
    assert trust.choose_earlier(art, "current") == "quiet"
    assert trust.namespace_controls(art, "slow").iloc[0]["status"] == "above"
    assert trust.load_namespace(ns).disturbed and not trust.load_namespace(art / "quiet").disturbed


def test_a_run_over_two_gpus_of_one_model_compares_with_one_gpu_runs(tmp_path: Path) -> None:
    """A namespace whose groups ran on two H200s records both; its GPU model is still 'NVIDIA
    H200', so drift and bands take the one-GPU namespaces before it."""
    art = tmp_path / "artifacts"
    write_namespace(art, "one-gpu", day(1), [kt(*LN, "triton", 1.0)])
    two = write_namespace(art, "two-gpus", day(2), [kt(*LN, "triton", 1.0)])
    prov = json.loads((two / "provenance.json").read_text())
    prov["gpus"] = [{"name": "NVIDIA H200", "uuid": "a"}, {"name": "NVIDIA H200", "uuid": "b"}]
    (two / "provenance.json").write_text(json.dumps(prov))
    assert trust.load_namespace(two).gpu == "NVIDIA H200"
    assert trust.choose_earlier(art, "two-gpus") == "one-gpu"
    assert history.namespace_row(two)["gpu_name"] == "NVIDIA H200"
    assert history.namespace_row(two)["gpu_count"] == 2



def test_the_same_machine_code_is_the_same_kernel_whatever_its_source() -> None:
    """identity_change: the same inputs are the same kernel (even where the compiler wrote other SASS
    for them); so is the same SASS for every kernel serving the shape, the source edited elsewhere;
    another source with other SASS, or with SASS unknown on either side, is a changed source."""
    def ident(source: str, sass: str, kernel: str = "k<1>", spec: str = "block=128") -> frozenset[tuple[str, ...]]:
        census = pd.DataFrame([{"op": "softmax", "impl": "cuda", "shapes": "4096x1024", "kernel": kernel,
                                "specialization": spec, "source_sha256": source, "compiler": "nvrtc 13.0",
                                "options": "-O3", "sass_sha256": sass}])
        got = trust.kernel_identity(census, "softmax", "cuda", "4096x1024")
        assert got == {(kernel, spec, source, "nvrtc 13.0", "-O3", sass)}
        return got

    assert trust.identity_change(ident("a", "x"), ident("a", "x")) is None
    assert trust.identity_change(ident("a", "x"), ident("a", "y")) is None  # same inputs, other code: NVRTC's doing
    assert trust.identity_change(ident("a", "x"), ident("b", "x")) is None  # same code from an edited file
    assert trust.identity_change(ident("a", "x"), ident("b", "y")) == "changed source"
    assert trust.identity_change(ident("a", ""), ident("b", "")) == "changed source"  # code unknown: inputs decide
    assert trust.identity_change(ident("a", "x"), ident("b", "")) == "changed source"
    assert trust.identity_change(ident("a", "x"), ident("b", "x", spec="block=256")) == "changed source"
    assert trust.identity_change(ident("a", "x"), ident("a", "x", spec="block=256")) == "changed specialization"
    assert trust.identity_change(ident("a", "x"), frozenset()) == "missing"


def test_drift_is_bounded_by_a_kernel_whose_file_changed_but_whose_code_did_not(tmp_path: Path) -> None:
    """Our cuda kernel's source hash changed between two namespaces (another kernel added to its
    file) while its SASS did not: it still bounds drift. With other SASS it is 'changed source'."""
    art = tmp_path / "artifacts"
    TR = ("transpose", "2048x2048")
    c1 = [kt(*TR, "cuda", 20.0), kt(*TR, "triton", 22.0), kt(*TR, "torch", 30.0)]
    c2 = [kt(*TR, "cuda", 20.2), kt(*TR, "triton", 22.1), kt(*TR, "torch", 30.0)]
    write_namespace(art, "c1", day(1), c1, census=census_of(c1, cuda={"sass_sha256": "e" * 64}))
    write_namespace(art, "c2", day(2), c2, census=census_of(c2, cuda={"source_sha256": "f" * 64, "sass_sha256": "e" * 64}))
    d = tables(art, "c2")["drift"].set_index("impl")
    assert (d.loc["cuda", "role"], d.loc["cuda", "reason"]) == ("bound", "") and d.loc["cuda", "unchanged_kernel"]
    write_namespace(art, "c3", day(3), c2, census=census_of(c2, cuda={"source_sha256": "0" * 64, "sass_sha256": "d" * 64}))
    out = tables(art, "c3")
    assert out["earlier"] == "c2"
    d = out["drift"].set_index("impl")
    assert (d.loc["cuda", "role"], d.loc["cuda", "reason"]) == ("changed", "changed source")

def test_a_tagged_shape_takes_the_identity_of_its_dimensions() -> None:
    """The census lists 65536x1048576x64 for the kernels that also serve the power-law graph of
    that size (h200-ops-1 and -2 do): the tagged shape is served by them, so its control band is
    not set aside as 'missing'."""
    census = pd.DataFrame([{"op": "neighbor_aggregation", "impl": "triton", "shapes": "65536x1048576x64",
                            "kernel": "neighbor_sum", "specialization": "F=64", "source_sha256": "s",
                            "compiler": "c", "options": ""}])
    plain = trust.kernel_identity(census, "neighbor_aggregation", "triton", "65536x1048576x64")
    tagged = trust.kernel_identity(census, "neighbor_aggregation", "triton", "65536x1048576x64-powerlaw")
    assert plain and tagged == plain
    assert not trust.kernel_identity(census, "neighbor_aggregation", "triton", "65536x1048576x16")


def test_a_census_read_once_answers_again_after_it_grew() -> None:
    """The identity index is kept per census frame; a frame that gained a row is read again, and a
    fresh frame with the same rows gets the same answer."""
    row = {"op": "softmax", "impl": "cuda", "shapes": "4096x1024", "kernel": "softmax_rows", "specialization": "",
           "source_sha256": "a", "compiler": "c", "options": ""}
    census = pd.DataFrame([row])
    first = trust.kernel_identity(census, "softmax", "cuda", "4096x1024")
    assert {r[2] for r in first} == {"a"}
    assert not trust.kernel_identity(census, "softmax", "cuda", "8192x4096")
    census.loc[1] = {**row, "shapes": "4096x1024;8192x4096", "source_sha256": "b"}
    assert {r[2] for r in trust.kernel_identity(census, "softmax", "cuda", "4096x1024")} == {"a", "b"}
    assert {r[2] for r in trust.kernel_identity(census, "softmax", "cuda", "8192x4096")} == {"b"}
    assert trust.kernel_identity(pd.DataFrame([row]), "softmax", "cuda", "4096x1024") == first


def test_a_census_whose_columns_were_replaced_is_read_again() -> None:
    """The identity index is stamped by the frame's columns object: renaming a column (a new
    Index, the same length) reads the frame again."""
    census = pd.DataFrame([{"op": "softmax", "impl": "cuda", "shapes": "4096x1024", "kernel": "softmax_rows",
                            "specialization": "", "source_sha256": "a", "compiler": "c", "options": ""}])
    assert {r[2] for r in trust.kernel_identity(census, "softmax", "cuda", "4096x1024")} == {"a"}
    census.columns = [("renamed" if c == "source_sha256" else c) for c in census.columns]
    assert {r[2] for r in trust.kernel_identity(census, "softmax", "cuda", "4096x1024")} == {""}


def test_every_sentence_on_the_retained_namespaces_ends_with_one_period(tmp_path: Path) -> None:
    """Every note, claim, summary and flag derived for the retained H200 namespaces (on a copy)."""
    art = tmp_path / "artifacts"
    shutil.copytree(REAL, art)
    found = []
    for ns in ("h200-validate-1", "h200-ops-1", "h200-ops-solo-1", "h200-loaded-1", "h200-ops-2", "h200-ops-3"):
        out = tables(art, ns)
        t = art / ns / "tables"
        ctx = trust_context.report_context(t / "controls.csv", t / "drift.csv", counters=t / "counters.csv", check=t / "check.csv",
                                   kernel_time=t / "kernel_time.csv", gpu_state=t / "gpu_state.csv")
        found += [*sentences_of(out), *ctx["flags"]]
        if ctx["set_aside_summary"]:
            found.append(ctx["set_aside_summary"])
            assert ctx["set_aside_summary"].startswith("Left out of the control bands: ")
    assert any("without an NVML record" in s for s in found)
    assert_one_period(found)
    assert len(found) > 250


def test_parentheses_inside_parentheses_alternate_with_brackets_and_unpaired_ones_stay() -> None:
    from harness.tables.phrases import in_parentheses, nested

    assert nested("a (b (c (d) e) f) g (h)") == "a (b [c (d) e] f) g (h)"
    assert nested("flagged (the GPU throttled (software power cap))") == "flagged (the GPU throttled [software power cap])"
    assert nested("no pair (here") == "no pair (here" and nested("nor here) (x)") == "nor here) (x)"
    assert nested("[already] (a [b] (c))") == "[already] (a [b] [c])"
    assert nested(None) == "" and nested(float("nan")) == ""
    assert in_parentheses("a (b (c))") == "(a [b (c)])"


def test_namespaces_left_out_of_a_band_are_said_by_reason_and_counted_past_three() -> None:
    """A band's set-aside namespaces are grouped by why: up to three named, more counted with the
    earliest and latest named (a run on a new GPU model sets aside every earlier one, 80 of them on the
    lent H100s, which the sentence named one by one); a why with parentheses and '; ' of its own
    is read whole, and the summary of the report context says the same."""
    from harness.tables.phrases import set_aside_items, set_aside_text

    flag = "NVML flagged its captures there: the GPU throttled (software power cap); another compute process (pids seen: 7)"
    cell = "; ".join([f"h200-ops-{i} (another GPU model: NVIDIA H200)" for i in range(1, 6)] + [f"h100-a-1 ({flag})"])
    items = set_aside_items(cell)
    assert len(items) == 6 and items[-1] == ("h100-a-1", flag) and items[0] == ("h200-ops-1", "another GPU model: NVIDIA H200")
    said = "(NVML flagged its captures there: the GPU throttled [software power cap]; another compute process [pids seen: 7])"
    assert set_aside_text((n, why, "") for n, why in items) == (
        f"5 namespaces, the earliest h200-ops-1 and the latest h200-ops-5 (another GPU model: NVIDIA H200); "
        f"h100-a-1 {said}")  # the why's own parentheses nest as brackets
    assert set_aside_text([("a", "why", "at 2 shapes"), ("b", "why", "")]) == "a at 2 shapes and b (why)"
    assert set_aside_items("") == [] and set_aside_items(float("nan")) == []
    rows = pd.DataFrame([{"op": "softmax", "shape": s, "set_aside": cell, "status": "establishing", "control": "triton"}
                         for s in ("4096x1024", "8192x4096")])
    summary = trust_context.report_context(rows, None)["set_aside_summary"]
    assert summary == (f"Left out of the control bands: 5 namespaces, the earliest h200-ops-1 and the latest h200-ops-5 "
                       f"(another GPU model: NVIDIA H200); h100-a-1 at softmax 4096x1024 and softmax 8192x4096 {said}.")


def test_the_margin_default_is_written_once() -> None:
    """The control band's default margin is the config schema's `trust.margin` default; no module
    of harness/ writes the number again."""
    import re

    import yaml

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert trust.MARGIN == schema["properties"]["trust"]["properties"]["margin"]["default"]
    again = [f"{p.relative_to(ROOT)}:{i + 1}" for p in sorted((ROOT / "harness").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines())
             if re.search(r"margin\W[^\n]*\b0\.05\b", line)]
    assert again == []
