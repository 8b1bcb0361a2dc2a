"""Render namespaces' reports again from their own tables, on the CPU: after a change to the
templates or the prose that formats them, so that committed reports read as the code now writes.

`python -m harness rerender NAMESPACE ... | --all [--artifacts DIR] [--reports DIR] [--rewrite-retained] [--jobs N]`

Every table stays as it is, byte for byte (retrust is the command that re-derives the trust tables
from other namespaces). Each namespace is rendered into a temporary folder first: where its field
note, issue comment, figures and summary come out as they are, it is left alone ("unchanged");
otherwise the command is added to its provenance, which the report's history lists (the same
command run again in a row is one record, counted), and its reports, page and summary are written
again, with the figures drawn in the temporary folder. Namespaces render side by side, one process
each, up to `--jobs` (default: the CPUs this process may use).
`--all` takes every namespace under the artifacts folder that has a report (a namespace of one
sweep has none and is passed over, named). Every named namespace is checked before the first is
rewritten.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError
from harness.evidence.retrust import note_command, reported_namespace
from harness.io import write_bytes
from harness.report import step as report_step
from harness.report.render import output_paths, render_namespace, table_inputs

NOTE = "reports re-rendered from the namespace's own tables; no table changed"


def with_reports(artifacts: str | Path) -> tuple[list[str], list[str]]:
    """(namespaces under `artifacts` that have a report, those that have provenance but no report)."""
    found = sorted(p.parent.name for p in Path(artifacts).glob("*/provenance.json"))
    has = [n for n in found if (Path(artifacts) / n / "tables" / "sweep.csv").is_file()]
    return has, [n for n in found if n not in has]


def _render_into(namespace: str, cfg: dict[str, Any], inputs: dict[str, str], tmp: str | Path) -> dict[str, Any]:
    """The namespace rendered from its tables into the folder `tmp`; its output paths there."""
    fresh = output_paths(namespace, list(cfg["operations"]), Path(tmp) / "artifacts", Path(tmp) / "report")
    report_step.render(cfg, inputs, fresh)
    return fresh


def _same(fresh: dict[str, Any], there: dict[str, Any]) -> bool:
    """Whether the field note, issue comment, figures and summary rendered at `fresh` are those at
    `there`, byte for byte (the page, not committed, aside)."""
    pairs = [(fresh[k], there[k]) for k in ("field_note", "issue_comment", "overview", "summary")]
    pairs += list(zip(fresh["figures"], there["figures"], strict=True))
    return all(Path(b).is_file() and Path(a).read_bytes() == Path(b).read_bytes() for a, b in pairs)


def renders_as_it_is(namespace: str, ns_dir: Path, provenance: dict[str, Any], reports: str | Path) -> bool:
    """Whether the namespace's tables render, now, into the reports and summary it has (the page,
    not committed, aside)."""
    cfg = provenance["config"]
    with tempfile.TemporaryDirectory(prefix="rerender-") as tmp:
        fresh = _render_into(namespace, cfg, table_inputs(ns_dir), tmp)
        return _same(fresh, output_paths(namespace, list(cfg["operations"]), ns_dir.parent, reports))


def rerender_one(namespace: str, ns_dir: str | Path, provenance: dict[str, Any], reports: str | Path,
                 command: str) -> bool:
    """Render the namespace from its tables into a temporary folder; where its field note, issue
    comment, figures or summary come out otherwise than it has them (`renders_as_it_is`), note
    `command` in its provenance (retrust.note_command) and write its reports, page and summary
    again, the figures drawn there moved into place rather than drawn twice (nothing they show
    comes from the provenance). Whether it rewrote."""
    ns_dir = Path(ns_dir)
    cfg = provenance["config"]
    inputs = table_inputs(ns_dir)
    there = output_paths(namespace, list(cfg["operations"]), ns_dir.parent, reports)
    with tempfile.TemporaryDirectory(prefix="rerender-") as tmp:
        fresh = _render_into(namespace, cfg, inputs, tmp)
        if _same(fresh, there):
            return False
        note_command(ns_dir, provenance, command, NOTE)
        for drawn, kept in zip([fresh["overview"], *fresh["figures"]], [there["overview"], *there["figures"]], strict=True):
            write_bytes(Path(drawn).read_bytes(), kept)
        render_namespace(cfg, inputs, there, draw=False)
    return True


def _rerender_task(task: tuple[str, str, dict[str, Any], str, str]) -> bool:
    """rerender_one over one tuple of its arguments (what a worker process is handed)."""
    return rerender_one(*task)


def default_jobs() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def rerender(namespaces: list[str], artifacts: str | Path = ROOT / "artifacts", reports: str | Path = ROOT / "report",
             rewrite_retained: bool = False, jobs: int = 1) -> list[str]:
    """Render again, from its tables, each namespace whose reports the code now writes otherwise,
    noting the command in its provenance; return those rendered. EvidenceError (one sentence)
    before anything is written where any namespace is refused. With `jobs` above 1, that many
    worker processes render the namespaces side by side (each writes only its own namespace's
    files); the lines come out in the namespaces' order either way."""
    flag = " --rewrite-retained" if rewrite_retained else ""
    checked = [(ns, *reported_namespace(ns, artifacts, rewrite_retained, "rerender")) for ns in namespaces]
    tasks = [(ns, str(ns_dir), provenance, str(reports), f"python -m harness rerender {ns}{flag}")
             for ns, ns_dir, provenance in checked]
    workers = max(1, min(jobs, len(tasks)))
    done = []
    with contextlib.ExitStack() as stack:
        if workers > 1:
            results: Iterator[bool] = stack.enter_context(ProcessPoolExecutor(max_workers=workers)).map(_rerender_task, tasks)
        else:
            results = map(_rerender_task, tasks)
        for (ns, *_), rewrote in zip(tasks, results):
            print(f"rerender: {ns}: {'rendered from its tables' if rewrote else 'unchanged'}.", flush=True)
            if rewrote:
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
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="namespaces rendered side by side, one process each (default: the CPUs this process may use)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise EvidenceError(f"rerender: --jobs {args.jobs} renders nothing; give 1 or more.")
    if bool(args.namespaces) == args.all:
        raise EvidenceError("rerender: name the namespaces to render, or pass --all, not both and not neither.")
    names = args.namespaces
    if args.all:
        names, passed = with_reports(args.artifacts)
        if not names:
            raise EvidenceError(f"rerender: no namespace under {args.artifacts} has a report to render.")
        if passed:
            print(f"rerender: passed over {len(passed)} without a report (one sweep each): {', '.join(passed)}.")
    rerender(names, args.artifacts, args.reports, args.rewrite_retained, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
