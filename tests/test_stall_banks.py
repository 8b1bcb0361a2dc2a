"""scripts/stall_banks.py on a cut of a real source page (tests/fixtures/ncu/source-page-ffma.csv: an
H100's SASS of the tiled kernel and ring2_wide at 2048^3, with their stall samples)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from harness import ROOT
from script_module import load_script

SCRIPT = ROOT / "scripts" / "stall_banks.py"
PAGE = ROOT / "tests" / "fixtures" / "ncu" / "source-page-ffma.csv"


def script() -> Any:
    return load_script("stall_banks")


def test_an_ffma_is_placed_by_the_sources_that_share_a_bank() -> None:
    s = script()
    assert s.sharing("      FFMA.FTZ R65, R100, R158, R58", 2) == 3  # all even
    assert s.sharing("      FFMA.FTZ R65, R100, R158, R58", 4) == 2  # 100 and 58 (mod 4: 0, 2, 2)
    assert s.sharing("FFMA R1, R5, R9, R13", 4) == 3 and s.sharing("FFMA R1, R4, R5, R6", 4) == 1
    assert s.sharing("FFMA R1, -R4, R4, RZ", 2) == 1  # one register read twice, RZ from no bank
    assert s.sharing("LDS.128 R32, [R196+0xc00]", 2) is None


def test_each_kernel_of_the_page_is_read_with_its_rows() -> None:
    got = script().kernels(PAGE)
    assert [name.split("<")[0] for name in got] == ["void matmul_f32_tiled", "void matmul_f32_ring16"]
    assert all(len(rows) == 13 for rows in got.values())
    ring = got[next(n for n in got if "ring16" in n)]
    assert ring[0]["Source"].split()[0] == "FFMA.FTZ" and ring[0]["stall_dispatch"] == "253"


def test_the_report_counts_dispatch_stalls_by_opcode_and_bank_sharing() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), str(PAGE)], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    # ring16: 253 + 194 + 191 + 186 + 178 + 156 dispatch samples, every one on an FFMA (the LDS rows carry
    # none), of 858 + 1063 + 666 + 864 + 831 + 814 + 5 + 10 + 10 + 10 samples
    ring = lines.index(next(line for line in lines if "ring16" in line))
    assert lines[ring + 1] == "  dispatch-stall samples 1158 of 5131 (FFMA 100%, LDS 0%)"
    # mod 2: R65, R100, R158, R58 alone has three even sources (186); the other nine, two in a bank: 972 / 9
    assert lines[ring + 2] == "  FFMA by sources in one bank (mod 2): 2: 9 FFMA, 108.00 a FFMA, 3: 1 FFMA, 186.00 a FFMA"
