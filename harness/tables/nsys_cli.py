"""`python -m harness nsys ...`: print nsys-stats-style summaries of an nsys SQLite export.

  python -m harness nsys kern-sum FILE.sqlite [--format csv|table]
      one row per kernel, the columns and figures of `nsys stats -r cuda_gpu_kern_sum`
  python -m harness nsys nvtx-kern-sum FILE.sqlite [--format csv|table]
      one row per (NVTX range, kernel), the columns and figures of `nsys stats -r nvtx_kern_sum`
  python -m harness nsys info FILE.sqlite
      the nsys version and GPUs the export records

`--format csv` prints exactly what `nsys stats --format csv` prints; `table` (the default) is an
aligned text table. Both write control characters in names (ESC, BEL, ...) as visible escapes
such as `\\x1b`, so an export cannot drive the terminal. Bad input, and an export refused under
the reader's limits (a view or text where nsys writes integer times, a read that takes too long or
needs too much temporary storage), ends with one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from harness.errors import EvidenceError
from harness.tables import nsys

USAGE = "usage: python -m harness nsys {kern-sum,nvtx-kern-sum,info} FILE.sqlite [--format csv|table]"

REPORTS: dict[str, tuple[Callable[[str], list[dict[str, Any]]], list[str]]] = {
    "kern-sum": (nsys.kern_sum, nsys.KERN_SUM_COLUMNS),
    "nvtx-kern-sum": (nsys.nvtx_kern_sum, nsys.NVTX_KERN_SUM_COLUMNS),
}
FORMATS = ("csv", "table")


def _parse(argv: Sequence[str]) -> tuple[str, str, str]:
    """(command, file, format) from the arguments; EvidenceError on anything else."""
    args = list(argv)
    if not args:
        raise EvidenceError(f"{USAGE}: a command and an export file are required.")
    command, rest = args[0], args[1:]
    if command not in (*REPORTS, "info"):
        raise EvidenceError(f"{USAGE}: unknown nsys command {command!r}.")
    fmt = "table"
    files: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("--format", "-f"):
            if i + 1 >= len(rest):
                raise EvidenceError(f"{USAGE}: --format needs a value (csv or table).")
            fmt = rest[i + 1]
            i += 2
            continue
        if arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-") and arg != "-":
            raise EvidenceError(f"{USAGE}: unknown option {arg!r}.")
        else:
            files.append(arg)
        i += 1
    if fmt not in FORMATS:
        raise EvidenceError(f"{USAGE}: unknown format {fmt!r} (use csv or table).")
    if len(files) != 1:
        raise EvidenceError(f"{USAGE}: give exactly one export file (got {len(files)}).")
    return command, files[0], fmt


def main(argv: list[str]) -> int:
    """Run one nsys command; returns the exit status (2 with one sentence on stderr on bad input)."""
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    try:
        command, path, fmt = _parse(argv)
        if command == "info":
            text = json.dumps(nsys.export_info(path), indent=1) + "\n"
        else:
            report, columns = REPORTS[command]
            rows = report(path)
            text = nsys.format_csv(rows, columns) if fmt == "csv" else nsys.format_table(rows, columns)
            note = nsys.without_duration_note(nsys.export_info(path)["kernels_without_duration"],
                                              nsys.escape_controls(path))
            if note:  # on stderr: stdout stays exactly what nsys stats prints
                print(f"note: {note}", file=sys.stderr)
    except EvidenceError as exc:
        print(nsys.escape_controls(str(exc)), file=sys.stderr)
        return 2
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`
        return 0
    return 0
