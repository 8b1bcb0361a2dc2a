"""A copy of the repository for tests that run the real workflow: its tracked and untracked (not
ignored) files without the retained namespaces, and an environment in which the copy's `harness`
is imported. `standin_env` adds the stand-in device (tests/fake_device.py): a stand-in `nsys` first
on PATH, and a sitecustomize that tells every Python process of the run a GPU is there (the
preflight's check, 141 GB) and draws the ceilings instead of timing copies. Nothing here is part of
the product."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import fake_device
import yaml

from harness import ROOT

SITECUSTOMIZE = '''\
import harness.gpu.device as _device

_device.require_gpu = lambda: None
_device.require_visible_gpu = lambda: None

import harness.gpu.preflight as _preflight
import harness.measure.ceilings as _ceilings

_preflight.require_visible_gpu = _device.require_visible_gpu
_preflight.gpu_memory_bytes = lambda: 141 * 10**9


def _measure(same_size, cache_mode="hot", **_):
    rows = [{"ceiling": "copy_bandwidth", "value": 3900.0, "unit": "GB/s", "median_ms": 1.1, "min_ms": 1.0,
             "max_ms": 1.2, "repeats": 20, "method": "stand-in", "bytes": 2 * 2**31},
            {"ceiling": "fp32_matmul", "value": 51.0, "unit": "TFLOP/s", "median_ms": 21.0, "min_ms": 20.0,
             "max_ms": 22.0, "repeats": 20, "method": "stand-in", "bytes": ""}]
    for b in same_size:
        rows.append({"ceiling": f"copy_bandwidth@{b}", "value": 3000.0, "unit": "GB/s", "median_ms": b / 3e9,
                     "min_ms": b / 3.1e9, "max_ms": b / 2.9e9, "repeats": 20, "method": "stand-in", "bytes": b})
    return rows


_ceilings.measure = _measure
'''


UNLISTED = {".git", ".snakemake", "__pycache__", ".pytest_cache", ".whl", ".debs", ".gl", "bundles", ".no-git-here"}
"""Folders a copy made without git leaves out (what .gitignore keeps out of git, and git's own)."""


def listed_files() -> list[str]:
    """The repository's tracked and untracked (not ignored) files, from git; where git cannot answer
    (a copy of the tree without its .git, as on a lent GPU machine) every file but those under
    UNLISTED folders."""
    proc = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True)
    if proc.returncode == 0:
        return [rel for rel in proc.stdout.decode().split("\0") if rel]
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                  if p.is_file() and not UNLISTED.intersection(p.relative_to(ROOT).parts))


def copy_repo(dest: Path) -> Path:
    """The repository's tracked and untracked (not ignored) files under `dest`, without the
    retained namespaces (artifacts/, report/ but its templates)."""
    for rel in listed_files():
        src = ROOT / rel
        if src.is_file() and not rel.startswith("artifacts/") and not (rel.startswith("report/")
                                                                       and not rel.startswith("report/templates/")):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def env(copy: Path, **extra: str) -> dict[str, str]:
    """The environment in which the copy's `harness` is the one imported (the copy first on the
    path, what was on it after, as the GPU machine's carried packages)."""
    rest = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{copy}:{rest}" if rest else str(copy), **extra}


def standin_env(copy: Path, work: Path, **extra: str) -> dict[str, str]:
    """env() with the stand-in device (module docstring) installed under `work`."""
    site = work / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    fake_device.install(work / "bin")
    return {**env(copy), "PYTHONPATH": f"{site}:{copy}", "PATH": f"{work / 'bin'}:{os.environ['PATH']}",
            "EVIDENCE_LOCK_DIR": str(work / "locks"), **extra}


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's 'Job stats' of a run or dry run: jobs per rule (empty when nothing is to be done)."""
    if "Job stats:" not in output:
        return {}
    counts = {}
    for line in output.split("Job stats:")[1].splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        counts[m.group(1)] = int(m.group(2))
    counts.pop("total", None)
    return counts


PIPELINE_NS = "cpu-run"
SECRET = "s3cr3t-" + "q" * 24
"""A value of GITHUB_TOKEN where the pipeline run starts, which must reach no kept file."""


def pipeline_config() -> str:
    """config.yaml for the CPU run: one operation (layernorm) at two shapes, one variant that
    measures and one whose check fails ('.wrong', tests/fake_device.py), no counters."""
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["namespace"] = PIPELINE_NS
    layernorm = raw["operations"]["layernorm"]
    layernorm["sweep"] = ["4096x768", "8192x768"]
    layernorm["variants"]["wrong"] = {"base": "cuda", "defines": {"LN_BLOCK": 256},
                                      "description": "a variant whose check fails (the stand-in device fails it)"}
    raw["operations"] = {"layernorm": layernorm}
    raw["variants"] = ["layernorm.block512", "layernorm.wrong"]
    raw["counters"]["enabled"] = False
    return yaml.safe_dump(raw, sort_keys=False)


def snakemake(copy: Path, env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=timeout)


def pipeline_run(work: Path) -> tuple[Path, dict[str, str], subprocess.CompletedProcess[str]]:
    """`snakemake --cores 1 report` in a copy under `work` with the stand-in device: (the copy, its
    environment, the finished process)."""
    copy = copy_repo(work / "repo")
    (copy / "config.yaml").write_text(pipeline_config())
    environment = standin_env(copy, work, GITHUB_TOKEN=SECRET)
    (work / "bin" / "leak").write_text(f"token={SECRET};")
    return copy, environment, snakemake(copy, environment, "--cores", "1", "report")
