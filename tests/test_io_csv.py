"""harness.io.write_csv: floats are written with "%.6g", except a column of whole numbers that
pandas holds as floats (an integer column with a missing value), which is written digit for digit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.io import write_csv


def test_whole_numbers_held_as_floats_keep_every_digit(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"bytes": 123456789, "instructions": 9007199254740992, "time_us": 1.23456789, "big": 1e20, "small": 2.0},
        {"bytes": None, "instructions": None, "time_us": 123456789.5, "big": None, "small": None}]
    columns = ["bytes", "instructions", "time_us", "big", "small", "absent"]
    frame = write_csv(rows, columns, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines() == [
        "bytes,instructions,time_us,big,small,absent",
        "123456789,9007199254740992,1.23457,1e+20,2,",  # not 1.23457e+08 nor 9.0072e+15
        ",,1.23457e+08,,,",  # the other floats keep %.6g
    ]
    back = pd.read_csv(tmp_path / "t.csv")
    assert back["bytes"].iloc[0] == 123456789 and back["instructions"].iloc[0] == 2**53
    # the frame returned is the one the rows make: its floats stay floats
    assert frame["bytes"].dtype == "float64" and frame["bytes"].iloc[0] == 123456789.0
