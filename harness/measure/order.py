"""The order of a group's measurements: which implementation runs after which, and on which
placement of the inputs, round by round. The capture (harness.measure.group), the spans and the
graph replay (harness.measure.graph_replay) all follow it, so none of them lets drift in clock or
temperature, what one slot leaves the next, or where the inputs sit favour one implementation."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any


def rotation(items: list[str], index: int) -> list[str]:
    """The order of round `index`: the list rotated by the round's number."""
    if not items:
        return []
    k = index % len(items)
    return items[k:] + items[:k]


def williams(n: int) -> list[list[int]]:
    """A Williams design of `n` treatments: orders of 0..n-1 (n of them for an even n, 2n for an
    odd n) in which every treatment comes right after every other equally often (once, or twice
    for an odd n) and stands in every position equally often. Its first order is 0, 1, n-1, 2,
    n-2, ...; order i adds i to each (mod n); an odd n adds each order reversed."""
    if n <= 0:
        return []
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    orders = [[(t + i) % n for t in first] for i in range(n)]
    return orders + [o[::-1] for o in orders] if n % 2 else orders


def balanced(items: list[str], index: int) -> list[str]:
    """The order of round `index`: order `index` (cyclically) of the Williams design of the items,
    so that over whole cycles of it each item follows every other equally often."""
    orders = williams(len(items))
    return [items[t] for t in orders[index % len(orders)]] if orders else []


def round_placements(rounds: int, placements: int, seed: int) -> list[int]:
    """The placement each round launches on: every `placements` rounds hold each placement once,
    in an order drawn afresh for each such block (seeded), so a placement is tied neither to a
    round's order of implementations (the Williams cycle) nor to its place in the capture."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < rounds:
        block = list(range(max(1, placements)))
        rng.shuffle(block)
        out += block
    return out[:rounds]


def place(calls: Mapping[str, Callable[[], Any]], placement: int) -> None:
    """Launch every call that has placements on `placement`."""
    for call in calls.values():
        select = getattr(call, "select", None)
        if select is not None:
            select(placement)
