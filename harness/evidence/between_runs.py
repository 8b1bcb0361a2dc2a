"""The between-run component of a ratio's interval, estimated from committed runs (CPU, nothing
measured): how far a ratio moves from one run to the next beyond what each run's own interval
holds (Kalibera and Jones, "Rigorous benchmarking in reasonable time": the variation a run fixes
and the next draws afresh).

    python -m harness between-runs NAMESPACE NAMESPACE ... [--artifacts DIR]

For every (operation, shape, pair a/b) measured in the named namespaces, each run gives the log
of its ratio x_k and the relative standard error s_k of its own interval, both re-derived from
its committed rounds (tables/rounds.csv, the placements from its seed) as the tables step
derives them. Runs are grouped into sessions by the commit they ran at: a session's runs share
their code and their day, and only the spread inside a session is counted (a ratio moves with
the code between sessions, and no verdict compares across sessions). The component is the
Paule-Mandel estimate of the variance between runs, tau^2: the value at which the weighted sum of
squares about each session's weighted mean, sum w_k (x_k - mean_w)^2 with w_k = 1 / (s_k^2 + tau^2),
equals its degrees of freedom, sum over sessions of (runs - 1); zero where the runs spread no more
than their own intervals say. Weighting by each run's precision lets a narrow interval that
missed its neighbours count for what it is.

The command prints the block `between_runs:` of the config's `verdict:` (per operation and pair,
`sd` = tau and `df`, the largest over the operation's shapes, with the runs it came from and that
shape), which every ratio's interval is then widened by (harness.tables.stats.widen).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness import ROOT
from harness.errors import EvidenceError
from harness.evidence import placements
from harness.tables import derive, stats

TINY = 1e-18
"""The least variance a run's own interval is taken to stand for (a pair of one kernel under two
names can come out exactly equal in every round)."""

def run_ratios(ns_dir: str | Path) -> list[dict[str, Any]]:
    """One dict per (op, shape, pair) of a namespace: the log ratio `x` and its relative standard
    error `se`, from its committed rounds, by the tables step's own interval (derive.ratio)."""
    ns_dir = Path(ns_dir)
    out = []
    for op, shape, wide, where in placements.placed_rounds(ns_dir, placements.namespace_config(ns_dir)):
        for a, b in derive.ratio_pairs(wide.columns):
            both = wide[[a, b]].dropna()
            if both.empty:
                continue
            clusters = [where[int(r)] for r in both.index] if where else None
            r = derive.ratio({a: list(both[a]), b: list(both[b])}, a, b, (op, shape), clusters=clusters)
            g = len(set(clusters)) if clusters else 1
            out.append({"op": op, "shape": shape, "pair": f"{a}/{b}", "x": math.log(r["ratio"]),
                        "se": stats.within_se(r["ratio"], r["ratio_lo"], r["ratio_hi"], g)})
    return out


def paule_mandel(sessions: Sequence[Sequence[tuple[float, float]]]) -> tuple[float, int]:
    """(tau, df) over sessions of runs (x, se) (module docstring); sessions of one run add nothing.
    (0.0, 0) where no session holds two runs."""
    kept = [s for s in sessions if len(s) > 1]
    df = sum(len(s) - 1 for s in kept)
    if df == 0:
        return 0.0, 0

    def excess(tau2: float) -> float:
        q = 0.0
        for s in kept:
            w = [1.0 / (max(se * se, TINY) + tau2) for _, se in s]
            mean = sum(wk * x for wk, (x, _) in zip(w, s)) / sum(w)
            q += sum(wk * (x - mean) ** 2 for wk, (x, _) in zip(w, s))
        return q - df

    if excess(0.0) <= 0:
        return 0.0, df
    lo, hi = 0.0, max(x * x for s in kept for x, _ in s) + 1e-12
    while excess(hi) > 0:
        hi *= 2.0
    for _ in range(100):  # bisection: the weighted sum of squares falls as tau^2 grows
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return math.sqrt((lo + hi) / 2.0), df


def estimate(ns_dirs: Sequence[str | Path]) -> dict[str, dict[str, dict[str, Any]]]:
    """The config block `between_runs` from the named namespaces (module docstring): operation ->
    pair -> {sd, df, runs, shape}."""
    by_key: dict[tuple[str, str, str], dict[str, list[tuple[float, float]]]] = {}
    for ns_dir in ns_dirs:
        ns_dir = Path(ns_dir)
        session = _provenance_commit(ns_dir) or ns_dir.name
        for row in run_ratios(ns_dir):
            by_key.setdefault((row["op"], row["shape"], row["pair"]), {}).setdefault(session, []).append(
                (row["x"], row["se"]))
    components: dict[str, dict[str, dict[str, Any]]] = {}
    for (op, shape, pair), sessions in by_key.items():
        tau, df = paule_mandel(list(sessions.values()))
        if df == 0:
            continue
        entry = {"sd": round(tau, 6), "df": df, "runs": sum(len(s) for s in sessions.values()), "shape": shape}
        held = components.setdefault(op, {}).get(pair)
        if held is None or entry["sd"] > held["sd"]:
            components[op][pair] = entry
    return components


def _provenance_commit(ns_dir: Path) -> str | None:
    git = placements.provenance(ns_dir).get("git")
    return str(git["commit"]) if isinstance(git, Mapping) and git.get("commit") else None


def as_yaml(block: Mapping[str, Any]) -> str:
    """The block as the config holds it, under `between_runs:` (to go under `verdict:`)."""
    text = yaml.safe_dump({"between_runs": dict(block)}, sort_keys=False, default_flow_style=None, width=120)
    return "".join(f"  {line}\n" for line in text.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness between-runs", description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="+")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    args = parser.parse_args(argv)
    block = estimate([Path(args.artifacts) / name for name in args.namespaces])
    if not block:
        raise EvidenceError("between-runs: no pair was measured in two runs of one session, so there is nothing to estimate.")
    print(as_yaml(block), end="")
    return 0
