"""docs/adding-an-operation.md, followed to the letter: its files are written into a copy of the
repository (two folders and a config entry, nothing else), and the copy's workflow then knows the
operation: config validation, the registry, the dry run of `report`, and a real census of its two
kernels (NVRTC and Triton's offline compiler, no GPU needed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import repo_copy

from harness import ROOT

GUIDE = ROOT / "docs" / "adding-an-operation.md"
BLOCK = re.compile(r"^```\w*\s+path=(\S+)(?:\s+append=(\S+))?\n(.*?)^```", re.MULTILINE | re.DOTALL)


def guide_files() -> list[tuple[str, str | None, str]]:
    return [(m.group(1), m.group(2), m.group(3)) for m in BLOCK.finditer(GUIDE.read_text())]


def test_the_guide_names_two_folders_and_a_config_entry() -> None:
    paths = [p for p, _, _ in guide_files()]
    assert paths, "the guide has no files"
    outside = [p for p in paths if not (p.startswith("harness/ops/scale/") or p.startswith("kernels/scale/") or p == "config.yaml")]
    assert outside == []


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's tracked and untracked (not ignored) files, with the guide's files added."""
    dest = repo_copy.copy_repo(tmp_path_factory.mktemp("sixth") / "repo")
    for rel, append, text in guide_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if append:
            config = target.read_text()
            last_top_level = [line for line in config.splitlines() if re.match(r"^[a-z_]+:", line)][-1]
            assert last_top_level.startswith(f"{append}:"), f"the guide appends to {append}, the last section"
            target.write_text(config.rstrip("\n") + "\n\n" + text)
        else:
            target.write_text(text)
    return dest


def run(copy: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=copy, env=repo_copy.env(copy), capture_output=True, text=True, timeout=timeout)


def test_the_copy_knows_the_operation(copy: Path) -> None:
    out = run(copy, sys.executable, "-c",
              "from harness import config, ops; c = config.load('config.yaml'); "
              "op = ops.get('scale'); print(sorted(ops.known()), sorted(op.implementations), op.sources['cuda'], "
              "c['operations']['scale']['alpha'])")
    assert out.returncode == 0, out.stderr
    assert "'scale'" in out.stdout and "['cuda', 'torch', 'triton']" in out.stdout
    assert "['scale/scale.cu'] 2.0" in out.stdout


def test_report_dry_run_schedules_it(copy: Path) -> None:
    out = run(copy, "snakemake", "-n", "report", "--config", "namespace=sixth-dry")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "op=scale" in text or "/scale/" in text, text[-3000:]


def test_census_builds_its_kernels(copy: Path) -> None:
    out = run(copy, "snakemake", "--cores", "1", "census", "--config", "run_operations=[scale]", "namespace=sixth-census")
    if out.returncode != 0 and "not found" in (out.stdout + out.stderr) and "NVRTC" in (out.stdout + out.stderr):
        pytest.skip("neither NVRTC nor nvcc is available to build the census")
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    census = (copy / "artifacts" / "sixth-census" / "tables" / "census.csv").read_text()
    assert "scale_f32" in census and "scale_fwd" in census
