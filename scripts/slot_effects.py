#!/usr/bin/env python3
"""What moves a kernel's time inside its slot of a round, from a run's tables (CPU, nothing measured).

    python3 scripts/slot_effects.py NAMESPACE [NAMESPACE ...] --op softmax [--slow 0.02]

For each namespace and the operation's groups:

* **slow rounds** (tables/rounds.csv.gz, committed): per implementation, the rounds whose value lies
  more than `--slow` (2%) above the implementation's median, marked '#' in round order ('+' above
  1%), so rounds in which several implementations were slow together line up;
* **calls per round** (rounds.csv's `calls`): the number the run's warm-up set;
* **position in the slot** (measure/<op>/<shape>/launches.csv, where the run's measure folder is
  here: it stays out of git, a run's bundle holds it): each implementation's kernel time by its
  call's place in the slot, relative to its median, and with `--drop N` the ratio `--a`/`--b` of
  the mean kernel times with and without the first N calls of every slot.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import ROOT  # noqa: E402
from harness.tables.table_files import table_file, table_path  # noqa: E402


def marks(values: list[float], slow: float) -> str:
    """One character per round: '#' above median by more than `slow`, '+' by more than half of it."""
    median = statistics.median(values)
    return "".join("#" if v / median - 1 > slow else "+" if v / median - 1 > slow / 2 else "." for v in values)


def report(ns_dir: Path, op: str, slow: float, positions: int = 6, drop: int = 0, a: str = "cuda",
           b: str = "triton") -> list[str]:
    import pandas as pd

    rounds = pd.read_csv(table_path(ns_dir / "tables", "rounds"), dtype={"op": str, "shape": str, "impl": str})
    lines = []
    for shape, grp in rounds[rounds["op"] == op].groupby("shape", sort=False):
        wide = grp.pivot_table(index="round", columns="impl", values="kernel_time_us", aggfunc="first").sort_index()
        calls = sorted({int(c) for c in grp["calls"].dropna()})
        lines.append(f"{ns_dir.name} {op} {shape}: calls per round {calls}")
        for impl in wide.columns:
            lines.append(f"  {impl:>16} {marks(list(wide[impl].dropna()), slow)}")
        launches = ns_dir / "measure" / op / str(shape) / "launches.csv"
        if launches.is_file():
            kernels = pd.read_csv(launches, dtype={"impl": str})
            kernels["position"] = kernels.groupby(["impl", "round"]).cumcount()
            for impl, k in kernels.groupby("impl", sort=False):
                by_place = k.groupby("position")["duration_ns"].mean() / k["duration_ns"].median() - 1
                shown = " ".join(f"{100 * v:+.1f}" for v in by_place.iloc[:positions])
                lines.append(f"  {impl:>16} by place in its slot (%): {shown}")
            if drop and {a, b} <= set(kernels["impl"]):
                mean = kernels.groupby("impl")["duration_ns"].mean()
                kept = kernels[kernels["position"] >= drop].groupby("impl")["duration_ns"].mean()
                lines.append(f"  {a}/{b}: {mean[a] / mean[b]:.4f} over every call, {kept[a] / kept[b]:.4f} "
                             f"without the first {drop} of each slot")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="+")
    parser.add_argument("--op", required=True)
    parser.add_argument("--slow", type=float, default=0.02)
    parser.add_argument("--drop", type=int, default=0)
    parser.add_argument("--a", default="cuda")
    parser.add_argument("--b", default="triton")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    args = parser.parse_args(argv)
    for name in args.namespaces:
        ns_dir = Path(args.artifacts) / name
        if not table_path(ns_dir / "tables", "rounds").is_file():
            print(f"slot_effects: {name} has no tables/{table_file('rounds')} under {args.artifacts}.", file=sys.stderr)
            return 2
        print("\n".join(report(ns_dir, args.op, args.slow, drop=args.drop, a=args.a, b=args.b)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
