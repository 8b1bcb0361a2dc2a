#!/usr/bin/env python3
"""What NVML's software power cap does to a run's numbers, from committed namespaces (CPU, nothing
measured).

    python3 scripts/power_cap_effect.py [--model "NVIDIA H100 80GB HBM3"] [--a torch --b triton]
                                        [--artifacts DIR] [NAMESPACE ...]

The trust rules flag every capture whose NVML samples, taken while kernels ran, report a slowing
throttle reason; many lent GPUs report the software power cap there, so their runs rank nothing.
Whether the cap moves what a verdict reads (a ratio of two kernels of one session) or only what
no verdict reads (a kernel's time across sessions) can be read off the namespaces already committed,
each group (op, shape) split by whether its gpu_state rows name the cap (where NVML's readings
were told per group, `during_extent` group, only the groups the cap was read in; before, one
watch over the session flagged every group of it), and for the namespaces that record them, the
busy samples' SM clock and power in the groups flagged:

* **times**: per (op, shape), the median over the groups of `--a`'s and `--b`'s kernel time
  (two kernels no run here changed: the library's and our Triton one), capped over uncapped;
* **ratios**: per (op, shape), the same session's `--a`/`--b`, median and range, capped and
  uncapped: a cap that slows both kernels alike leaves it where it was;
* **known answers**: the variants whose verdict is known before the run (harness.report.resolution:
  A/A twins and variants the census shows running their base's code expect "same", planted
  slowdowns "slower"): how many the runs called what.

Namespaces: those named, else every committed one with tables, of the GPU model `--model` (from
provenance.json's `gpus`; default: the model of the most namespaces). The output is text, to commit
as docs/evidence/power-cap/<commit>.txt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import ROOT  # noqa: E402
from harness.gpu.watch import SLOWING_REASONS  # noqa: E402
from harness.tables.table_files import table_path  # noqa: E402

CAP = SLOWING_REASONS[0x4]
"""How the gpu_state table's flags name the software power cap."""


def model_of(ns_dir: Path) -> str | None:
    """The GPU model a namespace ran on (provenance.json's first GPU), None where unrecorded."""
    try:
        gpus = json.loads((ns_dir / "provenance.json").read_text()).get("gpus") or []
    except (OSError, ValueError):
        return None
    return str(gpus[0].get("name")) if gpus else None


def capped(ns_dir: Path) -> dict[tuple[str, str], bool] | None:
    """(op, shape) -> whether the namespace's gpu_state table flags a capture there with the cap;
    None without a table. Where NVML's readings were told per group (`during_extent` group) only
    the groups the cap was read in are capped; before, one watch over the session flagged all."""
    import pandas as pd

    path = table_path(ns_dir / "tables", "gpu_state")
    if not path.is_file():
        return None
    state = pd.read_csv(path)
    if "flags" not in state:
        return {(str(r["op"]), str(r["shape"])): False for _, r in state.iterrows()}
    hit = state["flags"].map(lambda v: isinstance(v, str) and CAP in v)
    out: dict[tuple[str, str], bool] = {}
    for (op, shape), rows in hit.groupby([state["op"].astype(str), state["shape"].astype(str)]):
        out[(str(op), str(shape))] = bool(rows.any())
    return out


def busy_clock(ns_dir: Path) -> str | None:
    """'1875-1980 MHz (of 1980), at most 674.3 W (of 700), in 21 of 21 groups flagged': the SM
    clock and power of the readings taken while kernels ran, over the groups the cap was read in,
    where the gpu_state table records them; None where it does not."""
    import pandas as pd

    state = pd.read_csv(table_path(ns_dir / "tables", "gpu_state"))
    if "during_busy_sm_clock_min_mhz" not in state or state["during_busy_sm_clock_min_mhz"].isna().all():
        return None
    hit = state[state["flags"].map(lambda v: isinstance(v, str) and CAP in v)] if "flags" in state else state.iloc[0:0]
    groups = state.groupby(["op", "shape"]).ngroups
    if hit.empty:
        return f"no group flagged (of {groups})"

    def most(col: str) -> str:
        return f"{hit[col].max():g}" if col in hit and hit[col].notna().any() else "n/a"

    return (f"{hit['during_busy_sm_clock_min_mhz'].min():g}-{hit['during_busy_sm_clock_max_mhz'].max():g} MHz "
            f"(of {most('before_max_sm_clock_mhz')}), at most {most('during_busy_power_max_w')} W "
            f"(of {most('before_power_limit_w')}), in {hit.groupby(['op', 'shape']).ngroups} of {groups} groups flagged")


def namespaces(artifacts: Path, named: Sequence[str], model: str | None) -> tuple[str, list[Path]]:
    """(the model, the namespace folders of it with kernel_time, gpu_state, variants and census tables)."""
    dirs = [artifacts / n for n in named] if named else sorted(p for p in artifacts.iterdir() if p.is_dir())
    usable = [d for d in dirs if all(table_path(d / "tables", t).is_file()
                                     for t in ("kernel_time", "gpu_state", "variants", "census"))]
    models = Counter(m for d in usable if (m := model_of(d)))
    chosen = model or (models.most_common(1)[0][0] if models else "")
    return chosen, [d for d in usable if model_of(d) == chosen]


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} ({min(values):.4f}-{max(values):.4f}, {len(values)})" if values else "n/a"


def report(dirs: Sequence[Path], a: str, b: str) -> list[str]:
    """The lines the script prints for the namespaces `dirs`."""
    import pandas as pd

    from harness.report import resolution

    times: dict[tuple[str, str, str, bool], list[float]] = {}
    ratios: dict[tuple[str, str, bool], list[float]] = {}
    pairs: Counter[tuple[bool, str]] = Counter()
    worst: dict[bool, float] = {}
    split: dict[bool, list[str]] = {True: [], False: []}
    clocks: list[str] = []
    for d in dirs:
        shapes = capped(d)
        if shapes is None:
            continue
        anywhere = any(shapes.values())
        split[anywhere].append(d.name)
        if anywhere and (said := busy_clock(d)) is not None:
            clocks.append(f"  {d.name}: {said}")
        kt = pd.read_csv(table_path(d / "tables", "kernel_time"))
        by = {(str(r["op"]), str(r["shape"]), str(r["impl"])): float(r["kernel_time_us"]) for _, r in kt.iterrows()}
        for (op, shape, impl), us in by.items():
            cap = shapes.get((op, shape), anywhere)
            if impl in (a, b):
                times.setdefault((op, shape, impl, cap), []).append(us)
            if impl == a and (op, shape, b) in by:
                ratios.setdefault((op, shape, cap), []).append(us / by[(op, shape, b)])
        cfg = json.loads((d / "provenance.json").read_text()).get("config") or {}
        for r in resolution.rows(cfg, pd.read_csv(table_path(d / "tables", "variants")), None,
                                 pd.read_csv(table_path(d / "tables", "census"))):
            cap = shapes.get((str(r["op"]), str(r["shape"])), anywhere)
            pairs[(cap, f"{r['expected']} expected, {r['verdict'] or 'no verdict'}")] += 1
            if r["expected"] == "same" and r["ratio"] is not None:
                worst[cap] = max(worst.get(cap, 0.0), abs(float(r["ratio"]) - 1.0))
    lines = [f"namespaces with the cap flagged ({len(split[True])}): {' '.join(split[True]) or 'none'}",
             f"namespaces without it ({len(split[False])}): {' '.join(split[False]) or 'none'}",
             *(["busy samples of the groups the cap was read in (SM clock, power):", *clocks] if clocks else []), "",
             f"times: median kernel time over the groups, capped / uncapped ({a}; {b})"]
    keys = sorted({(op, shape) for op, shape, _, _ in times})
    for op, shape in keys:
        cells = []
        for impl in (a, b):
            on, off = times.get((op, shape, impl, True)), times.get((op, shape, impl, False))
            cells.append(f"{statistics.median(on) / statistics.median(off):.4f}" if on and off else "n/a")
        lines.append(f"  {op} {shape}: {'; '.join(cells)}")
    lines += ["", f"ratios: {a}/{b} in each session, median (range, groups): uncapped | capped | capped/uncapped"]
    shifts = []
    for op, shape in keys:
        off, on = ratios.get((op, shape, False), []), ratios.get((op, shape, True), [])
        shift = statistics.median(on) / statistics.median(off) if on and off else None
        overlap = bool(on and off and min(on) <= max(off) and min(off) <= max(on))
        if shift is not None:
            shifts.append(shift)
        lines.append(f"  {op} {shape}: {_median_range(off)} | {_median_range(on)} | "
                     f"{'n/a' if shift is None else f'{shift:.4f}'}{'' if overlap or shift is None else ' (ranges apart)'}")
    if shifts:
        lines.append(f"  capped/uncapped over the shapes: {min(shifts):.4f}-{max(shifts):.4f}")
    lines += ["", "known answers (harness.report.resolution: A/A twins and variants of the same binary expect same, "
              "plants slower): verdicts"]
    for cap in (False, True):
        said = ", ".join(f"{n} {v}" for (c, v), n in sorted(pairs.items()) if c == cap) or "none"
        farthest = f"; the farthest a same-expected ratio lies from 1: {worst[cap]:.4f}" if cap in worst else ""
        lines.append(f"  {'capped' if cap else 'uncapped'}: {said}{farthest}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespaces", nargs="*")
    parser.add_argument("--model", default=None)
    parser.add_argument("--a", default="torch")
    parser.add_argument("--b", default="triton")
    parser.add_argument("--artifacts", default=str(ROOT / "artifacts"))
    args = parser.parse_args(argv)
    model, dirs = namespaces(Path(args.artifacts), args.namespaces, args.model)
    if not dirs:
        print(f"power_cap_effect: no namespace with kernel_time, gpu_state, variants and census tables of "
              f"{model or 'any GPU model'} under {args.artifacts}.", file=sys.stderr)
        return 2
    print(f"GPU model: {model}; {args.a}/{args.b}")
    for line in report(dirs, args.a, args.b):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
