"""External tools and the software environment: finding a tool (nsys, ncu: the config's path, else
an environment variable, else PATH, else known install folders; one sentence naming every place
looked at when it is nowhere), running one as an argument list under a time limit, and the
versions of the Python packages a measurement depends on."""

from __future__ import annotations

import glob
import os
import platform
import shutil
import signal
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError, ToolMissing


def find_tool(name: str, title: str, configured: str | None, config_key: str, env_var: str,
              install_globs: Sequence[str] = ()) -> str:
    """The executable to use for `name`; ToolMissing names the places looked at."""
    tried: list[str] = []
    for label, candidate in ((f"config {config_key}", configured), (f"${env_var}", os.environ.get(env_var))):
        if candidate:
            tried.append(f"{label}={candidate}")
            if Path(candidate).is_file() and os.access(candidate, os.X_OK):
                return str(Path(candidate).resolve())
    found = shutil.which(name)
    if found:
        return found
    tried.append("PATH")
    for pattern in install_globs:
        installed = sorted(glob.glob(pattern))
        if installed:
            return installed[-1]
        tried.append(pattern)
    raise ToolMissing(f"{title} ({name}) was not found (looked at {', '.join(tried)}); install it, put it on PATH, "
                      f"or set {env_var} or the config key {config_key} to its executable.")


def run_command(argv: list[str], log_path: str | Path | None, env: dict[str, str] | None = None, timeout: float = 900,
                what: str = "command") -> tuple[int, str]:
    """Run an argument list (never a shell string) from the repository root; return its exit
    status and its output (stdout and stderr together), which is also appended to `log_path`.
    EvidenceError if it runs past `timeout` seconds (the process is killed)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT, text=True,
                                errors="replace", start_new_session=True)
    except OSError as exc:
        raise EvidenceError(f"{what} could not start {argv[0]}: {exc.strerror}.") from None
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_session(proc)
        raise EvidenceError(f"{what} did not finish within {timeout:g} s and was stopped; see the log.") from None
    if log_path:
        with open(log_path, "a") as log:
            print("$ " + " ".join(argv), file=log)
            log.write(output)
    return proc.returncode, output


def stop_session(proc: subprocess.Popen[Any]) -> None:
    """Kill a process started with start_new_session=True and everything it started, then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def clean_parent(argv: list[str]) -> list[str]:
    """`argv` run as the child of a shell started with the (clean) environment it is given, not as a
    child of this process: a profiler that records its parent's environment (Nsight Systems writes
    one into its report) then finds only that clean environment."""
    return ["/bin/sh", "-c", '"$@" & wait $!', "sh", *argv]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("torch", "triton", "cupy-cuda13x", "snakemake", "sqlite-utils", "pandas", "jinja2"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def find_nsys(configured: str | None) -> str:
    """The nsys to use: the config's `nsys.path`, else $NSYS, else nsys on PATH."""

    return find_tool("nsys", "Nsight Systems", configured, "nsys.path", "NSYS")
