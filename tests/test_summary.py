"""The machine-readable summary (artifacts/<ns>/summary.json, docs/summary-schema.md): built from
the tables and the provenance, written and read back under its schema version, and refused in one
sentence when it is anything else."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_report import NS, SHAPES, build_namespace, copy_namespace, small_config

from harness.errors import EvidenceError
from harness.report import render as report
from harness.report import summary
from harness.tables import trust


def built(tmp: Path, **kw: Any) -> tuple[dict, dict[str, pd.DataFrame], dict]:
    cfg = small_config()
    inputs = build_namespace(tmp, cfg, **kw)
    tables = report.load_tables(inputs)
    prov = json.loads(Path(inputs["provenance"]).read_text())
    return summary.build(tables, prov), tables, prov


def row(s: dict, shape: str, impl: str) -> dict:
    return next(r for r in s["rows"] if r["op"] == "layernorm" and r["shape"] == shape and r["impl"] == impl)


def test_every_row_comes_from_the_tables(tmp_path: Path) -> None:
    s, t, prov = built(tmp_path, failed={("layernorm", SHAPES[1], "torch"): "planted"}, above=[("layernorm", SHAPES[0])])
    assert s["schema"] == "kernel-evidence-summary/1" and s["namespace"] == NS and s["control"] == "triton"
    assert s["interval"] == {"kind": "bootstrap", "level": 0.95, "margin": 0.01,
                             "description": "95% bootstrap interval over interleaved rounds"}
    keys = {(r["op"], r["shape"], r["impl"]) for r in s["rows"]}
    assert keys == {(r["op"], r["shape"], r["impl"]) for r in t["check"].to_dict("records")}
    kt = t["kernel_time"].set_index(["shape", "impl"])
    sweep = t["sweep"].set_index("shape")
    span = t["span"].set_index(["shape", "impl"])
    for shape in SHAPES:
        r = row(s, shape, "cuda")
        assert r["default"] is (shape == SHAPES[0])
        k = kt.loc[(shape, "cuda")]
        assert (r["kernel_time_us"], r["kernel_time_lo_us"], r["kernel_time_hi_us"]) == pytest.approx(
            (k["kernel_time_us"], k["kernel_time_lo_us"], k["kernel_time_hi_us"]))
        assert r["launch_path"] == "prepared" and r["gpu_uuid"] == "GPU-aaaa"
        control = next(x for x in r["ratios"] if x["role"] == "control")
        w = sweep.loc[shape]
        assert control["over"] == "triton"
        assert (control["ratio"], control["lo"], control["hi"]) == pytest.approx(
            (w["cuda_over_triton"], w["cuda_over_triton_lo"], w["cuda_over_triton_hi"]))
        assert control["verdict_recorded"] == w["cuda_vs_triton"]
        ranked = trust.rankable(t["controls"], "layernorm", shape)
        # a pairing the controls do not rank carries the verdict "not ranked", never the table's
        assert control["verdict"] == (w["cuda_vs_triton"] if ranked else "not ranked")
        assert control["rankable"] is trust.rankable(t["controls"], "layernorm", shape)
        library = [x for x in r["ratios"] if x["role"] == "library"]
        if shape == SHAPES[1]:  # torch failed its check there: no ratio to it
            assert library == []
        else:
            assert library[0]["over"] == "torch" and library[0]["ratio"] == pytest.approx(w["cuda_over_torch"])
        assert r["span"]["median_us"] == pytest.approx(span.loc[(shape, "cuda"), "span_median_us"])
        assert r["span"]["launch_path"] == "prepared" and r["span"]["exclusive"] is True and r["span"]["threads"] == 16
        assert r["census"] == [dict(zip(trust.IDENTITY_COLUMNS, i)) for i in sorted(trust.kernel_identity(t["census"], "layernorm", "cuda", shape))]
        assert r["census"][0]["compiler"] == "NVRTC 13.0"
        assert r["check"] == {"passed": True, "error": None}
    assert next(x for x in row(s, SHAPES[0], "cuda")["ratios"] if x["role"] == "control")["rankable"] is False
    failed = row(s, SHAPES[1], "torch")
    assert failed["check"] == {"passed": False, "error": "planted"} and failed["kernel_time_us"] is None
    variant = row(s, SHAPES[0], "cuda.block512")
    assert variant["base"] == "cuda" and [x["role"] for x in variant["ratios"]] == ["base"]
    v = t["variants"].set_index(["shape", "variant"]).loc[(SHAPES[0], "cuda.block512")]
    assert variant["ratios"][0]["ratio"] == pytest.approx(v["ratio"]) and variant["ratios"][0]["verdict"] == v["verdict"]
    assert row(s, SHAPES[0], "triton")["ratios"] == []  # the control has no ratio against itself
    p = s["provenance"]
    assert set(p) == set(summary.PROVENANCE_KEYS)
    assert p["git"] == {"commit": prov["git"]["commit"], "dirty": False} and p["config_sha256"] == "f" * 64
    assert p["gpus"] == [{"name": "NVIDIA H200", "uuid": "GPU-aaaa"}] and p["host"] == "h200-host"
    assert p["commands"][0] == {"command": "snakemake report --cores 16", "start": "2026-11-29T11:00:00+00:00",
                                "jobs": 30, "end": "2026-11-29T11:50:00+00:00", "status": "success", "seconds": 3000.0,
                                "times": 1}


def test_written_and_read_back(tmp_path: Path) -> None:
    s, _, _ = built(tmp_path)
    path = tmp_path / "summary.json"
    summary.write(s, path)
    assert summary.read(path) == json.loads(json.dumps(s))
    assert "NaN" not in path.read_text()


def test_the_render_writes_it(tmp_path: Path) -> None:
    cfg = small_config()
    inputs = build_namespace(tmp_path, cfg)
    out = tmp_path / "report" / NS
    path = tmp_path / "artifacts" / NS / "summary.json"
    report.render_reports(cfg, inputs, out / "fn.md", out / "ic.md", summary=path)
    got = summary.read(path)
    assert len(got["rows"]) == len(pd.read_csv(inputs["check"]))


@pytest.mark.parametrize(("text", "message"), [
    ("{", r"^The summary .* is not JSON \(.*\)\.$"),
    ("[]", r"^The summary .* is not a JSON object, so it is no kernel evidence summary\.$"),
    ('{"rows": []}', r"^The summary .* names no schema kernel-evidence-summary/N, so it is no kernel evidence summary\.$"),
    ('{"schema": "kernel-evidence-summary/2"}', r"^The summary .* has schema kernel-evidence-summary/2, and this checkout reads kernel-evidence-summary/1 only\.$"),
    ('{"schema": "kernel-evidence-summary/1", "rows": []}', r"^The summary .* lacks the keys namespace, control, interval, verdicts, provenance that kernel-evidence-summary/1 requires\.$"),
])
def test_anything_else_is_one_sentence(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "summary.json"
    path.write_text(text)
    with pytest.raises(EvidenceError, match=message):
        summary.read(path)


def test_a_missing_file_and_a_bad_row_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match=r"^There is no summary at .*\.$"):
        summary.read(tmp_path / "none.json")
    s, _, _ = built(tmp_path)
    del s["rows"][3]["check"]
    with pytest.raises(EvidenceError, match=r"row 3 lacks check, which kernel-evidence-summary/1 requires of every row\.$"):
        summary.write(s, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_an_older_namespace_keeps_its_verdicts_and_invents_no_interval(tmp_path: Path) -> None:
    art = copy_namespace("h200-ops-3", tmp_path)
    tables = report.load_tables(report.table_inputs(art))
    s = summary.build(tables, json.loads((art / "provenance.json").read_text()))
    assert s["interval"]["kind"] == "envelope" and s["interval"]["margin"] is None
    assert s["interval"]["description"] == "the min–max envelope of the launches"
    layer = next(r for r in s["rows"] if (r["op"], r["shape"], r["impl"]) == ("layernorm", "4096x768", "cuda"))
    control = next(x for x in layer["ratios"] if x["role"] == "control")
    assert control["verdict_recorded"] == "no difference" and control["verdict"] == "can't tell"
    assert control["rankable"] is True  # its controls.csv says 'inside'
    assert layer["kernel_time_lo_us"] is None and layer["kernel_time_hi_us"] is None
    assert layer["span"]["launch_path"] is None and layer["span"]["exclusive"] is None
    assert layer["census"] and all(c["source_sha256"] for c in layer["census"])
    assert s["provenance"]["commands"][0]["command"].startswith("snakemake report --cores 8")
    assert s["provenance"]["commands"][0]["start"] == "2026-11-29T15:15:21+00:00"
    summary.write(s, tmp_path / "old.json")
    assert summary.read(tmp_path / "old.json")["namespace"] == "h200-ops-3"


def test_verdicts_are_read_in_one_place() -> None:
    assert [summary.verdict(v) for v in ("faster", "slower", "same", "can't tell", "no difference", "different GPUs", None)] == \
        ["faster", "slower", "same", "can't tell", "can't tell", None, None]
