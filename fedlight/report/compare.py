"""A report's groups (arms) compared with a reference arm, seed by seed, per final metric: ``compare.md``.

Each arm is paired with the reference on the seeds both ran (a seed run more than once in an
arm, e.g. on two devices, counts once, as the mean of its runs); a seed only one of them ran
is left out, and the table says how many pairs were used. Over the pairs, ``fedlight.stats``
gives the mean difference ``arm - reference`` in percentage points with its 95% Student-t
interval (``paired``), a verdict (``directional``: ``ahead`` / ``behind`` where the interval
excludes 0 on the better / worse side, the lower one for an adversary's AUC, else ``can't
tell``, then with about how many seeds would decide it if the differences' mean and sd stayed
as measured: ``seeds_to_decide``) and, given a margin of ``M``
points fixed in advance, an equivalence reading (``equivalence``, TOST at 5%: ``within ±M``
where the 90% interval lies inside ±M, ``not within ±M`` where the 95% interval lies outside
it, else ``can't tell``). Fewer than ``stats.MIN_SEEDS`` pairs give a note, not an interval; a
seed an arm ran without a finite value (NaN, not measured) is named as such. Each reading is its
own test at 5%, and beside it the same reading after Holm's adjustment over every test the file
prints (``stats.adjusted_verdicts``): the family is the file, since no comparison in it was named
in advance.

Each arm's row also gives its bytes up and down per run (MB, mean over its runs), and the package's own
checks (``fedlight.report.sanity``, rule v3's): an arm, or a reference, that ``did not train`` on a metric
(its lift over its random-init value not above ``stats.MIN_LIFT`` points) gets no verdict there, and its
tests leave the Holm family; an arm still rising over its last evaluations is flagged ``not at a plateau``.
A ``checks`` column and a note with the numbers appear only where a check fires.

Where the reference's runs have a virtual clock (``fedlight.report.timing``), each metric's table is followed
by one of virtual hours to reach a target (``--target METRIC=PERCENT``, else the reference's mean final
value): per arm with a clock, paired by seed, an exact sign test on which arm got there first
(``stats.times_sign_test``: a seed censored before the other arm's time orders nothing, and no time is
invented for it) and the median over the seeds both reached of the ratio arm / reference; each sign test
joins the file's Holm family.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from fedlight import stats
from fedlight.errors import UserError
from fedlight.eval import metric_names
from fedlight.report.arm_groups import ABSENT, ARM, Group, group_label, mixed_groups, survivor_notes
from fedlight.report.runs import Run
from fedlight.report.sanity import Checks, group_checks
from fedlight.report.tables import Cell, finite, markdown_table, metric_cell, seed_means, without_value
from fedlight.report.timing import Reach, Target, group_clocked, reach_cell, seed_reaches

VERDICT = {stats.HOLDS: "ahead", stats.FAILS: "behind", stats.OPEN: "can't tell"}
FIRST = {stats.HOLDS: "first", stats.FAILS: "later", stats.OPEN: "can't tell"}  # a time test's verdict
Block = tuple[str, list[int], int]  # (the cell it holds fixed, '' for none; its groups; the reference among them)


@dataclass(frozen=True)
class Arm:
    """One group's final values of a metric.

    Attributes:
        name: the group's label (an arm's name, or ``alpha = 0.1``).
        by_seed: seed -> the value (a fraction; the mean of the seed's runs).
        repeated: seeds with a value from more than one of the group's runs.
        unmeasured: seeds the group ran without a finite value (a NaN, or a metric some of its runs lack;
            none where no run of the group measures the metric).
        cell: mean ± sd over the seeds, in percent, with the random-init value.
        checks: the package's checks on the metric (did it train, is it at a plateau).
        mb: bytes up and down per run, in MB (10^6 bytes), the mean over the group's runs.
    """

    name: str
    by_seed: dict[int, float]
    repeated: list[int]
    unmeasured: list[int]
    cell: Cell
    checks: Checks = Checks(None, None)
    mb: tuple[float, float] = (0.0, 0.0)
    scale: float = 100.0  # percent; 1 for a label-free reading, compared in its own units

    @classmethod
    def of(cls, name: str, group: Group, metric: str) -> Arm:
        runs = group[1]
        seeds = [r.seed for r in runs if finite(r.final.get(metric))]
        mb = tuple(statistics.fmean(r.sent(k) for r in runs) / 1e6 for k in ("bytes_up", "bytes_down"))
        return cls(name, seed_means(runs, metric), sorted({s for s in seeds if seeds.count(s) > 1}),
                   without_value(runs, metric), metric_cell(runs, metric), group_checks(runs, metric), mb,
                   metric_names.scale(metric))

    def mb_cell(self) -> str:
        """``'1.25 / 1.25'``: MB up / down per run."""
        return f"{self.mb[0]:.2f} / {self.mb[1]:.2f}"

    @property
    def measured(self) -> bool:
        """Whether some run of the group has the metric, finite or not (FedAvg has no adversary's AUC)."""
        return bool(self.by_seed or self.unmeasured)


def check_margin(margin: float | None) -> None:
    """Refuse a ``--margin`` that is not a finite number of points above 0."""
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise UserError(f"--margin {margin:g}: an equivalence margin is a number of percentage points above 0, "
                        "fixed before the runs (e.g. --margin 1)")


def reference_index(names: list[str], wanted: str | None) -> int:
    """The position of the ``--reference`` arm among ``names`` (spaces ignored: ``alpha=0.1`` names
    ``alpha = 0.1``); the first without one."""
    if wanted is None:
        return 0
    squeezed = [n.replace(" ", "") for n in names]
    if wanted.replace(" ", "") not in squeezed:
        raise UserError(f"--reference {wanted}: no such arm among these runs; choose one of: {'; '.join(names)}")
    return squeezed.index(wanted.replace(" ", ""))


def comparison_blocks(groups: list[Group], keys: list[str], names: list[str],
                      reference: str | None) -> tuple[list[Block], list[str]]:
    """Which groups are compared with which reference, and notes on those that are not.

    Every group against ``--reference`` where it names a group (or is not given: the first); where it
    names an arm, or is not given, and other keys vary beside the arms (a sweep's arms x ``--grid``), the
    groups of each cell of those keys against that arm's (the first arm's) group in the same cell, so a
    difference is only ever the arm's.
    """
    at = keys.index(ARM) if ARM in keys else 0
    grid = [k for j, k in enumerate(keys) if j != at]

    def cell_of(values: tuple[Any, ...]) -> tuple[Any, ...]:  # a group's values of the grid keys
        return tuple(v for j, v in enumerate(values) if j != at)

    if reference is None and ARM in keys and grid and not any(v is ABSENT for values, _ in groups
                                                              for v in cell_of(values)):
        reference = str(groups[0][0][at])  # the first arm, cell by cell: never two factors in one difference
    squeezed = (reference or "").replace(" ", "")

    # cell by cell only where every group defines every grid key (an arm lacking one, e.g. a grid of FedProx's
    # mu beside FedAvg, has no cell to pair in), else the whole-label reference or its one-line refusal
    if (reference is None or squeezed in (n.replace(" ", "") for n in names) or ARM not in keys or not grid
            or any(v is ABSENT for values, _ in groups for v in cell_of(values))):
        return [("", list(range(len(groups))), reference_index(names, reference))], []
    cells: dict[str, list[int]] = {}
    for i, (values, _) in enumerate(groups):
        cells.setdefault(group_label(grid, cell_of(values)), []).append(i)
    blocks, notes = [], []
    for cell, members in cells.items():
        ref = [i for i in members if str(groups[i][0][at]).replace(" ", "") == squeezed]
        if ref and len(members) > 1:
            blocks.append((cell, members, members.index(ref[0])))
        elif not ref:
            notes.append(f"no `{reference}` runs at {cell}: its groups are not compared")
    if not blocks:
        reference_index(names, reference)  # names no arm either: the one-line refusal that lists the choices
    return blocks, notes


def seeds_to_decide(d: stats.Paired) -> str:
    """``'about 18 (15 more)'``: the seeds that would make ``d``'s interval exclude 0 at its mean and sd."""
    n = stats.seeds_to_decide(d)
    if n is None:
        return "none: no mean difference" if d.mean == 0 else "over 1000"
    return f"about {n} ({max(n - d.n, 0)} more)"


@dataclass(frozen=True)
class Tested:
    """An arm against the reference: the paired difference and its tests (the directional one, then TOST's
    where a margin is given), each test's verdict after Holm over the whole file beside it."""

    d: stats.Paired
    tests: list[stats.Test]
    after_holm: list[str]


def untrained(arm: Arm, ref: Arm) -> str | None:
    """Why a comparison of ``arm`` with ``ref`` gets no verdict: one of them did not train; else None."""
    if arm.checks.untrained:
        return "did not train"
    return "reference did not train" if ref.checks.untrained else None


def paired_tests(arm: Arm, ref: Arm, margin: float | None) -> tuple[stats.Paired, list[stats.Test]] | None:
    """``arm - ref`` over the seeds both have a value of, with its tests (none where one of them did not
    train); None with too few pairs."""
    seeds = sorted(set(arm.by_seed) & set(ref.by_seed))
    if len(seeds) < stats.MIN_SEEDS:
        return None
    d = stats.paired([ref.scale * arm.by_seed[s] for s in seeds], [ref.scale * ref.by_seed[s] for s in seeds])
    if untrained(arm, ref):
        return d, []
    return d, [stats.directional(d, -1 if ref.cell.lower_is_better else +1),
               *([stats.equivalence(d, margin)] if margin is not None else [])]


def arm_row(arm: Arm, ref: Arm, margin: float | None, tested: Tested | None) -> tuple[list[str], list[str]]:
    """``arm``'s table row against ``ref`` (``tested``: None with too few pairs) and its notes (seeds left
    out, too few pairs)."""
    pairs = len(set(arm.by_seed) & set(ref.by_seed))
    alone = [*_unpaired(ref, arm), *_unpaired(arm, ref)]
    notes = [f"`{arm.name}`: left out of the pairing: {'; '.join(alone)}"] if alone else []
    head = [arm.name, str(len(arm.by_seed)), arm.cell.with_init(), arm.mb_cell(), str(pairs)]
    if tested is None:
        fix = ("run more seeds of both" if not (arm.unmeasured or ref.unmeasured) else
               "seeds without a finite value cannot be paired; see why those runs have none")
        notes.append(f"`{arm.name}`: {pairs} pairs with `{ref.name}`, fewer than the {stats.MIN_SEEDS} a paired "
                     f"interval needs: {fix}")
        return head + ["", "", "too few pairs", ""] + ["", ""] * (margin is not None) + [""], notes
    words = [VERDICT, *([{stats.HOLDS: f"within ±{margin:g}", stats.FAILS: f"not within ±{margin:g}",
                           stats.OPEN: "can't tell"}] if margin is not None else [])]
    readings = [w[v] for w, test, after in zip(words, tested.tests, tested.after_holm) for v in (test.verdict, after)]
    d = tested.d
    void = untrained(arm, ref)
    if void:
        readings = [void] * (2 + 2 * (margin is not None))
    n = ref.cell.decimals
    return head + [f"{d.mean:+.{n}f}", f"[{d.low:+.{n}f}, {d.high:+.{n}f}]", *readings,
                   seeds_to_decide(d) if not void and tested.tests[0].verdict == stats.OPEN else ""], notes


def compared(arms: list[Arm], ref: int) -> list[Arm]:
    """The arms a metric's table compares with ``arms[ref]``: those that measure it, none where the reference
    does not."""
    return [a for i, a in enumerate(arms) if i != ref and a.measured] if arms[ref].measured else []


def metric_section(arms: list[Arm], ref: int, metric: str, margin: float | None, tested: dict[str, Tested | None],
                   cell: str = "") -> list[str]:
    """One metric's table (at one ``cell`` of the grid keys, where arms are compared cell by cell), the
    reference first, and its notes; ``tested``: each compared arm's tests, by name."""
    percent = not metric_names.is_reading(metric)
    header = ["arm", "seeds", f"mean ± sd over seeds{metric_names.unit(metric)}", "MB up / down", "pairs",
              "difference (points)" if percent else "difference",
              "95% interval", "verdict", "after Holm",
              *([f"within ±{margin:g}", "after Holm"] if margin is not None else []), "seeds to decide"]
    reference, title = arms[ref], metric_names.title(metric)
    rows = [[reference.name, str(len(reference.by_seed)), reference.cell.with_init(), reference.mb_cell(),
             "reference", *[""] * (len(header) - 5)]]
    notes = [f"`{a.name}`: {_seeds(a.repeated)} ran more than once; each counts once, as the mean of its runs"
             for a in arms if a.repeated]
    if reference.cell.lower_is_better:
        notes.insert(0, f"Lower is better on {title}: `ahead` is a difference below 0.")
    silent = [f"`{a.name}`" for i, a in enumerate(arms) if i != ref and not a.measured]
    if silent:
        notes.append(f"No run of {', '.join(silent)} measures {title}: no row.")
    if not reference.measured:
        notes.append(f"No run of the reference `{reference.name}` measures {title}: nothing is compared on it "
                     "(`--reference` chooses another).")
    shown = [reference, *compared(arms, ref)]
    for arm in shown[1:]:
        row, arm_notes = arm_row(arm, reference, margin, tested[arm.name])
        rows.append(row)
        notes += arm_notes
    if any(a.checks.flags() for a in shown):  # a column only where a check fires
        header.append("checks")
        for row, arm in zip(rows, shown):
            row.append("; ".join(arm.checks.flags()))
            notes += arm.checks.notes(arm.name, metric)
    return [f"## {title}{f': {cell}' if cell else ''}", "", *markdown_table(header, rows), "",
            *(f"- {note}" for note in notes), *([""] if notes else [])]


def reach_targets(groups: list[Group], keys: list[str], metrics: list[str], reference: str | None,
                  given: dict[str, float] | None = None) -> dict[str, list[Target | None]]:
    """Each metric's time-to-reach target per group: ``given`` (``--target``), else the mean final value over
    the seeds of the reference the group is compared with (its cell's, for arms over a grid); None where
    neither exists."""
    given = given or {}
    names = [group_label(keys, values) for values, _ in groups]
    blocks, _ = comparison_blocks(groups, keys, names, reference)
    out: dict[str, list[Target | None]] = {}
    for metric in metrics:
        fixed = Target(given[metric], "`--target`") if metric in given else None
        targets: list[Target | None] = [fixed] * len(groups)
        for _, members, ref in blocks:
            values = list(seed_means(groups[members[ref]][1], metric).values())
            if fixed is None and values:
                for i in members:
                    targets[i] = Target(sum(values) / len(values), f"`{names[members[ref]]}`'s mean final")
        out[metric] = targets
    return out


@dataclass(frozen=True)
class TimeArm:
    """One group's virtual hours to reach a target, by seed (none without a clock)."""

    name: str
    clocked: bool
    reaches: dict[int, Reach]

    @classmethod
    def of(cls, name: str, group: Group, metric: str, target: Target) -> TimeArm:
        clocked = group_clocked(group)
        return cls(name, clocked, seed_reaches(group[1], metric, target.value) if clocked else {})


@dataclass(frozen=True)
class Timed:
    """An arm's time to reach against the reference's: the sign test, its verdict after Holm, the median ratio."""

    sign: stats.TimeSignTest
    test: stats.Test
    after_holm: str
    ratio: str


def time_test(arm: TimeArm, ref: TimeArm) -> tuple[stats.TimeSignTest, stats.Test, str] | None:
    """The sign test of ``arm`` against ``ref`` over the seeds both have a time of, its verdict (holds: the
    arm got there first) and the median ratio of the seeds both reached; None without a pair."""
    seeds = sorted(set(arm.reaches) & set(ref.reaches))
    if not seeds:
        return None
    a, b = [arm.reaches[s] for s in seeds], [ref.reaches[s] for s in seeds]
    sign = stats.times_sign_test([r.hours for r in a], [r.hours for r in b], [r.censored for r in a],
                                 [r.censored for r in b])
    ratios = [x.hours / y.hours for x, y in zip(a, b) if not (x.censored or y.censored) and y.hours > 0]
    ratio = (f"{statistics.median(ratios):.2f} ({len(ratios)} seed{'s' if len(ratios) > 1 else ''} both reached)"
             if ratios else "-")
    return sign, stats.sign_verdict(sign, +1), ratio


def time_section(arms: list[TimeArm], ref: int, metric: str, target: Target, timed: dict[str, Timed | str | None],
                 cell: str = "") -> list[str]:
    """One metric's table of virtual hours to reach ``target``, the reference first, and its notes; ``timed``:
    each arm's test, or why it has none (it or the reference did not train)."""
    header = ["arm", "seeds", "hours to reach", "pairs", "first / later / tied / unordered", "sign test p",
              "verdict", "after Holm", "median ratio (arm / reference)"]
    reference = arms[ref]
    rows = [[reference.name, str(len(reference.reaches)), reach_cell(reference.reaches), "reference",
             *[""] * (len(header) - 4)]]
    notes = []
    for i, arm in enumerate(arms):
        if i == ref:
            continue
        if not arm.clocked:
            notes.append(f"`{arm.name}` has no virtual clock (some run has no `virtual_seconds`): no time to compare.")
            continue
        found = timed[arm.name]
        pairs = len(set(arm.reaches) & set(reference.reaches))
        if isinstance(found, str):
            rows.append([arm.name, str(len(arm.reaches)), reach_cell(arm.reaches), str(pairs), "", "", found, found,
                         ""])
            continue
        if found is None:
            rows.append([arm.name, str(len(arm.reaches)), reach_cell(arm.reaches), "0", *[""] * (len(header) - 4)])
            notes.append(f"`{arm.name}`: no seed with a time in both it and `{reference.name}`.")
            continue
        s = found.sign
        rows.append([arm.name, str(len(arm.reaches)), reach_cell(arm.reaches), str(pairs),
                     f"{s.a_first} / {s.b_first} / {s.ties} / {s.unordered}", f"{s.p:.2g}", FIRST[found.test.verdict],
                     FIRST[found.after_holm], found.ratio])
    where = f": {cell}" if cell else ""
    return [f"### {metric_names.title(metric)}{where}: virtual hours to reach {target.text()} ({target.source})", "",
            *markdown_table(header, rows), "", *(f"- {note}" for note in notes), *([""] if notes else [])]


def untimed_references(groups: list[Group], names: list[str], blocks: list[Block],
                       timed_metrics: list[str] | None) -> list[str]:
    """A note for each reference without a virtual clock among groups that have one: nothing is compared on time."""
    if not timed_metrics:
        return []
    return [f"`{names[members[ref]]}` has no virtual clock: no arm's time to reach is compared with it "
            "(`--reference` chooses a group whose runs have one)"
            for _, members, ref in blocks if not group_clocked(groups[members[ref]])
            and any(group_clocked(groups[i]) for i in members)]


def compare_text(groups: list[Group], keys: list[str], metrics: list[str], reference: str | None = None,
                 margin: float | None = None, targets: dict[str, float] | None = None,
                 timed_metrics: list[str] | None = None, unfinished: list[Run] | None = None) -> str:
    """``compare.md``: every group against the reference one (``--reference``, default the first), per metric;
    with a clock, the virtual hours to reach each of ``timed_metrics`` (those with a history) beside it, at
    ``targets`` (``--target``, fractions) or the reference's mean final value; ``unfinished``: the runs left
    out, named in its notes with the runs that read as collapsed (``arm_groups.survivor_notes``)."""
    check_margin(margin)
    names = [group_label(keys, values) for values, _ in groups]
    blocks, left_out = comparison_blocks(groups, keys, names, reference)
    lines = ["# Paired comparison", ""]
    if len(groups) < 2:
        return "\n".join(lines + [f"One group ({names[0] if names else 'no finished run'}): nothing to compare; "
                                  "give runs of two arms, or --group-by a key that varies."]) + "\n"
    layout = [(metric, cell, members, ref) for metric in metrics for cell, members, ref in blocks]
    sections = [(metric, cell, [Arm.of(names[i], groups[i], metric) for i in members], ref)
                for metric, cell, members, ref in layout]
    found = [{a.name: paired_tests(a, arms[ref], margin) for a in compared(arms, ref)} for _, _, arms, ref in sections]
    family = [t for section in found for pair in section.values() if pair for t in pair[1]]
    # a table of time per section whose reference has a clock and a target, on a metric with a history
    goals = reach_targets(groups, keys, metrics, reference, targets)
    timing: dict[int, tuple[Target, list[TimeArm]]] = {}
    for k, (metric, _, members, ref) in enumerate(layout):
        target = goals[metric][members[ref]]
        if metric in (timed_metrics or []) and target is not None and group_clocked(groups[members[ref]]):
            timing[k] = target, [TimeArm.of(names[i], groups[i], metric, target) for i in members]
    # an arm or reference that did not train on the metric gets no sign test either: the reason instead
    time_found = {k: {a.name: untrained(sections[k][2][i], sections[k][2][layout[k][3]])
                      or time_test(a, arms[layout[k][3]])
                      for i, a in enumerate(arms) if i != layout[k][3] and a.clocked}
                  for k, (_, arms) in timing.items()}
    family += [pair[1] for section in time_found.values() for pair in section.values() if isinstance(pair, tuple)]
    adjusted = iter(stats.adjusted_verdicts(family))
    tested = [{name: pair and Tested(*pair, [next(adjusted) for _ in pair[1]]) for name, pair in section.items()}
              for section in found]
    timed = {k: {name: Timed(pair[0], pair[1], next(adjusted), pair[2]) if isinstance(pair, tuple) else pair
                 for name, pair in section.items()} for k, section in time_found.items()}
    checked = any(a.checks.flags() for _, _, arms, _ in sections for a in arms)
    cell, members, ref = blocks[0]
    grid_keys = ", ".join(f"`{k}`" for k in keys if k != ARM)
    against = (f"`{names[members[ref]]}`" if not cell else
               f"`{groups[members[ref]][0][keys.index(ARM)]}` at the same {grid_keys}, a table per value")
    lines += [f"Each arm against {against} (`--reference` chooses), seed by seed: the difference is the arm's "
              "value minus the reference's on the same seed, in percentage points, averaged over the pairs (the "
              "seeds both ran), with its 95% Student-t interval. Verdict: `ahead` / `behind` where the interval "
              "excludes 0 on the better side (lower, for an adversary's AUC) / the worse side, else `can't tell`, "
              "with about how many seeds would decide it if the differences' mean and sd stayed as measured."
              + ("" if margin is None else f" `within ±{margin:g}`: TOST at 5% (the 90% interval lies inside "
                 f"±{margin:g} points; `not within`: the 95% interval lies outside).")
              + (" Virtual time: below a metric's table, where the reference's runs have a clock, the virtual hours "
                 "each arm took to reach a target (its first evaluation at or above it; `> X`: never, censored at its "
                 "last evaluation, X hours), paired by seed: an exact sign test on which arm got there first "
                 "(`first` / `later` where p < 0.05; a seed censored before the other arm's time is `unordered` and, "
                 "like a tie, left out; no time is invented for it) and the median over the seeds both reached of "
                 "the arm's hours over the reference's." if timing else "")
              + (" Checks (the package's own, as rule v3 makes them; docs/sweeps.md): an arm or reference whose "
                 f"lift over its random-init value is under {stats.MIN_LIFT:g} points at the lower end of its 95% "
                 "interval `did not train` on that metric: no verdict there, and its tests leave the Holm family; an "
                 f"arm whose mean moved {stats.PLATEAU_GAIN:g} point or more over the last fifth of its rounds is "
                 "`not at a plateau`: its verdict may change with more rounds." if checked else "")
              + " MB up / down: bytes sent per run, mean over the arm's runs, in MB (10^6 bytes)."
              + f" Each reading is its own test at 5%; `after Holm` keeps it only where its Holm-adjusted p over "
              f"all {len(family)} tests of this file (every arm, metric{', cell' if cell else ''} and reading"
              f"{', and each sign test on time' if timing else ''}) is "
              "below 0.05, else `can't tell`: among many rows some raw verdicts are chance, so read that column, "
              "or judge only a comparison fixed before the runs, on seeds no earlier look used.", ""]
    notes = [*mixed_groups(groups, keys), *survivor_notes(groups, keys, unfinished or []),
             *protocol_notes(groups, keys, names, blocks), *left_out,
             *untimed_references(groups, names, blocks, timed_metrics)]
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    for k, ((metric, cell, arms, ref), section) in enumerate(zip(sections, tested)):
        lines += metric_section(arms, ref, metric, margin, section, cell)
        if k in timing:
            lines += time_section(timing[k][1], ref, metric, timing[k][0], timed[k], cell)
    return "\n".join(lines).rstrip("\n") + "\n"


def protocol_notes(groups: list[Group], keys: list[str], names: list[str], blocks: list[Block]) -> list[str]:
    """A note for each compared group evaluated otherwise than its reference (an ``eval.*`` key with other
    values: kNN's k, the labels, the test set, ...; not one of the grouping ``keys``, which the groups' names
    say): only the probe's and kNN's names carry the label fraction, so a difference on any other metric
    (the clients' kNN, a fine-tune) would mix the method with the protocol unseen."""
    notes = []
    for _, members, ref in blocks:
        reference = _eval_settings(groups[members[ref]][1])
        for i in members:
            mine = _eval_settings(groups[i][1])
            differ = [k for k in dict.fromkeys([*mine, *reference])
                      if k not in keys and mine.get(k) != reference.get(k)]
            if i != members[ref] and differ:
                said = "; ".join(f"{k} {mine.get(k, '-')} (`{names[members[ref]]}`: {reference.get(k, '-')})"
                                 for k in differ)
                notes.append(f"`{names[i]}` was evaluated otherwise than `{names[members[ref]]}`: {said}; its "
                             "differences mix the method with how it was measured")
    return notes


def _eval_settings(runs: list[Run]) -> dict[str, str]:
    """``eval.*`` key -> the group's values of it, as said (``'0.1, 1.0'`` where its runs differ)."""
    values: dict[str, dict[str, None]] = {}
    for run in runs:
        for key, value in run.keys.items():
            if key.startswith("eval."):
                values.setdefault(key, {})[str(value)] = None
    return {k: ", ".join(v) for k, v in values.items()}


def _unpaired(a: Arm, b: Arm) -> list[str]:
    """Why the seeds ``b`` has a value of are not paired with ``a``: ``a`` did not run them, or ran them
    without a finite value."""
    missing = sorted(set(b.by_seed) - set(a.by_seed))
    ran = [s for s in missing if s in a.unmeasured]
    absent = [s for s in missing if s not in a.unmeasured]
    return ([f"{_seeds(absent)} only in `{b.name}`"] if absent else []) + (
        [f"{_seeds(ran)} ran in `{a.name}` without a finite value (NaN, or not measured)"] if ran else [])


def _seeds(seeds: list[int]) -> str:
    """``'seed 2'``, ``'seeds 2, 3'``."""
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))
