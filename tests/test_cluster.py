"""The workflow on a cluster, tested without one.

* The dry run with the SLURM profile (snakemake-executor-plugin-slurm, from the test extra) shows one
  group per operation and shape (`gpu-<op>-<shape>`) holding every job compared within it: the
  `measure` job that checks, captures and times every implementation, and the shape's `counters`
  where counters are read; each asks for gpu=1 on the profile's partition and wall time. A sweep is
  one group per shape, with the profile or without.
* A real submission through the SLURM plugin against stand-in sbatch/sacct commands: the run is not
  stopped by the missing GPU of the login node, and the plugin submits each group as one SLURM job
  with --gpus=1, the partition, and the sum of its jobs' wall times.
* The Kubernetes profile parses and sets the same group rules, with an NVIDIA GPU request per group.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import ROOT, config

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
SLURM = ["--profile", "profiles/slurm"]
GPU_RULES = {"measure", "counters", "ceilings"}


def run_snakemake(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
                  timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def parse_jobs(output: str) -> list[dict]:
    """Jobs of a dry run: rule, group (None outside one), wildcards and resources."""
    jobs: list[dict] = []
    group = None
    for line in output.splitlines():
        if m := re.search(r"Group job (\S+) \(", line):
            group = m.group(1)
            continue
        if m := re.match(r"^(\s*)(?:localrule|rule) (\w+):$", line):
            if not m.group(1):
                group = None  # a job at the top level ends the group above it
            jobs.append({"rule": m.group(2), "group": group, "wildcards": {}, "resources": {}})
        elif jobs and (m := re.match(r"^\s*(wildcards|resources): (.*)$", line)):
            jobs[-1][m.group(1)] = dict(kv.split("=", 1) for kv in m.group(2).split(", "))
    return jobs


def test_slurm_dry_run_groups_the_session_on_one_gpu() -> None:
    cfg = config.load()
    proc = run_snakemake(*SLURM, "-n", "--forceall", "report")
    assert proc.returncode == 0, proc.stderr
    jobs = parse_jobs(proc.stdout)
    groups: dict[str, list[dict]] = {}
    for job in jobs:
        if job["group"]:
            groups.setdefault(job["group"], []).append(job)
    assert cfg["counters"]["enabled"]  # the shipped config reads counters, so the session holds two jobs
    assert list(groups) == ["gpu-session"]
    members = groups["gpu-session"]
    assert sorted(j["rule"] for j in members) == ["counters", "measure"]
    for j in members:  # one GPU per job, on the profile's partition, with the profile's wall time
        assert j["wildcards"] == {} and j["resources"]["gpu"] == "1" and j["resources"]["slurm_partition"] == "gpu", j
        assert int(j["resources"]["runtime"]) > 0
    outside = [j for j in jobs if not j["group"]]
    assert [j["rule"] for j in outside if j["rule"] in GPU_RULES] == ["ceilings"]  # measured on its own
    assert next(j for j in outside if j["rule"] == "ceilings")["resources"]["gpu"] == "1"
    assert all("gpu" not in j["resources"] for j in outside if j["rule"] not in GPU_RULES)  # GPU-free work


def test_a_sweep_is_the_session_alone_with_the_profile_or_without() -> None:
    """A sweep needs no counters: the session is its measure job alone, the same group whether or
    not the profile's group-components merge the pieces of one group id."""

    def groups(args: list[str]) -> list[tuple[str, str]]:
        proc = run_snakemake(*args, "-n", "--forceall", "sweep_layernorm")
        assert proc.returncode == 0, proc.stderr
        return sorted((j["group"], j["rule"]) for j in parse_jobs(proc.stdout) if j["group"])

    assert groups([]) == [("gpu-session", "measure")]
    assert groups(SLURM) == [("gpu-session", "measure")]


FAKE_SBATCH = """#!/bin/sh
# stand-in sbatch: note the call, answer a fresh job id
f=$(mktemp "$FAKE_SLURM_DIR/sbatch.XXXXXX")
printf '%s\\n' "$*" > "$f"
id=1000
while ! mkdir "$FAKE_SLURM_DIR/id.$id" 2>/dev/null; do id=$((id + 1)); done
mv "$f" "$FAKE_SLURM_DIR/id.$id/args"
echo "$id"
"""

FAKE_SACCT = """#!/bin/sh
# stand-in sacct: every submitted job has failed (nothing runs here)
for d in "$FAKE_SLURM_DIR"/id.*; do [ -d "$d" ] && echo "${d##*.}|FAILED"; done
exit 0
"""


def stand_in_slurm(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    scripts = {"sbatch": FAKE_SBATCH, "sacct": FAKE_SACCT}
    for other in ("squeue", "sinfo", "scontrol", "sacctmgr", "scancel"):
        scripts[other] = "#!/bin/sh\nexit 1\n"
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_slurm_submits_the_session_as_one_job_with_one_gpu(tmp_path: Path) -> None:
    """Not a dry run: the SLURM plugin submits through stand-in sbatch/sacct (every job 'fails', as
    nothing runs here). One operation at one shape, its kernels' census already built; the targets
    need the session's measure and counters jobs, and the ceilings."""
    work = tmp_path / "work"
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["namespace"] = "cluster-test"
    shape = raw["operations"]["layernorm"]["default"]
    raw["operations"] = {"layernorm": {**raw["operations"]["layernorm"], "sweep": [shape]}}
    raw["variants"] = [v for v in raw["variants"] if v.startswith("layernorm.")]
    work.mkdir()
    (work / "config.yaml").write_text(yaml.safe_dump(raw))
    census = work / "artifacts" / "cluster-test" / "build" / "layernorm" / "census.json"
    census.parent.mkdir(parents=True)
    census.write_text("[]\n")
    record = tmp_path / "slurm"
    record.mkdir()
    env = {**os.environ, "PATH": f"{stand_in_slurm(tmp_path)}{os.pathsep}{os.environ['PATH']}",
           "FAKE_SLURM_DIR": str(record)}
    proc = run_snakemake(*SLURM, "--directory", str(work), "--slurm-no-account",
                         "--slurm-init-seconds-before-status-checks", "1",
                         "--forcerun", "measure", "counters", "ceilings", "--",
                         f"artifacts/cluster-test/tables/shape/layernorm/{shape}.csv",
                         f"artifacts/cluster-test/counters/layernorm/{shape}.csv",
                         "artifacts/cluster-test/tables/ceilings.csv", env=env)
    out = proc.stdout + proc.stderr
    assert "no CUDA GPU is visible here" not in out  # the login node needs no GPU
    calls = [p.read_text() for p in sorted(record.glob("id.*/args"))]
    assert len(calls) == 2, out  # the session, and the ceilings; nothing else was ready
    group = next(c for c in calls if "gpu-session" in c)
    ceilings = next(c for c in calls if "rule_ceilings" in c)
    wall = {rule: res["runtime"] for rule, res in
            yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())["set-resources"].items()}
    assert " --gpus=1" in group and " -p gpu " in group
    assert f" -t {wall['measure'] + wall['counters']} " in group  # one allocation, its jobs one after another
    targets = re.search(r"--target-jobs (.*?) --allowed-rules", group)
    assert targets is not None, group
    assert sorted(targets.group(1).split()) == ["'counters:'", "'measure:'"]
    assert " --gpus=1" in ceilings and f" -t {wall['ceilings']} " in ceilings


def test_kubernetes_profile_sets_the_same_group_rules() -> None:
    # its executor settings (kubernetes-namespace) parse only with the plugin installed; the test
    # extra installs the SLURM plugin alone
    pytest.importorskip("snakemake_executor_plugin_kubernetes")
    # snakemake ships neither stubs nor a py.typed marker (pyproject's mypy overrides omit it)
    from snakemake import cli

    parsed = {}
    for name in ("slurm", "kubernetes"):
        _, args = cli.parse_args(["--profile", f"profiles/{name}", "-n", "report"])
        parsed[name] = args
    k8s, slurm = parsed["kubernetes"], parsed["slurm"]
    assert k8s.executor == "kubernetes" and slurm.executor == "slurm"
    for args in (k8s, slurm):
        assert args.resources["gpu"].value == 1
        assert args.set_resource_scopes == {"gpu": "local"}
        assert args.group_components == {"gpu-session": 100}
        assert set(args.set_resources) == GPU_RULES
    for rule in GPU_RULES:
        res = k8s.set_resources[rule]
        assert res["scale"].value == 0 and "gpu_manufacturer" in res  # an nvidia.com/gpu limit per pod


@pytest.mark.parametrize("name", ["slurm", "kubernetes"])
def test_profiles_comment_every_entry(name: str) -> None:
    lines = (ROOT / "profiles" / name / "config.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-z]", line):  # a top-level entry: a comment right above its block of entries
            j = i - 1
            while j >= 0 and lines[j].strip() and not lines[j].startswith("#"):
                j -= 1
            assert j >= 0 and lines[j].startswith("#"), f"{name}: {line} has no comment"
