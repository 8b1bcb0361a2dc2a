"""Provenance of a namespace: code, configuration, tools, GPU, host, date and the commands run."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import ROOT, ops
from harness.errors import EvidenceError
from harness.io import write_json
from harness.runlog import commands
from harness.tools import versions


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def config_hash(cfg: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()


COMMIT = re.compile(r"[0-9a-f]{40}")

def git_state() -> dict[str, Any]:
    """The commit the run used and whether tracked files differed from it: from git where this is a
    checkout; else from EVIDENCE_GIT_COMMIT (and EVIDENCE_GIT_DIRTY), which whoever copied the
    tree to a machine without .git sets; else unknown. EVIDENCE_GIT_COMMIT must be a full commit
    hash, and in a checkout it must be its HEAD: anything else is refused in one sentence."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    env_commit = os.environ.get("EVIDENCE_GIT_COMMIT")
    if env_commit is not None and not COMMIT.fullmatch(env_commit):
        raise EvidenceError(f"EVIDENCE_GIT_COMMIT is {env_commit[:60]!r}, not a full commit hash (40 lower-case hex "
                            "digits, as `git rev-parse HEAD` prints it).")
    commit = git("rev-parse", "HEAD")
    if commit:
        if env_commit is not None and env_commit != commit:
            raise EvidenceError(f"EVIDENCE_GIT_COMMIT names {env_commit}, but this checkout is at {commit}: unset it "
                                "(git says which commit ran) or check out the commit it names.")
        return {"commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no")), "source": "git"}
    if env_commit:
        dirty = os.environ.get("EVIDENCE_GIT_DIRTY")
        return {"commit": env_commit, "dirty": None if dirty is None else dirty not in ("0", "false", ""),
                "source": "EVIDENCE_GIT_COMMIT"}
    return {"commit": "unknown", "dirty": None, "source": "none (no git checkout, EVIDENCE_GIT_COMMIT unset)"}


def source_hashes(cfg: dict[str, Any]) -> dict[str, str]:
    hashes = {}
    for op_name in cfg["operations"]:
        for files in ops.get(op_name).sources.values():
            for f in files:
                hashes[f"kernels/{f}"] = sha256_file(ROOT / "kernels" / f)
    return hashes


def measured_with(capture_metas: list[dict[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """The package versions and hosts the captures ran with, from their metadata (each capture job
    records its own). On a cluster the provenance job runs elsewhere (a login node, a CPU pod), so
    its own environment says nothing about the measurements. A package seen at several versions
    lists them all, ';'-joined. Falls back to this process's versions for metadata without any."""
    seen: dict[str, set[str]] = {}
    for m in capture_metas:
        for k, v in (m.get("versions") or {}).items():
            seen.setdefault(k, set()).add(str(v))
    hosts = sorted({str(m["host"]) for m in capture_metas if m.get("host")})
    if not seen:
        return versions(), hosts or [platform.node()]
    return {k: "; ".join(sorted(v)) for k, v in seen.items()}, hosts


def kernel_modules(capture_metas: list[dict[str, Any]]) -> dict[str, int]:
    """How the group processes got the modules of our CUDA kernels, counted over the groups: the
    build's cubin from the build cache ('build cache') or compiled at run time ('compiled';
    harness.launch.modules). Each group's record lists its own."""
    counts: dict[str, int] = {}
    for m in capture_metas:
        for loaded in m.get("modules") or []:
            how = "build cache" if str(loaded.get("module", "")).startswith("build cache") else "compiled"
            counts[how] = counts.get(how, 0) + 1
    return counts


def collect(cfg: dict[str, Any], capture_metas: list[dict[str, Any]], commands_file: str | Path) -> dict[str, Any]:
    """The namespace's provenance from its group records (each records its GPU, tools and host)."""
    gpus = sorted({(g.get("name", ""), g.get("uuid", "")) for m in capture_metas for g in m.get("export", {}).get("gpus", [])})
    nsys_versions = sorted({str(m.get("nsys_version") or "") for m in capture_metas})
    measured_versions, hosts = measured_with(capture_metas)
    return {
        "namespace": cfg["namespace"],
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": "; ".join(hosts),
        "provenance_host": platform.node(),
        "git": git_state(),
        "config_sha256": config_hash(cfg),
        "config": cfg,
        "sources_sha256": source_hashes(cfg),
        "versions": {**measured_versions, "nsys": "; ".join(nsys_versions)},
        "gpus": [{"name": n, "uuid": u} for n, u in gpus],
        "gpu_state_before_captures": [m.get("gpu") for m in capture_metas if m.get("gpu")][:1],
        "kernel_modules": kernel_modules(capture_metas),
        "commands": commands(commands_file),
        "python_executable": sys.executable,
    }


def write(cfg: dict[str, Any], records: list[str], commands_file: str | Path, out: str | Path) -> None:
    """The provenance rule's step: `collect` over the group records at `records`, into `out`."""
    write_json(collect(cfg, [json.loads(Path(p).read_text()) for p in records], commands_file), out)
