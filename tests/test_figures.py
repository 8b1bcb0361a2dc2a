"""The sweep figure: a valid SVG naming every shape and implementation, reproducible byte for byte
for the same table, different for a different one, and drawn even where an implementation is
missing."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from harness.errors import EvidenceError  # noqa: E402
from harness.report.figures import sweep_figure  # noqa: E402

NAN = math.nan
SHAPES = ["4096x768", "8192x768", "1024x2048", "4096x4096"]


def table(external: bool = True, scale: float = 1.0) -> pd.DataFrame:
    rows = []
    for i, shape in enumerate(SHAPES):
        rows.append({"namespace": "t", "op": "layernorm", "shape": shape, "cache_mode": "hot",
                     "cuda_us": scale * (10.0 + 7 * i), "triton_us": 11.0 + 6 * i,
                     "torch_us": 15.0 + 9 * i, "external_us": 30.0 + i if external else NAN})
    rows.append({"namespace": "t", "op": "softmax", "shape": "1x1", "cache_mode": "hot",
                 "cuda_us": 1.0, "triton_us": 1.0, "torch_us": 1.0, "external_us": NAN})
    return pd.DataFrame(rows)


def texts(svg: Path) -> list[str]:
    """The text of every <text> element (and its <tspan>s) of an SVG, which must parse as XML."""
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    return ["".join(el.itertext()) for el in root.iter() if el.tag.endswith("}text")]


def render(frame: pd.DataFrame, path: Path, **kwargs: object) -> bytes:
    sweep_figure(frame, "layernorm", path, **kwargs)
    return path.read_bytes()


def test_svg_names_shapes_and_implementations(tmp_path: Path) -> None:
    svg = tmp_path / "figures" / "layernorm_sweep.svg"
    render(table(), svg, cache_mode="hot")
    found = texts(svg)
    for label in [*SHAPES, "cuda", "triton", "torch", "external"]:
        assert label in found, label
    assert "1x1" not in found  # another operation's shape
    titles = [t for t in found if "kernel time (Nsight Systems), hot cache" in t]
    assert titles and all(t.startswith("layernorm") for t in titles)
    tick_order = [t for t in found if t in SHAPES]
    assert tick_order[: len(SHAPES)] == SHAPES  # table order, left panel first


def test_same_table_same_bytes(tmp_path: Path) -> None:
    first = render(table(), tmp_path / "a.svg")
    second = render(table(), tmp_path / "b.svg")
    assert first == second
    assert b"<dc:date>" not in first


def test_different_table_different_bytes(tmp_path: Path) -> None:
    base = render(table(), tmp_path / "a.svg")
    assert render(table(scale=2.0), tmp_path / "b.svg") != base
    assert render(table(), tmp_path / "c.svg", cache_mode="cold") != base
    assert render(table(), tmp_path / "d.svg", control="torch") != base


def test_missing_implementation_still_renders(tmp_path: Path) -> None:
    svg = tmp_path / "no_external.svg"
    render(table(external=False), svg)
    found = texts(svg)
    assert "external" not in found and "cuda" in found and "4096x4096" in found
    frame = table().drop(columns=["external_us"])
    frame.loc[frame["shape"] == "8192x768", "torch_us"] = NAN  # one missing time
    render(frame, tmp_path / "partial.svg")
    assert "torch" in texts(tmp_path / "partial.svg")


def test_missing_control_renders_a_note(tmp_path: Path) -> None:
    frame = table().assign(triton_us=NAN)
    svg = tmp_path / "no_control.svg"
    render(frame, svg)
    assert any("no triton times" in t for t in texts(svg))


def test_unknown_operation_refused(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="no rows for operation 'matmul'"):
        sweep_figure(table(), "matmul", tmp_path / "x.svg")
