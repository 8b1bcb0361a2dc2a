"""The cluster path against a real single-node SLURM on this machine (scripts/slurm-local.sh up).

* The census through the SLURM profile: every job is a real SLURM job that sacct lists COMPLETED,
  and the census table equals, row for row, the one a local run of the same tree writes (a row
  whose PTX NVRTC wrote differently in the two runs: its inputs; `same_census` says why).
* A measurement session through the SLURM profile (one operation at one shape): one SLURM job asking
  for one GPU (gres/gpu=1 in sacct's ReqTRES and AllocTRES); on a machine without a GPU it fails with
  the pipeline's one sentence "no CUDA GPU ...", and leaves nothing half-written that a later run
  would trust.

Both run in a temporary copy of the working tree (tracked files and untracked ones git does not
ignore), under fresh namespaces, so nothing is written into this checkout or a retained namespace.
Marked `slurm`; skipped where SLURM's or munge's programs are missing or the local cluster is not up
(docs/slurm-local.md says how to start it).
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO

import pytest
import yaml

from harness import ROOT
from harness.build.build import artifact_stem

pytestmark = pytest.mark.slurm

SCRIPT = ROOT / "scripts" / "slurm-local.sh"
PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmdbd", "sbatch", "sacct", "srun", "scancel")
SLURM = ["--profile", "profiles/slurm"]
# The plugin waits 40 s before its first status query, and up to 180 s between queries while no
# job finishes (it adds 10 s each time); on one machine jobs end in seconds, so start at 2 s.
FAST = ["--slurm-init-seconds-before-status-checks", "2"]
CENSUS_TIMEOUT = 480  # seconds, each of the two census runs (run side by side)
GROUP_TIMEOUT = 360
NO_GPU = "no CUDA GPU is visible here"


@pytest.fixture(scope="module")
def cluster_env() -> dict[str, str]:
    """The environment for snakemake and SLURM's commands, once the local cluster is known to run."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    path = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin{os.pathsep}/sbin"
    missing = [p for p in PROGRAMS if shutil.which(p, path=path) is None]
    if missing:
        pytest.skip(f"SLURM/munge programs missing ({', '.join(missing)}): docs/slurm-local.md installs them")
    try:
        proc = subprocess.run([str(SCRIPT), "status"], check=False, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.skip("scripts/slurm-local.sh status did not answer within 60 s")
    if proc.returncode != 0:
        stopped = [line.split(":")[0] for line in proc.stdout.splitlines() if line.endswith(": stopped")]
        pytest.skip(f"the local SLURM cluster is not up ({', '.join(stopped) or 'status'} not running): "
                    "scripts/slurm-local.sh up starts it")
    conf = re.search(r"^SLURM_CONF=(\S+)$", proc.stdout, re.MULTILINE)
    # A test run inside a SLURM job must not hand that job's settings to sbatch and srun.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env["PATH"] = path
    if conf:
        env["SLURM_CONF"] = conf.group(1)
    return env


def copy_tree(dest: Path) -> Path:
    """The working tree as it is now (tracked files and untracked ones that git does not ignore)."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, timeout=60, check=False)
    if listing.returncode != 0:
        pytest.skip(f"not a git checkout, so no copy of its tree: {listing.stderr.decode().strip()}")
    for rel in sorted(set(listing.stdout.decode().split("\0")) - {""}):
        src = ROOT / rel
        if src.is_file():  # tracked files deleted in the working tree are left out
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(tmp_path_factory.mktemp("slurm-local") / "repo")


def fresh_namespace(work: Path, kind: str) -> str:
    ns = f"slurmtest-{kind}-{uuid.uuid4().hex[:8]}"
    for base in (work, ROOT):
        assert not (base / "artifacts" / ns).exists() and not (base / "report" / ns).exists()
    return ns


def retained(work: Path) -> dict[str, str]:
    """Every file of the namespaces the copy holds now, by hash (retained evidence: never written)."""
    out = {}
    for top in ("artifacts", "report"):
        for f in sorted((work / top).rglob("*")):
            if f.is_file():
                out[str(f.relative_to(work))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


@dataclass
class Snakemake:
    """A snakemake run started by start(): its process, the open log it writes, its arguments."""

    proc: subprocess.Popen[str]
    log: IO[str]
    args: list[str]


def start(args: list[str], work: Path, env: dict[str, str], log: Path) -> Snakemake:
    out = open(log, "w")  # noqa: SIM115 (closed by finish)
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", *args], cwd=work, env=env, stdout=out,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return Snakemake(proc, out, args)


def finish(job: Snakemake, log: Path, deadline: float, env: dict[str, str]) -> tuple[int, str]:
    """Wait for a snakemake run until the deadline; past it, stop it and cancel its SLURM jobs."""
    proc = job.proc
    try:
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        text = log.read_text()
        if run := find_run_id(text):
            subprocess.run(["scancel", "--name", run], env=env, capture_output=True, timeout=30, check=False)
        pytest.fail(f"snakemake {' '.join(job.args)} ran past its time limit:\n{text[-4000:]}")
    finally:
        job.log.close()
    return rc, log.read_text()


def find_run_id(output: str) -> str | None:
    """The SLURM plugin names every job of one snakemake run after that run's id; None if the
    output does not name one (yet)."""
    m = re.search(r"SLURM run ID: (\S+)", output)
    return m.group(1) if m else None


def run_id(output: str) -> str:
    """The run id of a snakemake run that must have one."""
    run = find_run_id(output)
    assert run is not None, output[-4000:]
    return run


def sacct(run: str, since: datetime, env: dict[str, str]) -> list[dict[str, str]]:
    """The allocations (not their steps) of one snakemake run, once none of them is still going."""
    fields = ["JobID", "JobName", "State", "ExitCode", "ReqTRES", "AllocTRES", "Comment", "WorkDir"]
    for _ in range(30):  # accounting may trail the end of a job by a moment
        proc = subprocess.run(["sacct", "-X", "-n", "-P", "--name", run, "-S", since.strftime("%Y-%m-%dT%H:%M:%S"),
                               "-o", ",".join(fields)], env=env, capture_output=True, text=True, timeout=30,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        jobs = [dict(zip(fields, line.split("|"))) for line in proc.stdout.splitlines() if line.strip()]
        if jobs and not any(j["State"] in ("PENDING", "RUNNING", "COMPLETING") for j in jobs):
            return jobs
        time.sleep(1)
    return jobs


# The census columns a build's inputs fix (the kernel, its source, compiler and options); the others
# (registers, memory, PTX and SASS counts, sass_sha256) are what the compiler made of them.
BUILD_INPUTS = ("op", "impl", "kernel", "specialization", "shapes", "arch", "symbol", "block",
                "dynamic_smem", "source_sha256", "compiler", "options")


def ptx_digest(build: Path, row: dict[str, str]) -> str | None:
    """SHA-256 of the PTX the build wrote for `row`'s kernel (named by artifact_stem; every PTX of a
    CUDA source also holds its plain kernels, so the file, not `.entry`, tells whose it is), or None
    where it wrote none (external PTX)."""
    folder = build / row["op"] / row["impl"]
    for family in ("cuda", "triton"):
        path = folder / f"{artifact_stem(family, row['kernel'], row['specialization'])}.ptx"
        if path.is_file():
            return hashlib.sha256(path.read_bytes()).hexdigest()
    return None


def same_census(local: list[dict[str, str]], local_build: Path, other: list[dict[str, str]],
                other_build: Path) -> list[str]:
    """Assert that two census tables of one tree describe the same builds, and return the kernels
    whose PTX differed between them.

    Every row's inputs (BUILD_INPUTS) must be equal, in the same order. Where both builds wrote the
    same PTX for a row's kernel, the whole row must be equal (ptxas, inside NVRTC, made the same SASS
    of it). NVRTC's front end does not always write the same PTX for the same source and options:
    for some kernels (the matmul ring instances) it varies from one process to the next, and now
    and then so does the SASS (scripts/nvrtc_determinism.py shows it); such a row is held to its
    inputs only, and named."""
    assert local, "an empty census"
    assert [[r[c] for c in BUILD_INPUTS] for r in other] == [[r[c] for c in BUILD_INPUTS] for r in local]
    varied = []
    for mine, theirs in zip(local, other, strict=True):
        ptx = ptx_digest(local_build, mine)
        if ptx is not None and ptx != ptx_digest(other_build, theirs):
            varied.append(f"{mine['impl']} {mine['kernel']} {mine['specialization']}")
        else:
            assert theirs == mine
    assert len(varied) < len(local), "no row was compared in full"
    return varied


def census_rows(path: Path) -> list[dict[str, str]]:
    """The census rows without the namespace and without `build` (whether the build came from the
    build cache: the second of two runs of the same kernels takes them from it)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        del row["namespace"]
        build = row.pop("build")
        assert build == "built" or build.startswith("cache "), build
    return rows


def test_census_on_slurm_equals_the_local_census(cluster_env: dict[str, str], work: Path, tmp_path: Path) -> None:
    local_ns, slurm_ns = fresh_namespace(work, "local"), fresh_namespace(work, "census")
    before = retained(work)
    since = datetime.now() - timedelta(minutes=1)
    deadline = time.monotonic() + CENSUS_TIMEOUT
    # side by side: disjoint namespaces, so neither run locks the other's files
    local = start(["--cores", "1", "census", "--config", f"namespace={local_ns}"], work, cluster_env,
                  tmp_path / "local.log")
    cluster = start([*SLURM, *FAST, "census", "--config", f"namespace={slurm_ns}"], work, cluster_env,
                    tmp_path / "slurm.log")
    rc_local, out_local = finish(local, tmp_path / "local.log", deadline, cluster_env)
    rc, out = finish(cluster, tmp_path / "slurm.log", deadline, cluster_env)
    assert rc_local == 0, out_local[-4000:]
    assert rc == 0, out[-4000:]

    # every job that did not run on the submitting side ("localrule") was a SLURM job, COMPLETED
    remote = re.findall(r"^rule (\w+):$", out, re.MULTILINE)
    jobs = sacct(run_id(out), since, cluster_env)
    print("\n".join("|".join(j.values()) for j in jobs))
    assert len(jobs) == len(remote) > 0, (remote, jobs)
    assert all(j["State"] == "COMPLETED" and j["ExitCode"] == "0:0" for j in jobs), jobs
    assert all(Path(j["WorkDir"]) == work for j in jobs), jobs
    # the builds in particular (the plugin's comment: rule_<rule>_wildcards_<values>)
    builds = [j for j in jobs if j["Comment"].startswith("rule_build_")]
    assert len(builds) == remote.count("build") > 0, jobs
    assert len(list((work / "artifacts" / slurm_ns / "build").rglob("census.json"))) == len(builds)

    local_rows = census_rows(work / "artifacts" / local_ns / "tables" / "census.csv")
    slurm_rows = census_rows(work / "artifacts" / slurm_ns / "tables" / "census.csv")
    varied = same_census(local_rows, work / "artifacts" / local_ns / "build",
                         slurm_rows, work / "artifacts" / slurm_ns / "build")
    print(f"PTX differed (NVRTC's address-dependent output), inputs equal: {varied or 'none'}")

    assert retained(work).items() >= before.items()  # nothing that was there changed
    assert not (ROOT / "artifacts" / slurm_ns).exists() and not (ROOT / "artifacts" / local_ns).exists()


TINY = {
    "run_operations": ["layernorm"],
    "operations": {"layernorm": {"default": "4096x768", "sweep": ["4096x768"]}},
    "variants": [],
    "counters": {"enabled": False},
}


def test_a_group_is_one_slurm_job_with_one_gpu_and_fails_without_one(
        cluster_env: dict[str, str], work: Path, tmp_path: Path) -> None:
    from harness.gpu.device import has_gpu

    if has_gpu():
        pytest.skip("this machine has a CUDA GPU: the group job would measure, not fail")
    ns = fresh_namespace(work, "group")
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(yaml.safe_dump(TINY))
    args = [*SLURM, *FAST, "report", "--configfile", str(tiny), "--config", f"namespace={ns}"]
    before = retained(work)
    since = datetime.now() - timedelta(minutes=1)
    # --keep-going: the ceilings job (a GPU job of its own, ready first) fails as well, and without
    # it snakemake would stop before it submits the session
    proc = start([*args, "--keep-going"], work, cluster_env, tmp_path / "group.log")
    rc, out = finish(proc, tmp_path / "group.log", time.monotonic() + GROUP_TIMEOUT, cluster_env)
    assert rc != 0, out[-4000:]  # nothing can be measured here
    jobs = sacct(run_id(out), since, cluster_env)
    print("\n".join("|".join(j.values()) for j in jobs))
    gpu_jobs = [j for j in jobs if "gres/gpu=1" in j["ReqTRES"]]
    # the session's job: its name (the plugin's comment) holds the group id, gpu-session
    group = [j for j in gpu_jobs if "gpu-session" in j["Comment"]]
    assert len(group) == 1, jobs  # one job for the session, however many rules it holds
    job = group[0]
    assert job["State"] == "FAILED" and "gres/gpu=1" in job["AllocTRES"], job
    assert not [j for j in jobs if "gres/gpu" in j["ReqTRES"] and j not in gpu_jobs], jobs  # none asks more than one

    logs = [p for p in (work / ".snakemake" / "slurm_logs").rglob("*.log")
            if re.fullmatch(rf"{job['JobID']}(_\d+)?\.log", p.name)]
    assert len(logs) == 1, logs
    text = logs[0].read_text()
    # the job's own logs: SLURM's, and the logs of the rules it ran (named in it), whatever they are
    named = re.findall(r"^\s*log: (.+?)(?: \(check log.*)?$", text, re.MULTILINE)
    rule_logs = {work / p.strip() for line in named for p in line.split(", ")}
    said = [p for p in (logs[0], *sorted(rule_logs)) if p.is_file() and NO_GPU in p.read_text()]
    assert said, f"the session's job failed without saying '{NO_GPU}' in its logs; its SLURM log ends:\n{text[-3000:]}"

    # nothing half-written: no partial file, and a later run trusts no output of the failed jobs
    leftovers = [p for d in ("artifacts", "report") for p in (work / d / ns).rglob("*.partial")]
    assert not leftovers
    dry = subprocess.run([sys.executable, "-m", "snakemake", *args, "-n"], cwd=work, env=cluster_env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert dry.returncode == 0, dry.stderr[-4000:]
    assert "Incomplete output files" not in dry.stdout + dry.stderr
    assert "Nothing to be done" not in dry.stdout + dry.stderr  # the failed jobs' work is still to do

    assert retained(work).items() >= before.items()
    assert not (ROOT / "artifacts" / ns).exists() and not (ROOT / "report" / ns).exists()
