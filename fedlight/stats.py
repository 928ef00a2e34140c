"""Paired comparisons over seeds: the statistics behind rule v3 (benchmarks/REPRODUCTION.md) and
the comparison a user asks of two arms.

Two arms run on the same seeds are compared seed by seed: ``d_s = a_s - b_s`` (shape (S,), in the
metric's points), so what a seed shares between arms (its partition, its initial model) cancels.
Everything here is a Student-t statement about ``mean(d)``; the seeds are the sample.

- ``paired``: the mean difference, its sd, its interval and one-sided p-values.
- ``directional`` (``A > B`` / ``A < B``): holds if the two-sided test rejects ``mean = 0`` with the
  claim's sign, does not hold if with the other sign (the 95% interval excludes 0).
- ``equivalence`` (``A ~ B`` within a margin fixed in advance): TOST, Schuirmann (1987): holds if both
  one-sided tests reject ``|mean| >= margin`` at ``alpha`` (the 90% interval lies inside the
  margin); does not hold if the interval at ``1 - alpha`` lies wholly outside it.
- ``holm``: Holm's (1979) step-down adjustment over a family of claims; a claim's adjusted
  verdict keeps its raw one only where the adjusted p-value is below ``alpha``.
- ``rounds_sign_test``: rounds to reach a target when some seeds never reach it (censored): an
  exact sign test on which arm got there first, which needs no value for a censored seed.
- ``times_sign_test``: the same for virtual times, where each run stops looking at its own time (a
  censored seed is only ordered where the other arm got there before it stopped looking).
- ``lift`` / ``trained``: a row's gain over its own random-init value, seed by seed; ``MIN_LIFT``, the
  least gain rule v3 lets a row count as trained with, is what ``fedlight report`` asks of every arm.
- ``plateau_gain`` / ``at_plateau``: rule v3's plateau rule (MOON's R): a mean curve that gains under
  ``PLATEAU_GAIN`` points over the last fifth of its rounds has stopped rising.
- ``seeds_needed``: the seeds whose interval reaches a half-width wanted (a precision target, not a
  power calculation), from an upper confidence bound on a pilot's sd.

scipy is used for the t, chi-square and binomial distributions; nothing here needs torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

MIN_SEEDS = 3  # a paired interval from fewer seeds is an error, not a verdict
MIN_PILOT_SEEDS = 5  # rule v3 sizes n only from pilots of at least this many seeds
HOLDS, FAILS, OPEN = "holds", "does not hold", "inconclusive"
# rule v3's least min_lift (points): a row trained only where the lower end of its lift's 95% interval is
# at least this (a block may fix a larger one from its pilot; fedlight report has no pilot and uses this)
MIN_LIFT = 2.0
# rule v3's plateau rule (REPRODUCTION.md, "v3 MOON pilot"): a mean curve that gains under this many points
# over the last fifth of its rounds (at least one round) has stopped rising
PLATEAU_GAIN = 1.0


@dataclass(frozen=True)
class Paired:
    """``mean(a - b)`` over ``n`` paired seeds.

    Attributes:
        n: seeds.
        mean: mean of the per-seed differences.
        sd: their sample standard deviation (ddof 1).
        low: lower end of the two-sided interval at ``level``.
        high: upper end.
        level: the interval's coverage (0.95 unless asked).
    """

    n: int
    mean: float
    sd: float
    low: float
    high: float
    level: float

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n)

    def p_above(self, x: float) -> float:
        """One-sided p-value against ``mean <= x`` (small when the mean is clearly above ``x``)."""
        if self.se == 0:
            return 0.0 if self.mean > x else 1.0
        return float(stats.t.sf((self.mean - x) / self.se, self.n - 1))

    def p_below(self, x: float) -> float:
        """One-sided p-value against ``mean >= x``."""
        if self.se == 0:
            return 0.0 if self.mean < x else 1.0
        return float(stats.t.cdf((self.mean - x) / self.se, self.n - 1))

    def at(self, level: float) -> tuple[float, float]:
        """The two-sided interval at another ``level``."""
        half = float(stats.t.ppf(0.5 + level / 2, self.n - 1)) * self.se
        return self.mean - half, self.mean + half


def paired(a: Sequence[float], b: Sequence[float] | float = 0.0, level: float = 0.95) -> Paired:
    """Compare ``a`` and ``b`` seed by seed (each shape (S,), the same seed order; ``b`` may be one
    number shared by every seed).

    Raises:
        ValueError: sides of different lengths, not 1-d, fewer than ``MIN_SEEDS`` seeds, or a
            value that is not finite.
    """
    a = np.asarray(a, dtype=float)
    b = np.broadcast_to(np.asarray(b, dtype=float), a.shape) if np.ndim(b) == 0 else np.asarray(b, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"need two equal-length 1-d arrays of per-seed values, got {a.shape} and {b.shape}")
    if len(a) < MIN_SEEDS:
        raise ValueError(f"a paired comparison needs at least {MIN_SEEDS} seeds, got {len(a)}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):  # a NaN would make every p NaN, read as "does not hold"
        raise ValueError("a per-seed value is not finite (NaN or inf); leave that seed out of both sides")
    d = a - b
    n, mean, sd = len(d), float(d.mean()), float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return Paired(n, mean, sd, mean - half, mean + half, level)


@dataclass(frozen=True)
class Test:
    """One claim's test: its verdict and the p-value that decides it (what Holm adjusts).

    Attributes:
        verdict: ``HOLDS``, ``FAILS`` or ``OPEN``.
        p: the p-value of the outcome reached (of the likelier one when inconclusive).
    """

    verdict: str
    p: float


def directional(d: Paired, sign: int, alpha: float = 0.05) -> Test:
    """``A > B`` (``sign`` +1) or ``A < B`` (-1) from ``d = paired(A, B)``: the two-sided test of
    ``mean = 0`` at ``alpha``; the sign of the mean says which way."""
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign}")
    p = min(1.0, 2 * min(d.p_above(0.0), d.p_below(0.0)))
    if p >= alpha:
        return Test(OPEN, p)
    return Test(HOLDS if sign * d.mean > 0 else FAILS, p)


def equivalence(d: Paired, margin: float, alpha: float = 0.05) -> Test:
    """``A ~ B`` within ``margin`` points (fixed before the runs) by TOST at ``alpha``."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be > 0, got {margin}")
    p_inside = max(d.p_above(-margin), d.p_below(margin))
    p_outside = min(1.0, 2 * min(d.p_above(margin), d.p_below(-margin)))
    if p_inside < alpha:
        return Test(HOLDS, p_inside)
    if p_outside < alpha:
        return Test(FAILS, p_outside)
    return Test(OPEN, min(p_inside, p_outside))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (shape (K,), the input's order): the k-th smallest p times
    ``K - k + 1``, made non-decreasing and capped at 1. Reject where the adjusted p is below alpha;
    this keeps the chance of any false "holds" or "does not hold" in the family below alpha."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    adjusted = np.empty_like(p)
    adjusted[order] = scaled
    return adjusted


def adjusted_verdicts(tests: Sequence[Test], alpha: float = 0.05) -> list[str]:
    """Each test's verdict after Holm over the family ``tests``: kept where its adjusted p-value is
    below ``alpha``, else inconclusive."""
    adjusted = holm([t.p for t in tests])
    return [t.verdict if p < alpha else OPEN for t, p in zip(tests, adjusted)]


@dataclass(frozen=True)
class SignTest:
    """Which arm reached a target first, seed by seed.

    Attributes:
        a_first: seeds where A reached it in fewer rounds (or B never did).
        b_first: seeds where B did.
        ties: seeds with equal rounds, both never included.
        p: the exact two-sided binomial p-value of ``a_first`` among the untied seeds.
    """

    a_first: int
    b_first: int
    ties: int
    p: float


def rounds_sign_test(a: Sequence[float], b: Sequence[float]) -> SignTest:
    """Rounds to reach a target per seed for arms A and B, ``math.inf`` where a run never reached it
    (censored at its last round): a censored seed still says which arm got there first, so no
    number is invented for it, as a t interval on censored integers would."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two equal-length 1-d arrays of per-seed rounds, got {a.shape} and {b.shape}")
    a_first, b_first = int((a < b).sum()), int((b < a).sum())
    untied = a_first + b_first
    p = float(stats.binomtest(a_first, untied, 0.5).pvalue) if untied else 1.0
    return SignTest(a_first, b_first, len(a) - untied, p)


@dataclass(frozen=True)
class TimeSignTest(SignTest):
    """``SignTest`` on times that each run censors at its own horizon.

    Attributes:
        unordered: seeds that say nothing about which arm was first (both censored, or one censored
            before the other's time), left out of the test like ties.
    """

    unordered: int = 0


def times_sign_test(a: Sequence[float], b: Sequence[float], a_censored: Sequence[bool],
                    b_censored: Sequence[bool]) -> TimeSignTest:
    """Times to reach a target per seed for arms A and B (each shape (S,)), where ``*_censored`` marks a
    run that never reached it and its time is where it stopped looking (its last evaluation: it would
    have needed more). A seed counts for A where A reached it and earlier than B (B's time, or B's
    horizon where B never did: ``a <= b`` then suffices); for B likewise; equal reached times tie; the
    rest are unordered. With one horizon for every run (rounds) this is ``rounds_sign_test``, except
    that a seed neither reached is unordered rather than a tie; no time is invented for a censored seed."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ca, cb = np.asarray(a_censored, dtype=bool), np.asarray(b_censored, dtype=bool)
    if a.ndim != 1 or not a.shape == b.shape == ca.shape == cb.shape:
        raise ValueError(f"need four equal-length 1-d arrays of per-seed times and flags, got {a.shape}, {b.shape}, "
                         f"{ca.shape} and {cb.shape}")
    a_first = int((~ca & ((~cb & (a < b)) | (cb & (a <= b)))).sum())
    b_first = int((~cb & ((~ca & (b < a)) | (ca & (b <= a)))).sum())
    ties = int((~ca & ~cb & (a == b)).sum())
    untied = a_first + b_first
    p = float(stats.binomtest(a_first, untied, 0.5).pvalue) if untied else 1.0
    return TimeSignTest(a_first, b_first, ties, p, len(a) - untied - ties)


def sign_verdict(s: SignTest, sign: int, alpha: float = 0.05) -> Test:
    """``rounds(A) < rounds(B)`` (``sign`` +1: A first) or ``>`` (-1) from ``rounds_sign_test``."""
    if s.p >= alpha:
        return Test(OPEN, s.p)
    return Test(HOLDS if sign * (s.a_first - s.b_first) > 0 else FAILS, s.p)


def lift(values: Sequence[float], floors: Sequence[float] | float, level: float = 0.95) -> Paired:
    """A row's per-seed gain over its own random-init value (or over a reference such as chance)."""
    return paired(values, floors, level)


def trained(values: Sequence[float], floors: Sequence[float] | float, min_lift: float = MIN_LIFT,
            level: float = 0.95) -> bool:
    """Whether a row the paper expects to learn did: the lower end of its lift's interval is at
    least ``min_lift`` points (a number fixed before the runs, not the runs' own spread)."""
    return lift(values, floors, level).low >= min_lift


def plateau_gain(curve: dict[int, float]) -> tuple[int, int, float] | None:
    """The plateau rule's look back on a mean curve (round -> value in points, round 0 the random init):
    ``(start, end, gain)`` from the last round at or before ``end - max(1, end // 5)`` (the last fifth of
    the ``end`` rounds) to the last round ``end``; None without a round that far back."""
    if not curve:
        return None
    end = max(curve)
    earlier = [r for r in curve if r <= end - max(1, end // 5)]
    if not earlier:
        return None
    start = max(earlier)
    return start, end, curve[end] - curve[start]


def at_plateau(gain: float, sign: int = 1) -> bool:
    """Whether a curve that gained ``gain`` points over its last fifth has stopped rising: under
    ``PLATEAU_GAIN`` in the better direction (``sign`` -1 where lower is better)."""
    return sign * gain < PLATEAU_GAIN


def sd_upper(sd: float, n: int, confidence: float = 0.8) -> float:
    """An upper confidence bound on a standard deviation measured on ``n`` seeds: the chi-square
    bound ``sd * sqrt((n - 1) / chi2.ppf(1 - confidence, n - 1))``."""
    if n < 2:
        raise ValueError(f"an sd bound needs at least 2 seeds, got {n}")
    return sd * math.sqrt((n - 1) / float(stats.chi2.ppf(1 - confidence, n - 1)))


def seeds_needed(sd: float, target: float, level: float = 0.95, cap: int = 1000) -> int | None:
    """The fewest seeds ``n >= MIN_SEEDS`` whose interval half-width ``t(n - 1) * sd / sqrt(n)`` is at
    most ``target``; None when more than ``cap`` would be needed."""
    if not target > 0:
        raise ValueError(f"the half-width wanted must be > 0, got {target}")
    for n in range(MIN_SEEDS, cap + 1):
        if float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n) <= target:
            return n
    return None


def seeds_from_pilot(differences: Sequence[float], target: float, confidence: float = 0.8,
                     level: float = 0.95, cap: int = 1000) -> int | None:
    """Rule v3's n for a claim: ``seeds_needed`` at the upper ``confidence`` bound of the sd of a
    pilot's per-seed differences (at least ``MIN_PILOT_SEEDS`` seeds, none of them a verdict seed)."""
    d = np.asarray(differences, dtype=float)
    if len(d) < MIN_PILOT_SEEDS:
        raise ValueError(f"rule v3 sizes n from pilots of at least {MIN_PILOT_SEEDS} seeds, got {len(d)}")
    return seeds_needed(sd_upper(float(d.std(ddof=1)), len(d), confidence), target, level, cap)


def seeds_to_decide(d: Paired, cap: int = 1000) -> int | None:
    """About how many seeds would make ``d``'s interval exclude 0 if its mean and sd stayed as
    measured (what a user is told when a comparison cannot tell yet); None for a zero mean or
    more than ``cap``."""
    if d.mean == 0:
        return None
    return seeds_needed(d.sd, abs(d.mean), d.level, cap)
