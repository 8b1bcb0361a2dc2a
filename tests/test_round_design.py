"""The capture's design against what a run fixes: Williams orders (every implementation after
every other equally often), placements (each once per block of rounds, seeded), and the cluster
bootstrap that puts what a placement moves into a ratio's interval."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy
import pytest

from harness.measure import order
from harness.tables import derive, stats


@pytest.mark.parametrize("n", range(1, 9))
def test_williams_balances_neighbours_and_positions(n: int) -> None:
    orders = order.williams(n)
    assert len(orders) == (2 * n if n % 2 else n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    follows = Counter((o[i], o[i + 1]) for o in orders for i in range(n - 1))
    assert set(follows) == {(a, b) for a, b in itertools.permutations(range(n), 2)}
    assert len(set(follows.values())) <= 1
    positions = Counter((t, i) for o in orders for i, t in enumerate(o))
    assert len(positions) == n * n and len(set(positions.values())) == 1


def test_balanced_orders_cycle_and_name_the_items() -> None:
    items = ["cuda", "triton", "cuda.twin", "cuda.planted"]
    cycle = [order.balanced(items, r) for r in range(4)]
    assert order.balanced(items, 4) == cycle[0]
    before = Counter((o[i], o[i + 1]) for o in cycle for i in range(3))
    assert before[("cuda.planted", "cuda")] == before[("triton", "cuda")] == 1  # a rotation put cuda after one neighbour only
    assert order.balanced([], 3) == []


def test_round_placements_hold_each_placement_once_per_block() -> None:
    seq = order.round_placements(30, 6, seed=7)
    assert len(seq) == 30
    for b in range(5):
        assert sorted(seq[6 * b:6 * b + 6]) == list(range(6))
    assert seq == order.round_placements(30, 6, seed=7)
    assert seq != order.round_placements(30, 6, seed=8)
    assert order.round_placements(4, 1, seed=1) == [0, 0, 0, 0]
    assert Counter(order.round_placements(32, 6, seed=3)).most_common(1)[0][1] == 6  # a partial last block


def rounds_with(placement_effect: float, common: bool, rng: numpy.random.Generator) -> tuple[list[float], list[float], list[int]]:
    clusters = order.round_placements(60, 6, seed=1)
    shift = {p: placement_effect * (p - 2.5) / 2.5 for p in range(6)}
    a = [1.0 + shift[c] + 0.002 * rng.standard_normal() for c in clusters]
    b = [1.0 + (shift[c] if common else 0.0) + 0.002 * rng.standard_normal() for c in clusters]
    return a, b, clusters


def test_cluster_bootstrap_holds_what_a_placement_moves() -> None:
    rng = numpy.random.default_rng(0)
    a, b, clusters = rounds_with(0.02, common=False, rng=rng)
    _, lo0, hi0 = stats.ratio_interval(a, b, paired=True, seed=1)
    _, lo1, hi1 = stats.ratio_interval(a, b, paired=True, seed=1, clusters=clusters)
    assert hi1 - lo1 > 1.5 * (hi0 - lo0)
    _, mlo0, mhi0 = stats.mean_interval(a, seed=1)
    _, mlo1, mhi1 = stats.mean_interval(a, seed=1, clusters=clusters)
    assert mhi1 - mlo1 > 1.5 * (mhi0 - mlo0)


def test_a_placement_effect_both_share_cancels_in_the_ratio() -> None:
    rng = numpy.random.default_rng(1)
    a, b, clusters = rounds_with(0.02, common=True, rng=rng)
    r, lo, hi = stats.ratio_interval(a, b, paired=True, seed=1, clusters=clusters)
    assert stats.verdict(lo, hi) == stats.SAME and hi - lo < 0.01


def test_one_placement_resamples_as_before() -> None:
    rng = numpy.random.default_rng(2)
    a, b = list(1 + 0.01 * rng.standard_normal(30)), list(1 + 0.01 * rng.standard_normal(30))
    assert stats.ratio_interval(a, b, paired=True, seed=5, clusters=[0] * 30) == stats.ratio_interval(a, b, paired=True, seed=5)
    assert stats.mean_interval(a, seed=5, clusters=None) == stats.mean_interval(a, seed=5)
    with pytest.raises(ValueError):
        stats.ratio_interval(a, b, paired=True, seed=5, clusters=[0, 1])


def test_tables_take_the_placements_from_the_record() -> None:
    def g(record: dict) -> derive.Group:
        return derive.Group(record=record, launches=derive._frame(derive.LAUNCH_COLUMNS),
                            spans=derive._frame(derive.SPAN_SAMPLE_COLUMNS), graph=derive._frame(derive.GRAPH_COLUMNS))

    seq = order.round_placements(30, 6, seed=2)
    assert derive.placements(g({"rounds": 30, "placements": 6, "round_placements": seq})) == seq
    assert derive.placements(g({"rounds": 30})) is None  # a record from before placements
    assert derive.placements(g({"rounds": 30, "placements": 1, "round_placements": [0] * 30})) is None
    assert derive.placements(g({"rounds": 31, "placements": 6, "round_placements": seq})) is None


def test_t_quantiles_match_the_tables() -> None:
    # Student's t at p = 0.975 from the printed tables (df 1, 2, 3, 5, 10, 30)
    for df, value in ((1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042)):
        assert abs(stats.t_quantile(0.975, df) - value) < 0.004
    with pytest.raises(ValueError):
        stats.t_quantile(0.975, 0)


def test_the_interval_over_placements_is_the_ratio_estimators() -> None:
    # three placements, two rounds each: x sums 4, 6, 5 and y sums 2, 2, 2 -> R = 15/6 = 2.5,
    # residuals -1, 1, 0 -> se = sqrt(3/2 * 2) / 6 = 0.288675, t(2) = 4.302653
    x, y, clusters = [1.0, 3.0, 2.0, 4.0, 2.5, 2.5], [1.0] * 6, [0, 0, 1, 1, 2, 2]
    r, lo, hi = stats.ratio_interval(x, y, paired=True, seed=0, clusters=clusters)
    half = 4.302653 * (3.0 ** 0.5) / 6.0
    assert r == 2.5 and abs(lo - (2.5 - half)) < 1e-5 and abs(hi - (2.5 + half)) < 1e-5
    m, mlo, mhi = stats.mean_interval(x, seed=0, clusters=clusters)
    assert m == 2.5 and abs(mlo - (2.5 - half)) < 1e-5 and abs(mhi - (2.5 + half)) < 1e-5


def test_the_interval_over_six_placements_covers_what_another_run_draws() -> None:
    """Runs that each draw six placements afresh: the interval of one run must hold the true ratio
    about 95% of the time (a percentile bootstrap over six clusters held it far less often)."""
    rng = numpy.random.default_rng(11)
    held, boot_held, runs = 0, 0, 400
    for run in range(runs):
        clusters = order.round_placements(60, 6, seed=run)
        effect = 0.01 * rng.standard_normal(6)  # what each placement moves a, drawn afresh per run
        a = [1.02 * (1.0 + effect[c]) + 0.003 * rng.standard_normal() for c in clusters]
        b = [1.0 + 0.003 * rng.standard_normal() for _ in clusters]
        _, lo, hi = stats.ratio_interval(a, b, paired=True, seed=run, clusters=clusters)
        held += lo <= 1.02 <= hi
        x, y, labels = numpy.asarray(a), numpy.asarray(b), numpy.asarray(clusters)
        sx = numpy.array([x[labels == u].sum() for u in range(6)])
        sy = numpy.array([y[labels == u].sum() for u in range(6)])
        pick = rng.integers(0, 6, size=(2000, 6))
        blo, bhi = numpy.quantile(sx[pick].sum(axis=1) / sy[pick].sum(axis=1), [0.025, 0.975])
        boot_held += blo <= 1.02 <= bhi
    assert 0.92 <= held / runs <= 0.98
    assert boot_held / runs < held / runs - 0.03


def test_the_reports_name_the_interval_the_sweep_table_holds() -> None:
    import pandas as pd

    from harness.report import figures, summary

    placed = pd.DataFrame({"margin": [0.01, 0.01], "placements": [6, 6]})
    rounds_only = pd.DataFrame({"margin": [0.01, 0.01], "placements": [1, 1]})
    older = pd.DataFrame({"margin": [0.01]})  # a table from before the placements column
    assert summary.interval_kind(placed)["description"] == summary.PLACED_DESCRIPTION
    for table in (rounds_only, older):
        assert summary.interval_kind(table)["description"] == "95% bootstrap interval over interleaved rounds"
    assert figures.interval_label(placed) == figures.PLACED_LABEL
    assert figures.interval_label(older) == figures.interval_label(rounds_only) == figures.BOOTSTRAP_LABEL
    # where the component between runs widened a row's interval, the description says so
    widened = placed.assign(between_runs=[0.0, 0.0012])
    assert summary.interval_kind(widened)["description"] == summary.PLACED_DESCRIPTION + summary.BETWEEN_RUNS_DESCRIPTION
    assert summary.interval_kind(placed.assign(between_runs=[0.0, 0.0]))["description"] == summary.PLACED_DESCRIPTION
