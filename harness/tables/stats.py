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
  placements of the inputs (harness.measure.group), the draw is of placements: P of them with
  replacement, each with all its rounds (a cluster bootstrap: the placement is the level a run
  fixes and another run draws afresh, Kalibera and Jones), so what the placement moves is in the
  interval. The resampling is seeded from the
  names of what is compared, so a table re-derived from the same export is the same, digit for
  digit.

Four verdicts, a/b read as "a against b" (a: ours, b: the control):

* **same**: the whole interval lies within the equivalence margin, 1 +/- `margin`;
* **faster** / **slower**: otherwise, the whole interval lies below / above 1;
* **can't tell**: the interval is wider than the margin and holds 1.

With a margin of 1%, a kernel unchanged but for its name comes out "same", and a 2% step comes out
"faster" or "slower" once the interval is narrower than that step.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy

RESAMPLES = 4000
LEVEL = 0.95
MARGIN = 0.01
"""Equivalence margin of the verdict 'same' (a ratio within 1 +/- 1%)."""

SAME, FASTER, SLOWER, CANT_TELL = "same", "faster", "slower", "can't tell"
VERDICTS = (FASTER, SLOWER, SAME, CANT_TELL)
METHOD = (f"{LEVEL:.0%} percentile bootstrap of the ratio of summed round values ({RESAMPLES} resamples, rounds "
          f"paired within a capture); 'same' within 1 +/- margin")


def seed_of(*names: str) -> int:
    """A seed from the names compared, so the same comparison always resamples alike."""
    return zlib.crc32("\0".join(names).encode())


def _cluster_boot(rng: numpy.random.Generator, x: numpy.ndarray, y: numpy.ndarray, clusters: Sequence[int],
                  resamples: int) -> numpy.ndarray:
    """`resamples` ratios sum(x) / sum(y) over the clusters drawn with replacement, each cluster with
    all its rounds (the same clusters for x and y)."""
    if len(clusters) != x.size:
        raise ValueError("clusters must name the placement of every round")
    labels = numpy.asarray(clusters)
    groups = numpy.unique(labels)
    sx = numpy.array([x[labels == u].sum() for u in groups])
    sy = numpy.array([y[labels == u].sum() for u in groups])
    chosen = rng.integers(0, groups.size, size=(resamples, groups.size))
    return sx[chosen].sum(axis=1) / sy[chosen].sum(axis=1)


def ratio_interval(a: Sequence[float], b: Sequence[float], *, paired: bool, seed: int,
                   resamples: int = RESAMPLES, level: float = LEVEL,
                   clusters: Sequence[int] | None = None) -> tuple[float, float, float]:
    """(ratio, lo, hi) of sum(a) / sum(b) with its bootstrap interval; `paired` draws the same
    rounds for both (they must then have as many rounds). With `clusters` (the placement of each
    round, paired only) the bootstrap draws placements with replacement, each with all its rounds
    (a cluster bootstrap), so the interval holds what the placement moves as well as what moves
    from round to round."""
    x, y = numpy.asarray(a, dtype=float), numpy.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0 or not y.sum() > 0:
        raise ValueError("a ratio needs rounds on both sides and a positive denominator")
    if paired and x.size != y.size:
        raise ValueError("paired rounds must be as many on both sides")
    ratio = float(x.sum() / y.sum())
    rng = numpy.random.default_rng(seed)
    tail = (1.0 - level) / 2.0
    if clusters is not None and paired and len(set(clusters)) > 1:
        boot = _cluster_boot(rng, x, y, clusters, resamples)
    else:
        ix = rng.integers(0, x.size, size=(resamples, x.size))
        iy = ix if paired else rng.integers(0, y.size, size=(resamples, y.size))
        boot = x[ix].sum(axis=1) / y[iy].sum(axis=1)
    lo, hi = numpy.quantile(boot, [tail, 1.0 - tail])
    return ratio, float(lo), float(hi)


def mean_interval(values: Sequence[float], *, seed: int, resamples: int = RESAMPLES,
                  level: float = LEVEL, clusters: Sequence[int] | None = None) -> tuple[float, float, float]:
    """(mean, lo, hi) of one implementation's round values, by the same bootstrap (of placements,
    with `clusters`)."""
    x = numpy.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no rounds")
    rng = numpy.random.default_rng(seed)
    if clusters is not None and len(set(clusters)) > 1:
        boot = _cluster_boot(rng, x, numpy.ones_like(x), clusters, resamples)
    else:
        boot = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = numpy.quantile(boot, [tail, 1.0 - tail])
    return float(x.mean()), float(lo), float(hi)


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
