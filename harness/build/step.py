"""The build stage's workflow steps: every kernel of ours built offline and censused, and the
census table.

workflow/scripts/ call these, one function per rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.build import external as build_external
from harness.build.build import build_census
from harness.io import write_csv, write_json
from harness.ops import variants
from harness.shapes import parse_shape


def build(op: str, impl: str, shapes: list[str], arch: str, census_out: str, external_cfg: dict[str, Any] | None = None,
          op_cfg: dict[str, Any] | None = None) -> None:

    outdir = Path(census_out).parent
    outdir.mkdir(parents=True, exist_ok=True)
    if impl == "external":

        rows = build_external.census_rows(op, external_cfg or {}, arch, outdir, shapes=[parse_shape(s) for s in shapes])
    elif "." in impl:  # a named variant of our CUDA kernel (harness.variants)

        base, _ = variants.split(impl)
        rows = build_census(op, base, [parse_shape(s) for s in shapes], arch=arch, outdir=outdir,
                            variant=(impl, variants.compiler_options(op_cfg, impl)))
    else:
        rows = build_census(op, impl, [parse_shape(s) for s in shapes], arch=arch, outdir=outdir)
    for row in rows:
        print(f"census: {row['kernel']} [{row['specialization']}] registers={row['registers']} "
              f"spills={row['spill_stores']}/{row['spill_loads']} ld128={row['ld_global_128']} ld32={row['ld_global_32']}")
    write_json(rows, census_out)


def census_table(cfg: dict[str, Any], census_files: list[str], out: str) -> None:
    rows: list[dict[str, Any]] = []
    for path in census_files:
        rows.extend({"namespace": cfg["namespace"], **r} for r in json.loads(Path(path).read_text()))
    columns = ["namespace", *[k for k in rows[0] if k != "namespace"]] if rows else ["namespace"]
    write_csv(rows, columns, out)
