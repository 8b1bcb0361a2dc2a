"""The Snakemake DAG: a dry run lists every job; bad config and missing GPU stop in one sentence."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from repo_copy import job_counts

from harness import ROOT, config
from harness.gpu.device import has_gpu

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run_snakemake(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_dry_run_lists_every_job() -> None:
    cfg = config.load()
    proc = run_snakemake("-n", "--forceall", "report")
    assert proc.returncode == 0, proc.stderr
    counts = job_counts(proc.stdout)
    built = [op for op in cfg["operations"] if any(i != "torch" for i in config.implementations(cfg, op))]
    assert counts["measure"] == 1  # one session: every (operation, shape) and implementation in one process
    assert counts["build"] == len(built)  # one per operation
    assert counts["counters"] == 1  # one ncu process over the session
    for single in ("tables", "census_table", "ceilings", "provenance", "trust", "targets", "render", "report"):
        assert counts[single] == 1
    for gone in ("check", "capture", "kernel_time", "span"):
        assert gone not in counts


def test_without_ceilings_no_job_measures_them_and_the_rest_stays() -> None:
    proc = run_snakemake("-n", "--forceall", "report", "--config", "ceilings={enabled: false}")
    assert proc.returncode == 0, proc.stderr
    counts = job_counts(proc.stdout)
    assert "ceilings" not in counts
    assert counts["tables"] == counts["render"] == 1 and counts["measure"] > 0
    assert "ceilings.csv" not in proc.stdout


def test_sweep_and_shape_targets() -> None:
    cfg = config.load()
    for op in cfg["operations"]:
        proc = run_snakemake("-n", "--forceall", f"sweep_{op}")
        assert proc.returncode == 0, proc.stderr
        counts = job_counts(proc.stdout)
        assert counts["measure"] == 1  # the session, which measures the run's every group
        assert "counters" not in counts and "report" not in counts
        assert counts["sweep_provenance"] == 1 and "provenance" not in counts  # its own, from its groups only
    shape = cfg["operations"]["layernorm"]["default"]
    ns = config.resolve_namespace(cfg, ROOT)
    proc = run_snakemake("-n", "--forceall", f"artifacts/{ns}/tables/shape/layernorm/{shape}.csv")
    assert proc.returncode == 0, proc.stderr
    counts = job_counts(proc.stdout)
    assert counts["measure"] == 1 and counts["shape_table"] == 1


def test_bad_config_stops_with_one_sentence(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["capture"]["rounds"] = 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    proc = run_snakemake("-n", "--configfile", str(bad))
    assert proc.returncode != 0
    assert "capture.rounds" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.skipif(has_gpu(), reason="checks the no-GPU path")
def test_report_without_gpu_ends_in_one_sentence() -> None:
    proc = run_snakemake("--cores", "1", "report")
    assert proc.returncode != 0
    assert "no CUDA GPU is visible here" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def threads_by_rule(output: str) -> dict[str, set[int]]:
    """Each rule's threads in a dry run's job listing (1 where the listing names none)."""
    found: dict[str, set[int]] = {}
    for block in re.split(r"\n(?=\s*(?:local)?rule \w+:)", output):
        m = re.match(r"\s*(?:local)?rule (\w+):", block)
        if m:
            t = re.search(r"^\s*threads: (\d+)", block, re.M)
            found.setdefault(m.group(1), set()).add(int(t.group(1)) if t else 1)
    return found


def test_a_measurement_runs_alone_on_the_cpu(tmp_path: Path) -> None:
    # its spans time the launch path: beside other jobs a span came out up to 1.56x longer on the H200
    proc = run_snakemake("-n", "--forceall", "report", "--cores", "8", "--resources", "gpu=3")
    assert proc.returncode == 0, proc.stderr
    threads = threads_by_rule(proc.stdout)
    assert threads["measure"] == {8}
    assert threads["build"] == {1} and threads["counters"] == {1}
    (tmp_path / "shared.yaml").write_text("span: {exclusive: false}\n")
    shared = run_snakemake("-n", "--forceall", "report", "--cores", "8", "--configfile", str(tmp_path / "shared.yaml"))
    assert shared.returncode == 0, shared.stderr
    assert threads_by_rule(shared.stdout)["measure"] == {1}


def test_the_default_profile_is_loaded() -> None:
    """Snakemake reads profiles/default beside the working directory, so the main command gets
    rerun-incomplete and show-failed-logs without naming a profile."""
    out = subprocess.run(["snakemake", "-n", "report"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Using workflow specific profile profiles/default" in out.stdout + out.stderr
