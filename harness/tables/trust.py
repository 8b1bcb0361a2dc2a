"""How far a namespace's numbers can be trusted: control bands, drift between namespaces, and the
flags a report must not hide. The rules, and why they are these, are in docs/trust.md.

* **Same-session controls with a known band.** One implementation (the control, `triton` by default)
  is captured in every session. Its band per (op, shape) is the min-max of its kernel time over
  every earlier namespace whose captures there NVML did not flag (same GPU model, cache mode and
  control kernel), widened by a margin. A namespace without an NVML record there is unknown, not
  quiet: it enters the band, which names it (`unrecorded`), unless it lies so far above the
  median of the band's sessions that it reads as load. The band is a function of that set only: the order in
  which namespaces were captured or listed never changes it, and no namespace is left out for where
  its control fell against another band. Every namespace left out is listed with its reason.
* **A control is judged by its band and by NVML.** Above its band while NVML saw nothing: `above`
  (a suspect capture). Above its band while NVML flagged the captures at that shape: `under load`.
  Either way no ranking follows from its pairings there; ours (`cuda`) is compared with its own
  earlier range to say whether the slowdown hit the control's capture or the whole operation.
* **Drift bounded by our kernels that did not change.** Between two namespaces, only our kernels
  (neither the control nor a library baseline) that are the same kernel in both (the census rows
  serving that shape built from the same source hash, compiler, options, kernel and specialization,
  or built to the same SASS) and whose captures are clean, bound the drift. The control's own move
  is reported beside it, judged against its band.
* **Library baselines are never compared across sessions.** `torch` is not ours and may change with
  the driver and library version between sessions; its rows are listed, never used as a bound.

Inputs are the retained tables (`artifacts/<ns>/tables/*.csv`, `provenance.json`) or the history
index (harness.tables.history); outputs are DataFrames, and `trust_tables` writes them as
`tables/controls.csv` and `tables/drift.csv` of the current namespace, so a report quotes a table.
Every sentence produced here is complete and ends with exactly one period.

The rules are split by noun: harness.tables.retained (a namespace as the rules see it, kernel
identity), harness.tables.bands (control bands, the verdict on the control), harness.tables.drift
(drift and its bound), harness.tables.flags (the flags a report must not hide, each with its clean
clause), harness.tables.phrases (the words of their notes); this module holds the history, the
choice of the earlier namespace and the step that writes the tables, and re-exports the others'
names. What a report template needs from these tables is shaped in
harness.report.trust_context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import ConfigError, EvidenceError
from harness.io import row_dicts, write_csv
from harness.tables import history
from harness.tables.bands import (ABOVE, BAND_COLUMNS, CONTROL_COLUMNS, MARGIN, OUTLIER_MADS, OURS, STATUSES,
                                  classify_controls, control_bands, rankable)
from harness.tables.drift import DRIFT_COLUMNS, LIBRARY_NOTE, LIBRARY_REASON, ROLES, drift, drift_bound
from harness.tables.flags import CHECKS, Review, flags, review, table
from harness.tables.retained import (IDENTITY_COLUMNS, LIBRARY_IMPLS, Retained, cache_mode, identity_change,
                                     kernel_identity, load_namespace, retained)
from harness.tables.phrases import and_, flag_clause

# The namespace's controls, the earlier namespace, and the step that writes the tables


class _History:
    """The retained namespaces under an artifacts folder, each loaded once."""

    def __init__(self, artifacts: str | Path) -> None:
        self.artifacts = Path(artifacts)
        self.order = history.namespaces_in_order(self.artifacts)
        self._loaded: dict[str, Retained] = {}
        self._controls: dict[tuple[str, str, float, str], pd.DataFrame] = {}

    def get(self, name: str) -> Retained:
        if name not in self._loaded:
            self._loaded[name] = load_namespace(self.artifacts / name)
        return self._loaded[name]

    def before(self, name: str) -> list[str]:
        return self.order[: self.order.index(name)] if name in self.order else [n for n in self.order if n != name]

    def controls(self, name: str, control: str, margin: float, ours: str = OURS) -> pd.DataFrame:
        key = (name, control, margin, ours)
        if key not in self._controls:
            cur = self.get(name)
            before = [self.get(n) for n in self.before(name)]
            mode = cache_mode(cur)
            bands = control_bands(before, control, margin, exclude=name, current_census=cur.census, gpu=cur.gpu,
                                  cache_mode=mode)
            ours_bands = (control_bands(before, ours, margin, exclude=name, current_census=cur.census, gpu=cur.gpu,
                                        cache_mode=mode) if ours != control else None)
            self._controls[key] = classify_controls(cur.kernel_time, bands, control, gpu_state=cur.gpu_state, ours=ours,
                                                    ours_bands=ours_bands, margin=margin)
        return self._controls[key]


def namespace_controls(artifacts: str | Path, name: str, control: str = "triton", margin: float = MARGIN,
                       ours: str = OURS) -> pd.DataFrame:
    """The controls table of namespace `name` under `artifacts`: its control against the band of
    the namespaces retained before it (by provenance date), with ours against its own earlier range."""
    return _History(artifacts).controls(name, control, margin, ours)


def _op_shapes(ns: Retained) -> set[tuple[str, str]]:
    kt = ns.kernel_time
    if kt is None or kt.empty:
        return set()
    return {(str(o), str(s)) for o, s in zip(kt["op"], kt["shape"])}


def _choose(hist: _History, current: str, configured: str | None, control: str, margin: float) -> str | None:
    order = hist.order
    if configured:
        if configured == current:
            raise EvidenceError(f"trust: the earlier namespace for drift cannot be {current} itself.")
        if configured not in order:
            raise EvidenceError(f"trust: the configured earlier namespace {configured} has no tables under {hist.artifacts}.")
        return configured
    cur = hist.get(current)
    mine = _op_shapes(cur)
    for name in reversed(hist.before(current)):
        other = hist.get(name)
        if cur.gpu is not None and other.gpu is not None and cur.gpu != other.gpu:
            continue
        if not (mine & _op_shapes(other)) or other.disturbed:
            continue
        if hist.controls(name, control, margin)["status"].isin(ABOVE).any():
            continue
        return name
    return None


def choose_earlier(artifacts: str | Path, current: str, configured: str | None = None, control: str = "triton",
                   margin: float = MARGIN) -> str | None:
    """The namespace to bound drift against: `configured` when given (it must exist under
    `artifacts` with tables); else the most recent namespace dated before `current` (by provenance
    date; all others when `current` is not retained yet) that shares at least one (op, shape) with
    it, ran on the same GPU model where both record one, and was taken clean: no capture flagged by
    NVML and no control above its band (its controls derived now, by these rules, from the
    namespaces before it, never read from its possibly older controls.csv). None when there is none."""
    return _choose(_History(artifacts), current, configured, control, margin)


def earlier_namespaces(artifacts: str | Path, current: str) -> list[str]:
    """The namespaces retained before `current` in date order (all others when it has no tables yet)."""
    order = history.namespaces_in_order(artifacts)
    return order[: order.index(current)] if current in order else [n for n in order if n != current]


def retained_inputs(artifacts: str | Path, current: str) -> list[str]:
    """The files of the namespaces retained before `current` that its trust tables read (a Snakemake
    rule's input; a namespace retained later never makes an older one's tables out of date)."""
    artifacts = Path(artifacts)
    out = []
    for name in earlier_namespaces(artifacts, current):
        for rel in ("tables/kernel_time.csv", "tables/census.csv", "tables/gpu_state.csv", "provenance.json"):
            if (artifacts / name / rel).is_file():
                out.append((artifacts / name / rel).as_posix())
    return out


def check_earlier(artifacts: Path, current: str, earlier: str | None) -> None:
    """ConfigError (one sentence) when `trust.earlier` names a namespace with no retained tables."""

    if earlier is None:
        return
    if not (Path(artifacts) / earlier / "tables" / "kernel_time.csv").is_file() or earlier == current:
        retained = sorted(p.parent.parent.name for p in Path(artifacts).glob("*/tables/kernel_time.csv")
                          if p.parent.parent.name != current)
        raise ConfigError(f"config: trust.earlier names {earlier!r}, which is not a retained namespace under "
                          f"{artifacts}/ other than this one (retained: {', '.join(retained) or 'none'}).")


def trust_tables(artifacts: str | Path, current: str, controls_out: str | Path, drift_out: str | Path,
                 control: str = "triton", margin: float = MARGIN, earlier: str | None = None,
                 ours: str = OURS) -> dict[str, Any]:
    """Write the current namespace's `controls.csv` (its control against the band of the quiet
    namespaces retained before it, same GPU model, cache mode and control kernel) and `drift.csv`
    (against `earlier`, or choose_earlier's pick; header only when there is none). Returns
    {'controls': DataFrame, 'drift': DataFrame, 'bound': drift_bound(...), 'earlier': name or None}."""

    hist = _History(artifacts)
    cur = hist.get(current)
    controls = hist.controls(current, control, margin, ours)
    write_csv(row_dicts(controls), CONTROL_COLUMNS, controls_out)
    chosen = _choose(hist, current, earlier, control, margin)
    if chosen:
        drifted = drift(cur, hist.get(chosen), control=control, controls=controls,
                        earlier_controls=hist.controls(chosen, control, margin, ours))
    else:
        drifted = pd.DataFrame(columns=DRIFT_COLUMNS)
    write_csv(row_dicts(drifted), DRIFT_COLUMNS, drift_out)
    return {"controls": controls, "drift": drifted, "bound": drift_bound(drifted), "earlier": chosen}


__all__ = [
    "ABOVE", "BAND_COLUMNS", "CHECKS", "CONTROL_COLUMNS", "DRIFT_COLUMNS", "IDENTITY_COLUMNS", "LIBRARY_IMPLS", "LIBRARY_NOTE",
    "LIBRARY_REASON", "MARGIN", "OUTLIER_MADS", "OURS", "ROLES", "STATUSES", "Retained", "and_", "check_earlier",
    "choose_earlier", "classify_controls", "control_bands", "drift", "drift_bound", "earlier_namespaces", "flag_clause",
    "flags", "identity_change", "kernel_identity", "load_namespace", "namespace_controls", "rankable", "retained",
    "retained_inputs", "review", "Review", "table", "trust_tables",
]
