"""Verdict rules for REPRODUCTION.md, rule v2 (2026-11-25), fixed before the confirmatory runs.

A claim compares two sides A and B run on the same seeds, paired by seed (seed k of A against
seed k of B), on one metric in points (%):

- ``A > B`` (``A < B``): **holds** if the 95% Student-t interval of mean(A - B) excludes 0
  with the paper's sign; **does not hold** if it excludes 0 with the other sign; otherwise
  **inconclusive**.
- ``A ~ B`` (the paper: "within ``margin`` points"): **holds** if the interval lies inside
  [-margin, margin]; **does not hold** if it lies wholly outside it; otherwise inconclusive.
- Fewer than ``MIN_SEEDS`` seeds is an error, not a verdict.

Every row has a measured **floor**: the same metric of the random-init model of the same seeds
(for an AUC without one, chance, 50). A setting can show a claim only if training moves the rows
well above their floors: ``signal = mean over the rows of (row mean - row floor) / spread``,
with ``spread`` the seed-to-seed standard deviation pooled over the rows the claim reads (A and
B, or the four rows of a difference of differences). Below ``MIN_SIGNAL`` an interval that
would say **holds**, or **does not hold**, is inconclusive: the comparison would sit in the
floor's noise (until 2026-11-27 this sentence named only "holds", though the code has always
done both; rule v3, ``rule_v3.py``, has no such gate). But a row
that ends **at or below its own floor** has not trained as the paper says it does: it is
named (``Comparison.collapsed``), and an interval wholly on the wrong side then says **does not
hold** whatever the signal (v1 called FLESD at alpha 0.01, below its floor, "inconclusive").

Hand-judged claims get rules of the same shape (``reproduce.py``): rounds to reach a target
are per-seed values (a run that never reaches it counts one round past the last) judged by the
interval; a communication ratio is judged against a threshold in every seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

MIN_SIGNAL = 5.0
MIN_SEEDS = 3
OPS = (">", "<", "~")


@dataclass(frozen=True)
class Comparison:
    """A - B over paired seeds, in points.

    Attributes:
        mean: mean of the per-seed differences A - B.
        low: lower end of the 95% t-interval of that mean.
        high: upper end.
        spread: the seed std pooled over the rows the claim reads.
        signal: mean lift of those rows over their floors / ``spread`` (inf when the std is 0;
            None without floors).
        collapsed: indices (into the rows) of rows whose mean is at or below their floor.
    """

    mean: float
    low: float
    high: float
    spread: float
    signal: float | None
    collapsed: tuple[int, ...] = ()


def compare(a: Sequence[float], b: Sequence[float], floor: float | Sequence[float] | None,
            rows: Sequence[Sequence[float]] | None = None, level: float = 0.95) -> Comparison:
    """Paired comparison of per-seed values ``a`` and ``b`` (shape (S,), same seed order, S >= 3).

    Args:
        a, b: the claim's two sides, one value per seed.
        floor: each row's random-init value (a sequence, one per row), one value shared by
            every row, or None (no signal test, no collapse).
        rows: the measured rows behind ``a`` and ``b`` (each (S,)); default [a, b].
        level: the interval's coverage.

    Raises:
        ValueError: unequal or empty sides, or fewer than ``MIN_SEEDS`` seeds.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rows = [a, b] if rows is None else [np.asarray(r, dtype=float) for r in rows]
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"need two equal-length 1-d arrays of per-seed values, got {a.shape} and {b.shape}")
    n = len(a)
    if n < MIN_SEEDS:
        raise ValueError(f"a verdict needs at least {MIN_SEEDS} seeds, got {n}")
    diff = a - b
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * diff.std(ddof=1) / math.sqrt(n))
    spread = math.sqrt(np.mean([r.var(ddof=1) for r in rows]))
    signal, collapsed = None, ()
    if floor is not None:
        floors = np.broadcast_to(np.asarray(floor, dtype=float), (len(rows),))
        lifts = np.array([r.mean() for r in rows]) - floors
        gain = float(lifts.mean())
        signal = gain / spread if spread > 0 else (math.inf if gain > 0 else math.nan)
        collapsed = tuple(int(i) for i in np.flatnonzero(lifts <= 0))
    mean = float(diff.mean())
    return Comparison(mean, mean - half, mean + half, spread, signal, collapsed)


def interval_verdict(op: str, c: Comparison, margin: float = 2.0) -> str:
    """What the interval alone says of ``A op B``: holds, does not hold or inconclusive."""
    if op not in OPS:
        raise ValueError(f"claim operator must be one of {OPS}, got {op!r}")
    if op == "~":
        if -margin <= c.low and c.high <= margin:
            return "holds"
        return "does not hold" if c.low > margin or c.high < -margin else "inconclusive"
    sign = 1 if op == ">" else -1
    low, high = sorted((sign * c.low, sign * c.high))
    if low > 0:
        return "holds"
    return "does not hold" if high < 0 else "inconclusive"


def verdict(op: str, c: Comparison, margin: float = 2.0) -> str:
    """The rule's verdict for the claim ``A op B`` (see the module docstring)."""
    said = interval_verdict(op, c, margin)
    if c.signal is None or c.signal >= MIN_SIGNAL:  # nan counts as no signal
        return said
    if said == "does not hold" and c.collapsed:
        return "does not hold (a row at or below its random-init floor)"
    return f"inconclusive (signal {c.signal:.1f} < {MIN_SIGNAL:g}x spread)"


def seeds_needed(sd_diff: float, target: float, cap: int = 12, level: float = 0.95) -> int:
    """The power calculation: the fewest seeds n >= ``MIN_SEEDS`` whose expected interval
    half-width ``t(n - 1) * sd_diff / sqrt(n)`` is at most ``target`` points, capped at ``cap``.

    Args:
        sd_diff: the standard deviation of the per-seed differences A - B, measured in the
            exploratory runs.
        target: the half-width wanted: max(1 point, a third of the paper's effect).
    """
    for n in range(MIN_SEEDS, cap + 1):
        if stats.t.ppf(0.5 + level / 2, n - 1) * sd_diff / math.sqrt(n) <= target:
            return n
    return cap
