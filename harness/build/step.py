"""The build stage's workflow steps: every kernel of an operation built offline and censused, and
the census table. workflow/scripts/ call these, one function per rule."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import baseline
from harness.build import cache
from harness.build import external as build_external
from harness.build.build import build_census
from harness.io import write_csv, write_json
from harness.ops import variants
from harness.shapes import parse_shape


def build(op: str, impls: Sequence[str], shapes: Sequence[str], arch: str, block: Mapping[str, Any],
          census_out: str, baselines: Mapping[str, str] | None = None) -> None:
    """Build and census every implementation of `op` that has a build (ours, their variants and an
    external kernel; the library call has none) for `shapes`, into one census file. `block` is the
    part of the operation's config block the build reads (harness.config.build_block). Each
    compiled instance of ours comes from the build cache where nothing it depends on changed
    (harness.build.cache), whatever shapes the namespace has; each row's `build` says which
    ('cache <key>' or 'built'). Ours at a baseline revision ('cuda@main') are
    built from the kernel sources in `baselines[label]` (harness.baseline) with this dispatch."""
    baselines = baselines or {}
    outdir = Path(census_out).parent
    outdir.mkdir(parents=True, exist_ok=True)
    dims = [parse_shape(s) for s in shapes]
    rows: list[dict[str, Any]] = []
    for impl in impls:
        folder = outdir / impl
        if impl == "torch":
            continue
        if impl == "external":
            got = build_external.census_rows(op, block.get("external") or {}, arch, folder, shapes=dims)
            rows += [{**row, "build": cache.describe("", False)} for row in got]
            continue
        ours, revision = baseline.split(impl)
        root = Path(baselines[revision]) if revision is not None else None
        base, name = variants.split(ours)
        variant = (impl, variants.compiler_options(block, ours)) if name is not None else None

        def key(instance: Any, base: str = base, variant: Any = variant, root: Path | None = root) -> str:
            return cache.key(op, base, [], arch, variant=variant, sources_root=root, instance=instance)

        got = build_census(op, base, dims, arch=arch, outdir=folder, variant=variant, sources_root=root, cache_key=key)
        hits = sum(1 for row in got if str(row.get("build", "")).startswith("cache"))
        print(f"build: {op} {impl}: {len(got)} kernel(s), {hits} from the build cache")
        rows += [{**row, "impl": impl, "build": row.get("build", cache.describe("", False))} for row in got]
    for row in rows:
        print(f"census: {row['impl']}: {row['kernel']} [{row['specialization']}] registers={row['registers']} "
              f"spills={row['spill_stores']}/{row['spill_loads']} ld128={row['ld_global_128']} ld32={row['ld_global_32']}")
    write_json(rows, census_out)


def census_table(namespace: str, census_files: Sequence[str], out: str) -> None:
    rows: list[dict[str, Any]] = []
    for path in census_files:
        rows.extend({"namespace": namespace, **r} for r in json.loads(Path(path).read_text()))
    columns = ["namespace", *[k for k in rows[0] if k != "namespace"]] if rows else ["namespace"]
    write_csv(rows, columns, out)
