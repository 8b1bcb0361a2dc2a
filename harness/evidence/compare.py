"""Two namespaces side by side, kernel by kernel: did a change to the run (grouping, parallel jobs,
a second run in a row) move any figure beyond the spread of its launches?

`python -m harness compare A B [--artifacts DIR] [--out FILE.csv]` reads the retained
`kernel_time.csv` of both namespaces and, for every (operation, shape, implementation) in both,
gives B's kernel time against A's, the interval of B/A from the spread of each one's launches
(tables.ratio_interval, the same rule as the report's sweep), and a verdict: 'no difference' when
the interval holds 1, else 'faster' or 'slower'.

The evidence rules still hold here. A row measured on two different GPUs gets no verdict. A
library baseline (torch) is compared only when both namespaces ran the same torch version on the
same GPU; otherwise its row says why not (between sessions the library may change under us, so the
report never compares it across namespaces). The result is a tool for the people who change the
pipeline, not a figure of any report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from harness import ROOT
from harness.errors import EvidenceError
from harness.io import write_csv
from harness.tables import derive as tables
from harness.tables import history

COMPARE_COLUMNS = ["op", "shape", "impl", "a_us", "b_us", "change_pct", "b_over_a_lo", "b_over_a_hi", "verdict",
                   "reason"]
LIBRARY_IMPLS = ("torch",)


def _kernel_time(ns_dir: Path) -> pd.DataFrame:
    path = ns_dir / "tables" / "kernel_time.csv"
    if not path.is_file():
        raise EvidenceError(f"compare: {ns_dir.name} has no tables/kernel_time.csv under {ns_dir.parent}.")
    return history.read_table(path)


def _torch_version(ns_dir: Path) -> str | None:
    version = (history.read_provenance(ns_dir).get("versions") or {}).get("torch")
    return str(version) if version else None


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, library_comparable: bool) -> pd.DataFrame:
    """One row per (op, shape, impl) in both kernel-time tables, in A's order."""
    keys = ["op", "shape", "impl"]
    b_rows = {tuple(str(r[k]) for k in keys): r for r in b.to_dict("records")}
    out: list[dict[str, Any]] = []
    for ra in a.to_dict("records"):
        key = tuple(str(ra[k]) for k in keys)
        rb = b_rows.get(key)
        if rb is None:
            continue
        a_us, b_us = float(ra["kernel_time_us"]), float(rb["kernel_time_us"])
        row: dict[str, Any] = dict(zip(keys, key), a_us=a_us, b_us=b_us,
                                   change_pct=100.0 * (b_us / a_us - 1.0) if a_us > 0 else None,
                                   b_over_a_lo=None, b_over_a_hi=None, verdict=None, reason="")
        if not tables.same_gpu(ra, rb):
            row["reason"] = "measured on different GPUs: no verdict"
        elif key[2] in LIBRARY_IMPLS and not library_comparable:
            row["reason"] = "library baseline: compared only on one GPU with one torch version"
        else:
            lo, hi, verdict = tables.ratio_interval(rb, ra)
            row.update(b_over_a_lo=lo, b_over_a_hi=hi, verdict=verdict,
                       reason="" if verdict else "no launch spread in one of the tables")
        out.append(row)
    return pd.DataFrame(out, columns=COMPARE_COLUMNS)


def compare_namespaces(a: str, b: str, artifacts: str | Path = ROOT / "artifacts") -> pd.DataFrame:
    """compare_frames over two retained namespaces under `artifacts`."""
    root = Path(artifacts)
    a_dir, b_dir = root / a, root / b
    ta, tb = _torch_version(a_dir), _torch_version(b_dir)
    return compare_frames(_kernel_time(a_dir), _kernel_time(b_dir), library_comparable=ta is not None and ta == tb)


def summary(frame: pd.DataFrame, a: str, b: str) -> str:
    """One sentence: how many rows were compared, how many moved beyond their spread, the largest move."""
    judged = frame[frame["verdict"].notna()]
    if judged.empty:
        return f"{b} against {a}: no (operation, shape, implementation) could be compared."
    moved = judged[judged["verdict"] != "no difference"]
    worst = judged.loc[judged["change_pct"].abs().idxmax()]
    text = (f"{b} against {a}: {len(judged)} kernel times compared, {len(moved)} moved beyond the spread of their "
            f"launches; the largest change is {worst['change_pct']:+.1f}% ({worst['op']} {worst['shape']} "
            f"{worst['impl']}: {worst['a_us']:.2f} -> {worst['b_us']:.2f} us, {worst['verdict']}).")
    skipped = len(frame) - len(judged)
    return text + (f" {skipped} not compared (see reason)." if skipped else "")


def markdown(frame: pd.DataFrame) -> str:
    lines = ["| operation | shape | impl | A µs | B µs | change | B/A spread | verdict |", "|---|---|---|---:|---:|---:|---|---|"]
    for r in frame.to_dict("records"):
        interval = (f"{r['b_over_a_lo']:.3f}–{r['b_over_a_hi']:.3f}" if r["b_over_a_lo"] is not None
                    and not pd.isna(r["b_over_a_lo"]) else "")
        lines.append(f"| {r['op']} | {r['shape']} | {r['impl']} | {r['a_us']:.2f} | {r['b_us']:.2f} | "
                     f"{r['change_pct']:+.1f}% | {interval} | {r['verdict'] or r['reason']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness compare", description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the earlier namespace")
    parser.add_argument("b", help="the namespace compared with it")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--out", help="also write the rows to this CSV")
    args = parser.parse_args(argv)
    frame = compare_namespaces(args.a, args.b, args.artifacts)
    if args.out:
        write_csv(frame.to_dict("records"), COMPARE_COLUMNS, args.out)
    print(markdown(frame))
    print()
    print(summary(frame, args.a, args.b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
