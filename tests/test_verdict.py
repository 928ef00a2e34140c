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


def test_fewer_than_three_seeds_is_an_error() -> None:
    for n in (1, 2):
        with pytest.raises(ValueError, match="at least 3 seeds"):
            compare([80.0] * n, [70.0] * n, floor=10)


def test_a_row_below_its_floor_turns_a_wrong_side_interval_into_does_not_hold() -> None:
    # FLESD at alpha 0.01 (v1: "inconclusive (signal 0.9)"): A ends below its floor of 55, B above
    a, b = [46.8, 51.2, 55.6], [65.5, 64.0, 67.2]
    c = compare(a, b, floor=[55.3, 55.3])
    assert c.collapsed == (0,)
    assert c.signal < 5 and c.high < -2  # no signal, and the interval wholly below -2
    assert verdict("~", c) == "does not hold (a row at or below its random-init floor)"
    assert verdict(">", c) == "does not hold (a row at or below its random-init floor)"
    # the same numbers with both rows above their floors and no signal stay inconclusive
    assert verdict(">", compare(a, b, floor=[40.0, 64.0])).startswith("inconclusive (signal")


def test_low_signal_never_lets_a_holds_through_even_with_a_collapsed_row() -> None:
    c = compare([12.0, 12.5, 13.0], [9.0, 9.2, 9.1], floor=[10.0, 10.0])  # B below its floor
    assert c.collapsed == (1,) and c.low > 0
    assert verdict(">", c).startswith("inconclusive (signal")


def test_each_row_has_its_own_floor() -> None:
    c = compare([60.0, 61, 62], [50.0, 51, 52], floor=[40.0, 10.0])  # lifts 21 and 41, std 1
    assert c.signal == pytest.approx(31.0)
    assert c.collapsed == ()


def test_seeds_needed_by_hand() -> None:
    from verdict import seeds_needed
    # sd 1.2, target 1.1: n = 7 gives 2.447 * 1.2 / sqrt(7) = 1.110 > 1.1, n = 8 gives 1.003
    assert seeds_needed(1.2, 1.1) == 8
    assert seeds_needed(0.1, 5.0) == 3  # never fewer than 3
    assert seeds_needed(10.0, 1.0) == 12  # capped


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


def runs(*finals: float) -> list[dict]:
    """reproduce.py's results of one row: a final test accuracy per seed, each over a 0.1 floor."""
    return [{"final": {"test_acc": f}, "baseline": {"test_acc": 0.1}} for f in finals]


def test_a_best_of_glob_side_picks_the_highest_mean_row_and_names_it() -> None:
    """MOON's Table 5 claim: each term at its best mu (reproduce.py's ``best(GLOB)`` side)."""
    from reproduce import best_row, claim_row

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


def test_a_claim_by_at_least_d_points_is_judged_against_d_not_zero() -> None:
    """ROBUSTNESS.md's C1 ("broken, and by at least 20 points"): the interval is judged against -20."""
    from reproduce import claim_row

    clean = runs(0.70, 0.72, 0.74)
    # A - B per seed: -30, -31, -32 (mean -31, sd 1: interval -31 +- 2.48, wholly below -20)
    assert "| holds |" in claim_row(["hit", "<", "clean"], {"hit": runs(0.40, 0.41, 0.42), "clean": clean},
                                    "test_acc", 2.0, Path("x"), by=20)
    # -10, -11, -12: below 0 (holds without --by) but wholly above -20
    mild = {"hit": runs(0.60, 0.61, 0.62), "clean": clean}
    assert "| holds |" in claim_row(["hit", "<", "clean"], mild, "test_acc", 2.0, Path("x"))
    row = claim_row(["hit", "<", "clean"], mild, "test_acc", 2.0, Path("x"), by=20)
    assert "hit < clean (by >= 20)" in row and "A - B -11.00" in row and "| does not hold |" in row
    # -15, -20, -25: the interval (-20 +- 12.4) straddles -20
    assert "| inconclusive |" in claim_row(["hit", "<", "clean"], {"hit": runs(0.55, 0.52, 0.49), "clean": clean},
                                           "test_acc", 2.0, Path("x"), by=20)


def test_a_beside_row_prints_the_claims_numbers_with_no_verdict() -> None:
    """SOLO at FedAvg's budget (confirm_moon): A - B's numbers as a claim row has them, no verdict."""
    from reproduce import BESIDE, claim_row

    table = {"fedavg": runs(0.70, 0.72, 0.74), "solo": runs(0.40, 0.41, 0.42)}
    claimed = claim_row(["fedavg", ">", "solo", "paper"], table, "test_acc", 2.0, Path("x"))
    beside = claim_row(["fedavg", ">", "solo", "paper"], table, "test_acc", 2.0, Path("x"), judged=False)
    assert "| holds |" in claimed and beside.startswith("| fedavg vs solo (test_acc) | paper |")
    assert beside.split(" | ")[2] == claimed.split(" | ")[2]  # the same numbers: A - B +31.00 [...]
    assert f"| {BESIDE} |" in beside and "holds" not in beside


def test_rounds_to_reach_counts_a_run_that_never_reaches_one_past_its_last_round() -> None:
    from reproduce import rounds_claim_row, rounds_to_reach

    def run(*accs: float) -> dict:
        return {"history": [{"round": r + 1, "test_acc": a} for r, a in enumerate(accs)], "rounds_completed": len(accs)}

    moon = [run(0.2, 0.6, 0.7), run(0.5, 0.7, 0.7), run(0.2, 0.3, 0.4)]  # reach 0.6 at 2, 2, never
    assert rounds_to_reach(moon, "test_acc", 0.6).tolist() == [2, 2, 4]
    fedavg = [run(0.2, 0.3, 0.6), run(0.2, 0.4, 0.6), run(0.2, 0.3, 0.65)]  # 3, 3, 3
    row = rounds_claim_row(["rounds(moon)", "<", "rounds(fedavg)"], {"moon": moon, "fedavg": fedavg},
                           "test_acc", 0.6, Path("x"))
    assert "moon)" in row and "| inconclusive |" in row  # A - B = [-1, -1, +1]


def test_a_communication_ratio_is_judged_in_every_seed() -> None:
    from reproduce import ratio_row

    def uploads(*ups: float) -> list[dict]:
        return [{"comm": {"params_up": u, "params_new_test": 0.0}} for u in ups]

    table = {"lg": uploads(4.0, 6.0, 3.0), "fedavg": uploads(10.0, 10.0, 10.0)}  # ratios 0.4, 0.6, 0.3
    assert "| inconclusive |" in ratio_row(["lg", "fedavg", "params_up+params_new_test", "0.55"], table, Path("x"))
    assert "| holds |" in ratio_row(["lg", "fedavg", "params_up+params_new_test", "0.6"], table, Path("x"))
    assert "| does not hold |" in ratio_row(["lg", "fedavg", "params_up", "0.25"], table, Path("x"))
