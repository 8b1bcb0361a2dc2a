"""Re-derive a retained namespace's trust tables (control bands, drift) and its reports, on the CPU.

`python -m harness retrust NAMESPACE [--artifacts DIR] [--reports DIR]`

A namespace's controls and drift are read from the namespaces retained before it (by provenance
date). When one of those arrives only after the run (measured on another machine, or restored
from a pull request), the run's trust tables were derived without it. This reruns the pipeline's
own trust step over what is retained now, with the namespace's own configuration (from its
provenance), re-renders both reports from the tables, and appends the command to the namespace's
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

from harness import ROOT
from harness.errors import EvidenceError
from harness.io import write_text
from harness.report import step as report_step
from harness.report.render import table_inputs
from harness.tables import step as tables_step


def retrust(namespace: str, artifacts: str | Path = ROOT / "artifacts", reports: str | Path = ROOT / "report") -> None:
    """Rerun the trust step and the render of `namespace`, and note the command in its provenance."""

    ns_dir = Path(artifacts) / namespace
    prov_path = ns_dir / "provenance.json"
    if not prov_path.is_file():
        raise EvidenceError(f"retrust: {namespace} has no provenance.json under {artifacts}, so its configuration is unknown.")
    provenance = json.loads(prov_path.read_text())
    cfg = provenance.get("config")
    if not isinstance(cfg, dict) or cfg.get("namespace") != namespace:
        raise EvidenceError(f"retrust: the provenance of {namespace} does not hold that namespace's configuration.")
    tdir = ns_dir / "tables"
    tables_step.controls_and_drift(cfg, str(tdir / "controls.csv"), str(tdir / "drift.csv"))
    inputs = table_inputs(ns_dir)
    out = Path(reports) / namespace
    figures = [str(out / "figures" / f"{op}_sweep.svg") for op in cfg["operations"]] if (out / "figures").is_dir() else []
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    provenance.setdefault("commands", []).append(
        f"{now} python -m harness retrust {namespace} (on {socket.gethostname()}: controls and drift re-derived "
        "from the namespaces retained before it, reports re-rendered; no measurement changed)")
    write_text(json.dumps(provenance, indent=1) + "\n", prov_path)
    report_step.render(cfg, inputs, str(out / "field_note.md"), str(out / "issue_comment.md"), figures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness retrust", description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--reports", default=str(ROOT / "report"))
    args = parser.parse_args(argv)
    retrust(args.namespace, args.artifacts, args.reports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
