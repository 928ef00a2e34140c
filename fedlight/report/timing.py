"""Virtual time in a report (docs/time.md): how long each group's runs took on the clock, and how long they
took to reach a target accuracy.

A run has a clock where every history row holds ``virtual_seconds`` (cumulative, at the end of the round or
asynchronous server step); a run without one (``clock.devices: none``, or from before the clock) gets no
virtual time, and a group only where all its runs have one. Per run: its virtual hours (the last row's),
its idle share (the last row's: cumulative), the staleness of every update an asynchronous server applied
(``staleness``, a list per row), and the hours to reach a target: the ``virtual_seconds`` of its first
evaluation whose value reaches the target (at or above it; at or below it where lower is better), else
censored at its last evaluation's (``> X``), with no number invented for it. A seed run more than once
counts once: the mean of its runs' times, censored where one of its runs is (at the mean of their times
and horizons, a lower bound of that mean).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from fedlight.errors import UserError
from fedlight.eval import metric_names
from fedlight.report.arm_groups import Group, group_label
from fedlight.report.runs import Run
from fedlight.report.tables import finite, markdown_table, md_cell

HOUR = 3600.0


@dataclass(frozen=True)
class Reach:
    """When a run (or a seed's runs) reached a target: ``hours`` of virtual time, or, ``censored``, the hours
    at which it stopped looking without reaching it (it needs more)."""

    hours: float
    censored: bool

    def text(self) -> str:
        """``'1.20'``, or ``'> 2.00'`` where censored."""
        return f"> {hours_text(self.hours)}" if self.censored else hours_text(self.hours)


@dataclass(frozen=True)
class Target:
    """A metric's target (a fraction, as results.json holds it) and where it comes from, for a reader."""

    value: float
    source: str

    def text(self) -> str:
        return f"{100 * self.value:.2f}%"


def hours_text(hours: float, like: float | None = None) -> str:
    """Hours with 2 decimals from 1 up, 3 significant digits below (a quick run lasts seconds):
    ``'1.20'``, ``'0.00166'``; ``like`` chooses the decimals (an sd is shown as its mean is)."""
    scale = abs(hours if like is None else like)
    decimals = 2 if scale >= 1 or scale == 0 else min(8, 2 - math.floor(math.log10(scale)))
    return f"{hours:.{decimals}f}"


def clocked(run: Run) -> bool:
    """Whether every row of the run's history has a finite ``virtual_seconds`` (and it has rows)."""
    history = run.results["history"]
    return bool(history) and all(finite(row.get("virtual_seconds")) for row in history)


def asynchronous(run: Run) -> bool:
    """Whether the run's server stepped asynchronously (its rows list the staleness of the updates applied)."""
    return any(isinstance(row.get("staleness"), list) for row in run.results["history"])


def group_clocked(group: Group) -> bool:
    return all(clocked(r) for r in group[1])


def run_reach(run: Run, metric: str, target: float) -> Reach | None:
    """When ``run`` first reached ``target`` on ``metric`` (censored at its last evaluation where it never
    did); None where no evaluation has a finite value of it."""
    lower = metric_names.lower_is_better(metric)
    evaluated = [(row["virtual_seconds"] / HOUR, value) for row in run.results["history"]
                 if finite(value := run.named(row).get(metric))]
    if not evaluated:
        return None
    reached = next((h for h, v in evaluated if (v <= target if lower else v >= target)), None)
    return Reach(evaluated[-1][0], True) if reached is None else Reach(reached, False)


def seed_reaches(runs: list[Run], metric: str, target: float) -> dict[int, Reach]:
    """Seed -> when its runs reached ``target`` (the mean over a seed's runs, censored where one of them is),
    in seed order; seeds without an evaluation of ``metric`` left out."""
    found: dict[int, list[Reach]] = {}
    for run in runs:
        reach = run_reach(run, metric, target)
        if reach is not None:
            found.setdefault(run.seed, []).append(reach)
    return {seed: Reach(statistics.fmean(r.hours for r in reaches), any(r.censored for r in reaches))
            for seed, reaches in sorted(found.items())}


def reach_cell(reaches: dict[int, Reach]) -> str:
    """A group's hours to reach: ``'1.20 ± 0.10'`` where every seed reached it (mean ± sample sd), else each
    seed's in seed order, ``'2 of 3: 1.10, 1.30, > 2.00'``; ``'-'`` without a value."""
    if not reaches:
        return "-"
    values = [r.hours for r in reaches.values()]
    if not any(r.censored for r in reaches.values()):
        mean = statistics.fmean(values)
        return hours_text(mean) + (f" ± {hours_text(statistics.stdev(values), mean)}" if len(values) > 1 else "")
    reached = sum(not r.censored for r in reaches.values())
    return f"{reached} of {len(reaches)}: " + ", ".join(r.text() for r in reaches.values())


def seed_values(runs: list[Run], value: Any) -> list[float]:
    """``value(run)`` per seed (the mean of the seed's runs), in seed order."""
    by_seed: dict[int, list[float]] = {}
    for run in runs:
        by_seed.setdefault(run.seed, []).append(value(run))
    return [statistics.fmean(v) for _, v in sorted(by_seed.items())]


def mean_sd(values: list[float], percent: bool = False) -> str:
    """``'1.20 ± 0.10'`` in hours (``percent``: ``'36.45 ± 1.00'``), one value alone."""
    mean = statistics.fmean(values)
    if percent:
        return f"{100 * mean:.2f}" + (f" ± {100 * statistics.stdev(values):.2f}" if len(values) > 1 else "")
    return hours_text(mean) + (f" ± {hours_text(statistics.stdev(values), mean)}" if len(values) > 1 else "")


def idle_cell(runs: list[Run]) -> str:
    """The runs' idle share at their end (cumulative), mean ± sd over seeds in %; ``'-'`` where a run has none."""
    if any(not finite(r.results["history"][-1].get("idle_share")) for r in runs):
        return "-"
    return mean_sd(seed_values(runs, lambda r: r.results["history"][-1]["idle_share"]), percent=True)


def staleness(runs: list[Run]) -> tuple[str, str]:
    """(mean, max) staleness of the updates the runs' server applied: the mean over seeds of each seed's mean
    over its applied updates, and the largest; ``'-'`` where none was applied."""
    taus = {r.seed: [] for r in runs}
    for run in runs:
        taus[run.seed] += [t for row in run.results["history"] for t in row.get("staleness") or []]
    means = [statistics.fmean(t) for t in taus.values() if t]
    if not means:
        return "-", "-"
    return f"{statistics.fmean(means):.2f}", str(max(max(t) for t in taus.values() if t))


def parse_targets(texts: list[str] | None, metrics: list[str]) -> dict[str, float]:
    """``--target knn_acc=45`` (percent, as the report shows it) -> ``{'knn_acc@1': 0.45}``: each metric the
    name selects (``linear_probe_acc``: every label fraction), checked against ``metrics``."""
    out: dict[str, float] = {}
    for text in texts or []:
        name, sep, value = text.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not (math.isfinite(number) and 0 <= number <= 100):
            raise UserError(f"--target {text}: a target is METRIC=PERCENT, a number from 0 to 100 as the report "
                            "shows accuracies (e.g. --target knn_acc=45)")
        chosen = [m for m in metrics if metric_names.matches(m, name.strip())]
        if not chosen:
            raise UserError(f"--target {text}: no finished run measured {name.strip()}; choose from "
                            f"{', '.join(metrics) or 'none'}")
        out.update(dict.fromkeys(chosen, number / 100))
    return out


def tracked(groups: list[Group], metrics: list[str]) -> list[str]:
    """The ``metrics`` some run's history has a value of (a final-only one has no time to reach); a label-free
    reading has no target in percent to reach."""
    return [m for m in metrics if not metric_names.is_reading(m)
            and any(r.named(row).get(m) is not None for _, g in groups for r in g for row in r.results["history"])]


def target_text(metric: str, targets: list[Target | None], names: list[str]) -> str:
    """``'kNN, 100% labels 42.00% (`base`'s mean final)'``; where groups have different targets (arms over a
    grid, each against its cell's reference), each with the groups it holds for."""
    found: dict[Target | None, list[str]] = {}
    for target, name in zip(targets, names):
        found.setdefault(target, []).append(f"`{name}`")
    if list(found) == [None]:
        return f"{metric_names.title(metric)}: none (no final value in the reference)"
    parts = [("none" if t is None else f"{t.text()} ({t.source})") + (f" for {', '.join(n)}" if len(found) > 1 else "")
             for t, n in found.items()]
    return f"{metric_names.title(metric)} {'; '.join(parts)}"


def time_lines(groups: list[Group], keys: list[str], targets: dict[str, list[Target | None]]) -> list[str]:
    """report.md's section on virtual time, where some group has a clock (else none): per clocked group its
    virtual hours, idle share, staleness (asynchronous groups) and hours to reach each metric's target
    (``targets``: per metric, one per group)."""
    timed = [i for i, group in enumerate(groups) if group_clocked(group)]
    if not timed:
        return []
    names = [group_label(keys, values) for values, _ in groups]
    late = any(asynchronous(r) for i in timed for r in groups[i][1])
    header = [*keys, "seeds", "virtual hours", "idle share (%)", *(["staleness mean", "staleness max"] if late else []),
              *(f"hours to reach {metric_names.title(m)}" for m in targets)]
    rows = []
    for i in timed:
        values, runs = groups[i]
        reaches = [reach_cell(seed_reaches(runs, m, goals[i].value)) if goals[i] else "-"
                   for m, goals in targets.items()]
        rows.append([*map(md_cell, values), str(len({r.seed for r in runs})),
                     mean_sd(seed_values(runs, lambda r: r.results["history"][-1]["virtual_seconds"] / HOUR)),
                     idle_cell(runs),
                     *(staleness(runs) if late else ()), *reaches])
    lines = ["## Virtual time", "",
             "Virtual hours: the clock's time at each run's end (its last round or server step), mean ± sample std "
             "over seeds; idle share: the share of the clients' time spent waiting, as the clock counts it "
             "(docs/time.md), the same"
             + ("; staleness (asynchronous servers): server steps between a client's download and the step that "
                "applied its update, over the updates applied (the mean over seeds of each seed's mean, and the "
                "largest)" if late else "")
             + ". Hours to reach: the virtual hours at a run's first evaluation at or above the target (at or "
             "below, where lower is better), mean ± sample std over seeds where every seed reached it, else each "
             "seed's in seed order, `> X` where it never did (censored at its last evaluation, X hours). "
             "Accuracy against virtual hours: the `_vs_hours` plots.", ""]
    if targets:
        lines += ["Targets (`--target METRIC=PERCENT` sets one, else the reference's mean final value): "
                  + "; ".join(target_text(m, goals, names) for m, goals in targets.items()) + ".", ""]
    lines += markdown_table(header, rows) + [""]
    untimed = [f"`{names[i]}`" for i in range(len(groups)) if i not in timed]
    if untimed:
        lines += [f"- {', '.join(untimed)}: no virtual clock in every run (`clock.devices: none`, or runs from "
                  "before the clock): no row.", ""]
    return lines
