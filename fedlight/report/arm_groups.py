"""Which runs belong together: the recipe keys that define an experiment, arms, and group names.

Runs are grouped by the recipe keys that define what was measured, never by how it was run:
the seed (the sample), ``fabric.*`` (devices, threads, workers; not ``fabric.precision``, whose 16-bit
arithmetic changes the numbers), ``run.*`` (folder, state
store, budgets), where the data lives (``data.root``, ``data.download``) and where the scalars
go (``loggers``). Runs whose
recipes carry a top-level ``arm`` (a sweep's arms) are grouped by it, and by any experiment
key that still varies inside an arm. A group is named by its values as a reader says them
(``alpha = 0.1``; an arm by its name), leaving out every key its recipe does not define: a
BYOL arm has no ``method.temperature``, so it shows none, not ``temperature = None``.
"""

from __future__ import annotations

from typing import Any, Callable

from fedlight.errors import UserError
from fedlight.report.runs import Run, varying_keys

ARM = "arm"
# how a run executed, not what it measured: runs that differ only here are one arm
EXECUTION_KEYS = ("seed", "data.root", "data.download", "loggers")
EXECUTION_SECTIONS = ("fabric.", "run.")
NUMERICS = ("fabric.precision",)  # an execution key that changes what is measured: 16-bit runs are not repeats

Group = tuple[tuple[Any, ...], list[Run]]


class _Absent:
    """The value of a grouping key that a group's recipe does not define."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


def experiment_keys(runs: list[Run]) -> list[str]:
    """The recipe keys that vary between ``runs`` and define the experiment (execution settings excepted)."""
    return [k for k in varying_keys(runs)
            if k in NUMERICS or (k not in EXECUTION_KEYS and not k.startswith(EXECUTION_SECTIONS))]


def default_keys(runs: list[Run]) -> list[str]:
    """``arm`` and the experiment keys that vary inside an arm where every run names its arm, else
    the experiment keys that vary."""
    if not runs or not all(r.keys.get(ARM) is not None for r in runs):  # a run outside a sweep's arms records none
        return experiment_keys(runs)
    arms: dict[Any, list[Run]] = {}
    for run in runs:
        arms.setdefault(repr(run.keys[ARM]), []).append(run)
    inside = dict.fromkeys(k for members in arms.values() for k in experiment_keys(members))
    return [ARM, *inside]


def grouping_keys(runs: list[Run], group_by: list[str] | None) -> list[str]:
    """``group_by`` checked against the runs' recipe keys, or ``default_keys``."""
    if group_by is None:
        return default_keys(runs)
    known = {k for r in runs for k in r.keys}
    unknown = [k for k in group_by if k not in known]
    if unknown:
        raise UserError(f"--group-by {unknown[0]}: not a recipe key of these runs; keys that vary: "
                        f"{', '.join(experiment_keys(runs)) or 'none'}")
    return group_by


def group_runs(runs: list[Run], keys: list[str]) -> list[Group]:
    """Runs grouped by their values of ``keys`` (``ABSENT`` where a recipe lacks one), groups in order
    of first appearance."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(repr(run.keys.get(k, ABSENT)) for k in keys), []).append(run)
    return [(tuple(g[0].keys.get(k, ABSENT) for k in keys), g) for g in groups.values()]


def mixed_groups(groups: list[Group], keys: list[str]) -> list[str]:
    """A note for each group whose runs still differ in an experiment key that ``keys`` leave out (only
    ``--group-by`` can make one): ``'`fedavg` mixes partition.alpha = 0.1, 1.0'``. Its seeds' runs are
    averaged as if they were repeats of one experiment, so a reader must be told."""
    notes = []
    for values, runs in groups:
        inside = [k for k in experiment_keys(runs) if k not in keys]
        if inside:
            what = "; ".join(f"{k} = {', '.join(dict.fromkeys(str(r.keys.get(k, '-')) for r in runs))}"
                             for k in inside)
            notes.append(f"`{group_label(keys, values)}` mixes {what}: its runs of one seed are averaged as "
                         "if they were repeats; --group-by these keys too to keep them apart")
    return notes


def survivor_notes(groups: list[Group], keys: list[str], unfinished: list[Run]) -> list[str]:
    """A note for each group with a run that read as collapsed (``collapse`` in its results.json: in its mean)
    and for each group of ``keys``' values with runs that did not finish (the collapse alarm stopped them, or
    they have fewer rounds than their recipe's): a comparison reads the seeds that finished, so an arm that
    failed on some seeds would otherwise look as good as its survivors, and a reader must be told."""
    notes = []
    for values, runs in groups:
        fired = [r for r in runs if r.results.get("collapse")]
        if fired:
            notes.append(f"`{group_label(keys, values)}`: {_seeds_with(fired, _alarm)} read as collapsed (in its "
                         "mean; eval.collapse_stop=true stops such a run)")
    lost: dict[str, list[Run]] = {}
    for run in unfinished:
        lost.setdefault(group_label(keys, tuple(run.keys.get(k, ABSENT) for k in keys)), []).append(run)
    for label, runs in lost.items():
        notes.append(f"`{label}`: {_seeds_with(runs, _why_unfinished)} did not finish (left out: its "
                     "comparisons read only the seeds that did)")
    return notes


def _alarm(run: Run) -> str:
    record = run.results["collapse"]
    return f"the alarm fired at round {record.get('round')}"


def _why_unfinished(run: Run) -> str:
    record, done = run.results.get("collapse"), run.results.get("rounds_completed", 0)
    if record:
        return f"the collapse alarm stopped it at round {record.get('round')}"
    rounds = run.keys.get("rounds")
    return f"{done} of {rounds} rounds" if isinstance(rounds, int) and done < rounds else "no final metrics"


def _seeds_with(runs: list[Run], why: Callable[[Run], str]) -> str:
    """``'seeds 3 (...), 4 (...)'``: each run's seed with ``why(run)``."""
    listed = ", ".join(f"{r.seed} ({why(r)})" for r in sorted(runs, key=lambda r: r.seed))
    return ("seed " if len(runs) == 1 else "seeds ") + listed


def legend_names(keys: list[str]) -> list[str]:
    """How a legend names each grouping key: its last dotted part (``partition.alpha`` -> ``alpha``),
    or the whole key where two keys share that part."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return [short if last.count(short) == 1 else key for key, short in zip(keys, last)]


def group_label(keys: list[str], values: tuple[Any, ...]) -> str:
    """``'alpha = 0.1, name = byol'``, an arm by its name (``'byol, alpha = 0.1'``), a key the group does
    not define left out; ``'all runs'`` without keys."""
    parts = [str(v) if key == ARM else f"{name} = {v}"
             for key, name, v in zip(keys, legend_names(keys), values) if v is not ABSENT]
    return ", ".join(parts) or "all runs"
