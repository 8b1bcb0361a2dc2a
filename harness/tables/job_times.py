"""Where a run's time went: every job's wall time (Snakemake's `benchmark:` files under
artifacts/<ns>/benchmarks/) beside the commands that ran (artifacts/<ns>/commands.jsonl).

`python -m harness job-times NAMESPACE [--artifacts DIR]` writes artifacts/<ns>/tables/job_times.csv
(one row per job: rule, its wildcards, seconds, CPU seconds, peak memory) and prints each rule's
total beside each command's wall time; and, from the groups' records, tables/group_seconds.csv
(where each measurement group's time went, PHASES) with each phase's sum over the groups. The sum of the jobs is the work; the wall time of the
command is what the user waited (the difference is Snakemake's own start-up and scheduling).

Where the table exists already, a job of it that has no benchmark file here (a copy that left
some out) keeps its row, and the sentence says how many did: the table never loses a job.
A namespace without benchmarks/ (a fresh clone: they are not committed) is answered from its
committed tables/job_times.csv (and group_seconds.csv), which is then read, never rewritten; a namespace with neither says
so in one sentence and lists its commands' wall times, which is all its run recorded.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.errors import EvidenceError
from harness.io import write_csv
from harness.namespaces import namespace_dir
from harness.runlog import commands as read_commands

COLUMNS = ["rule", "job", "seconds", "cpu_seconds", "max_rss_mb"]

PHASES = ["start_up", "gpu_init", "checks", "bind_and_warmup", "spans", "graph_replay", "idle_starts", "capture",
          "nsys_end", "outside"]
"""Where a measurement group's time went, in order (harness.measure.group's `seconds`): the process's
start under nsys (start_up), torch, the CUDA context and CuPy or Triton (gpu_init), the group's phases, nsys's work
after the process exited (nsys_end: the report's import and the SQLite export), and the measure
step's own around it (outside: the GPU lock, the quiet-GPU wait, the export's scrub and split, the
groups' files). Since measurement sessions (one process for every group of the run) a group's row
holds its own phases and one row `session` the session's start, end and outside, so that the rows
add up to the measure job; before, each group's process had all of them."""
GROUP_COLUMNS = ["op", "shape", "job", *PHASES]

SESSION = "session"
"""The `op` of the row that holds a session's own seconds."""


def group_rows(measure: str | Path) -> list[dict[str, Any]]:
    """One row per measurement group whose record.json (measure/<op>/<shape>/) holds the seconds of
    its phases (`job` its seconds in the measure step, split into PHASES), and, for groups measured
    in a session, one row SESSION for the session's own."""
    rows = []
    sessions: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(measure).glob("*/*/record.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        s = record.get("seconds") if isinstance(record, dict) else None
        if not isinstance(s, dict):
            continue
        row: dict[str, Any] = {"op": path.parent.parent.name, "shape": path.parent.name}
        session = record.get("session")
        if isinstance(session, dict) and isinstance(session.get("seconds"), dict):
            own = float(s.get("total") or 0.0)  # its files' writing is the session's (outside)
            row.update({"job": own, **{k: _seconds(s, k) for k in PHASES if k not in _SESSION_PHASES}})
            entry = sessions.setdefault(json.dumps(session.get("groups")), {"seconds": session["seconds"], "groups": 0.0})
            entry["groups"] += own
            rows.append(row)
            continue
        if not isinstance(s.get("job"), (int, float)) or s.get("profile nsys") is None:
            continue
        inside = [float(s.get(k) or 0.0) for k in ("start_up", "gpu_init", "total")]
        # the phases worked out from the others; every other phase is read as the record holds it
        derived = {"nsys_end": float(s["profile nsys"]) - math.fsum(inside),
                   "outside": float(s["job"]) - float(s["profile nsys"])}
        row["job"] = float(s["job"])
        row.update({k: derived[k] if k in derived else _seconds(s, k) for k in PHASES})
        rows.append(row)
    for entry in sessions.values():
        s = entry["seconds"]
        if not isinstance(s.get("job"), (int, float)) or s.get("profile nsys") is None:
            continue
        start = [float(s.get(k) or 0.0) for k in ("start_up", "gpu_init")]
        nsys_end = float(s["profile nsys"]) - math.fsum(start) - entry["groups"]
        row = {"op": SESSION, "shape": "", "job": float(s["job"]) - entry["groups"],
               **{k: None for k in PHASES}, "start_up": start[0], "gpu_init": start[1], "nsys_end": nsys_end,
               "outside": float(s["job"]) - float(s["profile nsys"])}
        rows.append(row)
    return rows


_SESSION_PHASES = ("start_up", "gpu_init", "nsys_end", "outside")
"""The phases a session's row holds, not its groups'."""


def _seconds(s: dict[str, Any], key: str) -> float | None:
    value = s.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def read_group_rows(table: str | Path) -> list[dict[str, Any]]:
    """The rows of a group_seconds.csv written earlier, numbers as floats (None where empty)."""
    return [{"op": r.get("op") or "", "shape": r.get("shape") or "",
             **{k: _number(r.get(k)) for k in ("job", *PHASES)}} for r in _read(Path(table), ",")]


def group_summary(rows: list[dict[str, Any]]) -> str:
    """Each phase's seconds summed over the groups, beside the groups' total (PHASES); then each
    group's checks: their median and the most a group took, and which."""
    if not rows:
        return ""
    total = math.fsum(float(r["job"] or 0.0) for r in rows)
    parts = []
    for phase in PHASES:
        values = [float(r[phase]) for r in rows if r.get(phase) is not None]
        if values:
            parts.append(f"{phase} {math.fsum(values):.1f}")
    text = f"measure groups: {len(rows)}, {total:.1f} s in the measure step, of which (s): " + ", ".join(parts)
    checks = sorted((float(r["checks"]), f"{r['op']} {r['shape']}") for r in rows if r.get("checks") is not None)
    if checks:
        text += (f"\nchecks per group: median {statistics.median(v for v, _ in checks):.2f} s, "
                 f"most {checks[-1][0]:.2f} s ({checks[-1][1]})")
    return text


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "NA", "-") else None
    except ValueError:
        return None


def job_rows(benchmarks: str | Path) -> list[dict[str, Any]]:
    """One row per benchmark file, benchmarks/<rule>[/<wildcards>...].tsv (its last line: the
    latest run of that job)."""
    root = Path(benchmarks)
    rows = []
    for path in sorted(root.rglob("*.tsv")):
        lines = _read(path, "\t")
        if not lines:
            continue
        last = lines[-1]
        rel = path.relative_to(root).with_suffix("")
        rows.append({"rule": rel.parts[0], "job": "/".join(rel.parts[1:]),
                     "seconds": _number(last.get("s")), "cpu_seconds": _number(last.get("cpu_time")),
                     "max_rss_mb": _number(last.get("max_rss"))})
    return rows


def read_rows(table: str | Path) -> list[dict[str, Any]]:
    """The rows of a job_times.csv written earlier, numbers as floats (None where empty)."""
    return [{"rule": r.get("rule") or "", "job": r.get("job") or "", "seconds": _number(r.get("seconds")),
             "cpu_seconds": _number(r.get("cpu_seconds")), "max_rss_mb": _number(r.get("max_rss_mb"))}
            for r in _read(Path(table), ",")]


def _read(path: Path, delimiter: str) -> list[dict[str, Any]]:
    """The rows of a table; EvidenceError (one sentence) where it is not UTF-8 text or not a table."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh, delimiter=delimiter))
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"job-times: {path} is not UTF-8 text (byte {exc.start} cannot be read), so it is no "
                            "table Snakemake or the pipeline wrote.") from None
    except (csv.Error, OSError) as exc:
        raise EvidenceError(f"job-times: {path} cannot be read as a table ({exc}).") from None


def merged(found: list[dict[str, Any]], recorded: list[dict[str, Any]], ns: str) -> list[dict[str, Any]]:
    """The rows of the benchmark files found, and each recorded row of a job they lack (module
    docstring), in the order of (rule, job) where any is kept."""
    seen = {(r["rule"], r["job"]) for r in found}
    kept = [r for r in recorded if (r["rule"], r["job"]) not in seen]
    if not kept:
        return found
    print(f"job-times: {len(kept)} job(s) of {ns}'s job_times.csv have no benchmark file here; their rows are kept.")
    return sorted(found + kept, key=lambda r: (r["rule"], r["job"]))


def by_rule(rows: Iterable[dict[str, Any]]) -> list[tuple[str, int, float]]:
    """(rule, jobs, total seconds), the longest first."""
    totals: dict[str, list[float]] = {}
    for r in rows:
        totals.setdefault(r["rule"], []).append(float(r["seconds"] or 0.0))
    return sorted(((rule, len(v), math.fsum(v)) for rule, v in totals.items()), key=lambda t: -t[2])


def summary(rows: list[dict[str, Any]], commands: list[dict[str, Any]]) -> str:
    lines = []
    if rows:
        lines.append(f"{'rule':<16} {'jobs':>5} {'seconds':>9}")
        lines += [f"{rule:<16} {n:>5} {total:>9.1f}" for rule, n, total in by_rule(rows)]
        lines.append(f"{'all jobs':<16} {len(rows):>5} {math.fsum(float(r['seconds'] or 0) for r in rows):>9.1f}")
    for c in commands:
        wall = f"{c['seconds']:.0f} s" if c.get("seconds") is not None else "unfinished"
        lines.append(f"command: {c.get('command', '?')}: {c.get('jobs', '?')} jobs, {wall}, {c.get('status', 'running')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness job-times", description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    args = parser.parse_args(argv)
    ns_dir = namespace_dir(args.namespace, args.artifacts)
    if not ns_dir.is_dir():
        raise EvidenceError(f"job-times: there is no namespace {args.namespace} under {args.artifacts}.")
    table = ns_dir / "tables" / "job_times.csv"
    commands = read_commands(ns_dir / "commands.jsonl")
    if (ns_dir / "benchmarks").is_dir():
        rows = job_rows(ns_dir / "benchmarks")
        if table.is_file():
            rows = merged(rows, read_rows(table), args.namespace)
        write_csv(rows, COLUMNS, table)
    elif table.is_file():
        rows = read_rows(table)
        print(f"job-times: {args.namespace} has no benchmarks/ here, so these are the jobs its committed {table.name} records.")
    else:
        print(f"job-times: {args.namespace} recorded no job times (no benchmarks/ and no tables/{table.name}), "
              f"so only its commands' wall times are known.")
        rows = []
    print(summary(rows, commands))
    groups_table = ns_dir / "tables" / "group_seconds.csv"
    groups = group_rows(ns_dir / "measure") if (ns_dir / "measure").is_dir() else []
    if groups:
        write_csv(groups, GROUP_COLUMNS, groups_table)
    elif groups_table.is_file():
        groups = read_group_rows(groups_table)
    if groups:
        print(group_summary(groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
