"""The command log of a namespace (artifacts/<ns>/commands.jsonl): each snakemake command
that ran jobs in it, when it started, how many jobs it ran, when and how it ended. The workflow
appends to it (onstart, onsuccess, onerror); the provenance and the job-times table read it."""

from __future__ import annotations

import datetime
import json
import shlex
import sys
from pathlib import Path
from typing import Any


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def record_start(path: str | Path, jobs: int) -> None:
    """Append the snakemake command that starts now, with the number of jobs it will run, to the
    namespace's command log (JSON lines; `commands` pairs each start with its end)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as fh:
        fh.write(json.dumps({"command": shlex.join(["snakemake", *sys.argv[1:]]), "start": _now(), "jobs": jobs}) + "\n")


def record_end(path: str | Path, status: str) -> None:
    """Append the end of the command that started last ('success' or 'error')."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as fh:
        fh.write(json.dumps({"end": _now(), "status": status}) + "\n")


def commands(path: str | Path) -> list[dict[str, Any]]:
    """The commands of the log, each {command, start, jobs, end, status, seconds} (end, status and
    seconds absent while it runs); lines of the older plain-text form become {command, start}."""
    p = Path(path)
    out: list[dict[str, Any]] = []
    if not p.is_file():
        return out
    for line in p.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            stamp, _, command = line.partition(" ")
            out.append({"command": command, "start": stamp})
            continue
        if "command" in entry:
            out.append(dict(entry))
        elif "end" in entry and out and "end" not in out[-1]:
            out[-1].update(entry)
            try:
                out[-1]["seconds"] = (datetime.datetime.fromisoformat(entry["end"])
                                      - datetime.datetime.fromisoformat(out[-1]["start"])).total_seconds()
            except (KeyError, TypeError, ValueError):
                pass
    return out


def superseded(entries: list[Any]) -> list[Any]:
    """Provenance `entries` (harness.report.provenance) with each run of consecutive re-derivations
    of one command on the CPU kept as its last record, `times` counting the run. A re-derivation is
    a record that holds a `note` (rerender, retrust): it rewrites everything it writes, so the last
    of a run supersedes those before it; records without a note (a snakemake command may run only
    the jobs that one before it left) and older plain-text ones are kept as they are."""
    out: list[Any] = []
    for entry in entries:
        last = out[-1] if out else None
        if (isinstance(entry, dict) and entry.get("note") and isinstance(last, dict)
                and (last.get("command"), last.get("note")) == (entry.get("command"), entry.get("note"))):
            out[-1] = {**entry, "times": int(last.get("times") or 1) + int(entry.get("times") or 1)}
        else:
            out.append(entry)
    return out
