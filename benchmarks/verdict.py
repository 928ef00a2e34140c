"""Verdict rules for REPRODUCTION.md, fixed before any run (issue 18).

A claim compares two rows A and B run on the same seeds, paired by seed (seed k of A against
seed k of B), on one metric in points (%):

- ``A > B`` (``A < B``): **holds** if the 95% Student-t interval of mean(A - B) excludes 0
  with the paper's sign; **does not hold** if it excludes 0 with the other sign; otherwise
  **inconclusive**.
- ``A ~ B`` (the paper: "within ``margin`` points"): **holds** if the interval lies inside
  [-margin, margin]; **does not hold** if it lies wholly outside it; otherwise inconclusive.

A setting can show a claim only if training moves the encoder well above its random-init
floor: ``signal = (mean of the rows - floor) / spread``, with ``spread`` the seed-to-seed
standard deviation pooled over the rows the claim reads (A and B, or the four rows of a
difference of differences such as "supervised loses more than SimCLR from alpha 100 to 0.01"). Below ``MIN_SIGNAL`` the verdict is inconclusive
whatever the interval says: the comparison would sit in the floor's noise. A metric with no
random-init value (an adversary's AUC) has no floor and no signal test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_SIGNAL = 5.0
OPS = (">", "<", "~")


@dataclass(frozen=True)
class Comparison:
    """A - B over paired seeds, in points.

    Attributes:
        mean: mean of the per-seed differences A - B.
        low: lower end of the 95% t-interval of that mean (-inf with one seed).
        high: upper end (+inf with one seed).
        spread: the seed std pooled over the rows the claim reads (nan with one seed).
        signal: (mean of A and B - floor) / ``spread`` (inf when the std is 0; None
            without a floor).
    """

    mean: float
    low: float
    high: float
    spread: float
    signal: float | None


def compare(a: np.ndarray, b: np.ndarray, floor: float | None, rows: list[np.ndarray] | None = None,
            level: float = 0.95) -> Comparison:
    """Paired comparison of per-seed values ``a`` and ``b`` (shape (S,), same seed order).

    Args:
        a, b: the claim's two sides, one value per seed.
        floor: the metric's random-init value (None: no signal test).
        rows: the measured rows behind ``a`` and ``b`` (each (S,)) for the signal; default [a, b].
        level: the interval's coverage.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rows = [a, b] if rows is None else [np.asarray(r, dtype=float) for r in rows]
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"need two equal-length 1-d arrays of per-seed values, got {a.shape} and {b.shape}")
    diff = a - b
    n = len(diff)
    half = math.inf
    if n > 1:
        half = float(stats.t.ppf(0.5 + level / 2, n - 1) * diff.std(ddof=1) / math.sqrt(n))
    spread = math.sqrt(np.mean([r.var(ddof=1) for r in rows])) if n > 1 else math.nan
    signal = None
    if floor is not None:
        gain = float(np.concatenate(rows).mean() - floor)
        signal = gain / spread if spread > 0 else (math.inf if gain > 0 else math.nan)
    mean = float(diff.mean())
    return Comparison(mean, mean - half, mean + half, spread, signal)


def verdict(op: str, c: Comparison, margin: float = 2.0) -> str:
    """The rule's verdict for the claim ``A op B`` (see the module docstring)."""
    if op not in OPS:
        raise ValueError(f"claim operator must be one of {OPS}, got {op!r}")
    if c.signal is not None and not c.signal >= MIN_SIGNAL:  # nan counts as no signal
        return f"inconclusive (signal {c.signal:.1f} < {MIN_SIGNAL:g}x spread)"
    if op == "~":
        if -margin <= c.low and c.high <= margin:
            return "holds"
        return "does not hold" if c.low > margin or c.high < -margin else "inconclusive"
    sign = 1 if op == ">" else -1
    low, high = sorted((sign * c.low, sign * c.high))
    if low > 0:
        return "holds"
    return "does not hold" if high < 0 else "inconclusive"
