"""Re-derive a retained namespace's trust tables (control bands, drift) and its reports, on the CPU.

`python -m harness retrust NAMESPACE [--artifacts DIR] [--reports DIR]`

A namespace's controls and drift are read from the namespaces retained before it (by provenance
date). When one of those arrives only after the run (measured on another machine, or restored
from a pull request), the run's trust tables were derived without it. This reruns the pipeline's
own trust step over what is retained now, with the namespace's own configuration (from its
provenance), judges its targets again where it has them (they read which pairings the controls
rank), re-renders the reports, page, figures and summary from the tables, and appends the command to the namespace's
provenance so the report's history stays honest. Nothing measured changes: only the tables
derived from other namespaces and the text rendered from them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import sys
from pathlib import Path
from typing import Any

from harness import ROOT
from harness import config as hconfig
from harness.errors import EvidenceError
from harness.io import write_text
from harness.namespaces import namespace_dir, refuse_retained
from harness.report import step as report_step
from harness.report.render import output_paths, table_inputs
from harness.runlog import superseded
from harness.tables import history
from harness.tables import step as tables_step
from harness.tables import trust


KERNEL_TIME_COLUMNS = ("op", "shape", "impl", "kernel_time_us")
KERNEL_TIME_NUMBERS = ("kernel_time_us", "kernel_time_lo_us", "kernel_time_hi_us")


def check_kernel_tables(artifacts: str | Path) -> None:
    """The kernel-time table of every namespace under `artifacts` (the trust step reads them all
    for bands and drift) is readable, has its columns and numbers where numbers belong; else
    EvidenceError, one sentence naming the file, before anything is rewritten."""
    for table in sorted(Path(artifacts).glob("*/tables/kernel_time.csv")):
        history.read_table(table, required=KERNEL_TIME_COLUMNS, numbers=KERNEL_TIME_NUMBERS)


def _holding(tdir: Path) -> str:
    names = sorted(p.name for p in tdir.glob("*.csv")) if tdir.is_dir() else []
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "") if names else "no tables"


def reported_namespace(namespace: str, artifacts: str | Path, rewrite_retained: bool, command: str) -> tuple[Path, dict[str, Any]]:
    """The folder and provenance of a namespace that has a report to re-render, or EvidenceError
    (one sentence, `command` naming who refuses) before anything is written. A retained namespace
    (harness.namespaces) is accepted only with `rewrite_retained`."""
    ns_dir = namespace_dir(namespace, artifacts)
    refuse_retained(namespace, Path(artifacts).parent, overwrite=namespace if rewrite_retained else None,
                    how="--rewrite-retained")
    prov_path = ns_dir / "provenance.json"
    if not prov_path.is_file():
        raise EvidenceError(f"{command}: {namespace} has no provenance.json under {artifacts}, so its configuration is unknown.")
    provenance = json.loads(prov_path.read_text())
    cfg = provenance.get("config")
    if not isinstance(cfg, dict) or cfg.get("namespace") != namespace:
        raise EvidenceError(f"{command}: the provenance of {namespace} does not hold that namespace's configuration.")
    tdir = ns_dir / "tables"
    if not (tdir / "sweep.csv").is_file():  # a namespace of one sweep (tables/sweep_<op>*.csv) has no report
        raise EvidenceError(f"{command}: {namespace} has no tables/sweep.csv (it holds {_holding(tdir)}), so it has no "
                            "report to re-render; nothing was rewritten.")
    return ns_dir, provenance


def note_command(ns_dir: Path, provenance: dict[str, Any], command: str, note: str) -> None:
    """Add `command` (a re-derivation on the CPU, `note` saying what it changed) to the namespace's
    provenance and write it; the report's history then lists it. The same command run again in a
    row is one record, counted (harness.runlog.superseded), so re-renders do not grow the list."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    provenance["commands"] = superseded([*(provenance.get("commands") or []),
                                         {"command": command, "start": now, "host": socket.gethostname(), "note": note}])
    write_text(json.dumps(provenance, indent=1) + "\n", ns_dir / "provenance.json")


def render_again(namespace: str, ns_dir: Path, provenance: dict[str, Any], reports: str | Path, command: str,
                 note: str) -> None:
    """Note `command` in the namespace's provenance (`note_command`), then render its reports, page,
    figures and summary from its tables."""
    cfg = provenance["config"]
    note_command(ns_dir, provenance, command, note)
    report_step.render(cfg, table_inputs(ns_dir), output_paths(namespace, list(cfg["operations"]), ns_dir.parent, reports))


def retrust(namespace: str, artifacts: str | Path = ROOT / "artifacts", reports: str | Path = ROOT / "report",
            rewrite_retained: bool = False) -> None:
    """Rerun the trust step and the render of `namespace`, and note the command in its provenance.
    A retained namespace (harness.namespaces) is rewritten only with `rewrite_retained`."""
    ns_dir, provenance = reported_namespace(namespace, artifacts, rewrite_retained, "retrust")
    check_kernel_tables(artifacts)
    t = provenance["config"].get("trust") or {}
    tdir = ns_dir / "tables"
    tables_step.controls_and_drift(namespace=namespace, control=t.get("control", "triton"), margin=float(t.get("margin", trust.MARGIN)),
                                   earlier=t.get("earlier"), controls_out=str(tdir / "controls.csv"),
                                   drift_out=str(tdir / "drift.csv"))
    cfg = provenance["config"]
    judged = (tdir / "targets.csv").is_file()
    if judged:  # its targets read the controls' rankable column: judged again with the run's own targets
        tables_step.targets_table(namespace=namespace, targets=list(cfg.get("targets") or []),
                                  operations=hconfig.targets_plan(cfg), sweep=str(tdir / "sweep.csv"),
                                  kernel_time=str(tdir / "kernel_time.csv"), span=str(tdir / "span.csv"),
                                  controls=str(tdir / "controls.csv"), out=str(tdir / "targets.csv"))
    render_again(namespace, ns_dir, provenance, reports, f"python -m harness retrust {namespace} --rewrite-retained",
                 f"controls{', drift and targets' if judged else ' and drift'} re-derived from the namespaces retained "
                 "before it, reports re-rendered; no measurement changed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness retrust", description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--reports", default=str(ROOT / "report"))
    parser.add_argument("--rewrite-retained", action="store_true",
                        help="rewrite a retained namespace's derived tables and reports (recorded in its provenance)")
    args = parser.parse_args(argv)
    retrust(args.namespace, args.artifacts, args.reports, args.rewrite_retained)
    return 0


if __name__ == "__main__":
    sys.exit(main())
