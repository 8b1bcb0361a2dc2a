#!/usr/bin/env python3
"""How long the render step takes over a committed namespace's tables, on this machine (no GPU needed).

    python3 scripts/bench_render.py [NAMESPACE ...] [--repeat 3]

Renders, from the namespace's committed tables and provenance, what the render job writes (both
reports, the page, the figures and the summary) into a temporary folder with the step's own call
(harness.report.render.render_reports, as verify calls it), `--repeat` times in this process, and
prints the best time of the call and whether the files are those committed (field note, issue
comment, figures, and the page where one was rendered there, since pages are not committed: the same
bytes). Default: the newest full run committed."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.namespaces import newest, reported  # noqa: E402
from harness.report.render import output_paths, render_reports, table_inputs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="*", default=[n for n in [newest(reported(ROOT), "h200-ops-")] if n])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    for ns in args.namespaces:
        art, rep = ROOT / "artifacts" / ns, ROOT / "report" / ns
        if not (art / "provenance.json").is_file() or not (rep / "field_note.md").is_file():
            print(f"bench_render: {ns} is not a committed namespace with tables and reports.", file=sys.stderr)
            return 2
        cfg = json.loads((art / "provenance.json").read_text())["config"]
        times, same = [], True
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="bench-render-") as work:
                paths = output_paths(ns, list(cfg["operations"]), Path(work) / "artifacts", Path(work) / "report")
                t = time.perf_counter()
                render_reports(cfg, table_inputs(art), paths["field_note"], paths["issue_comment"],
                               [str(f) for f in paths["figures"]], html=paths["html"], summary=paths["summary"],
                               overview=paths["overview"])
                times.append(time.perf_counter() - t)
                made = [Path(paths["field_note"]), Path(paths["issue_comment"]), Path(paths["overview"]),
                        *map(Path, paths["figures"])]
                page = rep / Path(paths["html"]).name  # not committed (.gitignore): compared where one was rendered
                pairs = [(f, rep / f.relative_to(Path(work) / "report" / ns)) for f in made]
                pairs += [(Path(paths["html"]), page)] if page.is_file() else []
                same = same and all(b.is_file() and a.read_bytes() == b.read_bytes() for a, b in pairs)
        print(f"{ns}: render {min(times):.2f} s (best of {args.repeat}, in one process, imports aside); "
              f"{'the same files as committed' if same else 'files differ from those committed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
