"""Placements, read back from a namespace's committed tables: how a ratio moves with where its
inputs lie, and what interval more placements would give at the same spread.

A group allocates its timing inputs `capture.placements` times and launches every implementation
of a round on one of them (harness.ops.bind_group, harness.measure.order.round_placements), so a
round's placement follows from the run's seed, the rounds and the placements, all in the
provenance. This module puts each round of rounds.csv back on its placement and gives, per
(op, shape), the ratio a/b of the placement means, their spread, and the half-width of the t
interval over placements at G placements: t(0.975, G-1) · sd / √G relative to the mean ratio,
the same interval harness.tables.stats draws over placements (up to the ratio estimator's
weighting). It reads committed tables only; nothing here measures.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from harness.errors import EvidenceError
from harness.measure.order import round_placements
from harness.tables import stats


@dataclass(frozen=True)
class Spread:
    """One (op, shape)'s ratio a/b by placement (index = placement), and its spread."""

    op: str
    shape: str
    a: str
    b: str
    by_placement: tuple[float, ...]
    rounds: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.by_placement)

    @property
    def sd(self) -> float:
        """Sample standard deviation of the placement ratios (NaN with fewer than two)."""
        return statistics.stdev(self.by_placement) if len(self.by_placement) > 1 else math.nan

    def half_width(self, placements: int | None = None) -> float:
        """Relative half-width of the 95% t interval over `placements` placements (this run's
        count by default) at this spread."""
        g = placements or len(self.by_placement)
        if g < 2 or not math.isfinite(self.sd):
            return math.nan
        return stats.t_quantile(0.975, g - 1) * self.sd / math.sqrt(g) / self.mean


def namespace_config(ns_dir: Path) -> dict:
    if not ns_dir.is_dir():
        raise EvidenceError(f"placements: there is no namespace {ns_dir.name} under {ns_dir.parent}.")
    path = ns_dir / "provenance.json"
    try:
        cfg = json.loads(path.read_text()).get("config")
    except (OSError, ValueError):
        cfg = None
    if not isinstance(cfg, dict):
        raise EvidenceError(f"placements: {path} holds no configuration, so the rounds' placements are unknown.")
    return cfg


def spreads(ns_dir: str | Path, a: str = "cuda", b: str = "triton",
            shapes: dict[str, list[str]] | None = None) -> list[Spread]:
    """The spread of a/b over placements at each (op, shape) of the namespace where both were
    captured (`shapes`: op -> shapes, all by default), in the order of rounds.csv. Raises
    EvidenceError where the namespace has no rounds table or ran on one placement."""
    ns_dir = Path(ns_dir)
    cfg = namespace_config(ns_dir)
    count = int((cfg.get("capture") or {}).get("placements") or 1)
    if count < 2 or str(cfg.get("cache_mode", "hot")) != "hot":
        raise EvidenceError(f"placements: {ns_dir.name} ran its rounds on one placement, so there is no spread over placements.")
    table = ns_dir / "tables" / "rounds.csv"
    if not table.is_file():
        raise EvidenceError(f"placements: {ns_dir.name} has no tables/rounds.csv.")
    import pandas as pd

    rounds = pd.read_csv(table, dtype={"op": str, "shape": str, "impl": str})
    out = []
    for (op, shape), grp in rounds.groupby(["op", "shape"], sort=False):
        if shapes is not None and shape not in shapes.get(str(op), []):
            continue
        wide = grp.pivot_table(index="round", columns="impl", values="kernel_time_us", aggfunc="first")
        if a not in wide or b not in wide:
            continue
        wide = wide[[a, b]].dropna()
        where = round_placements(int(wide.index.max()) + 1, count, int(cfg["seed"]))
        wide["placement"] = [where[int(r)] for r in wide.index]
        means = wide.groupby("placement")[[a, b]].mean()
        out.append(Spread(str(op), str(shape), a, b, tuple(float(x) for x in means[a] / means[b]), len(wide)))
    return out


def defaults(ns_dir: str | Path) -> dict[str, list[str]]:
    """op -> [its default shape] from the namespace's configuration."""
    ops = namespace_config(Path(ns_dir)).get("operations") or {}
    return {str(op): [str(spec["default"])] for op, spec in ops.items() if isinstance(spec, dict) and "default" in spec}
