"""The tables stage's workflow steps: the namespace's tables, one shape's and one sweep's, and the
controls and drift. workflow/scripts/ call these, one per rule (the counters table's step is
harness.tables.counters.write_table, which needs none of these imports)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.io import row_dicts, write_csv
from harness.tables import derive, history, nsys, trust
from harness.tables import targets as tg


def _groups(group_files: Sequence[str]) -> list[derive.Group]:
    """The groups whose files these are (each group's folder once, in order); the kernel rows an
    export held without a duration (its record says how many) are said in the job's log."""
    folders = list(dict.fromkeys(str(Path(f).parent) for f in group_files))
    groups = [derive.read_group(folder) for folder in folders]
    for folder, group in zip(folders, groups):
        count = ((group.record.get("export") or {}).get("kernels_without_duration") or 0) \
            if isinstance(group.record, dict) else 0
        note = nsys.without_duration_note(int(count), f"{Path(folder).parent.name} {Path(folder).name}'s capture")
        if note:
            print(f"export: {note}")
    return groups


def _write(tables: Mapping[str, list[dict[str, Any]]], outputs: Mapping[str, str]) -> None:
    for name, frame in derive.frames(tables).items():
        if name in outputs:
            write_csv(row_dicts(frame), list(frame.columns), outputs[name])


def namespace_tables(group_files: Sequence[str], ceilings_csv: str | None, outputs: Mapping[str, str], *,
                     namespace: str, cache_mode: str, descriptions: Mapping[str, Mapping[str, str]],
                     cross_check: Mapping[str, Any], margin: float,
                     between_runs: Mapping[str, Any] | None = None) -> None:
    """Every namespace table (derive.TABLES) from its groups' files, into `outputs` (name -> path);
    without a ceilings table (None), the fractions of the ceilings stay empty. `between_runs`: the
    config's `verdict.between_runs` (harness.tables.stats)."""
    tables = derive.namespace_tables(_groups(group_files), namespace=namespace, cache_mode=cache_mode,
                                     descriptions=descriptions,
                                     ceilings=pd.read_csv(ceilings_csv) if ceilings_csv else None,
                                     cross_check=cross_check, margin=margin, between_runs=between_runs)
    _write(tables, outputs)
    for row in tables["sweep"]:
        if row.get("cuda_over_triton") is not None:
            print(f"{row['op']} {row['shape']}: cuda/triton {row['cuda_over_triton']:.4f} "
                  f"[{row['cuda_over_triton_lo']:.4f}, {row['cuda_over_triton_hi']:.4f}] {row['cuda_vs_triton']}")


def shape_table(group_files: Sequence[str], out: str, *, namespace: str, cache_mode: str, margin: float) -> None:
    """One shape: each implementation's kernel time with its interval and span."""
    tables = derive.frames(derive.namespace_tables(_groups(group_files), namespace=namespace, cache_mode=cache_mode,
                                                   descriptions={}, margin=margin))
    kt, sp = tables["kernel_time"], tables["span"]
    merged = kt.merge(sp[["op", "shape", "impl", "samples", "span_median_us", "span_mean_us", "span_std_us"]],
                      on=["op", "shape", "impl"], how="left")
    write_csv(row_dicts(merged), list(merged.columns), out)


def sweep(group_files: Sequence[str], outputs: Mapping[str, str], *, namespace: str, cache_mode: str,
          descriptions: Mapping[str, str], margin: float, between_runs: Mapping[str, Any] | None = None) -> None:
    """One operation's sweep: the sweep table, every implementation's kernel time (variants
    included) and each variant against its base, without the namespace's ceilings and spans."""
    groups = _groups(group_files)
    op = groups[0].key[0] if groups else ""
    tables = derive.namespace_tables(groups, namespace=namespace, cache_mode=cache_mode,
                                     descriptions={op: dict(descriptions)}, margin=margin,
                                     between_runs=between_runs)
    _write({"sweep": tables["sweep"], "kernel_time": tables["kernel_time"], "variants": tables["variants"]},
           {"sweep": outputs["table"], "kernel_time": outputs["kernel_time"], "variants": outputs["variants"]})


def controls_and_drift(*, namespace: str, control: str, margin: float, earlier: str | None, controls_out: str,
                       drift_out: str) -> None:
    artifacts = Path(controls_out).parents[2]
    out = trust.trust_tables(artifacts, namespace, controls_out, drift_out, control, margin, earlier)
    for note in out["controls"]["note"]:
        print(f"control: {note}")
    bound = out["bound"]
    print(f"drift: {bound.get('sentence') or bound.get('summary')}" if out["earlier"]
          else "drift: no earlier namespace shares a shape on this GPU model.")


def targets_table(*, namespace: str, targets: Sequence[Mapping[str, Any]], operations: Mapping[str, Mapping[str, Any]],
                  sweep: str, kernel_time: str, span: str, controls: str, out: str) -> None:
    """tables/targets.csv: the config's targets judged from this namespace's tables
    (harness.tables.targets); each row said in the job's log."""
    frame = tg.evaluate(namespace, targets, operations, *(history.read_table(p) for p in (sweep, kernel_time, span,
                                                                                           controls)))
    write_csv(row_dicts(frame), list(frame.columns), out)
    for r in row_dicts(frame):
        value = "n/a" if r["value"] is None or r["value"] != r["value"] else f"{r['value']:.4f}"
        print(f"target: {r['target']}: {r['op']} {r['shape']} {r['ratio']} {value}: {r['status']}"
              + (f" ({r['reason']})" if r["reason"] else ""))
