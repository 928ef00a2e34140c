"""fedlight.stats (rule v3's statistics) on hand-computed cases.

With 2 degrees of freedom Student's t has a closed form, cdf(t) = 1/2 + t / (2 sqrt(2 + t^2)),
so the three-seed cases below are computed by hand, not by the scipy calls the module makes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlight import stats

T_975_2 = 4.302652729911275  # t(0.975, 2 df)


def t2_sf(t: float) -> float:
    """Student t's upper tail at 2 degrees of freedom, by its closed form."""
    return 0.5 - t / (2 * math.sqrt(2 + t * t))


def test_paired_interval_and_p_values_by_hand() -> None:
    d = stats.paired([3, 4, 5], [1, 1, 1])  # differences 2, 3, 4: mean 3, sd 1
    half = T_975_2 / math.sqrt(3)
    assert (d.n, d.mean, d.sd) == (3, 3, 1)
    assert (d.low, d.high) == pytest.approx((3 - half, 3 + half))
    assert d.p_above(0) == pytest.approx(t2_sf(3 * math.sqrt(3)))  # 0.01758
    assert d.p_below(0) == pytest.approx(1 - t2_sf(3 * math.sqrt(3)))
    assert d.at(0.9) == pytest.approx((3 - 2.919985580 / math.sqrt(3), 3 + 2.919985580 / math.sqrt(3)))


def test_paired_refuses_unpaired_or_too_few_seeds() -> None:
    with pytest.raises(ValueError, match="at least 3 seeds"):
        stats.paired([1.0, 2.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="equal-length"):
        stats.paired([1.0, 2.0, 3.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="not finite"):  # NaN p-values would read as "does not hold"
        stats.paired([1.0, 2.0, math.nan], [0.0, 0.0, 0.0])


def test_directional_verdicts_and_their_p_value() -> None:
    d = stats.paired([3, 4, 5], [1, 1, 1])
    p = 2 * t2_sf(3 * math.sqrt(3))  # 0.0352
    assert stats.directional(d, +1) == stats.Test(stats.HOLDS, pytest.approx(p))
    assert stats.directional(d, -1) == stats.Test(stats.FAILS, pytest.approx(p))
    assert stats.directional(d, +1, alpha=0.01).verdict == stats.OPEN  # 0.035 is not below 0.01
    across = stats.paired([1, 3, 2], [2, 2, 2])  # differences -1, 1, 0
    assert stats.directional(across, +1) == stats.Test(stats.OPEN, 1.0)


def test_zero_spread_decides_by_the_sign_alone() -> None:
    d = stats.paired([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (d.p_above(0), d.p_below(0)) == (0.0, 1.0)
    assert stats.directional(d, +1).verdict == stats.HOLDS


def test_equivalence_is_tost_at_the_margin() -> None:
    near = stats.paired([10.0, 10.5, 11.0], [10.2, 10.4, 10.9])  # -0.2, 0.1, 0.1: mean 0, se 0.1
    test = stats.equivalence(near, margin=2)
    assert test.verdict == stats.HOLDS
    assert test.p == pytest.approx(t2_sf(20.0))  # both one-sided tests at t = 2 / 0.1
    # inside a 0.05 margin the 90% interval (half-width 2.92 x 0.1) does not fit
    assert stats.equivalence(near, margin=0.05).verdict == stats.OPEN
    far = stats.paired([20.0, 20.5, 21.0], [10.2, 10.4, 10.9])
    assert stats.equivalence(far, margin=2).verdict == stats.FAILS
    with pytest.raises(ValueError, match="margin"):
        stats.equivalence(near, margin=0)


def test_equivalence_holds_where_the_90_percent_interval_fits_though_the_95_does_not() -> None:
    d = stats.paired([0.0, 1.0, 2.0], [0.0, 0.0, 0.0])  # mean 1, sd 1, se 1/sqrt(3)
    low90, high90 = d.at(0.90)
    margin = high90 + 0.01  # 90% interval inside [-margin, margin], the 95% one is not
    assert d.high > margin
    assert stats.equivalence(d, margin).verdict == stats.HOLDS


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04 -> x3 0.03, x2 0.06, x1 0.04 -> running max 0.03, 0.06, 0.06
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    tests = [stats.Test(stats.HOLDS, 0.01), stats.Test(stats.FAILS, 0.04), stats.Test(stats.HOLDS, 0.03)]
    assert stats.adjusted_verdicts(tests) == [stats.HOLDS, stats.OPEN, stats.OPEN]


def test_holm_never_adjusts_below_the_raw_p() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(size=20)
    adjusted = stats.holm(p)
    assert (adjusted >= p).all() and (adjusted <= 1).all()
    assert (np.diff(adjusted[np.argsort(p)]) >= 0).all()


def test_rounds_sign_test_counts_censored_seeds_without_a_number() -> None:
    inf = math.inf
    s = stats.rounds_sign_test([3, inf, 5, inf], [4, 6, inf, inf])
    assert (s.a_first, s.b_first, s.ties) == (2, 1, 1)
    assert s.p == pytest.approx(1.0)  # 2 of 3: P(X <= 1) + P(X >= 2) under Bin(3, 1/2)
    six = stats.rounds_sign_test([5] * 6, [inf] * 6)
    assert six.p == pytest.approx(2 / 64)
    assert stats.sign_verdict(six, +1) == stats.Test(stats.HOLDS, pytest.approx(2 / 64))
    assert stats.sign_verdict(six, -1).verdict == stats.FAILS
    assert stats.rounds_sign_test([inf] * 3, [inf] * 3).p == 1.0


def test_trained_uses_the_lower_end_of_the_lift() -> None:
    values, floors = [20.0, 21.0, 22.0], [10.0, 10.0, 10.0]  # lift 10, 11, 12: low 11 - 2.48
    assert stats.trained(values, floors, min_lift=8.5)
    assert not stats.trained(values, floors, min_lift=8.6)
    # SOLO-like: 1.2 points over its floor is not a row that trained at a 5-point minimum
    assert not stats.trained([11.5, 12.0, 10.9, 11.8], 10.3, min_lift=5)


def test_power_by_hand() -> None:
    # sd 1, half-width 1: n = 6 gives 2.571 / 2.449 = 1.05, n = 7 gives 2.447 / 2.646 = 0.92
    assert stats.seeds_needed(1.0, 1.0) == 7
    assert stats.seeds_needed(1.0, 0.001, cap=50) is None
    # chi-square(4) 20% quantile 1.6488: the bound is sqrt(4 / 1.6488) = 1.5576 x sd
    assert stats.sd_upper(1.0, 5) == pytest.approx(1.5576, abs=1e-4)
    d = [0.0, 1.0, 2.0, 1.0, 1.0]  # sd sqrt(0.5)
    assert stats.seeds_from_pilot(d, 1.0) == stats.seeds_needed(stats.sd_upper(math.sqrt(0.5), 5), 1.0)
    with pytest.raises(ValueError, match="at least 5 seeds"):
        stats.seeds_from_pilot([0.0, 1.0, 2.0], 1.0)


def test_seeds_to_decide_a_comparison_that_cannot_tell_yet() -> None:
    d = stats.paired([1.0, 0.0, 2.0], [0.0, 0.0, 0.0])  # mean 1, sd 1: interval crosses 0
    assert d.low < 0
    assert stats.seeds_to_decide(d) == 7  # as test_power_by_hand
    assert stats.seeds_to_decide(stats.paired([1.0, -1.0, 0.0], 0.0)) is None
