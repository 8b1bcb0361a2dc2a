#!/usr/bin/env python3
"""Does the offline build write the same PTX and SASS for the same kernel twice? Build one
implementation of one operation at the given shapes in `--runs` fresh processes and count the
distinct PTX and SASS (by SHA-256) of each kernel.

NVRTC's front end does not always: for some kernels (the matmul ring instances, NVRTC 13.5) its
PTX varies from one process to the next, and now and then the SASS too. To look for the cause,
`--no-aslr` starts each process with address-space randomization off (personality
ADDR_NO_RANDOMIZE, as `setarch -R` does), and `--bare` makes each process only load NVRTC and
compile the kernel (the source, name expression and options the build used). CPU only (no GPU is
used); the build cache is not used.

    python scripts/nvrtc_determinism.py --op matmul --impl cuda.ring3_128x64 --shapes 2048x2048x2048 --runs 24
    python scripts/nvrtc_determinism.py --op matmul --impl cuda.ring3_128x64 --shapes 2048x2048x2048 --runs 24 --no-aslr
    python scripts/nvrtc_determinism.py --op matmul --impl cuda.ring3_128x64 --shapes 2048x2048x2048 --runs 24 --no-aslr --bare
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import hashlib
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import config  # noqa: E402
from harness.errors import EvidenceError  # noqa: E402

ADDR_NO_RANDOMIZE = 0x0040000
KERNELS = config.ROOT / "kernels"


def build_once(op: str, impl: str, shapes: list[tuple[int, ...]]) -> dict[str, dict[str, Any]]:
    """One build in this process: kernel -> its PTX and SASS SHA-256 and, for --bare, what NVRTC
    was given (the source under kernels/, the name expression, the options)."""
    from harness.build.build import artifact_stem, build_census
    from harness.ops import variants

    cfg = config.load(config.ROOT / "config.yaml")
    variant = None if "." not in impl else (impl, variants.compiler_options(cfg["operations"][op], impl))
    base = impl.split(".")[0]
    sources = {hashlib.sha256(p.read_bytes()).hexdigest(): str(p.relative_to(KERNELS))
               for p in KERNELS.rglob("*.cu")}
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for row in build_census(op, base, shapes, "sm_90", Path(tmp), variant=variant):
            stem = Path(tmp) / artifact_stem(base, row["kernel"], row["specialization"])
            out[f"{row['kernel']} {row['specialization']}"] = {
                "ptx": hashlib.sha256(stem.with_suffix(".ptx").read_bytes()).hexdigest(),
                "sass": row["sass_sha256"], "source": sources.get(row["source_sha256"]),
                "expr": row["kernel"], "options": row["options"].split()}
    return out


def compile_bare(job: dict[str, Any]) -> dict[str, str]:
    """NVRTC alone on one kernel: its PTX and SASS SHA-256."""
    from harness.build import toolchain

    nvrtc = toolchain.load_nvrtc()
    if nvrtc is None:
        raise EvidenceError("The NVRTC library (libnvrtc) could not be loaded.")
    ptx, cubin, _, _ = nvrtc.compile((KERNELS / job["source"]).read_text(), Path(job["source"]).name,
                                     job["options"], [job["expr"]])
    return {"ptx": hashlib.sha256(ptx.encode()).hexdigest(),
            "sass": hashlib.sha256(toolchain.disassemble(cubin).encode()).hexdigest()}


def no_aslr() -> None:
    """In the child before exec: turn address-space randomization off (EPERM where not allowed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.personality(ctypes.c_ulong(ADDR_NO_RANDOMIZE)) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) was refused")


def child(args: argparse.Namespace, job: dict[str, Any] | None) -> dict[str, Any]:
    """One fresh process: the build (job None) or NVRTC alone on one kernel (--bare)."""
    cmd = [sys.executable, __file__, "--op", args.op, "--impl", args.impl, "--shapes", *args.shapes]
    cmd += ["--child", json.dumps(job)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          preexec_fn=no_aslr if args.no_aslr else None)
    if proc.returncode != 0:
        raise EvidenceError(f"A build process failed: {proc.stderr.strip().splitlines()[-1:]}.")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", required=True)
    parser.add_argument("--impl", required=True, help="cuda, triton or a variant 'cuda.name'")
    parser.add_argument("--shapes", nargs="+", required=True, help="e.g. 2048x2048x2048")
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=8, help="processes at once")
    parser.add_argument("--no-aslr", action="store_true")
    parser.add_argument("--bare", action="store_true", help="each process only compiles, through NVRTC")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes]
    try:
        if args.child is not None:
            job = json.loads(args.child)
            print(json.dumps(build_once(args.op, args.impl, shapes) if job is None else compile_bare(job)))
            return 0
        jobs: dict[str, dict[str, Any] | None] = {"": None}
        if args.bare:
            built = build_once(args.op, args.impl, shapes)
            if any(j["source"] is None or args.impl.startswith("triton") for j in built.values()):
                raise EvidenceError("--bare compiles our CUDA kernels only.")
            jobs = dict(built)
        with ThreadPoolExecutor(args.jobs) as pool:
            runs = {name: list(pool.map(lambda _, j=job: child(args, j), range(args.runs)))
                    for name, job in jobs.items()}
    except (EvidenceError, OSError) as exc:
        print(f"nvrtc_determinism: {exc}", file=sys.stderr)
        return 2
    if not args.bare:  # one build a process: every kernel of it
        runs = {kernel: [r[kernel] for r in runs[""]] for kernel in runs[""][0]}
    print(f"{args.op} {args.impl} at {' '.join(args.shapes)}: {args.runs} processes "
          f"({'NVRTC alone' if args.bare else 'the build'}), address-space randomization "
          f"{'off' if args.no_aslr else 'as the system has it'}")
    for kernel, results in runs.items():
        ptx = collections.Counter(r["ptx"][:12] for r in results)
        sass = collections.Counter(r["sass"][:12] for r in results)
        print(f"  {kernel}: {len(ptx)} distinct PTX {dict(ptx)}; {len(sass)} distinct SASS {dict(sass)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
