"""harness.runlog.superseded: a run of the same re-derivation in a row is one provenance record,
counted; everything else stays as recorded."""

from __future__ import annotations

from typing import Any

from harness.runlog import superseded

RERENDER = "python -m harness rerender ns --rewrite-retained"
NOTE = "reports re-rendered from the namespace's own tables; no table changed"


def rederived(start: str, command: str = RERENDER, note: str = NOTE, **more: Any) -> dict[str, Any]:
    return {"command": command, "start": start, "host": "vm", "note": note, **more}


def test_a_run_in_a_row_keeps_its_last_record_and_counts_it() -> None:
    first, second, third = (rederived(f"2026-12-0{d}T10:00:00+00:00") for d in (1, 2, 3))
    assert superseded([first, second, third]) == [{**third, "times": 3}]


def test_an_earlier_count_counts_in() -> None:
    counted = rederived("2026-12-01T10:00:00+00:00", times=4)
    later = rederived("2026-12-02T10:00:00+00:00")
    assert superseded([counted, later]) == [{**later, "times": 5}]


def test_runs_apart_and_other_commands_stay() -> None:
    """A retrust between two re-renders changed the tables, so both re-renders stand; a re-render
    with another flag or another note is another command."""
    one = rederived("2026-12-01T10:00:00+00:00")
    retrust = rederived("2026-12-02T10:00:00+00:00", command="python -m harness retrust ns --rewrite-retained",
                        note="controls and drift re-derived")
    two = rederived("2026-12-03T10:00:00+00:00")
    plain = rederived("2026-12-04T10:00:00+00:00", command="python -m harness rerender ns")
    other_note = rederived("2026-12-05T10:00:00+00:00", command="python -m harness rerender ns", note="other")
    entries = [one, retrust, two, plain, other_note]
    assert superseded(entries) == entries


def test_snakemake_commands_and_plain_text_records_are_never_merged() -> None:
    """A snakemake command run twice may have run other jobs each time (the second only those the
    first left): both are kept, as are older plain-text records."""
    run = {"command": "snakemake report --cores 1", "start": "2026-12-01T10:00:00+00:00", "jobs": 16}
    again = {**run, "start": "2026-12-01T11:00:00+00:00", "jobs": 3}
    text = "2026-11-29T12:00:00+00:00 snakemake report"
    entries: list[Any] = [run, again, text, text]
    assert superseded(entries) == entries
