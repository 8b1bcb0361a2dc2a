"""A namespace's tables judged against the config's performance targets, offline:
`python -m harness targets NAMESPACE [--configfile FILE ...] [--artifacts DIR]`.

The targets are the config's (config.yaml with each --configfile merged over it, validated as a run
would); the shapes are the ones the namespace measured (its provenance), so a committed namespace is
judged as it stands, by the rules of harness.tables.targets: met, missed, can't tell, not judged
(the control does not rank the shape) or not measured. Nothing is written. Exit 0 once judged; with
--strict, 0 only where every target is met at every shape it names and 1 otherwise (a gate); 2 for
input that cannot be used (one sentence)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from harness import ROOT
from harness import config as hconfig
from harness.errors import EvidenceError, shown
from harness.io import row_dicts
from harness.namespaces import namespace_dir
from harness.report.targets import gap_text
from harness.report.words import ratio_text
from harness.tables import history, table_files
from harness.tables import targets as tg

NEEDED = ("sweep", "kernel_time", "span")


def judge(namespace: str, cfg: dict[str, Any], artifacts: str | Path = ROOT / "artifacts") -> pd.DataFrame:
    """targets.csv's rows for the namespace under `artifacts`: `cfg`'s targets at the shapes its
    provenance records. EvidenceError (one sentence) where it has no tables or provenance."""
    ns_dir = namespace_dir(namespace, artifacts)
    tdir = ns_dir / "tables"
    missing = [n for n in NEEDED if not table_files.table_path(tdir, n).is_file()]
    if missing:
        raise EvidenceError(f"targets: {shown(namespace)} has no tables/{missing[0]}.csv under {shown(str(artifacts))}, "
                            "so there is nothing to judge.")
    try:
        operations = hconfig.targets_plan(json.loads((ns_dir / "provenance.json").read_text())["config"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise EvidenceError(f"targets: {shown(namespace)} has no provenance.json recording its operations, so its "
                            "shapes are unknown.") from None
    controls = table_files.table_path(tdir, "controls")
    sweep, kernel_time, span = (history.read_table(table_files.table_path(tdir, n)) for n in NEEDED)
    return tg.evaluate(namespace, list(cfg.get("targets") or []), operations, sweep, kernel_time, span,
                       history.read_table(controls) if controls.is_file() else None)


def markdown(frame: pd.DataFrame) -> str:
    lines = ["| target | operation | shape | ratio | value [interval] | asked | status |",
             "|---|---|---|---|---|---|---|"]
    for r in row_dicts(frame):
        value = ratio_text(r["value"], r["lo"], r["hi"])
        gap = gap_text(r.get("gap"), r["status"])
        status = (r["status"] + (f", {gap}" if gap else "")
                  + (f" ({r['reason']})" if isinstance(r["reason"], str) and r["reason"] else ""))
        lines.append(f"| {shown(r['target'])} | {r['op']} | {r['shape']} | {r['ratio']} {r['metric']} | {value} | "
                     f"{r['asked']} | {status} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness targets", description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("--configfile", action="append", default=[],
                        help="a config merged over config.yaml, as snakemake --configfile (repeatable)")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--strict", action="store_true", help="exit 1 unless every target is met at every shape")
    args = parser.parse_args(argv)
    cfg = hconfig.load(ROOT / "config.yaml", *args.configfile)
    if not cfg.get("targets"):
        raise EvidenceError("targets: the config has no targets to judge (config.yaml's `targets`).")
    frame = judge(args.namespace, cfg, args.artifacts)
    print(markdown(frame))
    counted = tg.counts(frame["status"])
    print(f"\n{shown(args.namespace)}: {tg.counts_text(counted) or 'no target names a shape it measured'} "
          f"(of {len(frame)} targets at a shape).")
    return 0 if not args.strict or (len(frame) and counted[tg.MET] == len(frame)) else 1


if __name__ == "__main__":
    sys.exit(main())
