"""Control bands, drift between namespaces and the choice of the earlier namespace (CPU only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import ROOT
from harness.errors import EvidenceError
from harness.tables import history, trust

REAL = ROOT / "artifacts"
OLD, NEW = "h200-layernorm-1", "h200-ops-defaults-1"
SRC = {"cuda": "a" * 64, "triton": "b" * 64, "external": "c" * 64}


def kt(op: str, shape: str, impl: str, us: float | None) -> dict:
    return {"op": op, "shape": shape, "impl": impl, "kernel_time_us": us}


def census_row(op: str, impl: str, shapes: str, **over: str) -> dict:
    row = {"op": op, "impl": impl, "kernel": f"{op}_{impl}", "specialization": "BLOCK=128", "shapes": shapes,
           "source_sha256": SRC[impl], "compiler": "NVRTC 13.0" if impl == "cuda" else "triton 3.6.0 / ptxas 12.8.93",
           "options": "-arch=sm_90" if impl == "cuda" else "num_warps=4 num_stages=3 target=cuda:90"}
    row.update(over)
    return row


def write_namespace(artifacts: Path, name: str, date: str | None, kernel_time: list[dict], census: list[dict] | None = None,
                    gpu: str = "NVIDIA H200", cache_mode: str = "hot", controls: list[dict] | None = None) -> Path:
    ns = artifacts / name
    (ns / "tables").mkdir(parents=True)
    pd.DataFrame([{"namespace": name, "cache_mode": cache_mode, **r} for r in kernel_time]).to_csv(
        ns / "tables" / "kernel_time.csv", index=False)
    if census is not None:
        pd.DataFrame([{"namespace": name, **r} for r in census]).to_csv(ns / "tables" / "census.csv", index=False)
    if controls is not None:
        pd.DataFrame(controls).to_csv(ns / "tables" / "controls.csv", index=False)
    if date is not None:
        (ns / "provenance.json").write_text(json.dumps({
            "namespace": name, "date_utc": date, "git": {"commit": "abc", "dirty": False},
            "gpus": [{"name": gpu, "uuid": f"uuid-{name}"}], "config": {"cache_mode": cache_mode}}))
    return ns


def frame(rows: list[dict], cache_mode: str = "hot") -> pd.DataFrame:
    return pd.DataFrame([{"cache_mode": cache_mode, **r} for r in rows])


LN, SM = ("layernorm", "4096x768"), ("softmax", "4096x1024")


# ---------------------------------------------------------------------------------------------
# Control bands and their classification


def two_sessions() -> list[tuple[str, pd.DataFrame]]:
    return [("s1", frame([kt(*LN, "triton", 5.0), kt(*LN, "cuda", 6.0), kt(*LN, "torch", 12.0)])),
            ("s2", frame([kt(*LN, "triton", 5.4), kt(*LN, "cuda", 6.1)]))]


def test_band_is_min_max_widened_by_margin() -> None:
    bands = trust.control_bands(two_sessions(), control="triton", margin=0.05)
    assert len(bands) == 1
    b = bands.iloc[0]
    assert (b["op"], b["shape"], b["control"]) == LN + ("triton",)
    assert b["observed_min_us"] == 5.0 and b["observed_max_us"] == 5.4
    assert b["band_lo_us"] == pytest.approx(5.0 * 0.95) and b["band_hi_us"] == pytest.approx(5.4 * 1.05)
    assert b["n_namespaces"] == 2 and b["namespaces"] == "s1;s2"
    assert (b["min_namespace"], b["max_namespace"]) == ("s1", "s2")
    # another control, another margin
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


def test_classify_inside_outside_establishing() -> None:
    bands = trust.control_bands(two_sessions(), margin=0.05)
    hi = 5.4 * 1.05
    cur = frame([kt(*LN, "triton", 6.10), kt(*LN, "cuda", 5.9), kt(*SM, "triton", 5.9), kt("matmul", "64x64x64", "cuda", 3.0)])
    out = trust.classify_controls(cur, bands, "triton").set_index(["op", "shape"])
    above = out.loc[LN]
    assert above["status"] == "outside" and above["side"] == "above" and bool(above["under_load"]) is True
    assert above["note"] == (f"triton's layernorm 4096x768 came back at 6.10 us, above its band of 4.75-{hi:.2f} us "
                             "(observed 5.00-5.40 us across 2 namespaces, widened by 5%): this capture probably ran "
                             "under load, so its comparisons quote the band instead of this capture.")
    new = out.loc[SM]
    assert new["status"] == "establishing" and bool(new["under_load"]) is False
    assert new["note"].startswith("No earlier namespace measured triton's softmax 4096x1024: its band is being established")
    none = out.loc[("matmul", "64x64x64")]
    assert none["status"] == "no_control" and bool(none["under_load"]) is False
    for value in (5.2, 5.0 * 0.95, hi):  # inside, both edges included
        row = trust.classify_controls(frame([kt(*LN, "triton", value)]), bands).iloc[0]
        assert row["status"] == "inside" and not row["under_load"], value
        assert "a clean capture by this control" in row["note"]
    below = trust.classify_controls(frame([kt(*LN, "triton", 4.0)]), bands).iloc[0]
    assert below["status"] == "outside" and below["side"] == "below" and bool(below["under_load"]) is False
    assert "load cannot cause" in below["note"]


def test_margin_decides_the_edge() -> None:
    cur = frame([kt(*LN, "triton", 5.6)])  # 3.7% above the highest observed 5.4
    assert trust.classify_controls(cur, trust.control_bands(two_sessions(), margin=0.05)).iloc[0]["status"] == "inside"
    assert trust.classify_controls(cur, trust.control_bands(two_sessions(), margin=0.03)).iloc[0]["status"] == "outside"


def test_band_filters_gpu_cache_mode_and_changed_control(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    write_namespace(art, "h200-a", "2026-12-01T00:00:00+00:00", [kt(*LN, "triton", 5.0)],
                    census=[census_row("layernorm", "triton", "4096x768")])
    write_namespace(art, "a100-b", "2026-12-02T00:00:00+00:00", [kt(*LN, "triton", 9.0)],
                    census=[census_row("layernorm", "triton", "4096x768")], gpu="NVIDIA A100")
    write_namespace(art, "h200-c", "2026-12-03T00:00:00+00:00", [kt(*LN, "triton", 5.2)],
                    census=[census_row("layernorm", "triton", "4096x768", source_sha256="d" * 64)])
    write_namespace(art, "h200-d", "2026-12-04T00:00:00+00:00", [kt(*LN, "triton", 7.0)],
                    census=[census_row("layernorm", "triton", "4096x768")],
                    controls=[{"op": "layernorm", "shape": "4096x768", "status": "outside", "under_load": True}])
    current_census = pd.DataFrame([census_row("layernorm", "triton", "4096x768")])
    all_b = trust.control_bands(art).iloc[0]
    assert all_b["n_namespaces"] == 3 and "h200-d (under load)" in all_b["set_aside"]
    b = trust.control_bands(art, gpu="NVIDIA H200", current_census=current_census).iloc[0]
    assert b["namespaces"] == "h200-a" and b["observed_max_us"] == 5.0
    assert b["set_aside"] == "h200-c (changed source);h200-d (under load)"
    assert trust.control_bands(art, cache_mode="cold").empty
    # every earlier capture set aside: the band is being established again
    changed = pd.DataFrame([census_row("layernorm", "triton", "4096x768", options="num_warps=8")])
    only = trust.control_bands(art, gpu="NVIDIA H200", current_census=changed)
    assert only.iloc[0]["n_namespaces"] == 0 and pd.isna(only.iloc[0]["band_lo_us"])
    row = trust.classify_controls(frame([kt(*LN, "triton", 5.1)]), only).iloc[0]
    assert row["status"] == "establishing" and "established again" in row["note"]
    assert "h200-a (changed options)" in row["note"]


def test_band_from_index_equals_band_from_folders(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    for n in (OLD, NEW):
        shutil.copytree(REAL / n, art / n)
    index = history.build_index(art, tmp_path / "history.sqlite")
    from_dirs = trust.control_bands(art)
    from_index = trust.control_bands(index)
    pd.testing.assert_frame_equal(from_dirs, from_index, check_dtype=False)


# ---------------------------------------------------------------------------------------------
# Drift


def synthetic_pair(tmp_path: Path, gpu_after: str = "NVIDIA H200") -> tuple[Path, Path]:
    art = tmp_path / "artifacts"
    before = write_namespace(art, "before", "2026-12-01T00:00:00+00:00", [
        kt(*LN, "cuda", 10.0), kt(*LN, "triton", 20.0), kt(*LN, "torch", 30.0),
        kt(*SM, "cuda", 10.0), kt(*SM, "triton", 10.0), kt("transpose", "64x64", "external", 8.0),
        kt("transpose", "64x64", "cuda", 4.0), kt("matmul", "8x8x8", "cuda", 1.0),
    ], census=[
        census_row("layernorm", "cuda", "4096x768;8192x768"), census_row("layernorm", "triton", "4096x768"),
        census_row("softmax", "cuda", "4096x1024"), census_row("softmax", "triton", "4096x1024"),
        census_row("transpose", "external", "64x64", compiler="ptxas 13.0"),
    ])
    after = write_namespace(art, "after", "2026-12-02T00:00:00+00:00", [
        kt(*LN, "cuda", 11.0), kt(*LN, "triton", 19.0), kt(*LN, "torch", 45.0),
        kt(*SM, "cuda", 12.0), kt(*SM, "triton", 10.0), kt("transpose", "64x64", "external", 8.8),
        kt("transpose", "64x64", "cuda", 4.0), kt("neighbor_aggregation", "4x16x8", "cuda", 2.0),
    ], census=[
        census_row("layernorm", "cuda", "4096x768"), census_row("layernorm", "triton", "4096x768"),
        census_row("softmax", "cuda", "4096x1024", source_sha256="e" * 64),
        census_row("softmax", "triton", "4096x1024", options="num_warps=8 num_stages=3 target=cuda:90"),
        census_row("transpose", "external", "64x64", compiler="ptxas 13.0"),
    ], gpu=gpu_after)
    return before, after


def test_drift_unchanged_excluded_sign_and_percent(tmp_path: Path) -> None:
    before, after = synthetic_pair(tmp_path)
    d = trust.drift(after, before)
    assert list(d.columns) == trust.DRIFT_COLUMNS
    by = d.set_index(["op", "shape", "impl"])
    # only (op, shape, impl) measured in both: matmul (before only) and neighbor_aggregation (after only) are absent
    assert ("matmul", "8x8x8", "cuda") not in by.index and ("neighbor_aggregation", "4x16x8", "cuda") not in by.index
    assert len(d) == 7
    cuda = by.loc[LN + ("cuda",)]
    assert bool(cuda["unchanged_kernel"]) and cuda["reason"] == ""
    assert (cuda["before_us"], cuda["after_us"]) == (10.0, 11.0) and cuda["change_pct"] == pytest.approx(10.0)
    tri = by.loc[LN + ("triton",)]
    assert bool(tri["unchanged_kernel"]) and tri["change_pct"] == pytest.approx(-5.0)
    torch = by.loc[LN + ("torch",)]
    assert not torch["unchanged_kernel"] and torch["reason"] == "torch" and "library" in torch["note"]
    assert torch["change_pct"] == pytest.approx(50.0)  # listed, never used as a bound
    assert by.loc[SM + ("cuda",)]["reason"] == "changed source"
    assert by.loc[SM + ("triton",)]["reason"] == "changed options"
    ext = by.loc[("transpose", "64x64", "external")]
    assert bool(ext["unchanged_kernel"]) and ext["change_pct"] == pytest.approx(10.0)
    missing = by.loc[("transpose", "64x64", "cuda")]
    assert missing["reason"] == "missing" and "before or after" in missing["note"]

    bound = trust.drift_bound(d)
    assert bound["count"] == 3 and bound["max_abs_change_pct"] == pytest.approx(10.0)
    assert bound["max_change_pct"] == pytest.approx(10.0) and bound["min_change_pct"] == pytest.approx(-5.0)
    assert bound["excluded_reasons"] == {"torch": 1, "changed source": 1, "changed options": 1, "missing": 1}
    assert bound["summary"] == ("unchanged kernels moved by at most 10.0% (10.00 -> 11.00 us, 20.00 -> 19.00 us, "
                                "8.00 -> 8.80 us) between before and after")


def test_drift_changed_compiler_and_specialization(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    a = write_namespace(art, "a", "2026-12-01T00:00:00+00:00", [kt(*LN, "cuda", 1.0), kt(*LN, "triton", 1.0)],
                        census=[census_row("layernorm", "cuda", "4096x768"), census_row("layernorm", "triton", "4096x768")])
    b = write_namespace(art, "b", "2026-12-02T00:00:00+00:00", [kt(*LN, "cuda", 1.0), kt(*LN, "triton", 1.0)],
                        census=[census_row("layernorm", "cuda", "4096x768", compiler="NVRTC 13.1"),
                                census_row("layernorm", "triton", "4096x768", specialization="BLOCK=256")])
    by = trust.drift(b, a).set_index("impl")
    assert by.loc["cuda", "reason"] == "changed compiler" and by.loc["triton", "reason"] == "changed specialization"
    bound = trust.drift_bound(trust.drift(b, a))
    assert bound["count"] == 0 and bound["max_abs_change_pct"] is None
    assert "not bounded" in bound["summary"]


def test_drift_across_gpu_models_bounds_nothing(tmp_path: Path) -> None:
    before, after = synthetic_pair(tmp_path, gpu_after="NVIDIA A100")
    d = trust.drift(after, before)
    assert not d["unchanged_kernel"].any()
    assert set(d["reason"]) == {"torch", "different gpu"}


def test_drift_without_census_or_ceilings(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    a = write_namespace(art, "a", "2026-12-01T00:00:00+00:00", [kt(*LN, "cuda", 1.0)])
    b = write_namespace(art, "b", "2026-12-02T00:00:00+00:00", [kt(*LN, "cuda", 1.1)])
    assert not (a / "tables" / "ceilings.csv").exists()
    d = trust.drift(b, a)
    assert d.iloc[0]["reason"] == "missing" and not d.iloc[0]["unchanged_kernel"]
    assert d.iloc[0]["change_pct"] == pytest.approx(10.0)


# ---------------------------------------------------------------------------------------------
# The two retained H200 namespaces (expectations derived from their files, never typed in)


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
            assert row["reason"] == "torch" and not row["unchanged_kernel"]
            continue
        same = identity(OLD, rec["op"], rec["impl"], rec["shape"]) == identity(NEW, rec["op"], rec["impl"], rec["shape"])
        same = same and bool(identity(OLD, rec["op"], rec["impl"], rec["shape"]))
        assert bool(row["unchanged_kernel"]) is same, (rec["op"], rec["impl"])
    unchanged = d[d["unchanged_kernel"]]
    bound = trust.drift_bound(d)
    assert bound["count"] == len(unchanged)
    if len(unchanged):
        assert bound["max_abs_change_pct"] == pytest.approx(unchanged["change_pct"].abs().max())
        pairs = ", ".join(f"{r.before_us:.2f} -> {r.after_us:.2f} us" for r in unchanged.itertuples())
        assert bound["summary"] == (f"unchanged kernels moved by at most {bound['max_abs_change_pct']:.1f}% ({pairs}) "
                                    f"between {OLD} and {NEW}")


def test_real_namespaces_controls_and_choice(tmp_path: Path) -> None:
    import shutil

    real = tmp_path / "artifacts"  # the two retained namespaces alone, without those retained later
    for name in (OLD, NEW):
        shutil.copytree(REAL / name, real / name)
    assert trust.choose_earlier(real, NEW) == OLD
    assert trust.choose_earlier(real, OLD) is None  # nothing retained before it
    bands = trust.control_bands(real, exclude=NEW)
    new_kt = pd.read_csv(REAL / NEW / "tables" / "kernel_time.csv", dtype={"shape": str})
    out = trust.classify_controls(new_kt, bands, "triton").set_index(["op", "shape"])
    old_tri = pd.read_csv(REAL / OLD / "tables" / "kernel_time.csv", dtype={"shape": str})
    old_tri = old_tri[old_tri["impl"] == "triton"].set_index(["op", "shape"])["kernel_time_us"]
    for (op, shape), row in out.iterrows():
        if (op, shape) not in old_tri.index:
            assert row["status"] == "establishing"
            continue
        lo, hi = old_tri[(op, shape)] * 0.95, old_tri[(op, shape)] * 1.05
        value = new_kt[(new_kt["op"] == op) & (new_kt["shape"] == shape) & (new_kt["impl"] == "triton")]["kernel_time_us"].iloc[0]
        assert row["status"] == ("inside" if lo <= value <= hi else "outside")
        assert row["band_lo_us"] == pytest.approx(lo) and row["band_hi_us"] == pytest.approx(hi)


def test_trust_tables_on_retained_copy(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    for n in (OLD, NEW):
        shutil.copytree(REAL / n, art / n)
    out = trust.trust_tables(art, NEW, art / NEW / "tables" / "controls.csv", art / NEW / "tables" / "drift.csv")
    assert out["earlier"] == OLD
    controls = pd.read_csv(art / NEW / "tables" / "controls.csv")
    drifted = pd.read_csv(art / NEW / "tables" / "drift.csv")
    assert list(controls.columns) == trust.CONTROL_COLUMNS and list(drifted.columns) == trust.DRIFT_COLUMNS
    new_kt = pd.read_csv(art / NEW / "tables" / "kernel_time.csv")
    assert len(controls) == len(new_kt[["op", "shape"]].drop_duplicates())
    assert len(drifted) == len(trust.drift(art / NEW, art / OLD))
    ctx = trust.report_context(art / NEW / "tables" / "controls.csv", art / NEW / "tables" / "drift.csv")
    assert ctx["earlier"] == OLD and ctx["bound"]["summary"] == out["bound"]["summary"]
    assert len(ctx["controls"]) == len(controls)
    # the oldest namespace has nothing before it: every control establishing, drift header only
    first = trust.trust_tables(art, OLD, tmp_path / "c.csv", tmp_path / "d.csv")
    assert first["earlier"] is None and set(first["controls"]["status"]) == {"establishing"}
    assert pd.read_csv(tmp_path / "d.csv").empty
    assert trust.report_context(tmp_path / "c.csv", tmp_path / "d.csv")["bound"] is None
    assert trust.report_context(None, tmp_path / "absent.csv")["controls"] == []
    # trust tables enter the history index like any other table
    db = history.build_index(art, tmp_path / "h.sqlite")
    import sqlite_utils

    assert sqlite_utils.Database(db)["controls"].count == len(controls)
    files = trust.retained_inputs(art, NEW)
    assert f"{(art / OLD / 'tables' / 'kernel_time.csv').as_posix()}" in files
    assert not any(f"/{NEW}/" in f for f in files)
    assert trust.retained_inputs(art, OLD) == []  # a later namespace is never an input of an older one


# ---------------------------------------------------------------------------------------------
# Choosing the earlier namespace


def test_choose_earlier(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    write_namespace(art, "old-shared", "2026-12-01T00:00:00+00:00", [kt(*LN, "cuda", 1.0)])
    write_namespace(art, "mid-shared", "2026-12-02T00:00:00+00:00", [kt(*LN, "triton", 1.0)])
    write_namespace(art, "late-other-op", "2026-12-03T00:00:00+00:00", [kt(*SM, "cuda", 1.0)])
    write_namespace(art, "late-other-gpu", "2026-12-04T00:00:00+00:00", [kt(*LN, "cuda", 1.0)], gpu="NVIDIA A100")
    write_namespace(art, "current", "2026-12-05T00:00:00+00:00", [kt(*LN, "cuda", 1.0), kt(*LN, "torch", 1.0)])
    write_namespace(art, "future", "2026-12-06T00:00:00+00:00", [kt(*LN, "cuda", 1.0)])
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
    assert hist[0].namespace == "x" and hist[0].census is None
    with pytest.raises(EvidenceError):
        trust.retained(tmp_path / "nothing-here")


def test_loaded_capture_is_flagged_then_kept_out_of_later_bands(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    census = [census_row("layernorm", "triton", "4096x768"), census_row("layernorm", "cuda", "4096x768")]
    write_namespace(art, "s1", "2026-12-01T00:00:00+00:00", [kt(*LN, "triton", 5.0), kt(*LN, "cuda", 6.0)], census=census)
    write_namespace(art, "s2", "2026-12-02T00:00:00+00:00", [kt(*LN, "triton", 7.0), kt(*LN, "cuda", 8.0)], census=census)
    write_namespace(art, "s3", "2026-12-03T00:00:00+00:00", [kt(*LN, "triton", 5.1), kt(*LN, "cuda", 6.1)], census=census)
    s2 = trust.trust_tables(art, "s2", art / "s2" / "tables" / "controls.csv", art / "s2" / "tables" / "drift.csv")
    row = s2["controls"].iloc[0]
    assert row["status"] == "outside" and bool(row["under_load"]) and "probably ran under load" in row["note"]
    s3 = trust.trust_tables(art, "s3", art / "s3" / "tables" / "controls.csv", art / "s3" / "tables" / "drift.csv")
    row = s3["controls"].iloc[0]
    # s2's loaded capture does not widen s3's band: only s1 is in it
    assert row["namespaces"] == "s1" and row["status"] == "inside"
    # and drift is bounded against s1, the last clean run, not against the loaded s2
    assert s3["earlier"] == "s1" and s3["bound"]["count"] == 2
    ctx = trust.report_context(s3["controls"], s3["drift"])
    assert ctx["control"] == "triton" and ctx["margin"] == 0.05 and ctx["any_band"]
    assert ctx["by_key"]["layernorm 4096x768"]["status"] == "inside" and ctx["under_load"] == []
    ctx2 = trust.report_context(art / "s2" / "tables" / "controls.csv", art / "s2" / "tables" / "drift.csv")
    assert [r["shape"] for r in ctx2["under_load"]] == ["4096x768"] and ctx2["under_load"][0]["under_load"] is True


def test_choose_earlier_skips_loaded_and_disturbed_namespaces(tmp_path: Path) -> None:
    """Drift is bounded against a clean run: a later namespace whose captures NVML marked disturbed
    (h200-loaded-1 was one) or whose control came back above its band is passed over."""
    art = tmp_path / "artifacts"
    write_namespace(art, "quiet", "2026-12-01T00:00:00+00:00", [kt(*LN, "triton", 1.0)])
    write_namespace(art, "loaded", "2026-12-02T00:00:00+00:00", [kt(*LN, "triton", 1.0)],
                    controls=[{"op": LN[0], "shape": LN[1], "control": "triton", "under_load": True}])
    ns = write_namespace(art, "disturbed", "2026-12-03T00:00:00+00:00", [kt(*LN, "triton", 1.0)])
    pd.DataFrame([{"op": LN[0], "shape": LN[1], "impl": "triton", "disturbed": True},
                  {"op": LN[0], "shape": LN[1], "impl": "cuda", "disturbed": False}]).to_csv(
        ns / "tables" / "gpu_state.csv", index=False)
    write_namespace(art, "current", "2026-12-04T00:00:00+00:00", [kt(*LN, "triton", 1.0)])
    assert trust.choose_earlier(art, "current") == "quiet"
    assert trust.load_namespace(ns).disturbed and not trust.load_namespace(art / "quiet").disturbed


def test_a_run_over_two_gpus_of_one_model_compares_with_one_gpu_runs(tmp_path: Path) -> None:
    """A namespace whose groups ran on two H200s records both; its GPU model is still 'NVIDIA
    H200', so drift and bands take the one-GPU namespaces before it."""
    art = tmp_path / "artifacts"
    write_namespace(art, "one-gpu", "2026-12-01T00:00:00+00:00", [kt(*LN, "triton", 1.0)])
    two = write_namespace(art, "two-gpus", "2026-12-02T00:00:00+00:00", [kt(*LN, "triton", 1.0)])
    prov = json.loads((two / "provenance.json").read_text())
    prov["gpus"] = [{"name": "NVIDIA H200", "uuid": "a"}, {"name": "NVIDIA H200", "uuid": "b"}]
    (two / "provenance.json").write_text(json.dumps(prov))
    assert trust.load_namespace(two).gpu == "NVIDIA H200"
    assert trust.choose_earlier(art, "two-gpus") == "one-gpu"
    from harness.tables import history
    assert history.namespace_row(two)["gpu_name"] == "NVIDIA H200"
    assert history.namespace_row(two)["gpu_count"] == 2


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
