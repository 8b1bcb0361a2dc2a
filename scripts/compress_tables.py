#!/usr/bin/env python3
"""Compress the tables of namespaces written before those tables were (harness.tables.table_files's
COMPRESSED: '<name>.csv' becomes '<name>.csv.gz', the same bytes inside, no time or name in the
gzip header), so the tree that travels to a lent GPU machine stays under its limit
(docs/gpu-machine.md). Each file is checked to read back byte for byte before the uncompressed one
is removed; a namespace that has both is refused in one sentence (exit 2).

    python3 scripts/compress_tables.py [--artifacts artifacts] [NAMESPACE ...]

Without namespaces, every folder under --artifacts. Prints one line per file compressed.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import ROOT  # noqa: E402
from harness.errors import EvidenceError  # noqa: E402
from harness.io import write_gzip  # noqa: E402
from harness.tables import history  # noqa: E402
from harness.tables.table_files import COMPRESSED, plain_file, table_file  # noqa: E402


def compress(ns_dir: Path) -> list[tuple[Path, int, int]]:
    """Compress the COMPRESSED tables of one namespace folder that are still plain CSV; returns
    (compressed file, bytes before, bytes after) for each."""
    done = []
    for name in COMPRESSED:
        plain, packed = ns_dir / "tables" / plain_file(name), ns_dir / "tables" / table_file(name)
        if not plain.is_file():
            continue
        if packed.exists():
            raise EvidenceError(f"{ns_dir.name} has both tables/{plain.name} and tables/{packed.name}: remove the one "
                                "that is not its table.")
        data = plain.read_bytes()
        blob = write_gzip(data, packed)
        if gzip.decompress(packed.read_bytes()) != data:
            packed.unlink()
            raise EvidenceError(f"{packed} does not read back as {plain.name}; nothing was removed.")
        plain.unlink()
        done.append((packed, len(data), len(blob)))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("namespaces", nargs="*")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    args = parser.parse_args(argv)
    try:
        for ns_dir in history.named_dirs(args.artifacts, args.namespaces):
            for packed, before, after in compress(ns_dir):
                print(f"{packed}: {before} -> {after} bytes")
    except EvidenceError as exc:
        print(f"compress_tables: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
