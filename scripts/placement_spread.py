#!/usr/bin/env python3
"""How a ratio moves with where its inputs lie, from committed tables (CPU, nothing measured).

    python3 scripts/placement_spread.py NAMESPACE [NAMESPACE ...] [--a cuda] [--b triton] [--all-shapes]
                                        [--placements 6 8 10 12]

For each namespace (under artifacts/) and each operation at its default shape (every shape with
--all-shapes): the ratio a/b of the means of the rounds on each placement, their standard
deviation, and the half-width of the 95% t interval over placements that G placements would give
at that spread (harness.evidence.placements). With the run's own G it reproduces, up to the
ratio estimator's weighting, the half-width sweep.csv reports; with more it says what more
placements would buy before a run is spent on them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import ROOT  # noqa: E402
from harness.errors import EvidenceError  # noqa: E402
from harness.evidence import placements  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="+")
    parser.add_argument("--a", default="cuda")
    parser.add_argument("--b", default="triton")
    parser.add_argument("--all-shapes", action="store_true")
    parser.add_argument("--placements", type=int, nargs="+", default=[6, 8, 10, 12])
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    args = parser.parse_args(argv)
    try:
        for name in args.namespaces:
            ns_dir = Path(args.artifacts) / name
            shapes = None if args.all_shapes else placements.defaults(ns_dir)
            for s in placements.spreads(ns_dir, args.a, args.b, shapes):
                ratios = " ".join(f"{r:.3f}" for r in s.by_placement)
                widths = "  ".join(f"G={g}: {100 * s.half_width(g):.2f}%" for g in args.placements)
                print(f"{name} {s.op} {s.shape} {s.a}/{s.b} by placement: {ratios} | sd {100 * s.sd:.2f}% "
                      f"| half-width {widths}")
    except EvidenceError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
