"""harness.tables.cells: one reading of a table cell for the trust rules and the reports' words.
They used to disagree: the trust rules took True for 1.0 and an infinity for a number, the
reports took neither."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from harness.report import words
from harness.tables import cells, phrases


@pytest.mark.parametrize(("cell", "want"), [
    (None, None), (float("nan"), None), (pd.NA, None), ("", None), ("n/a", None), (True, None), (False, None),
    (math.inf, None), ("-inf", None), ("1e-3", 0.001), (3, 3.0), ("12.5", 12.5), (0, 0.0),
])
def test_a_number_cell_reads_the_same_to_the_rules_and_the_words(cell: Any, want: float | None) -> None:
    assert cells.number(cell) == want
    assert phrases._float(cell) == want and words.number(cell) == want


@pytest.mark.parametrize(("cell", "want"), [
    (None, None), (float("nan"), None), ("true", True), (" Yes ", True), ("0", False), ("no", False),
    ("maybe", None), (1, True), (0, False), (True, True),
])
def test_a_boolean_cell(cell: Any, want: bool | None) -> None:
    assert cells.truth(cell) is want and words.truth(cell) is want
    assert phrases._truthy(cell) is (want is True)


def test_missing_and_text() -> None:
    assert all(cells.missing(v) for v in (None, float("nan"), pd.NA, pd.NaT))
    assert not any(cells.missing(v) for v in ("", 0, False))
    assert cells.text("") is None and cells.text(pd.NA) is None and cells.text(5) == "5"
    assert cells.integer("2.6") == 3 and cells.integer(True) is None
