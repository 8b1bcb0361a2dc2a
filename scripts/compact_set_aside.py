#!/usr/bin/env python3
"""Write the `set_aside` column of namespaces' controls tables as the trust rules now write it
(harness.tables.phrases.set_aside_cell: each run of namespaces set aside for one reason named before
it once, 'a, b (why); c (why2)', instead of 'a (why); b (why); c (why2)'), every other cell byte
for byte as it was. The column lists every earlier namespace of another GPU model at every shape,
so in the old form it grew with the history in every new table, and the tree that travels to a
lent GPU machine has a limit (docs/gpu-machine.md). Each cell is checked to name the same
namespaces with the same reasons in the same order before its file is written (atomically).

    python3 scripts/compact_set_aside.py [--artifacts artifacts] [NAMESPACE ...]

Without namespaces, every folder under --artifacts. Prints one line per file rewritten and the
bytes saved; running it again changes nothing.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import ROOT  # noqa: E402
from harness.errors import EvidenceError  # noqa: E402
from harness.io import write_bytes  # noqa: E402
from harness.tables import history  # noqa: E402
from harness.tables.phrases import set_aside_cell, set_aside_items  # noqa: E402


def compacted(text: str, where: str = "controls.csv") -> str:
    """A controls table's CSV `text` with its set_aside cells written as set_aside_cell writes them,
    every other cell as it was; `text` itself where it has no such column."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows or "set_aside" not in rows[0]:
        return text
    col = rows[0].index("set_aside")
    for row in rows[1:]:
        items = set_aside_items(row[col])
        cell = set_aside_cell(items)
        if set_aside_items(cell) != items or (row[col].strip() and not items):
            raise EvidenceError(f"{where}: a set_aside cell does not read back as the namespaces it names; "
                                "left as it is.")
        row[col] = cell
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def compact(path: Path) -> tuple[int, int] | None:
    """Rewrite one controls.csv's set_aside cells (`compacted`); (bytes before, bytes after), or
    None where nothing changed."""
    before = path.read_text(encoding="utf-8")
    after = compacted(before, str(path))
    if after == before:
        return None
    write_bytes(after.encode(), path)
    return len(before.encode()), len(after.encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    parser.add_argument("namespaces", nargs="*")
    args = parser.parse_args(argv)
    saved = 0
    try:
        for ns_dir in history.named_dirs(args.artifacts, args.namespaces):
            path = ns_dir / "tables" / "controls.csv"
            if not path.is_file():
                continue
            done = compact(path)
            if done:
                saved += done[0] - done[1]
                print(f"{path}: {done[0]} -> {done[1]} bytes")
    except EvidenceError as exc:
        print(f"compact_set_aside: {exc}", file=sys.stderr)
        return 2
    print(f"{saved} bytes saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
