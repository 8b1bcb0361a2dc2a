"""harness.tables.binaries: which implementations run the same code at a shape, from census rows
(each compiled kernel with the shapes it serves and the SHA-256 of its SASS)."""

from __future__ import annotations

import hashlib

import pandas as pd

from harness.tables import binaries


def digest(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def row(impl: str, kernel: str, shapes: str, sass: str | None, op: str = "neighbor_aggregation") -> dict[str, object]:
    return {"op": op, "impl": impl, "kernel": kernel, "shapes": shapes,
            "sass_sha256": digest(sass) if sass is not None else None}


CENSUS = pd.DataFrame([
    # two kernels serve each shape; the variant changes the second at the wide shape only
    row("cuda", "zero", "1024x64;4096x256", "zero"),
    row("cuda", "sum<64>", "1024x64", "sum64"),
    row("cuda", "sum<256>", "4096x256", "sum256"),
    row("cuda.wide", "zero", "1024x64;4096x256", "zero"),
    row("cuda.wide", "sum<64>", "1024x64", "sum64"),
    row("cuda.wide", "sum<256>", "4096x256", "sum256-wide"),
    # a row without its hash (a census from before the column) makes the shape unknown
    row("cuda.old", "zero", "1024x64", None),
    row("cuda.old", "sum<64>", "1024x64", "sum64"),
])


def test_the_code_serving_each_shape() -> None:
    code = binaries.serving(CENSUS)
    assert code[("neighbor_aggregation", "cuda", "1024x64")] == {digest("zero"), digest("sum64")}
    assert code[("neighbor_aggregation", "cuda", "4096x256")] == {digest("zero"), digest("sum256")}
    assert code[("neighbor_aggregation", "cuda.old", "1024x64")] is None
    assert binaries.serving(None) == {}


def test_same_only_where_every_kernel_serving_the_shape_is_the_same_binary() -> None:
    code = binaries.serving(CENSUS)
    op = "neighbor_aggregation"
    assert binaries.same(code, op, "1024x64", "cuda.wide", "cuda") is True
    assert binaries.same(code, op, "4096x256", "cuda.wide", "cuda") is False  # one of its two kernels differs
    assert binaries.same(code, op, "1024x64", "cuda.old", "cuda") is None  # unknown, never "same"
    assert binaries.same(code, op, "4096x256", "cuda.old", "cuda") is None  # no row of it there
    assert binaries.same(code, "layernorm", "1024x64", "cuda.wide", "cuda") is None


def test_identical_variants_of_a_variants_table() -> None:
    variants = pd.DataFrame([{"op": "neighbor_aggregation", "shape": s, "variant": v, "base": "cuda"}
                             for s in ("1024x64", "4096x256") for v in ("cuda.wide", "cuda.old")])
    assert binaries.identical_variants(binaries.serving(CENSUS), variants) == {
        ("neighbor_aggregation", "1024x64", "cuda.wide")}
    assert binaries.identical_variants(binaries.serving(CENSUS), None) == set()
    old = CENSUS.drop(columns=["sass_sha256"])  # a census from before the column
    assert binaries.identical_variants(binaries.serving(old), variants) == set()


def test_the_change_table_counts_unchanged_code_as_aa_pairs_and_only_a_direction_as_wrong() -> None:
    from harness.report import change

    rows = pd.DataFrame([{"revision": "main", "commit": "c", "op": "softmax", "shape": shape, "impl": "cuda",
                          "current_us": 1.0, "baseline_us": 1.0, "ratio": 1.0, "ratio_lo": 0.98, "ratio_hi": 1.02,
                          "verdict": verdict} for shape, verdict in (("a", "can't tell"), ("b", "faster"), ("c", "same"))])
    census = pd.DataFrame([row(impl, "softmax_warp", "a;b;c", "warp", op="softmax") for impl in ("cuda", "cuda@main")])
    code = binaries.serving(census)
    ctx = change.context(rows, None, None, code)
    assert ctx is not None
    (rev,) = ctx["revisions"]
    assert (rev["unchanged"], rev["unchanged_wrong"], rev["binaries_known"]) == (3, 1, True)
    assert [r["binary"] for r in rev["rows"]] == ["unchanged"] * 3
    # the unchanged rows are known answers: the one that came out faster is the session's flag
    from harness.report import resolution

    pairs = change.aa_pairs(rows, code)
    assert [(p["shape"], p["variant"], p["role"]) for p in pairs] == [(s, "cuda@main", "same binary") for s in "abc"]
    (flag,) = resolution.flags(pairs)
    assert flag.startswith("Known answers: 1 of 3 A/A pairs came out faster or slower (softmax b cuda@main: faster, ")
    assert change.aa_pairs(rows, None) == []  # without a census no row is known to be unchanged
    ctx = change.context(rows, None, None, None)  # no census: nothing said of the code
    assert ctx is not None and ctx["revisions"][0]["binaries_known"] is False
    assert {r["binary"] for r in ctx["revisions"][0]["rows"]} == {None}


def test_the_stage_table_says_which_builds_run_this_checkout_s_code() -> None:
    """Two revisions of one kernel: the older compiled to other code ('its own'), the newer to this
    checkout's ('this checkout's'); this checkout's own row says nothing, nor does any row without
    a census."""
    from harness.report import change

    rows = pd.DataFrame([{"revision": rev, "commit": rev, "commit_date": date, "op": "softmax", "shape": "a",
                          "impl": "cuda"} for rev, date in (("v1", "2026-01-01"), ("v2", "2026-02-01"))])
    census = pd.DataFrame([row("cuda", "softmax_warp", "a", "new", op="softmax"),
                           row("cuda@v2", "softmax_warp", "a", "new", op="softmax"),
                           row("cuda@v1", "softmax_warp", "a", "old", op="softmax")])
    (stage,) = change.stages(rows, None, None, "triton", "head", None, binaries.serving(census))
    assert [(b["build"], b["binary"]) for b in stage["builds"]] == [
        ("v1", "its own"), ("v2", "this checkout's"), ("this checkout", "")]
    (stage,) = change.stages(rows, None, None, "triton", "head")
    assert {b["binary"] for b in stage["builds"]} == {""}


def test_the_change_section_says_whose_dispatch_chose_the_revisions_kernels() -> None:
    """change.csv's `dispatch`, per operation: every one 'its own' says a change of which kernel
    serves a shape is in the rows; any "this checkout's" names those operations and says it is not
    there; a table from before the column says nothing; summary.json's rows carry each value."""
    from harness.report import change

    def frame(dispatch: dict[str, object]) -> pd.DataFrame:
        return pd.DataFrame([{"revision": "main", "commit": "c", "op": op, "shape": shape, "impl": "cuda",
                              "dispatch": d, "verdict": "same"} for op, d in dispatch.items() for shape in ("a", "b")])

    def said(table: pd.DataFrame) -> str:
        ctx = change.context(table)
        assert ctx is not None
        return str(ctx["revisions"][0]["dispatch"])

    assert said(frame({"softmax": "its own", "layernorm": "its own"})).startswith(
        "The revision's kernels ran as its own dispatch chose and launched them (harness/ops/softmax/kernels.py, "
        "harness/ops/layernorm/kernels.py at that commit)")
    mixed = said(frame({"softmax": "its own", "layernorm": "this checkout's", "matmul": "this checkout's"}))
    assert mixed.startswith("At layernorm, matmul this checkout's dispatch chose and launched the revision's kernels")
    assert "is not in these rows" in mixed
    assert said(frame({"softmax": float("nan")})) == ""
    assert said(frame({"softmax": "its own", "layernorm": None})) == ""  # not every operation known
    assert said(frame({"softmax": "its own"}).drop(columns=["dispatch"])) == ""
    assert [r["dispatch"] for r in change.rows(frame({"softmax": "its own", "matmul": None}))] == [
        "its own", "its own", None, None]
