"""Run a GPU test tier and keep its evidence with the code.

    python3 scripts/gpu_tests.py smoke     # every operation x implementation once, one end-to-end run
    python3 scripts/gpu_tests.py full      # the whole GPU suite

Each tier runs `python3 -m pytest -q -p no:cacheprovider -m <its marker> [its files]` (extra
arguments after `--` are passed on; test paths among them replace the tier's files), prints its
wall time, and adds a section to
`docs/evidence/gpu-tests/<full commit>.txt`: the commit, the GPU and its driver, the nsys and ncu
versions, the Python packages, the tier, the wall time, pytest's summary line and its slowest
test phases (`--durations`, where the wall time went). The commit is
EVIDENCE_GIT_COMMIT where it is set (a copy without .git, as on the lent GPU machine), else git's
HEAD. `--out DIR` also writes the file into DIR (the device tool's $OUT). The exit status is
pytest's. Commit the file: it is how a reviewer knows the GPU path passed at that commit.

`--prime` first times, apart from the tier and written into its section, what a start costs
before any test runs: the bytecode of the packages installed without it (`pip install
--no-compile`, as the lent GPU machine's carried packages are; a plain install compiles it), and
one start of nsys and of ncu, each on a process that launches one kernel. On a fresh H200 each
first start took 8-9 s and the tier after it was no faster
(docs/evidence/gpu-tests/849e119ad82196cf93530beaea3c457da00d0d93.txt); on a warm machine nsys adds
1.7-1.9 s to such a process and ncu 1.0-1.8 s (scripts/probe_starts.py,
docs/evidence/starts/639cb53d01d74f6e4bac40a6516822e65d839ec4.txt), a cost every capture pays.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.io import write_text  # noqa: E402
from harness.tools import versions  # noqa: E402

TIERS = {"smoke": "gpu and smoke", "full": "gpu"}
"""Each tier's pytest marker expression."""

TARGET_S = {"smoke": 60, "full": 180}
"""The wall time each tier is meant to stay within on one H200."""

MARKS = {"smoke": re.compile(r"\bmark\.smoke\b"), "full": re.compile(r"\bmark\.gpu\b")}
"""How a test file marks a tier's tests (tests/conftest.py marks every test of a test_*_gpu.py gpu)."""


def tier_files(tier: str, tests: Path = ROOT / "tests") -> list[str]:
    """The test files a tier collects, relative to the repository root: the files that hold its
    tests (collecting all of tests/ imports every CPU test module, seconds of the tier), the
    end-to-end run last: a broken implementation is then named by the generic test within seconds,
    before the run that takes most of the tier. The full tier's files are those named
    test_*_gpu.py and those that mark a test gpu; the smoke tier's, those that mark one smoke."""
    mark = MARKS[tier]
    files = [p for p in sorted(tests.glob("test_*.py"))
             if mark.search(p.read_text()) or (tier == "full" and p.name.endswith("_gpu.py"))]
    return [str(p.relative_to(ROOT)) for p in sorted(files, key=lambda p: "end_to_end" in p.name)]


def names_paths(args: list[str]) -> bool:
    """Whether pytest arguments name a test path (a file or folder that exists, or a node id in one)."""
    return any(not a.startswith("-") and (ROOT / a.split("::")[0]).exists() for a in args)

SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|skipped|error|errors|deselected)\b.*?)\s*=*$")


def summary_line(output: str) -> str:
    """pytest's closing summary line ('12 passed, 3 skipped in 40.1s'), or '' when it printed none."""
    lines = [m.group(1) for m in map(SUMMARY.match, output.splitlines()) if m]
    return lines[-1] if lines else ""


DURATION = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(\S+)")

SLOWEST = 5
"""How many of pytest's slowest test phases (--durations) the evidence file names."""


def slowest(output: str, n: int = SLOWEST) -> list[str]:
    """pytest's `--durations` lines ('12.34s call     tests/x.py::t'), slowest first, as
    '12.3 s tests/x.py::t (call)': where a tier's wall time went."""
    found = [(float(m.group(1)), m.group(3), m.group(2)) for m in map(DURATION.match, output.splitlines()) if m]
    return [f"{s:.1f} s {test} ({phase})" for s, test, phase in sorted(found, reverse=True)[:n]]


PRIME_CODE = "import torch; x = torch.ones(1 << 20, device='cuda'); print(float((x * 2).sum()))"
"""The process nsys and ncu start once in `prime`: one kernel (and torch's own) on the GPU."""


def _timed(argv: list[str], cwd: Path) -> str:
    """Run `argv` (output discarded); '<seconds> s', or why it could not run."""
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not run ({type(exc).__name__})"
    took = f"{time.monotonic() - start:.1f} s"
    return took if proc.returncode == 0 else f"{took}, exit status {proc.returncode}"


def prime(work: Path) -> str:
    """The costs of a start before any test (module docstring), each timed: one line for the evidence."""
    parts = []
    uncompiled = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                  if d and Path(d).is_dir() and Path(d).resolve() != ROOT and os.access(d, os.W_OK)]
    if uncompiled:
        compiled = _timed([sys.executable, "-m", "compileall", "-q", "-j", "0", *uncompiled], work)
        parts.append(f"bytecode of {', '.join(uncompiled)} {compiled}")
    else:
        parts.append("no package folder on PYTHONPATH to compile")
    for tool, args in (("nsys", ["profile", "--trace", "cuda", "--sample", "none", "--cpuctxsw", "none",
                                 "--force-overwrite", "true", "--export", "sqlite", "-o", str(work / "prime")]),
                       ("ncu", ["--clock-control", "none", "--metrics", "gpu__time_duration.sum"])):
        path = shutil.which(tool)
        parts.append(f"first {tool} start " + (_timed([path, *args, sys.executable, "-c", PRIME_CODE], work)
                                              if path else "skipped (not found)"))
    return "; ".join(parts)


def commit() -> str:
    """The full commit the tree is at (module docstring)."""
    given = os.environ.get("EVIDENCE_GIT_COMMIT", "")
    if re.fullmatch(r"[0-9a-f]{40}", given):
        return given
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _first_line(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env={"PATH": os.environ.get("PATH", ""),
                                   "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", "")})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({type(exc).__name__})"
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return lines[-1] if lines else "unavailable"


def machine() -> dict[str, str]:
    """The GPU, its driver, nsys and ncu, as their own tools print them."""
    facts = {"gpu": "none visible", "driver": "unknown"}
    if shutil.which("nvidia-smi"):
        line = _first_line(["nvidia-smi", "--query-gpu=name,uuid,driver_version", "--format=csv,noheader"])
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            facts = {"gpu": f"{parts[0]} ({parts[1]})", "driver": parts[2]}
    for tool in ("nsys", "ncu"):
        path = shutil.which(tool)
        facts[tool] = _first_line([path, "--version"]) if path else "not found"
    return facts


def section(tier: str, facts: dict[str, str], wall_s: float, summary: str, rc: int,
            slow: list[str] | None = None, primed: str = "", narrowed: Sequence[str] = ()) -> str:
    """The evidence file's section for one tier run; `narrowed`: the pytest arguments that narrowed
    it (after --), named so that a part of a tier never reads as the whole."""
    packages = ", ".join(f"{k} {v}" for k, v in versions().items())
    return (f"tier: {tier} (pytest -m '{TIERS[tier]}'; meant to take at most {TARGET_S[tier]} s)\n"
            + (f"narrowed to (not the whole tier): {' '.join(narrowed)}\n" if narrowed else "")
            + f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
            f"gpu: {facts['gpu']}\ndriver: {facts['driver']}\nnsys: {facts['nsys']}\nncu: {facts['ncu']}\n"
            f"packages: {packages}\n"
            + (f"primed before the tier, outside its wall time: {primed}\n" if primed else "")
            + f"wall time: {wall_s:.1f} s\npytest exit status: {rc}\npytest: {summary or '(no summary line)'}\n"
            + "".join(f"slowest: {line}\n" for line in slow or []))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Run a GPU test tier and write its evidence file; arguments "
                                     "after -- go to pytest.")
    parser.add_argument("tier", choices=sorted(TIERS))
    parser.add_argument("--out", help="also write the evidence file into this folder")
    parser.add_argument("--prime", action="store_true",
                        help="first time the tools' start apart from the tier (module docstring)")
    parser.add_argument("--evidence-dir", default=str(ROOT / "docs" / "evidence" / "gpu-tests"),
                        help="where the evidence file goes (default docs/evidence/gpu-tests)")
    ours, passed_on = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--durations={SLOWEST}",
               "--durations-min=0.5", "-m", TIERS[args.tier],
               *([] if names_paths(passed_on) else tier_files(args.tier)), *passed_on]
    primed = ""
    if args.prime:
        with tempfile.TemporaryDirectory(prefix="gpu-tests-prime-") as work:
            primed = prime(Path(work))
        print(f"primed: {primed}")
    start = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:  # as pytest prints it, so a run stopped at a time limit still shows its progress
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
    wall = time.monotonic() - start
    summary = summary_line("".join(lines))
    print(f"gpu tests, {args.tier} tier: {wall:.1f} s (meant to take at most {TARGET_S[args.tier]} s): {summary}")
    at = commit()
    header = f"commit: {at}\n"
    text = section(args.tier, machine(), wall, summary, proc.returncode, slowest("".join(lines)), primed, passed_on)
    folders = [Path(args.evidence_dir)] + ([Path(args.out)] if args.out else [])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{at}.txt"
        old = path.read_text() if path.is_file() else header
        write_text(old + "\n" + text, path)
        print(f"evidence: {path}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
