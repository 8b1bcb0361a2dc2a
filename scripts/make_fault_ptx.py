#!/usr/bin/env python3
"""Developers: build tests/fixtures/faults/transpose_faults.ptx from its .cu with NVRTC (no GPU
needed): python3 scripts/make_fault_ptx.py"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.build import toolchain


def main() -> int:
    src = ROOT / "tests" / "fixtures" / "faults" / "transpose_faults.cu"
    nvrtc = toolchain.load_nvrtc()
    if nvrtc is None:
        print("NVRTC could not be loaded; install the CUDA toolkit's NVRTC (cupy's wheels carry it).", file=sys.stderr)
        return 1
    ptx, _, log, _ = nvrtc.compile(src.read_text(), src.name, ("-arch=sm_90", "-std=c++17"), ())
    src.with_suffix(".ptx").write_text(ptx)
    print(f"wrote {src.with_suffix('.ptx')} ({len(ptx)} bytes){' ; log: ' + log if log.strip() else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
