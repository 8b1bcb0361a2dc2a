"""Two namespaces side by side, kernel by kernel, with a verdict an engineer can act on: same,
faster, slower, or can't tell.

`python -m harness compare A B [--artifacts DIR] [--out FILE.csv]` reads both namespaces' kernel
times (`tables/kernel_time.csv`) and for every (operation, shape, implementation) in both gives B's kernel time against A's:

* where both have `tables/rounds.csv` (each capture's rounds), the ratio B/A with a 95% bootstrap
  interval over the rounds, resampled independently on each side (two sessions share no rounds),
  and the four verdicts of harness.tables.stats with the equivalence margin (`--margin`, 1%);
* otherwise (tables from before the rounds), the min-max envelope of the two spreads of the
  launches, and "can't tell" where it holds 1: an envelope is not an interval that narrows.

The evidence rules hold here too. A row measured on two different GPUs gets no verdict. A library
baseline (torch) is compared only when both namespaces ran the same torch version on the same GPU;
otherwise its row says why not. The result is a tool for the people who change a kernel or the
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
from harness.namespaces import namespace_dir
from harness.tables import derive, history, stats

COMPARE_COLUMNS = ["op", "shape", "impl", "a_us", "b_us", "change_pct", "b_over_a", "b_over_a_lo", "b_over_a_hi",
                   "verdict", "interval", "reason"]
LIBRARY_IMPLS = ("torch",)


def _kernel_time(ns_dir: Path) -> pd.DataFrame:
    path = ns_dir / "tables" / "kernel_time.csv"
    if not path.is_file():
        raise EvidenceError(f"compare: {ns_dir.name} has no tables/kernel_time.csv.")
    return history.read_table(path)


def _rounds(ns_dir: Path) -> dict[tuple[str, str, str], list[float]]:
    path = ns_dir / "tables" / "rounds.csv"
    if not path.is_file():
        return {}
    frame = history.read_table(path)
    return {(str(op), str(shape), str(impl)): [float(v) for v in grp.sort_values("round")["kernel_time_us"]]
            for (op, shape, impl), grp in frame.groupby(["op", "shape", "impl"], sort=False)}


def _torch_version(ns_dir: Path) -> str | None:
    version = (history.read_provenance(ns_dir).get("versions") or {}).get("torch")
    return str(version) if version else None


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, library_comparable: bool,
                   a_rounds: dict[tuple[str, str, str], list[float]] | None = None,
                   b_rounds: dict[tuple[str, str, str], list[float]] | None = None,
                   margin: float = stats.MARGIN) -> pd.DataFrame:
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
        row: dict[str, Any] = dict(zip(keys, key), a_us=a_us, b_us=b_us, b_over_a=b_us / a_us if a_us > 0 else None,
                                   change_pct=100.0 * (b_us / a_us - 1.0) if a_us > 0 else None,
                                   b_over_a_lo=None, b_over_a_hi=None, verdict=None, interval="", reason="")
        ka, kb = (a_rounds or {}).get(key), (b_rounds or {}).get(key)
        if not derive.same_gpu(ra, rb) and ka is None:
            row["reason"] = "measured on different GPUs: no verdict"
        elif key[2] in LIBRARY_IMPLS and not library_comparable:
            row["reason"] = "library baseline: compared only on one GPU with one torch version"
        elif ka and kb:
            ratio, lo, hi = stats.ratio_interval(kb, ka, paired=False, seed=stats.seed_of(*key))
            row.update(b_over_a=ratio, b_over_a_lo=lo, b_over_a_hi=hi, verdict=stats.verdict(lo, hi, margin),
                       interval="bootstrap over rounds")
        else:
            lo, hi = derive.envelope_interval(rb, ra)
            if lo is None:
                row["reason"] = "no rounds and no launch spread in one of the tables"
            else:
                verdict = stats.FASTER if hi < 1 else stats.SLOWER if lo > 1 else stats.CANT_TELL
                row.update(b_over_a_lo=lo, b_over_a_hi=hi, verdict=verdict, interval="envelope of the launches")
        out.append(row)
    return pd.DataFrame(out, columns=COMPARE_COLUMNS)


def compare_namespaces(a: str, b: str, artifacts: str | Path = ROOT / "artifacts",
                       margin: float = stats.MARGIN) -> pd.DataFrame:
    """compare_frames over two retained namespaces under `artifacts`."""
    a_dir, b_dir = namespace_dir(a, artifacts), namespace_dir(b, artifacts)
    for d in (a_dir, b_dir):
        if not d.is_dir():
            raise EvidenceError(f"compare: there is no namespace {d.name} under {d.parent}.")
    ta, tb = _torch_version(a_dir), _torch_version(b_dir)
    return compare_frames(_kernel_time(a_dir), _kernel_time(b_dir), library_comparable=ta is not None and ta == tb,
                          a_rounds=_rounds(a_dir), b_rounds=_rounds(b_dir), margin=margin)


def summary(frame: pd.DataFrame, a: str, b: str) -> str:
    """One sentence: how many rows were compared, their verdicts, the largest move."""
    judged = frame[frame["verdict"].notna()]
    if judged.empty:
        return f"{b} against {a}: no (operation, shape, implementation) could be compared."
    counts = ", ".join(f"{int((judged['verdict'] == v).sum())} {v}" for v in stats.VERDICTS)
    worst = judged.loc[judged["change_pct"].abs().idxmax()]
    text = (f"{b} against {a}: {len(judged)} kernel times compared ({counts}); the largest change is "
            f"{worst['change_pct']:+.1f}% ({worst['op']} {worst['shape']} {worst['impl']}: {worst['a_us']:.2f} -> "
            f"{worst['b_us']:.2f} us, {worst['verdict']}).")
    skipped = len(frame) - len(judged)
    return text + (f" {skipped} not compared (see reason)." if skipped else "")


def markdown(frame: pd.DataFrame) -> str:
    lines = ["| operation | shape | impl | A µs | B µs | change | B/A interval | verdict |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for r in frame.to_dict("records"):
        interval = (f"{r['b_over_a_lo']:.3f}–{r['b_over_a_hi']:.3f}" if r["b_over_a_lo"] is not None
                    and not pd.isna(r["b_over_a_lo"]) else "")
        lines.append(f"| {r['op']} | {r['shape']} | {r['impl']} | {r['a_us']:.2f} | {r['b_us']:.2f} | "
                     f"{r['change_pct']:+.1f}% | {interval} | {r['verdict'] if isinstance(r['verdict'], str) else r['reason']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness compare", description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the earlier namespace")
    parser.add_argument("b", help="the namespace compared with it")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--margin", type=float, default=stats.MARGIN, help="equivalence margin of 'same' (0.01: 1%%)")
    parser.add_argument("--out", help="also write the rows to this CSV")
    args = parser.parse_args(argv)
    frame = compare_namespaces(args.a, args.b, args.artifacts, args.margin)
    if args.out:
        write_csv(frame.to_dict("records"), COMPARE_COLUMNS, args.out)
    print(markdown(frame))
    print()
    print(summary(frame, args.a, args.b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
