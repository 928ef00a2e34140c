"""The package's own checks on a report's groups (docs/sweeps.md, "Checks"), as rule v3 makes them
(benchmarks/REPRODUCTION.md; the numbers in ``fedlight.stats``):

- **did not train**: the lower end of the 95% interval of a group's per-seed lift (final value minus the
  same seed's random-init value) is under ``stats.MIN_LIFT`` points. Its comparisons get no verdict and
  leave the Holm family: being ahead of, or behind, a model that learnt nothing shows nothing. Not checked
  with fewer than ``stats.MIN_SEEDS`` seeds that have both values, or on a metric where lower is better
  (its floor is chance, which a report does not know). A metric no run has a random-init value of (a
  fine-tune's accuracy: the random init is not fine-tuned) takes the check of the group's test accuracy,
  linear probe and kNN: a group that did not train on one of them did not train on it either, so an
  encoder that learnt nothing gets no verdict on its fine-tunes.
- **not at a plateau**: the mean over seeds of the group's evaluations still gains ``stats.PLATEAU_GAIN``
  point or more over the last fifth of its rounds (``stats.plateau_gain``; round 0 is the random init):
  its verdicts may change with more rounds. Not checked where the group has no evaluation that far back.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from fedlight import stats
from fedlight.eval import metric_names
from fedlight.report.runs import Run
from fedlight.report.tables import finite, seed_means

UNTRAINED, RISING = "did not train", "not at a plateau"


@dataclass(frozen=True)
class Checks:
    """One group's checks on one metric.

    Attributes:
        lift: the per-seed lift over the random init (points); None where not checked.
        plateau: ``(start, end, gain)`` of the mean curve over its last fifth (points); None where not checked.
        sign: +1, or -1 where lower is better.
    """

    lift: stats.Paired | None
    plateau: tuple[int, int, float] | None
    sign: int = 1
    on: str | None = None  # the metric ``lift`` was read on, where not the checked one (it has no floor)

    @property
    def untrained(self) -> bool:
        return self.lift is not None and self.lift.low < stats.MIN_LIFT

    @property
    def rising(self) -> bool:
        return self.plateau is not None and not stats.at_plateau(self.plateau[2], self.sign)

    def flags(self) -> list[str]:
        """``['did not train', 'not at a plateau']``, those that fire."""
        return [UNTRAINED] * self.untrained + [RISING] * self.rising

    def notes(self, name: str, metric: str) -> list[str]:
        """A sentence per check that fires, with its numbers."""
        title, out = metric_names.title(metric), []
        if self.untrained:
            d = self.lift
            read = "" if self.on is None else (f" ({title} has no random-init value; read on "
                                                f"{metric_names.title(self.on)})")
            out.append(f"`{name}` did not train on {title}{read}: its lift over its random-init value is "
                       f"{d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}] points over {d.n} seeds, the interval's lower "
                       f"end under the {stats.MIN_LIFT:g} a group must gain: no verdict on it, and out of the Holm "
                       "family")
        if self.rising:
            start, end, gain = self.plateau
            out.append(f"`{name}` is not at a plateau on {title}: its mean moved {gain:+.2f} points from round "
                       f"{start} to round {end} (the last fifth of its rounds; a plateau moves under "
                       f"{stats.PLATEAU_GAIN:g}): the verdict may change with more rounds")
        return out


def group_checks(runs: list[Run], metric: str) -> Checks:
    """``runs``' (one group's) checks on ``metric`` (none on a label-free reading: the rules are in points)."""
    if metric_names.is_reading(metric):
        return Checks(None, None)
    lower = metric_names.lower_is_better(metric)
    if lower:
        return Checks(None, _plateau(runs, metric), -1)
    if any(finite(r.baseline.get(metric)) for r in runs):
        return Checks(_lift(runs, metric), _plateau(runs, metric))
    return _floorless(runs, metric)


def _floorless(runs: list[Run], metric: str) -> Checks:
    """The checks on a metric without a random-init value: untrained where the group is on the global model's
    test accuracy, linear probe or kNN (in that order, the report's), else none."""
    floors = {m for r in runs for m, v in r.baseline.items()
              if finite(v) and metric_names.split(m)[0] in (metric_names.TEST, *metric_names.LABELLED)}
    for other in metric_names.order(list(floors)):
        lift = _lift(runs, other)
        if lift is not None and lift.low < stats.MIN_LIFT:
            return Checks(lift, _plateau(runs, metric), on=other)
    return Checks(None, _plateau(runs, metric))


def _lift(runs: list[Run], metric: str) -> stats.Paired | None:
    finals, floors = seed_means(runs, metric), _seed_floors(runs, metric)
    seeds = [s for s in finals if s in floors]
    if len(seeds) < stats.MIN_SEEDS:
        return None
    return stats.lift([100 * finals[s] for s in seeds], [100 * floors[s] for s in seeds])


def _seed_floors(runs: list[Run], metric: str) -> dict[int, float]:
    """Seed -> the mean random-init value of its runs; seeds without a finite one left out."""
    values: dict[int, list[float]] = {}
    for run in runs:
        if finite(run.baseline.get(metric)):
            values.setdefault(run.seed, []).append(run.baseline[metric])
    return {seed: statistics.fmean(v) for seed, v in values.items()}


def _plateau(runs: list[Run], metric: str) -> tuple[int, int, float] | None:
    """The plateau rule on the mean over seeds at the rounds every seed evaluated (round 0: the random init)."""
    curves: dict[int, dict[int, list[float]]] = {}  # seed -> round -> its runs' values
    for run in runs:
        curve = curves.setdefault(run.seed, {})
        points = [(0, run.baseline.get(metric))] + [(row["round"], run.named(row).get(metric))
                                                      for row in run.results["history"]]
        for r, value in points:
            if finite(value):
                curve.setdefault(int(r), []).append(value)
    if not curves:
        return None
    rounds = set.intersection(*(set(c) for c in curves.values()))
    mean = {r: 100 * statistics.fmean(statistics.fmean(c[r]) for c in curves.values()) for r in rounds}
    return stats.plateau_gain(mean)
