"""The external implementation kind without a GPU: the launch-expression evaluator, validation of
the config block, the launch plan, and the census of the committed PTX fixture.

Expected values are derived independently: grid sizes with math.ceil, census counts by a grep of
the PTX, the ptxas log and the SASS that the census wrote out, and by the cubin path agreeing with
the PTX path on the same code.
"""

from __future__ import annotations

import builtins
import hashlib
import math
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy
import pytest

from harness import ROOT
from harness.build import toolchain
from harness.build import external as build_external
from harness.build.build import CENSUS_COLUMNS
from harness.errors import EvidenceError
from harness.launch import exprs, external

FIXTURES = Path(__file__).parent / "fixtures" / "external"
PTX = FIXTURES / "transpose_naive.ptx"
DIMS = ("rows", "cols")


def transpose_cfg(**changes: object) -> dict[str, Any]:
    """An external kernel's configuration, as read from the YAML config (so its values are dynamic)."""
    cfg: dict[str, Any] = {"path": str(PTX.relative_to(ROOT)), "entry": "transpose_naive",
           "grid": ["cdiv(cols, 32)", "cdiv(rows, 32)"], "block": [32, 8],
           "args": ["x", "out", "rows:int32", "cols:int32"]}
    cfg.update(changes)
    return cfg


class FakeTensor:
    """Just enough of a tensor for plan_launch: an address and a shape."""

    def __init__(self, address: int, shape: tuple[int, ...] = ()) -> None:
        self.address, self.shape = address, shape

    def data_ptr(self) -> int:
        return self.address


def one_sentence(message: str) -> bool:
    return message.endswith(".") and "\n" not in message


# ----------------------------------------------------------------------------- evaluator


@pytest.mark.parametrize(("text", "values", "expected"), [
    ("rows", {"rows": 300}, 300),
    ("cdiv(cols, 32)", {"cols": 500}, math.ceil(500 / 32)),
    ("cdiv(cols, 32)", {"cols": 512}, 512 // 32),
    ("cdiv(m, 64) * 2", {"m": 130}, math.ceil(130 / 64) * 2),
    ("(a + b) % 7 - a // 3", {"a": 10, "b": 5}, (10 + 5) % 7 - 10 // 3),
    ("max(1, min(a, 7), b)", {"a": 9, "b": 4}, 7),
    ("-a + +b", {"a": 2, "b": 5}, 3),
    ("  cdiv(nodes * features, 256)  ", {"nodes": 1000, "features": 64},
     math.ceil(1000 * 64 / 256)),
])
def test_evaluate_valid(text: str, values: dict, expected: int) -> None:
    assert exprs.evaluate(text, values) == expected


def test_evaluate_plain_int_and_names() -> None:
    assert exprs.evaluate(7, {}) == 7
    assert exprs.names("cdiv(m, 64) * max(n, k)") == {"m", "n", "k"}


def test_evaluate_never_uses_eval_or_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    assert exprs.evaluate("cdiv(rows, 8) + 1", {"rows": 17}) == 4


@pytest.mark.parametrize("text", [
    "__import__('os')",
    "__import__('os').system('true')",
    "().__class__.__bases__",
    "rows.bit_length()",
    "x.y",
    "lambda: 1",
    "(lambda: 1)()",
    "2 ** 10 ** 10",
    "9 ** 999999",
    "pow(2, 64)",
    "open('/etc/passwd')",
    "[i for i in range(10)]",
    "rows[0]",
    "'a' * 3",
    "1.5",
    "True",
    "None",
    "a if b else c",
    "a < b",
    "a and b",
    "(n := 3)",
    "a / 2",
    "a << 40",
    "cdiv(1)",
    "cdiv(1, 2, 3)",
    "min(1)",
    "max(1, x=2)",
    "min(*[1, 2])",
    "",
    "rows = 1",
    "1; 2",
    "9" * 30,
    "1 + " * 100 + "1",
])
def test_hostile_expressions_rejected(text: str) -> None:
    with pytest.raises(ValueError) as info:
        exprs.evaluate(text, {"rows": 4, "a": 1, "b": 2, "c": 3, "n": 5, "x": 1})
    assert one_sentence(str(info.value))


@pytest.mark.parametrize(("text", "values"), [
    ("os", {}),
    ("rows + secret", {"rows": 1}),
    ("rows", {"rows": 1.5}),
    ("rows", {"rows": True}),
    ("a // 0", {"a": 1}),
    ("a % (b - b)", {"a": 1, "b": 2}),
    ("cdiv(a, 0)", {"a": 1}),
    ("cdiv(a, -2)", {"a": 1}),
    ("a * a * a * a * a", {"a": 2**40}),
])
def test_bad_names_and_values_rejected(text: str, values: dict) -> None:
    with pytest.raises(ValueError) as info:
        exprs.evaluate(text, values)
    assert one_sentence(str(info.value))


def test_check_names() -> None:
    exprs.check("cdiv(cols, 32)", DIMS)
    with pytest.raises(ValueError, match="unknown name 'width'"):
        exprs.check("cdiv(width, 32)", DIMS)
    with pytest.raises(ValueError):
        exprs.check("__import__", DIMS)


# ----------------------------------------------------------------------------- validation


def test_fixture_validates() -> None:
    external.validate_external(transpose_cfg(), DIMS, ["x"], ["tolerance", "default", "sweep"])


@pytest.mark.parametrize(("changes", "field"), [
    ({"args": ["x", "out", "rows:int32", "width:int32"]}, "width"),
    ({"args": ["x", "y", "out", "rows:int32"]}, "'y'"),
    ({"args": ["x", "out", "rows"]}, "'rows'"),
    ({"args": ["x:int32", "out"]}, "x:int32"),
    ({"args": ["x", "out:uint32"]}, "out:uint32"),
    ({"args": ["x", "out", "rows:int16"]}, "int16"),
    ({"args": ["x", "rows:int32"]}, "'out'"),
    ({"args": ["x", "out", "rows-1:int32"]}, "rows-1"),
    ({"args": []}, "external.args"),
    ({"grid": ["cdiv(cols, 32)", "rows.bit_length()"]}, "external.grid[1]"),
    ({"grid": ["cdiv(width, 32)"]}, "external.grid[0]"),
    ({"grid": [0]}, "external.grid[0]"),
    ({"grid": [1.5]}, "external.grid[0]"),
    ({"grid": [1, 1, 1, 1]}, "external.grid"),
    ({"block": [32, 8, 8]}, "external.block"),
    ({"block": [2048]}, "external.block"),
    ({"block": [0]}, "external.block"),
    ({"block": []}, "external.block"),
    ({"shared_bytes": -1}, "external.shared_bytes"),
    ({"shared_bytes": 10**9}, "external.shared_bytes"),
    ({"entry": "transpose_tiled"}, "external.entry"),
    ({"entry": "bad name"}, "external.entry"),
    ({"path": "tests/fixtures/external/missing.ptx"}, "external.path"),
    ({"path": "tests/fixtures/external/README.md"}, "external.path"),
    ({"path": "../outside.ptx"}, "outside the repository"),
    ({"path": "/etc/passwd.ptx"}, "outside the repository"),
    ({"stream": 1}, "'stream'"),
])
def test_validation_errors_name_the_field(changes: dict, field: str) -> None:
    with pytest.raises(EvidenceError) as info:
        external.validate_external(transpose_cfg(**changes), DIMS, ["x"], ["tolerance"])
    assert field in str(info.value)
    assert one_sentence(str(info.value))


def test_missing_key() -> None:
    cfg = transpose_cfg()
    del cfg["entry"]
    with pytest.raises(EvidenceError, match="lacks the key 'entry'"):
        external.validate_external(cfg, DIMS, ["x"], [])


def test_unknown_parameter_and_unchecked_names() -> None:
    cfg = transpose_cfg(args=["x", "out", "rows:int32", "eps:float32"])
    with pytest.raises(EvidenceError, match="eps:float32"):
        external.validate_external(cfg, DIMS, ["x"], ["tolerance"])
    external.validate_external(cfg, DIMS, ["x"], ["eps"])
    external.validate_external(cfg, DIMS)  # names unchecked when not given


def test_path_escape_refused(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "k").mkdir(parents=True)
    outside = tmp_path / "outside.ptx"
    shutil.copy(PTX, outside)
    shutil.copy(PTX, root / "k" / "inside.ptx")
    (root / "k" / "link.ptx").symlink_to(outside)
    external.validate_external(transpose_cfg(path="k/inside.ptx"), DIMS, root=root)
    for path in ("../outside.ptx", "k/../../outside.ptx", str(outside), "k/link.ptx"):
        with pytest.raises(EvidenceError, match="outside the repository") as info:
            external.validate_external(transpose_cfg(path=path), DIMS, root=root)
        assert one_sentence(str(info.value))
    with pytest.raises(EvidenceError, match="outside the repository"):
        build_external.census_rows("transpose", transpose_cfg(path="../outside.ptx"), root=root)


# ----------------------------------------------------------------------------- launch plan


@pytest.mark.parametrize(("rows", "cols"), [(300, 500), (1024, 4096), (1, 1), (33, 31)])
def test_plan_launch_transpose(rows: int, cols: int) -> None:
    x, out = FakeTensor(0x7F0000001000), FakeTensor(0x7F0000800000)
    grid, block, shared, args = external.plan_launch(
        transpose_cfg(), {"rows": rows, "cols": cols}, {"x": x}, out, {"tolerance": {}})
    assert grid == (math.ceil(cols / 32), math.ceil(rows / 32), 1)
    assert block == (32, 8, 1)
    assert shared == 0
    assert [type(a) for a in args] == [numpy.uint64, numpy.uint64, numpy.int32, numpy.int32]
    assert [int(a) for a in args] == [x.address, out.address, rows, cols]


def test_plan_launch_params_and_types() -> None:
    cfg = transpose_cfg(grid=[4, "max(1, cdiv(rows, 2))", "2"], block=[64], shared_bytes=1024,
                        args=["w", "x", "out", "cols:int64", "eps:float32", "alpha:float64",
                              "rows:uint32"])
    inputs = {"x": FakeTensor(16), "w": FakeTensor(32)}
    grid, block, shared, args = external.plan_launch(
        cfg, {"rows": 5, "cols": 7}, inputs, FakeTensor(48), {"eps": 1e-5, "alpha": 0.5})
    assert (grid, block, shared) == ((4, 3, 2), (64, 1, 1), 1024)
    assert [type(a) for a in args] == [numpy.uint64, numpy.uint64, numpy.uint64, numpy.int64,
                                       numpy.float32, numpy.float64, numpy.uint32]
    assert [int(a) for a in args[:4]] == [32, 16, 48, 7]
    assert args[4] == numpy.float32(1e-5) and args[5] == 0.5 and int(args[6]) == 5


@pytest.mark.parametrize(("changes", "dims", "params", "match"), [
    ({"args": ["x", "out", "eps:float32"]}, {"rows": 1, "cols": 1}, {}, "parameter 'eps'"),
    ({"args": ["x", "out", "eps:int32"]}, {"rows": 1, "cols": 1}, {"eps": 0.5}, "integer"),
    ({"args": ["x", "out", "rows:int32"], "grid": [1]}, {"rows": 2**31, "cols": 1}, {},
     "outside the range"),
    ({"args": ["x", "out", "rows:uint32"], "grid": [1]}, {"rows": -1, "cols": 1}, {},
     "outside the range"),
    ({"args": ["y", "out"]}, {"rows": 1, "cols": 1}, {}, "'y'"),
    ({}, {"rows": 2**22, "cols": 1}, {}, "external.grid[1]"),
    ({"grid": ["cols - 5"]}, {"rows": 1, "cols": 5}, {}, "external.grid[0]"),
    ({"grid": ["cdiv(cols, 32)", "cdiv(rows, 32)"]}, {"rows": 1}, {}, "external.grid[0]"),
])
def test_plan_launch_errors(changes: dict, dims: dict, params: dict, match: str) -> None:
    with pytest.raises(EvidenceError, match=re.escape(match)) as info:
        external.plan_launch(transpose_cfg(**changes), dims, {"x": FakeTensor(16)},
                             FakeTensor(32), params)
    assert one_sentence(str(info.value))


def test_dims() -> None:
    assert external.dims_from_shape("300x500", DIMS) == {"rows": 300, "cols": 500}
    assert external.dims_from_shape("64x8x2-powerlaw", ("nodes", "edges", "features")) == {
        "nodes": 64, "edges": 8, "features": 2}
    with pytest.raises(EvidenceError, match="3 dimensions"):
        external.dims_from_shape("1x2x3", DIMS)
    assert external.first_input_dims(DIMS, {"x": FakeTensor(0, (3, 4))}) == {"rows": 3, "cols": 4}
    with pytest.raises(EvidenceError, match="dims_of"):
        external.first_input_dims(("m", "n", "k"), {"a": FakeTensor(0, (3, 4))})


def test_make_launcher_validates_without_gpu() -> None:
    op = SimpleNamespace(name="transpose", dim_names=DIMS)
    launcher = external.make_launcher(op, transpose_cfg())
    assert launcher.dim_names == DIMS and launcher.tensor_names == ["x"]
    assert launcher.path == str(PTX.resolve())
    with pytest.raises(EvidenceError, match="names no dimensions"):
        external.make_launcher(SimpleNamespace(name="transpose", dim_names=()), transpose_cfg())
    with pytest.raises(EvidenceError, match="external.grid"):
        external.make_launcher(op, transpose_cfg(grid=["cdiv(width, 32)"]))


def test_launcher_refuses_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    launcher = external.make_launcher("transpose", transpose_cfg(), DIMS)
    x = torch.ones(4, 5)
    with pytest.raises(EvidenceError, match="is on cpu") as info:
        launcher({"x": x}, torch.empty(5, 4), {})
    assert one_sentence(str(info.value))


# ----------------------------------------------------------------------------- census

needs_tools = pytest.mark.skipif(
    toolchain.find_tool("ptxas") is None or toolchain.find_tool("cuobjdump") is None,
    reason="ptxas or cuobjdump not found")


def _grep_count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text, re.M))


@needs_tools
def test_census_of_committed_ptx(tmp_path: Path) -> None:
    rows = build_external.census_rows("transpose", transpose_cfg(), "sm_90", tmp_path,
                                shapes=[(300, 500), (1024, 4096)])
    assert len(rows) == 1
    row = rows[0]
    assert tuple(row) == CENSUS_COLUMNS
    ptx = PTX.read_text()
    log = (tmp_path / "external_transpose_naive.ptxas.log").read_text()
    sass = (tmp_path / "external_transpose_naive.sass").read_text()
    assert (row["op"], row["impl"], row["kernel"], row["symbol"]) == (
        "transpose", "external", "transpose_naive", "transpose_naive")
    assert row["shapes"] == "300x500;1024x4096" and row["block"] == 32 * 8
    used = re.search(r"Used (\d+) registers", log)
    assert used is not None, log
    assert row["registers"] == int(used.group(1)) > 0
    assert (row["spill_stores"], row["spill_loads"], row["stack_bytes"]) == (0, 0, 0)
    # widths from a plain grep of the PTX: scalar f32 loads and stores, read-only loads
    assert row["ld_global_32"] == _grep_count(r"^\s*ld\.global(\.nc)?\.f32\b", ptx) == 4
    assert row["st_global_32"] == _grep_count(r"^\s*st\.global\.f32\b", ptx) == 4
    assert row["ld_global_nc"] == _grep_count(r"^\s*ld\.global\.nc\.", ptx)
    assert row["ld_global_128"] == _grep_count(r"^\s*ld\.global\S*\.v4\.", ptx) == 0
    assert row["st_global_128"] == row["ld_global_64"] == row["st_global_64"] == 0
    assert row["barriers"] == row["shuffles"] == 0
    # SASS counts from a grep of the disassembly the census wrote
    assert row["sass_ldg_32"] == _grep_count(r"\bLDG\.E(\.[A-Z]+)*\s", sass) == 4
    assert row["sass_stg_32"] == _grep_count(r"\bSTG\.E(\.[A-Z]+)*\s", sass) == 4
    assert row["sass_local"] == 0 and row["sass_instructions"] > 0
    assert row["source_sha256"] == hashlib.sha256(PTX.read_bytes()).hexdigest()
    assert row["compiler"].startswith("external PTX ISA ") and "ptxas" in row["compiler"]
    assert row["arch"] == "sm_90" and row["dynamic_smem"] == 0
    assert "cdiv(cols, 32)" in row["specialization"]
    for suffix in ("ptx", "cubin", "res-usage.txt"):
        assert (tmp_path / f"external_transpose_naive.{suffix}").is_file()


@needs_tools
def test_census_of_cubin_agrees_with_ptx(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    ptxas = toolchain.require_tool("ptxas")
    subprocess.run([str(ptxas), "-arch=sm_90", str(PTX), "-o", str(root / "k.cubin")], check=True)
    from_ptx = build_external.census_rows("transpose", transpose_cfg(), "sm_90")[0]
    cubin_cfg = transpose_cfg(path="k.cubin", shared_bytes=512)
    external.validate_external(cubin_cfg, DIMS, ["x"], [], root=root)
    row = build_external.census_rows("transpose", cubin_cfg, "sm_90", tmp_path / "out", root=root)[0]
    assert tuple(row) == CENSUS_COLUMNS
    same = ("registers", "stack_bytes", "static_smem", "constant_bytes", "sass_ldg_32",
            "sass_stg_32", "sass_ldg_128", "sass_local", "sass_instructions", "block")
    assert {k: row[k] for k in same} == {k: from_ptx[k] for k in same}
    assert row["dynamic_smem"] == 512
    assert row["ld_global_32"] == row["st_global_32"] == 0  # no PTX in a cubin
    assert "cubin" in row["compiler"] and "unknown" in row["options"]
    with pytest.raises(EvidenceError, match="sm_80"):
        build_external.census_rows("transpose", cubin_cfg, "sm_80", root=root)
    with pytest.raises(EvidenceError, match="external.entry"):
        build_external.census_rows("transpose", transpose_cfg(path="k.cubin", entry="nope"), root=root)
