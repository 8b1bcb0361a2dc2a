#!/usr/bin/env python3
"""Where a kernel's dispatch stalls sit: by opcode, and for FFMA by how many of its source registers share a bank.

Reads Nsight Compute's per-instruction source page as CSV (one block per kernel, each opening with a
"Kernel Name" line), as written by

    ncu --cache-control none --clock-control none --nvtx --nvtx-include "probe/" \\
        --section WarpStateStats --section SourceCounters -o mm \\
        python3 scripts/probe_ncu.py --op matmul --shape 2048x2048x2048 --impls cuda cuda.ring2_wide \\
        --variants matmul.ring2_wide --calls 1
    ncu -i mm.ncu-rep --page source --csv --print-source sass > mm_source.csv
    python3 scripts/stall_banks.py mm_source.csv

For each kernel it prints the dispatch-stall samples by opcode (the top ones) and, for FFMA, the mean
samples per instruction by the largest number of its distinct source registers in one bank, with
banks as register number mod 2 and mod 4. The source page does not show operand-reuse flags, so a
source read from the reuse cache counts here as if read from its bank. Screening evidence for a
kernel notebook, not a pipeline table.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
import statistics
import sys
from pathlib import Path

FFMA = re.compile(r"FFMA(?:\.\w+)*\s+R\d+,\s*(-?R\d+|RZ)\S*,\s*(-?R\d+|RZ)\S*,\s*(-?R\d+|RZ)")
SAMPLES = "Warp Stall Sampling (All Samples)"


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def kernels(path: Path) -> dict[str, list[dict[str, str]]]:
    """Kernel name -> its instruction rows, from a source-page CSV of one or more kernels."""
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"Kernel Name"')]
    out: dict[str, list[dict[str, str]]] = {}
    for a, b in zip(starts, [*starts[1:], len(lines)]):
        name = next(csv.reader([lines[a]]))[1]
        rows = list(csv.reader(lines[a + 1:b]))
        out[name] = [dict(zip(rows[0], r)) for r in rows[1:] if len(r) == len(rows[0])]
    return out


def sharing(source: str, banks: int) -> int | None:
    """The largest number of an FFMA's distinct source registers in one bank; None if not an FFMA."""
    m = FFMA.search(source)
    if not m:
        return None
    regs = list(dict.fromkeys(int(r.lstrip("-R")) for r in m.groups() if r != "RZ"))
    return max(collections.Counter(r % banks for r in regs).values()) if regs else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source_csv", type=Path)
    parser.add_argument("--top", type=int, default=4, help="opcodes listed per kernel")
    args = parser.parse_args()
    for name, rows in kernels(args.source_csv).items():
        by_op: dict[str, float] = collections.defaultdict(float)
        for r in rows:
            words = [w for w in r["Source"].split() if not w.startswith("@")]
            by_op[words[0].split(".")[0] if words else "?"] += number(r["stall_dispatch"])
        total, samples = sum(by_op.values()), sum(number(r[SAMPLES]) for r in rows)
        print(f"{name}\n  dispatch-stall samples {total:.0f} of {samples:.0f} ("
              + ", ".join(f"{op} {n / total:.0%}" for op, n in sorted(by_op.items(), key=lambda kv: -kv[1])[:args.top]) + ")")
        for banks in (2, 4):
            groups: dict[int, list[float]] = collections.defaultdict(list)
            for r in rows:
                level = sharing(r["Source"], banks)
                if level is not None:
                    groups[level].append(number(r["stall_dispatch"]))
            print(f"  FFMA by sources in one bank (mod {banks}): " + ", ".join(
                f"{level}: {len(v)} FFMA, {statistics.mean(v):.2f} a FFMA" for level, v in sorted(groups.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
