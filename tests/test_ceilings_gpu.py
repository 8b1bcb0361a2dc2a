"""Ceilings measured on the GPU: plausible values for any NVIDIA GPU, rows with the table's keys,
TF32 really off during the FP32 matmul and the previous settings restored afterwards."""

from __future__ import annotations

import statistics

import pytest

from harness.measure import ceilings


@pytest.mark.gpu
def test_measure_rows_are_plausible() -> None:
    import torch

    torch.cuda.empty_cache()  # what earlier tests left in torch's cache is not this test's
    free_before = torch.cuda.mem_get_info()[0]
    rows = ceilings.measure(repeats=5, same_size=[25 * 2**20])
    assert [r["ceiling"] for r in rows] == ["copy_bandwidth", "fp32_matmul", f"copy_bandwidth@{25 * 2**20}"]
    rows = rows[:2]
    for row in rows:
        assert list(row) == list(ceilings.COLUMNS)
        assert row["repeats"] == 5
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"]
        assert row["method"].endswith(".") and "\n" not in row["method"]
    copy, matmul = rows
    assert copy["unit"] == "GB/s" and 100 < copy["value"] < 20000
    assert copy["value"] == pytest.approx(2 * ceilings.COPY_BYTES / (copy["median_ms"] * 1e-3) / 1e9)
    assert matmul["unit"] == "TFLOP/s" and 1 < matmul["value"] < 200
    assert matmul["value"] == pytest.approx(
        2 * ceilings.MATMUL_N**3 / (matmul["median_ms"] * 1e-3) / 1e12)
    # the 2 GiB buffers went back to the driver, whatever ran before (the allocator's slack allowed)
    assert torch.cuda.mem_get_info()[0] > free_before - 2**28


def test_columns_match_the_ceilings_table() -> None:
    tables = pytest.importorskip("harness.tables.derive", exc_type=ImportError)  # needs sqlite_utils
    assert list(ceilings.COLUMNS) == tables.CEILING_COLUMNS


@pytest.mark.gpu
def test_matmul_precision_is_full_fp32_and_restored() -> None:
    """Under the settings the ceiling uses, an FP32 matmul is as accurate as FP32 accumulation
    allows (TF32 would be ~100x worse), and the caller's settings come back afterwards."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    try:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(512, 4096, device="cuda", generator=gen)
        b = torch.randn(4096, 512, device="cuda", generator=gen)
        ref = a.double() @ b.double()
        with ceilings.fp32_matmul_precision():
            assert torch.backends.cuda.matmul.allow_tf32 is False
            err = float((torch.matmul(a, b).double() - ref).norm() / ref.norm())
        assert err < 1e-5, err  # TF32 (10-bit mantissa) gives ~1e-3
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(saved[1])
        torch.backends.cuda.matmul.allow_tf32 = saved[0]


@pytest.mark.gpu
def test_time_ms_counts_repeats() -> None:
    import torch

    x = torch.ones(1024, device="cuda")
    calls = []
    times = ceilings.time_ms(lambda: calls.append(x.add_(1)), repeats=4, warmup=2)
    assert len(times) == 4 and len(calls) == 6 and all(t > 0 for t in times)
    assert statistics.median(times) < 1000
    assert float(x[0]) == 7.0


def test_repeats_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ceilings.measure(repeats=0)
