"""scripts/probe_spacing.py's summary on the CPU: medians a call back to back and spaced (less the
spins alone), and each implementation over the first."""

from __future__ import annotations

import pytest

from script_module import load_script


def test_the_spaced_time_is_the_replay_less_the_spin_and_ratios_are_over_the_first() -> None:
    probe = load_script("probe_spacing")
    back = {"cuda": [6.1, 6.0, 6.2], "triton": [5.9, 5.8, 6.0]}
    spaced = {"cuda": [8.0, 8.1, 7.9], "triton": [8.0, 7.8, 8.2], "spin": [2.0, 2.1, 1.9]}
    rows = probe.summarize(back, spaced)
    assert [r["impl"] for r in rows] == ["cuda", "triton"]
    cuda, triton = rows
    assert cuda["back_to_back_us"] == pytest.approx(6.1) and triton["back_to_back_us"] == pytest.approx(5.9)
    assert cuda["spaced_us"] == pytest.approx(6.0) and triton["spaced_us"] == pytest.approx(6.0)
    assert cuda["back_to_back_ratio"] == 1.0 and triton["back_to_back_ratio"] == pytest.approx(5.9 / 6.1)
    assert triton["spaced_ratio"] == pytest.approx(1.0) and cuda["spin_us"] == pytest.approx(2.0)
