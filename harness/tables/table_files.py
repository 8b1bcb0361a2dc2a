"""Where a namespace's tables lie under its `tables/` folder: '<name>.csv', or, for the tables
written compressed, '<name>.csv.gz' (pandas reads either by its name). The pipeline's tables rule,
verify, the history index and every reader of a compressed table take the file name from here, so
it is decided once."""

from __future__ import annotations

from pathlib import Path

COMPRESSED = ("rounds",)
"""Tables written gzip-compressed (tables/<name>.csv.gz): rounds.csv, a row for every round of every
implementation, is the largest a namespace commits, and a tenth of its size compressed; the tree
that travels to a lent GPU machine has a limit (docs/gpu-machine.md)."""


def table_file(name: str) -> str:
    """The file name of the namespace table `name` under tables/: '<name>.csv', or '<name>.csv.gz'
    for the COMPRESSED ones."""
    return f"{plain_file(name)}.gz" if name in COMPRESSED else plain_file(name)


def plain_file(name: str) -> str:
    """The uncompressed file name of the table `name`, '<name>.csv': how a COMPRESSED table was
    written before it was compressed."""
    return f"{name}.csv"


def table_path(tables_dir: str | Path, name: str) -> Path:
    """Where the table `name` lies in the folder `tables_dir`: `table_file(name)`, or the
    uncompressed `plain_file(name)` where only that is there (a namespace written before the table
    was compressed)."""
    path = Path(tables_dir) / table_file(name)
    legacy = Path(tables_dir) / plain_file(name)
    return legacy if not path.is_file() and legacy.is_file() else path


def table_name(file_name: str) -> str | None:
    """The table a file of tables/ holds ('rounds.csv.gz' -> 'rounds'), None for another file."""
    for suffix in (".csv.gz", ".csv"):
        if file_name.endswith(suffix):
            return file_name[: -len(suffix)]
    return None


def in_folder(tables_dir: str | Path) -> list[tuple[str, Path]]:
    """(table, file) for each table file directly in `tables_dir` ('*.csv' and '*.csv.gz'), sorted
    by file name; none where there is no such folder."""
    folder = Path(tables_dir)
    files = sorted((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.name) if folder.is_dir() else []
    return [(name, p) for p in files if (name := table_name(p.name)) is not None]
