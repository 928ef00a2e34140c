"""benchmarks/verdict.py: the reproduction verdict rule on hand-computed cases."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from verdict import compare, verdict  # noqa: E402

T_975_2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom


def test_interval_and_signal_by_hand() -> None:
    # A - B = [2, 3, 4]: mean 3, std 1, half-width t * 1 / sqrt(3)
    c = compare([3, 4, 5], [1, 1, 1], floor=-10)
    half = T_975_2 / math.sqrt(3)
    assert (c.mean, c.low, c.high) == pytest.approx((3, 3 - half, 3 + half))
    # pooled spread sqrt((1 + 0) / 2); mean of A and B 2.5; gain 12.5 over the floor
    assert c.spread == pytest.approx(math.sqrt(0.5))
    assert c.signal == pytest.approx(12.5 / math.sqrt(0.5))
    assert verdict(">", c) == "holds"
    assert verdict("<", c) == "does not hold"


def test_interval_across_zero_is_inconclusive() -> None:
    c = compare([1, 3, 2], [2, 2, 2], floor=-100)  # A - B = [-1, 1, 0]
    assert c.low < 0 < c.high
    assert verdict(">", c) == verdict("<", c) == "inconclusive"


def test_no_signal_above_the_floor_is_inconclusive_whatever_the_interval() -> None:
    c = compare([3, 4, 5], [1, 1, 1], floor=0)  # signal 2.5 / 0.707 = 3.5 < 5
    assert c.low > 0
    assert verdict(">", c).startswith("inconclusive (signal 3.5")


def test_equivalence_within_a_margin() -> None:
    near = compare([10.0, 10.5, 11.0], [10.2, 10.4, 10.9], floor=0)  # A - B = [-0.2, 0.1, 0.1]
    assert verdict("~", near, margin=2) == "holds"
    far = compare([20.0, 20.5, 21.0], [10.2, 10.4, 10.9], floor=0)
    assert verdict("~", far, margin=2) == "does not hold"
    assert verdict("~", near, margin=0.05) == "inconclusive"


def test_one_seed_never_decides() -> None:
    c = compare([80.0], [70.0], floor=10)
    assert (c.low, c.high) == (-math.inf, math.inf)
    assert verdict(">", c).startswith("inconclusive")


def test_a_metric_without_a_floor_skips_the_signal_test() -> None:
    c = compare([50, 52, 51], [90, 91, 92], floor=None)  # an adversary's AUC: lower is the claim
    assert c.signal is None
    assert verdict("<", c) == "holds"


def test_signal_pools_every_row_behind_a_difference_of_differences() -> None:
    rows = [np.array([80.0, 81, 82]), np.array([60.0, 61, 62]), np.array([79.0, 80, 81]), np.array([77.0, 78, 79])]
    c = compare(rows[0] - rows[1], rows[2] - rows[3], floor=50, rows=rows)  # drops 20 vs 2
    assert c.mean == pytest.approx(18)
    assert c.signal == pytest.approx((np.mean(rows) - 50) / 1.0)  # every row has std 1
    assert verdict(">", c) == "holds"


def test_a_best_of_glob_side_picks_the_highest_mean_row_and_names_it() -> None:
    """MOON's Table 5 claim: each term at its best mu (reproduce.py's ``best(GLOB)`` side)."""
    from reproduce import best_row, claim_row

    def runs(*finals: float) -> list[dict]:
        return [{"final": {"test_acc": f}, "baseline": {"test_acc": 0.1}} for f in finals]

    table = {"moon-mu1": runs(0.70, 0.72, 0.74), "moon-mu5": runs(0.75, 0.71, 0.73),  # means 0.72, 0.73
             "l2-mu0.1": runs(0.60, 0.61, 0.62), "l2-mu1": runs(0.50, 0.52, 0.51)}
    assert best_row("best(moon-*)", table, "test_acc") == "moon-mu5"
    assert best_row("best(l2-*)", table, "test_acc") == "l2-mu0.1"
    assert best_row("moon-mu1", table, "test_acc") == "moon-mu1"  # a plain row is itself
    row = claim_row(["best(moon-*)", ">", "best(l2-*)"], table, "test_acc", 2.0, Path("out"))
    assert row.startswith("| best(moon-*) = moon-mu5 > best(l2-*) = l2-mu0.1 (test_acc) |")
    assert "A - B +12.00" in row and "| holds |" in row
    with pytest.raises(SystemExit, match="no row matches"):
        best_row("best(fedavg-*)", table, "test_acc")
