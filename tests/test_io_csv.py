"""harness.io.write_csv: floats are written with "%.6g", except a column of whole numbers that
pandas holds as floats (an integer column with a missing value), which is written digit for digit.
harness.io.row_dicts: a frame's rows as pandas' to_dict("records") gives them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.io import row_dicts, write_csv


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


def test_row_dicts_are_the_records_pandas_gives() -> None:
    frame = pd.DataFrame({
        "int": [1, 2], "float": [1.5, np.nan], "bool": [True, False], "text": ["a", None],
        "nullable_int": pd.array([1, None], dtype="Int64"), "nullable_bool": pd.array([True, None], dtype="boolean"),
        "string": pd.array(["x", None], dtype="string"), "time": pd.to_datetime(["2026-12-05", None]),
        "object": [{"k": 1}, (1,)]})
    expected, got = frame.to_dict("records"), row_dicts(frame)
    assert [list(r) for r in got] == [list(r) for r in expected]
    # each value of the same type and printed alike (NaN and NaT are equal to nothing)
    assert [[(type(v), repr(v)) for v in r.values()] for r in got] == [[(type(v), repr(v)) for v in r.values()] for r in expected]
    assert got[1]["nullable_int"] is None and got[1]["string"] is None  # None for a nullable column's NA, as to_dict
    assert type(got[0]["int"]) is int and type(got[0]["bool"]) is bool  # Python's, not numpy's
    assert row_dicts(frame.head(0)) == [] and row_dicts(frame[[]]) == [{}, {}]
