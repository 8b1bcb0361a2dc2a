"""Span bookkeeping that runs without a GPU: rotation between rounds and the summary statistics."""

from __future__ import annotations

import statistics

from harness.measure import spans


def test_rotation_puts_each_implementation_first_once() -> None:
    impls = ["cuda", "triton", "torch"]
    firsts = [spans.rotation(impls, r)[0] for r in range(3)]
    assert sorted(firsts) == sorted(impls)
    for r in range(5):
        assert sorted(spans.rotation(impls, r)) == sorted(impls)


def test_summary_statistics() -> None:
    values = {"cuda": [1.0, 2.0, 3.0, 10.0], "torch": [5.0, 5.5]}
    rows = [{"op": "layernorm", "shape": "8x8", "impl": impl, "round": 0, "sample": i, "span_us": v}
            for impl, vs in values.items() for i, v in enumerate(vs)]
    summary = {r["impl"]: r for r in spans.summarise(rows)}
    for impl, vs in values.items():
        s = summary[impl]
        assert s["samples"] == len(vs)
        assert s["span_median_us"] == statistics.median(vs)
        assert s["span_mean_us"] == statistics.fmean(vs)
        assert s["span_std_us"] == statistics.stdev(vs)
        assert (s["span_min_us"], s["span_max_us"]) == (min(vs), max(vs))


def test_cold_mode_rotates_through_enough_input_sets() -> None:
    from harness.ops import cold_sets

    l2 = 60 * 2**20
    # a 12.6 MB layer-norm input: at least 4 x 60 MB / 12.6 MB sets plus the one in use
    n = cold_sets(12_600_000, l2)
    assert n * 12_600_000 >= 4 * l2 and (n - 2) * 12_600_000 < 4 * l2
    assert cold_sets(10 * 2**30, l2) == 2  # bigger than the L2 already: two sets suffice
    assert cold_sets(1000, l2, cap=10_000) == 10  # the memory cap wins over the footprint
