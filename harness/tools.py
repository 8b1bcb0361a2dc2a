"""External tools and the software environment: finding a tool (nsys, ncu: the config's path, else
an environment variable, else PATH, else known install folders; one sentence naming every place
looked at when it is nowhere), running one as an argument list under a time limit, and the
versions of the Python packages a measurement depends on."""

from __future__ import annotations

import functools
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
    """Run an argument list (never a shell string) from the repository root, in a session this
    process owns (`start_owned`); return its exit status and its output (stdout and stderr
    together), which is also appended to `log_path`. EvidenceError if it runs past `timeout`
    seconds (the session is killed)."""
    proc = start_owned(argv, what, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                       errors="replace")
    output = wait_owned(proc, timeout, what, read=True)
    if log_path:
        with open(log_path, "a") as log:
            print("$ " + " ".join(argv), file=log)
            log.write(output)
    return proc.returncode, output


@functools.cache
def pdeathsig_prefix() -> tuple[str, ...]:
    """util-linux's setpriv, asked to have the kernel send SIGKILL to the command it runs when that
    command's parent ends (Linux's parent-death signal, kept across exec), or () where there is none."""
    exe = shutil.which("setpriv")
    if exe is None:
        return ()
    try:
        done = subprocess.run([exe, "--pdeathsig", "KILL", "/bin/true"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return (exe, "--pdeathsig", "KILL") if done.returncode == 0 else ()


def start_owned(argv: list[str], what: str, **popen: Any) -> subprocess.Popen[Any]:
    """Start `argv` from the repository root in a session of its own that this process owns: wait
    for it with `wait_owned`, which kills the whole session when the wait ends any other way than
    by its exit (a time limit, Ctrl-C, SIGTERM). Where util-linux's setpriv runs, the session's
    leader also gets SIGKILL from the kernel when this process ends however it ends (SIGKILL too),
    and a process namespace (`clean_parent`) goes with its leader: a capture never outlives the
    step that started it, to run on beside the next one. EvidenceError if it cannot start."""
    path = (popen.get("env") or os.environ).get("PATH")  # where the child looks, as Popen does
    if shutil.which(argv[0], path=path) is None:  # setpriv would start and report it only as exit status 127
        raise EvidenceError(f"{what} could not start {argv[0]}: No such file or directory.")
    try:
        return subprocess.Popen([*pdeathsig_prefix(), *argv], cwd=ROOT, start_new_session=True, **popen)
    except OSError as exc:
        raise EvidenceError(f"{what} could not start {argv[0]}: {exc.strerror}.") from None


def wait_owned(proc: subprocess.Popen[Any], timeout: float, what: str, read: bool = False) -> Any:
    """Wait for a process from `start_owned` to exit, reading its output when `read` (returned;
    None otherwise). Past `timeout` seconds its session is killed and EvidenceError says so; on
    anything raised meanwhile (KeyboardInterrupt, a SIGTERM handler's SystemExit) the session is
    killed and that goes on."""
    try:
        if read:
            return proc.communicate(timeout=timeout)[0]
        proc.wait(timeout=timeout)
        return None
    except subprocess.TimeoutExpired:
        stop_session(proc)
        raise EvidenceError(f"{what} did not finish within {timeout:g} s and was stopped; see the log.") from None
    except BaseException:
        stop_session(proc)
        raise


def stop_session(proc: subprocess.Popen[Any]) -> None:
    """Kill a process started with start_new_session=True and everything it started, then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


ISOLATIONS = (
    ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child"),
    ("unshare", "--user", "--map-current-user", "--pid", "--fork", "--mount-proc", "--kill-child"),
    ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"),
)
"""Ways to start a command in a process namespace of its own with its own /proc, tried in order:
as root (or with CAP_SYS_ADMIN), then inside a user namespace keeping the user's id, then mapping
it to root (util-linux before 2.38 has no --map-current-user)."""


@functools.cache
def isolation() -> tuple[str, ...]:
    """The first of ISOLATIONS this machine allows (it runs /bin/true), or () where none does
    (no unshare, or namespaces refused). EVIDENCE_NO_ISOLATION=1 forces (), as on such a machine.

    Nsight Systems writes into its report the environment of every process above it, up to init:
    the tool's parent, that one's parent and so on (found on the H200: scripts/probe_nsys_env.py),
    so a secret exported in the shell that started snakemake reaches the raw report, whatever
    environment the tool itself is given. In a process namespace with its own /proc the tool has
    one ancestor, the namespace's first process, which runs with the clean environment given."""
    if os.environ.get("EVIDENCE_NO_ISOLATION") == "1":
        return ()
    for candidate in ISOLATIONS:
        exe = shutil.which(candidate[0])
        if exe is None:
            return ()
        try:
            done = subprocess.run([exe, *candidate[1:], "/bin/true"], stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return (exe, *candidate[1:])
    return ()


def isolation_note() -> str:
    """One phrase saying how a profiler's process tree is kept from the invoking one (for records)."""
    prefix = isolation()
    if prefix:
        return "process namespace: " + " ".join([Path(prefix[0]).name, *prefix[1:]])
    return "none: this machine allows no process namespace, so a profiler sees the environment of every process above it"


def clean_parent(argv: list[str]) -> list[str]:
    """`argv` run where no process above it holds the invoking environment: in a process namespace
    of its own (`isolation`), as the child of a shell started with the (clean) environment it is
    given. Where no namespace is allowed, only that shell: a profiler then still finds the
    environment of the processes above this one (the caller deletes a raw report that holds it)."""
    return [*isolation(), "/bin/sh", "-c", '"$@" & wait $!', "sh", *argv]


PROVENANCE_INPUTS = ("EVIDENCE_GIT_COMMIT", "EVIDENCE_GIT_DIRTY")
"""The variables the provenance takes its commit from where the tree has no .git
(harness.report.provenance.git_state): their values are written into the provenance and the
reports on purpose, so they are never searched for as credentials."""


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
