"""Render namespaces' reports again from their own tables, on the CPU: after a change to the
templates or the prose that formats them, so that committed reports read as the code now writes.

`python -m harness rerender NAMESPACE ... | --all [--artifacts DIR] [--reports DIR] [--rewrite-retained]`

Every table stays as it is, byte for byte (retrust is the command that re-derives the trust tables
from other namespaces). Each namespace is rendered into a temporary folder first: where its field
note, issue comment, figures and summary come out as they are, it is left alone ("unchanged");
otherwise they, and its page, are written again, and the command is added to its provenance, which
the report's history lists (the same command run again in a row is one record, counted).
`--all` takes every namespace under the artifacts folder that has a report (a namespace of one
sweep has none and is passed over, named). Every named namespace is checked before the first is
rewritten.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError
from harness.evidence.retrust import render_again, reported_namespace
from harness.report import step as report_step
from harness.report.render import output_paths, table_inputs

NOTE = "reports re-rendered from the namespace's own tables; no table changed"


def with_reports(artifacts: str | Path) -> tuple[list[str], list[str]]:
    """(namespaces under `artifacts` that have a report, those that have provenance but no report)."""
    found = sorted(p.parent.name for p in Path(artifacts).glob("*/provenance.json"))
    has = [n for n in found if (Path(artifacts) / n / "tables" / "sweep.csv").is_file()]
    return has, [n for n in found if n not in has]


def renders_as_it_is(namespace: str, ns_dir: Path, provenance: dict[str, Any], reports: str | Path) -> bool:
    """Whether the namespace's tables render, now, into the reports and summary it has (the page,
    not committed, aside)."""
    cfg = provenance["config"]
    ops = list(cfg["operations"])
    with tempfile.TemporaryDirectory() as tmp:
        fresh = output_paths(namespace, ops, Path(tmp) / "artifacts", Path(tmp) / "report")
        report_step.render(cfg, table_inputs(ns_dir), fresh)
        there = output_paths(namespace, ops, ns_dir.parent, reports)
        pairs = [(fresh[k], there[k]) for k in ("field_note", "issue_comment", "overview", "summary")]
        pairs += list(zip(fresh["figures"], there["figures"], strict=True))
        return all(Path(b).is_file() and Path(a).read_bytes() == Path(b).read_bytes() for a, b in pairs)


def rerender(namespaces: list[str], artifacts: str | Path = ROOT / "artifacts", reports: str | Path = ROOT / "report",
             rewrite_retained: bool = False) -> list[str]:
    """Render again, from its tables, each namespace whose reports the code now writes otherwise,
    noting the command in its provenance; return those rendered. EvidenceError (one sentence)
    before anything is written where any namespace is refused."""
    flag = " --rewrite-retained" if rewrite_retained else ""
    checked = [(ns, *reported_namespace(ns, artifacts, rewrite_retained, "rerender")) for ns in namespaces]
    done = []
    for ns, ns_dir, provenance in checked:
        if renders_as_it_is(ns, ns_dir, provenance, reports):
            print(f"rerender: {ns}: unchanged.")
            continue
        render_again(ns, ns_dir, provenance, reports, f"python -m harness rerender {ns}{flag}", NOTE)
        print(f"rerender: {ns}: rendered from its tables.")
        done.append(ns)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness rerender", description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="*")
    parser.add_argument("--all", action="store_true", help="every namespace under --artifacts that has a report")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("--reports", default=str(ROOT / "report"))
    parser.add_argument("--rewrite-retained", action="store_true",
                        help="rewrite retained namespaces' reports (recorded in their provenance)")
    args = parser.parse_args(argv)
    if bool(args.namespaces) == args.all:
        raise EvidenceError("rerender: name the namespaces to render, or pass --all, not both and not neither.")
    names = args.namespaces
    if args.all:
        names, passed = with_reports(args.artifacts)
        if not names:
            raise EvidenceError(f"rerender: no namespace under {args.artifacts} has a report to render.")
        if passed:
            print(f"rerender: passed over {len(passed)} without a report (one sweep each): {', '.join(passed)}.")
    rerender(names, args.artifacts, args.reports, args.rewrite_retained)
    return 0


if __name__ == "__main__":
    sys.exit(main())
