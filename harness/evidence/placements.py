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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import EvidenceError
from harness.measure.order import round_placements
from harness.tables import stats, table_files

if TYPE_CHECKING:
    import pandas as pd


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


def provenance(ns_dir: Path) -> dict:
    """The namespace's provenance.json ({} where it is missing or unreadable)."""
    if not ns_dir.is_dir():
        raise EvidenceError(f"placements: there is no namespace {ns_dir.name} under {ns_dir.parent}.")
    try:
        found = json.loads((ns_dir / "provenance.json").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def namespace_config(ns_dir: Path) -> dict:
    cfg = provenance(ns_dir).get("config")
    if not isinstance(cfg, dict):
        raise EvidenceError(f"placements: {ns_dir / 'provenance.json'} holds no configuration, so the rounds' "
                            f"placements are unknown.")
    return cfg


def placed_rounds(ns_dir: Path, cfg: dict) -> Iterator[tuple[str, str, pd.DataFrame, list[int] | None]]:
    """(op, shape, its rounds as a table of round x implementation, the placement of every round
    by round number) for each group of the namespace's rounds.csv, in its order; the placements are
    None where the run used one (cold mode, or `capture.placements` 1)."""
    table = table_files.table_path(ns_dir / "tables", "rounds")
    if not table.is_file():
        raise EvidenceError(f"placements: {ns_dir.name} has no tables/{table_files.table_file('rounds')}.")
    import pandas as pd

    count = int((cfg.get("capture") or {}).get("placements") or 1)
    placed = count > 1 and str(cfg.get("cache_mode", "hot")) == "hot"
    rounds = pd.read_csv(table, dtype={"op": str, "shape": str, "impl": str})
    for (op, shape), grp in rounds.groupby(["op", "shape"], sort=False):
        wide = grp.pivot_table(index="round", columns="impl", values="kernel_time_us", aggfunc="first").sort_index()
        where = round_placements(int(wide.index.max()) + 1, count, int(cfg["seed"])) if placed else None
        yield str(op), str(shape), wide, where


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
    out = []
    for op, shape, wide, where in placed_rounds(ns_dir, cfg):
        if shapes is not None and shape not in shapes.get(op, []):
            continue
        if a not in wide or b not in wide or where is None:
            continue
        both = wide[[a, b]].dropna()
        both["placement"] = [where[int(r)] for r in both.index]
        means = both.groupby("placement")[[a, b]].mean()
        out.append(Spread(op, shape, a, b, tuple(float(x) for x in means[a] / means[b]), len(both)))
    return out


def defaults(ns_dir: str | Path) -> dict[str, list[str]]:
    """op -> [its default shape] from the namespace's configuration."""
    ops = namespace_config(Path(ns_dir)).get("operations") or {}
    return {str(op): [str(spec["default"])] for op, spec in ops.items() if isinstance(spec, dict) and "default" in spec}
