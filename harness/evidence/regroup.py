"""Make a namespace re-measure its groups that ran on more than one GPU.

`python -m harness regroup NAMESPACE [--artifacts DIR] [--reports DIR] [--dry-run] [--rewrite-retained]`

A retained namespace (harness.namespaces) is read-only: regroup removes nothing from one without
`--rewrite-retained`, and the rerun's provenance records the commands that rewrote it.

A group is one (operation, shape): the job that checks, captures and times every implementation,
and its counters. Its ratios are only taken between measurements of one GPU, so a group whose jobs
ran on two GPUs (a run resumed on another machine) has no ratio in any table, and the report says
to rerun it. This removes exactly what that needs: each split group's per-job
outputs and its GPU record (`logs/gpu/<op>/<shape>.json`, which would send it back to a GPU that
may not exist here), and the namespace's derived tables, provenance and reports, which Snakemake
would otherwise keep as up to date. The session's ceilings and every other group stay. Then

    snakemake --cores 1 report --config namespace=NAMESPACE

measures the split groups again, each on one GPU, and derives the tables and reports anew.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from harness import ROOT
from harness.errors import EvidenceError
from harness.gpu.lock import group_record, read_record
from harness.namespaces import namespace_dir, refuse_retained
from harness.tables import history

KEPT_TABLES = ("ceilings.csv",)
"""Tables measured once per session, not per group: kept."""


def split_groups(ns_dir: str | Path) -> list[tuple[str, str, list[str]]]:
    """(op, shape, GPU UUIDs) of every group whose captures name more than one GPU: from the
    namespace's kernel_time table, and from its GPU records (which also see checks and spans)."""
    ns_dir = Path(ns_dir)
    uuids: dict[tuple[str, str], set[str]] = {}
    table = ns_dir / "tables" / "kernel_time.csv"
    if table.is_file():
        kt = history.read_table(table, required=("op", "shape"))
        if "gpu_uuid" in kt:
            for (op, shape), grp in kt.dropna(subset=["gpu_uuid"]).groupby(["op", "shape"], sort=False):
                uuids.setdefault((str(op), str(shape)), set()).update(str(u) for u in grp["gpu_uuid"].unique())
    records = ns_dir / "logs" / "gpu"
    for path in sorted(records.glob("*/*.json")) if records.is_dir() else []:
        seen = {str(u) for u in read_record(path).get("gpu_uuids") or []}
        uuids.setdefault((path.parent.name, path.stem), set()).update(seen)
    return [(op, shape, sorted(u)) for (op, shape), u in uuids.items() if len(u) > 1]


def group_outputs(ns_dir: str | Path, op: str, shape: str) -> list[Path]:
    """Every file a group's jobs wrote, and its GPU record."""
    ns_dir = Path(ns_dir)
    out: list[Path] = []
    d = ns_dir / "measure" / op / shape
    if d.is_dir():
        out.extend(sorted(p for p in d.rglob("*") if p.is_file()))
    counters = ns_dir / "counters" / op
    out.extend(sorted(counters.glob(f"{shape}.*")) if counters.is_dir() else [])
    record = group_record(ns_dir, op, shape)
    if record.is_file():
        out.append(record)
    return out


def derived_outputs(ns_dir: str | Path, report_dir: str | Path) -> list[Path]:
    """The namespace's tables (but its ceilings), provenance and reports."""
    ns_dir, report_dir = Path(ns_dir), Path(report_dir)
    tables = ns_dir / "tables"
    out = sorted(p for p in tables.glob("*") if p.is_file() and p.name not in KEPT_TABLES) if tables.is_dir() else []
    if (ns_dir / "provenance.json").is_file():
        out.append(ns_dir / "provenance.json")
    if report_dir.is_dir():
        out.append(report_dir)
    return out


def regroup(namespace: str, artifacts: str | Path = ROOT / "artifacts", reports: str | Path = ROOT / "report",
            dry_run: bool = False, rewrite_retained: bool = False) -> tuple[list[tuple[str, str, list[str]]], list[Path]]:
    """Remove what re-measuring the split groups of `namespace` needs removed (nothing with
    `dry_run`); returns the split groups and the paths removed (or that would be)."""
    ns_dir = namespace_dir(namespace, artifacts)
    if not dry_run:
        refuse_retained(namespace, Path(artifacts).parent, overwrite=namespace if rewrite_retained else None,
                        how="--rewrite-retained")
    if not ns_dir.is_dir():
        raise EvidenceError(f"regroup: there is no namespace {namespace} under {artifacts}.")
    groups = split_groups(ns_dir)
    if not groups:
        return [], []
    paths = [p for op, shape, _ in groups for p in group_outputs(ns_dir, op, shape)]
    paths += derived_outputs(ns_dir, Path(reports) / namespace)
    if not dry_run:
        for path in paths:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    return groups, paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness regroup", description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--reports", default=str(ROOT / "report"))
    parser.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    parser.add_argument("--rewrite-retained", action="store_true", help="allow it on retained evidence")
    args = parser.parse_args(argv)
    groups, paths = regroup(args.namespace, args.artifacts, args.reports, args.dry_run, args.rewrite_retained)
    if not groups:
        print(f"{args.namespace}: every group was measured on one GPU; nothing to do.")
        return 0
    for op, shape, uuids in groups:
        print(f"split: {op} {shape} on {', '.join(uuids)}")
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(paths)} files and folders; then run: "
          f"snakemake --cores 1 report --config namespace={args.namespace}"
          + (f" overwrite={args.namespace}" if args.rewrite_retained else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
