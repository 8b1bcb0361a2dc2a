"""The interval of a ratio of kernel times and the verdict it supports.

A capture holds `rounds` rounds; in each, every implementation of the group made its calls in turn
(harness.measure.group). An implementation's value in a round is its kernel time per call there
(the summed durations of the kernels its calls launched, over the calls). Over the rounds:

* the kernel time is the summed durations over all its calls (the mean per call);
* the ratio a/b of two implementations is (sum of a's round values) / (sum of b's);
* its interval is a percentile bootstrap: `RESAMPLES` times, draw rounds with replacement, the same
  rounds for a and b when they were measured in the same rounds (paired: whatever drifted between
  rounds moved both), independently otherwise (two namespaces); take the ratio of the sums each
  time, and the 2.5th and 97.5th percentiles of those ratios. Where the rounds ran on several
  placements of the inputs (harness.measure.group), the placement is the level a run fixes and
  another run draws afresh (Kalibera and Jones), and the interval is taken over placements: each
  placement's summed round values form one pair (x_g, y_g) of G, the ratio is R = sum x / sum y,
  its standard error the ratio estimator's over clusters, se = sqrt(G/(G-1) * sum (x_g - R y_g)^2)
  / sum y, and the interval R +/- t(G-1) se with Student's t at G-1 degrees of freedom. A
  bootstrap of six clusters would leave out a sixth of their variance and take normal tails
  where six draws have wider ones: it was narrower than the spread between runs. The resampling
  is seeded from the names of what is compared, so a table re-derived from the same export is the
  same, digit for digit.

Four verdicts, a/b read as "a against b" (a: ours, b: the control):

* **same**: the whole interval lies within the equivalence margin, 1 +/- `margin`;
* **faster** / **slower**: otherwise, the whole interval lies below / above 1;
* **can't tell**: the interval is wider than the margin and holds 1.

With a margin of 1%, a kernel unchanged but for its name comes out "same", and a 2% step comes out
"faster" or "slower" once the interval is narrower than that step.

**Between runs.** The interval above holds what varies inside one run. What a run fixes and the
next draws afresh beyond the placements (the process, its calls per round, the GPU's state) can
move a ratio further; its size is estimated from committed runs of the pipeline
(harness.evidence.between_runs: a standard deviation `sd` of the log ratio between runs, at `df`
degrees of freedom, per operation and pair) and kept in the config (`verdict.between_runs`). A ratio's
interval is then widened by it (`widen`): each side's half-width and t(df) * sd * ratio added in
quadrature. A pair without its own estimate takes the largest estimated at its operation, an
operation without any the largest estimated at all; with no estimate configured nothing is added.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy

RESAMPLES = 4000
LEVEL = 0.95
MARGIN = 0.01
"""Equivalence margin of the verdict 'same' (a ratio within 1 +/- 1%)."""

SAME, FASTER, SLOWER, CANT_TELL = "same", "faster", "slower", "can't tell"
VERDICTS = (FASTER, SLOWER, SAME, CANT_TELL)
METHOD = (f"{LEVEL:.0%} interval of the ratio of summed round values: over placements (Student's t at G-1 degrees of "
          f"freedom) where the rounds ran on several, else a percentile bootstrap of rounds ({RESAMPLES} resamples, "
          f"paired within a capture), widened by the between-run component of verdict.between_runs; "
          f"'same' within 1 +/- margin")


def seed_of(*names: str) -> int:
    """A seed from the names compared, so the same comparison always resamples alike."""
    return zlib.crc32("\0".join(names).encode())


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile at probability p (0.5 < p < 1) for `df` degrees of freedom: exact for
    1 and 2, else the Cornish-Fisher expansion around the normal quantile to the fourth order
    (at p = 0.975: 3.179 for the exact 3.182 at 3 degrees of freedom, 2.5703 for 2.5706 at 5)."""
    if df < 1 or not 0.5 < p < 1.0:
        raise ValueError("a t quantile needs df >= 1 and 0.5 < p < 1")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2.0 * p - 1.0) * math.sqrt(2.0 / (4.0 * p * (1.0 - p)))
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / (92160 * v ** 4))


def _cluster_interval(x: numpy.ndarray, y: numpy.ndarray, clusters: Sequence[int], level: float) -> tuple[float, float]:
    """(lo, hi) of sum(x) / sum(y) over the placements named by `clusters`, one per round: the
    ratio estimator's standard error over the placements' sums and Student's t at G-1 degrees of
    freedom (module docstring)."""
    if len(clusters) != x.size:
        raise ValueError("clusters must name the placement of every round")
    labels = numpy.asarray(clusters)
    groups = numpy.unique(labels)
    sx = numpy.array([x[labels == u].sum() for u in groups])
    sy = numpy.array([y[labels == u].sum() for u in groups])
    g = groups.size
    ratio = sx.sum() / sy.sum()
    se = math.sqrt(g / (g - 1) * float(((sx - ratio * sy) ** 2).sum())) / sy.sum()
    t = t_quantile(1.0 - (1.0 - level) / 2.0, g - 1)
    return float(ratio - t * se), float(ratio + t * se)


def ratio_interval(a: Sequence[float], b: Sequence[float], *, paired: bool, seed: int,
                   resamples: int = RESAMPLES, level: float = LEVEL,
                   clusters: Sequence[int] | None = None) -> tuple[float, float, float]:
    """(ratio, lo, hi) of sum(a) / sum(b) with its bootstrap interval; `paired` draws the same
    rounds for both (they must then have as many rounds). With `clusters` (the placement of each
    round, paired only, at least two placements) the interval is taken over placements instead
    (module docstring), so it holds what the placement moves as well as what moves from round to
    round."""
    x, y = numpy.asarray(a, dtype=float), numpy.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0 or not y.sum() > 0:
        raise ValueError("a ratio needs rounds on both sides and a positive denominator")
    if paired and x.size != y.size:
        raise ValueError("paired rounds must be as many on both sides")
    ratio = float(x.sum() / y.sum())
    if clusters is not None and paired and len(set(clusters)) > 1:
        return (ratio, *_cluster_interval(x, y, clusters, level))
    rng = numpy.random.default_rng(seed)
    tail = (1.0 - level) / 2.0
    ix = rng.integers(0, x.size, size=(resamples, x.size))
    iy = ix if paired else rng.integers(0, y.size, size=(resamples, y.size))
    boot = x[ix].sum(axis=1) / y[iy].sum(axis=1)
    lo, hi = numpy.quantile(boot, [tail, 1.0 - tail])
    return ratio, float(lo), float(hi)


def mean_interval(values: Sequence[float], *, seed: int, resamples: int = RESAMPLES,
                  level: float = LEVEL, clusters: Sequence[int] | None = None) -> tuple[float, float, float]:
    """(mean, lo, hi) of one implementation's round values, by the same bootstrap (over placements,
    with `clusters`, as ratio_interval with a denominator of one per round)."""
    x = numpy.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no rounds")
    if clusters is not None and len(set(clusters)) > 1:
        return (float(x.mean()), *_cluster_interval(x, numpy.ones_like(x), clusters, level))
    rng = numpy.random.default_rng(seed)
    boot = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = numpy.quantile(boot, [tail, 1.0 - tail])
    return float(x.mean()), float(lo), float(hi)


def between_run(components: Mapping[str, Any] | None, op: str, a: str, b: str) -> tuple[float, int]:
    """(sd, df) of the between-run component of a/b at `op` (module docstring) from the config's
    `verdict.between_runs` ({op: {"a/b": {"sd": .., "df": ..}}}): the pair's own, else the largest
    at the operation, else the largest of all; (0.0, 0) where none is configured."""
    table = components or {}
    own = (table.get(op) or {}).get(f"{a}/{b}")
    if own:
        return float(own["sd"]), int(own["df"])
    pool = list((table.get(op) or {}).values()) or [c for pairs in table.values() for c in pairs.values()]
    if not pool:
        return 0.0, 0
    widest = max(pool, key=lambda c: float(c["sd"]))
    return float(widest["sd"]), int(widest["df"])


def widen(ratio: float, lo: float, hi: float, sd: float, df: int,
          level: float = LEVEL) -> tuple[float, float, float]:
    """(lo, hi, added) of `ratio`'s interval with a between-run component of relative standard
    deviation `sd` at `df` degrees of freedom: each side's half-width and t(df) * sd * ratio in
    quadrature; `added` is t(df) * sd, the relative half-width of the component alone. With sd 0
    (or df 0) the interval comes back as it is and `added` is 0."""
    if not sd > 0 or df < 1:
        return lo, hi, 0.0
    added = t_quantile(1.0 - (1.0 - level) / 2.0, df) * sd
    extra = added * ratio
    return ratio - math.hypot(ratio - lo, extra), ratio + math.hypot(hi - ratio, extra), added


def within_se(ratio: float, lo: float, hi: float, placements: int, level: float = LEVEL) -> float:
    """The relative standard error a ratio's interval stands for: its half-width over the quantile
    it was drawn with (t at placements-1 degrees of freedom over placements, the normal's for a
    bootstrap of one placement), over the ratio."""
    p = 1.0 - (1.0 - level) / 2.0
    q = t_quantile(p, placements - 1) if placements > 1 else NormalDist().inv_cdf(p)
    return (hi - lo) / 2.0 / q / ratio


def verdict(lo: float, hi: float, margin: float = MARGIN) -> str:
    """The verdict of an interval of a/b (module docstring)."""
    if lo >= 1.0 - margin and hi <= 1.0 + margin:
        return SAME
    if hi < 1.0:
        return FASTER
    if lo > 1.0:
        return SLOWER
    return CANT_TELL


def half_width(lo: float, hi: float, ratio: float) -> float:
    """The interval's half-width relative to the ratio (0.01 is +/- 1%)."""
    return (hi - lo) / 2.0 / ratio if ratio else float("nan")
