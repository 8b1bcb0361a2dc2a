"""`python -m harness compare`: two namespaces kernel by kernel, with the four verdicts (a bootstrap
interval over each side's rounds where both have them, the envelope of the launches otherwise) and
the evidence rules (one GPU; the library only with one torch version)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pandas as pd
import pytest

from harness.__main__ import main as cli
from harness.evidence import compare
from harness.io import write_csv
from harness.tables import stats

GPU_A, GPU_B = "GPU-aaaa", "GPU-bbbb"
KEY = ("layernorm", "4096x768", "cuda")


def row(impl: str, us: float, spread: float = 0.02, gpu: str = GPU_A, shape: str = "4096x768") -> dict:
    return {"op": "layernorm", "shape": shape, "impl": impl, "kernel_time_us": us, "main_median_us": us,
            "main_min_us": us * (1 - spread), "main_max_us": us * (1 + spread), "gpu_uuid": gpu}


def rounds(us: float, n: int = 30, noise: float = 0.002, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [us * (1 + rng.gauss(0, noise)) for _ in range(n)]


def test_an_envelope_that_holds_one_cannot_tell() -> None:
    """Tables without rounds give only the launches' min-max envelope: it never says 'same'."""
    a = pd.DataFrame([row("cuda", 5.66), row("triton", 5.40)])
    out = compare.compare_frames(a, a.copy(), library_comparable=True)
    assert list(out["verdict"]) == [stats.CANT_TELL, stats.CANT_TELL]
    assert (out["change_pct"] == 0).all() and set(out["interval"]) == {"envelope of the launches"}
    b = pd.DataFrame([row("cuda", 6.5), row("triton", 5.40)])  # +15% against spreads of 2%
    assert compare.compare_frames(a, b, library_comparable=True).loc[0, "verdict"] == stats.SLOWER


def test_rounds_give_same_faster_slower_and_cant_tell() -> None:
    a = pd.DataFrame([row("cuda", 10.0)])
    for b_us, noise, expected in ((10.02, 0.002, stats.SAME), (10.5, 0.002, stats.SLOWER),
                                  (9.5, 0.002, stats.FASTER), (10.0, 0.05, stats.CANT_TELL)):
        b = pd.DataFrame([row("cuda", b_us)])
        out = compare.compare_frames(a, b, True, {KEY: rounds(10.0)}, {KEY: rounds(b_us, noise=noise, seed=1)})
        assert out.loc[0, "verdict"] == expected, (b_us, noise, out.loc[0].to_dict())
        assert out.loc[0, "interval"] == "bootstrap over rounds"
        assert out.loc[0, "b_over_a_lo"] < out.loc[0, "b_over_a"] < out.loc[0, "b_over_a_hi"]


def test_the_margin_decides_what_is_the_same() -> None:
    a, b = pd.DataFrame([row("cuda", 10.0)]), pd.DataFrame([row("cuda", 10.15)])
    ra, rb = {KEY: rounds(10.0)}, {KEY: rounds(10.15, seed=2)}
    assert compare.compare_frames(a, b, True, ra, rb, margin=0.01).loc[0, "verdict"] == stats.SLOWER
    assert compare.compare_frames(a, b, True, ra, rb, margin=0.03).loc[0, "verdict"] == stats.SAME


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
    assert out.loc["cuda", "verdict"] == stats.CANT_TELL
    assert compare.compare_frames(a, b, library_comparable=True).set_index("impl").loc["torch", "verdict"] == "slower"


def test_only_rows_in_both_namespaces_are_compared() -> None:
    a = pd.DataFrame([row("cuda", 5.0), row("cuda", 30.0, shape="4096x4096")])
    b = pd.DataFrame([row("cuda", 5.0)])
    assert list(compare.compare_frames(a, b, True)["shape"]) == ["4096x768"]


def write_ns(root: Path, name: str, rows: list[dict], torch_version: str,
             per_round: dict[str, list[float]] | None = None) -> None:
    folder = root / name
    write_csv(rows, list(rows[0]), folder / "tables" / "kernel_time.csv")
    if per_round:
        write_csv([{"op": "layernorm", "shape": "4096x768", "impl": impl, "round": r, "kernel_time_us": v}
                   for impl, values in per_round.items() for r, v in enumerate(values)],
                  ["op", "shape", "impl", "round", "kernel_time_us"], folder / "tables" / "rounds.csv.gz")
    (folder / "provenance.json").write_text(json.dumps({"namespace": name, "versions": {"torch": torch_version}}))


def test_the_command_reads_two_namespaces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_ns(tmp_path, "one", [row("cuda", 10.0), row("torch", 12.0)], "2.11.0",
             {"cuda": rounds(10.0), "torch": rounds(12.0)})
    write_ns(tmp_path, "two", [row("cuda", 10.5), row("torch", 15.0)], "2.12.0",
             {"cuda": rounds(10.5, seed=3), "torch": rounds(15.0)})
    out_csv = tmp_path / "out" / "ab.csv"
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path), "--out", str(out_csv)]) == 0
    text = capsys.readouterr().out
    assert "| layernorm | 4096x768 | cuda | 10.00 | 10.50 | +5.0% |" in text
    assert "two against one: 1 kernel times compared (0 faster, 1 slower, 0 same, 0 can't tell)" in text
    assert "1 not compared" in text
    assert "| layernorm | 4096x768 | torch | 12.00 | 15.00 | +25.0% |  | library baseline: compared only on one GPU " \
           "with one torch version |" in text
    assert list(pd.read_csv(out_csv)["impl"]) == ["cuda", "torch"]


def test_a_namespace_without_tables_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_ns(tmp_path, "one", [row("cuda", 10.0)], "2.11.0")
    (tmp_path / "empty").mkdir()
    assert cli(["compare", "one", "empty", "--artifacts", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "compare: empty has no tables/kernel_time.csv and no summary.json."
    assert cli(["compare", "one", "missing", "--artifacts", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"compare: there is no namespace missing under {tmp_path}."
    assert cli(["compare", "one", "../etc", "--artifacts", str(tmp_path)]) == 2
    assert "namespace" in capsys.readouterr().err


def test_an_out_that_is_a_folder_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_ns(tmp_path, "one", [row("cuda", 10.0)], "2.11.0")
    write_ns(tmp_path, "two", [row("cuda", 10.0)], "2.11.0")
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"compare: --out {tmp_path} is a folder; --out names the file to write.\n"
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}*.partial"))  # the refused write left nothing


def summary_file(path: Path, ns: str, rows: list[tuple[str, float, float, float]], torch: str = "2.11.0") -> Path:
    """A summary.json (docs/summary-schema.md) with these (impl, time, lo, hi) rows at layernorm 4096x768."""
    data = {"schema": "kernel-evidence-summary/1", "namespace": ns, "control": "triton",
            "interval": {"kind": "bootstrap", "level": 0.95, "margin": 0.01, "description": "95% bootstrap"},
            "verdicts": list(stats.VERDICTS), "legacy_verdicts": {},
            "provenance": {"namespace": ns, "versions": {"torch": torch}},
            "rows": [{"op": "layernorm", "shape": "4096x768", "impl": impl, "kernel_time_us": us,
                      "kernel_time_lo_us": lo, "kernel_time_hi_us": hi, "gpu_uuid": GPU_A, "ratios": [], "base": None,
                      "default": True, "launch_path": "prepared", "span": None, "census": [], "check": None}
                     for impl, us, lo, hi in rows]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_summaries_compare_by_their_intervals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two summary files (no rounds): B/A lies within [B lo / A hi, B hi / A lo], and the verdict
    follows that interval; a namespace folder holding only its summary.json reads the same."""
    a = summary_file(tmp_path / "a" / "summary.json", "one",
                     [("cuda", 10.0, 9.99, 10.01), ("triton", 8.0, 7.9, 8.1), ("cuda.v", 5.0, 4.99, 5.01)])
    b = summary_file(tmp_path / "artifacts" / "two" / "summary.json", "two",
                     [("cuda", 10.0, 9.99, 10.01), ("triton", 8.4, 8.3, 8.5), ("cuda.v", 5.0, 4.8, 5.2)])
    frame = compare.compare_namespaces(str(a), "two", tmp_path / "artifacts").set_index("impl")
    assert frame.loc["cuda", "verdict"] == stats.SAME
    assert frame.loc["cuda", "b_over_a_lo"] == pytest.approx(9.99 / 10.01)
    assert frame.loc["triton", "verdict"] == stats.SLOWER
    assert frame.loc["triton", "b_over_a_lo"] == pytest.approx(8.3 / 8.1)
    assert frame.loc["cuda.v", "verdict"] == stats.CANT_TELL
    assert set(frame["interval"]) == {"the two kernel-time intervals"}
    assert cli(["compare", str(a), str(b)]) == 0
    assert "two against one: 3 kernel times compared (0 faster, 1 slower, 1 same, 1 can't tell)" in capsys.readouterr().out


def test_a_file_that_is_no_summary_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = summary_file(tmp_path / "a.json", "one", [("cuda", 10.0, 9.99, 10.01)])
    (tmp_path / "b.json").write_text('{"schema": "kernel-evidence-summary/2"}')
    assert cli(["compare", str(a), str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kernel-evidence-summary/1 only" in err


def write_gpu_ns(root: Path, name: str, us: float, uuid: str, model: str, seed: int) -> None:
    """A namespace with rounds on one GPU, its provenance naming the GPU (as the pipeline records it)
    and its session."""
    write_ns(root, name, [row("cuda", us, gpu=f"GPU-{uuid}")], "2.11.0", {"cuda": rounds(us, seed=seed)})
    (root / name / "provenance.json").write_text(json.dumps({
        "namespace": name, "versions": {"torch": "2.11.0"}, "date_utc": f"2026-11-0{seed}T10:00:00+00:00",
        "host": "vm", "gpus": [{"name": model, "uuid": uuid}]}))


def test_rounds_on_two_gpus_get_no_verdict_and_both_gpus_and_sessions_are_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With rounds on both sides, two GPUs of one model keep the ratio, never a verdict (the rounds
    path skipped the GPU check); the output names both GPUs and sessions and what such a ratio is."""
    write_gpu_ns(tmp_path, "one", 10.0, "aaaa-1111", "NVIDIA H200", 1)
    write_gpu_ns(tmp_path, "two", 12.0, "bbbb-2222", "NVIDIA H200", 2)
    frame = compare.compare_namespaces("one", "two", tmp_path)
    assert frame["verdict"].isna().all() and frame.loc[0, "b_over_a"] == pytest.approx(1.2)
    assert frame.loc[0, "reason"] == "measured on two GPUs of one model (NVIDIA H200): the ratio only, no verdict"
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "A: one, run 2026-11-01T10:00:00+00:00 on host vm, on NVIDIA H200 (GPU-aaaa-1111)." in out
    assert "B: two, run 2026-11-02T10:00:00+00:00 on host vm, on NVIDIA H200 (GPU-bbbb-2222)." in out
    assert "a ratio across sessions is not a same-session verdict" in out and "measure both builds in one run" in out
    assert "--config baseline=<revision>" in out
    assert "| +20.0% |" in out and "1 ratio without a verdict (two GPUs of one model)" in out


def test_two_gpu_models_give_no_ratio_either(tmp_path: Path) -> None:
    write_gpu_ns(tmp_path, "one", 10.0, "aaaa-1111", "NVIDIA H200", 1)
    write_gpu_ns(tmp_path, "two", 12.0, "bbbb-2222", "NVIDIA H100", 2)
    frame = compare.compare_namespaces("one", "two", tmp_path)
    assert frame["verdict"].isna().all() and frame["b_over_a"].isna().all() and frame["change_pct"].isna().all()
    assert frame.loc[0, "reason"] == ("measured on different GPUs (A: NVIDIA H200 GPU-aaaa-1111; B: NVIDIA H100 "
                                      "GPU-bbbb-2222): no ratio and no verdict")


def test_one_gpu_across_two_sessions_keeps_its_verdict_and_says_what_it_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_gpu_ns(tmp_path, "one", 10.0, "aaaa-1111", "NVIDIA H200", 1)
    write_gpu_ns(tmp_path, "two", 12.0, "aaaa-1111", "NVIDIA H200", 2)
    assert compare.compare_namespaces("one", "two", tmp_path).loc[0, "verdict"] == stats.SLOWER
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path)]) == 0
    assert compare.SESSIONS in capsys.readouterr().out


@pytest.mark.parametrize("content, expected", [
    (b"op,shape,impl\nlayernorm,4096x768,cuda\n", "lacks the column kernel_time_us"),
    (b"op,shape,impl,kernel_time_us\nlayernorm,4096x768,cuda,\xff\xfe\n", "is not UTF-8 text"),
    (b"", "is empty"),
    (b"op,shape,impl,kernel_time_us\nlayernorm,4096x768,cuda,fast\n", "holds 'fast' in its number column kernel_time_us"),
])
def test_a_bad_table_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                                     expected: str) -> None:
    """A kernel-time table without a column, not UTF-8, empty, or with text for a number: one
    sentence and exit 2 (each was a traceback: KeyError, UnicodeDecodeError, EmptyDataError, ValueError)."""
    write_ns(tmp_path, "one", [row("cuda", 10.0)], "2.11.0")
    write_ns(tmp_path, "two", [row("cuda", 10.0)], "2.11.0")
    (tmp_path / "two" / "tables" / "kernel_time.csv").write_bytes(content)
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err, err


def test_a_bad_rounds_table_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_ns(tmp_path, "one", [row("cuda", 10.0)], "2.11.0", {"cuda": rounds(10.0)})
    write_ns(tmp_path, "two", [row("cuda", 10.0)], "2.11.0", {"cuda": rounds(10.0)})
    bad = b"op,shape,impl,round\nlayernorm,4096x768,cuda,0\n"
    (tmp_path / "two" / "tables" / "rounds.csv.gz").write_bytes(gzip.compress(bad))
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path)]) == 2
    assert "rounds.csv.gz lacks the column kernel_time_us" in capsys.readouterr().err
    (tmp_path / "two" / "tables" / "rounds.csv.gz").unlink()  # a namespace from before: its plain table
    (tmp_path / "two" / "tables" / "rounds.csv").write_bytes(bad)
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path)]) == 2
    assert "rounds.csv lacks the column kernel_time_us" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["artifacts/one/tables/kernel_time.csv", "report/x/field_note.md", "config.yaml",
                                    "harness/io.py", "workflow/x.csv", "kernels/x.csv"])
def test_an_out_onto_evidence_code_or_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        target: str) -> None:
    """`--out` never replaces the evidence, the code or the config (it replaced config.yaml, exit 0)."""
    from harness import ROOT

    write_ns(tmp_path, "one", [row("cuda", 10.0)], "2.11.0")
    write_ns(tmp_path, "two", [row("cuda", 10.0)], "2.11.0")
    before = (ROOT / target).read_bytes() if (ROOT / target).is_file() else None
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path), "--out", str(ROOT / target), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"compare: --out {ROOT / target} ") and "may replace" in err
    assert ((ROOT / target).read_bytes() if (ROOT / target).is_file() else None) == before


def test_an_existing_out_is_replaced_only_with_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_ns(tmp_path, "one", [row("cuda", 10.0)], "2.11.0")
    write_ns(tmp_path, "two", [row("cuda", 10.0)], "2.11.0")
    out = tmp_path / "ab.csv"
    out.write_text("mine\n")
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path), "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"compare: {out} already exists; pass --force to replace it.\n"
    assert out.read_text() == "mine\n"
    assert cli(["compare", "one", "two", "--artifacts", str(tmp_path), "--out", str(out), "--force"]) == 0
    assert list(pd.read_csv(out)["impl"]) == ["cuda"]


def test_help_is_whole_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    """`compare --help` ended mid-sentence (the first line of the docstring)."""
    with pytest.raises(SystemExit):
        compare.main(["--help"])
    text = capsys.readouterr().out
    description = text.split("\n\n")[1]
    assert description.rstrip().endswith("can't tell.")
    assert "measure both builds in one run (snakemake --cores 1 report --config baseline=<revision>)." in " ".join(text.split())


def test_a_side_named_with_control_characters_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A crafted file name printed raw retitles the terminal; every sentence of the command line escapes it."""
    crafted = tmp_path / "\x1b]0;owned\x07.json"
    crafted.write_text("{}")
    assert cli(["compare", str(crafted), str(crafted)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned\\x07.json" in err
