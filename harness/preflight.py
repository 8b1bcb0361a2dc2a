"""Stop a run that needs a GPU or nsys on a machine without them, in one sentence, before any
job starts (called from the workflow's onstart with the jobs that will run)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from harness.capture import find_nsys
from harness.errors import ToolMissing
from harness.gpu import require_gpu


def problems(needs: Iterable[tuple[str, int]], cfg: dict[str, Any]) -> list[str]:
    """`needs` is (rule name, gpu resource) per job that will run; returns what blocks them."""
    needs = list(needs)
    found: list[str] = []
    if any(gpu > 0 for _, gpu in needs):
        try:
            require_gpu()
        except ToolMissing as exc:
            found.append(str(exc))
    if any(rule == "capture" for rule, _ in needs):
        try:
            find_nsys(cfg["nsys"]["path"])
        except ToolMissing as exc:
            found.append(str(exc))
    return found


def before_jobs(jobs: Iterable[Any], cfg: dict[str, Any]) -> None:
    needs = [(job.rule.name, int(job.resources.get("gpu", 0) or 0)) for job in jobs]
    found = problems(needs, cfg)
    if found:
        print("\n".join(found), file=sys.stderr)
        sys.exit(1)


def record_command(path: str) -> None:
    """Append the snakemake command line that started this run (for provenance)."""
    import datetime
    import shlex
    from pathlib import Path

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(p, "a") as fh:
        fh.write(f"{stamp} {shlex.join(['snakemake', *sys.argv[1:]])}\n")
