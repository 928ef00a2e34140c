"""``fedlight report``: finished runs grouped by recipe keys, as ``report.md``, ``report.csv``,
``report.tex`` and three plots per metric (PNG and SVG): accuracy vs round, vs bytes and vs upload bytes.

Runs are grouped by ``--group-by KEYS`` (default: their arms, or every recipe key that varies
and defines the experiment: ``fedlight.report.arm_groups``). Each group's row gives, per final
metric (``--metric NAME`` picks some), the mean and the sample standard deviation (n - 1) over
its seeds, in percent, beside the random-init value (flagged where the group ends below it),
and the bytes communicated per run (up + down + device to device + LG-FedAvg's new-test
upload, mean over seeds), in MB (10^6 bytes); see ``fedlight.report.tables``. Below, in ``report.md``: one row
per run (with the git commits its code was at), and the plots (``fedlight.report.plots``). In
``compare.md``: every group against a reference one, paired by seed (``fedlight.report.compare``). Below the
table, a note for each group and metric where one of the package's checks fires (``fedlight.report.sanity``:
did not train, not at a plateau). Runs with a
virtual clock add a section on virtual time (hours, idle share, staleness, hours to reach a target:
``fedlight.report.timing``), a table of time to reach per metric in ``compare.md`` and ``_vs_hours`` plots.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedlight.atomic_files import atomic_write_bytes
from fedlight.config.files import output_folder_problem
from fedlight.errors import UserError
from fedlight.eval import metric_names
from fedlight.report.compare import compare_text, reach_targets
from fedlight.report.arm_groups import ABSENT, Group, group_label, group_runs, grouping_keys, mixed_groups
from fedlight.report.sanity import group_checks
from fedlight.report.partitions import partition_files, write_partition_pictures
from fedlight.report.plots import REMAKE, plot_files, write_plots
from fedlight.report.runs import Run, find_runs
from fedlight.report.tables import Cell, GroupTable, markdown_table, md_cell, metric_cell
from fedlight.report.timing import group_clocked, parse_targets, time_lines, tracked

REPORT = "report.md"
COMPARE = "compare.md"  # the groups paired by seed against a reference: fedlight.report.compare
TABLES = {"report.csv": GroupTable.csv, "report.tex": GroupTable.latex}


def metric_keys(runs: list[Run], wanted: list[str] | None = None) -> list[str]:
    """Final metrics any run has a value of (main one first), each named with its label fraction;
    only those ``wanted`` names select (``linear_probe_acc`` selects every label fraction). A spread
    over clients (``knn_acc_std``) is no metric of the model: it gets no column. A label-free reading
    (``rankme``) is shown where ``wanted`` names it."""
    present = metric_names.order(sorted({k for r in runs for k in r.final if not metric_names.is_spread(k)}))
    if not wanted:
        return [k for k in present if not metric_names.is_reading(k)]
    unknown = [w for w in wanted if not any(metric_names.matches(k, w) for k in present)]
    if unknown:
        raise UserError(f"--metric {unknown[0]}: no finished run measured it; choose from {', '.join(present) or 'none'}")
    return [k for k in present if any(metric_names.matches(k, w) for w in wanted)]


def check_notes(groups: list[Group], keys: list[str], metrics: list[str]) -> list[str]:
    """A note per group and metric where one of the package's checks fires (did not train, not at a plateau)."""
    return [note for metric in metrics for values, runs in groups
            for note in group_checks(runs, metric).notes(group_label(keys, values), metric)]


def mean_std(values: list[float]) -> str:
    """``'85.31 ± 0.42'`` (percent; sample std), ``'85.31'`` for one value, ``'-'`` for none."""
    return Cell.of(values).text()


def render(runs: list[Run], sources: list[str], table: GroupTable, plots: list[str], out: Path,
           notes: list[str], timing: list[str] | None = None, partitions: list[str] = ()) -> str:
    """The markdown text of the report (run folders relative to ``out``, where it is written), ``notes``
    below its table, then ``timing``'s lines (virtual time, where runs have a clock), the plots and the
    ``partitions`` pictures."""
    done = [r for r in runs if r.finished]
    keys, metrics = table.keys, table.metrics
    lines = ["# fedlight report", "",
             f"{len(done)} finished runs from {', '.join(f'`{s}`' for s in sources)}; grouped by "
             + (", ".join(f"`{k}`" for k in keys) or "nothing (no recipe key that defines the experiment varies)")
             + f"; seeds {sorted({r.seed for r in done})}.",
             "Accuracies: mean ± sample std over seeds, in %, with the random-init encoder's value "
             "(`init`; `below init` where training ended below it, except on an adversary's AUC, where lower is "
             "better; `N seeds without a value` where some seeds' runs have none: a NaN, or a metric not "
             "measured, left out of the mean); probe and kNN headers name the labels they "
             "were fit on. Bytes: sent per run (up + down + device to device), mean over seeds, in MB (10^6 bytes); "
             "`MB up`: the uploads alone. The same table: `report.csv`, `report.tex`.", ""]
    lines += table.markdown() + [""] + [f"- {note}" for note in notes] + ([""] if notes else []) + (timing or [])
    if len(table.rows) > 1:
        lines += [f"Each group against a reference, seed by seed (difference, 95% interval, verdict, and verdict "
                  f"after Holm over the file): `{COMPARE}`.", ""]
    if plots:
        lines += ["Plots: the mean over each group's seeds from round 0 (the random-init encoder); the shaded band "
                  "is ± one sample standard deviation over seeds. Each is also an SVG beside the PNG.", ""]
    lines += [f"![{p.removesuffix('.png').replace('_', ' ')}]({p})" for p in plots if p.endswith(".png")] + [""]
    if partitions:
        lines += ["## Partitions", "", "Each group's first seed: samples a client holds, the share of each class among "
                  "them, and its domain (feature shift; grey: none).", ""]
        lines += [f"![{p.removesuffix('.png').replace('_', ' ')}]({p})" for p in partitions] + [""]
    lines += ["## Runs", ""]
    run_rows = [[f"`{os.path.relpath(r.path, out.resolve())}`", *(md_cell(r.keys.get(k, ABSENT)) for k in keys),
                 str(r.seed),
                 *(metric_cell([r], m).with_init() for m in metrics),
                 f"{r.total_bytes / 1e6:.2f}", str(r.results["rounds_completed"]), ", ".join(r.commits) or "-"]
                for r in done]
    lines += markdown_table(["run", *keys, "seed", *(metric_names.title(m) for m in metrics), "MB", "rounds",
                             "commit"], run_rows)
    unfinished = [r for r in runs if not r.finished]
    if unfinished:
        listed = ", ".join(f"`{r.path}` ({r.results.get('rounds_completed', 0)} rounds)" for r in unfinished)
        lines += ["", f"Not finished (left out): {listed}"]
    return "\n".join(lines) + "\n"


def write_report(paths: list[str], out: str | Path, group_by: list[str] | None = None,
                 metrics: list[str] | None = None, reference: str | None = None,
                 margin: float | None = None, targets: list[str] | None = None) -> list[Path]:
    """Read the runs under ``paths``; write the report, its comparison (each group against ``reference``,
    the first group's label by default, equivalence within ``margin`` points where given; with a virtual
    clock, the hours to reach ``targets``, ``METRIC=PERCENT``, else the reference's mean final values), tables
    and plots into ``out``; returns every file written, report.md and compare.md first."""
    out = Path(out)
    blocked = output_folder_problem(out)
    if blocked:
        raise UserError(f"--out {blocked}; give --out a folder to write the report into")
    runs = find_runs(paths)  # every results.json is read and checked before anything is written
    done = [r for r in runs if r.finished]
    if not done:
        raise UserError(f"no finished run under {', '.join(repr(str(p)) for p in paths)} ({len(runs)} not finished: "
                        "no final metrics yet); finish them (fedlight fit --resume) or give folders of finished runs")
    keys = grouping_keys(done, group_by)
    groups = group_runs(done, keys)
    table = GroupTable.build(groups, keys, metric_keys(done, metrics))
    timed = tracked(groups, table.metrics) if any(group_clocked(g) for g in groups) else []
    if targets and not timed:
        raise UserError("--target: no finished run has a virtual clock with an evaluation history "
                        "(clock.devices: none); leave --target out, or report runs made with clock.devices set")
    given = parse_targets(targets, timed)
    comparison = compare_text(groups, keys, table.metrics, reference, margin, given, timed,
                              [r for r in runs if not r.finished])
    goals = reach_targets(groups, keys, timed, reference, given)
    targets = [*plot_files(groups, table.metrics), *partition_files(groups), *TABLES, COMPARE, REPORT]
    in_the_way = next((out / name for name in targets if (out / name).exists() and not (out / name).is_file()), None)
    if in_the_way is not None:  # before any file is written: a report is whole or not written
        raise UserError(f"'{in_the_way}' is a folder, where the report writes a file; move it away or give "
                        "another --out")
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(groups, keys, table.metrics, out)
    partitions = write_partition_pictures(groups, keys, out, REMAKE)
    texts = {name: write(table) for name, write in TABLES.items()}
    texts[COMPARE] = comparison
    notes = mixed_groups(groups, keys) + check_notes(groups, keys, table.metrics)
    texts[REPORT] = render(runs, [str(p) for p in paths], table, plots, out, notes, time_lines(groups, keys, goals),
                           partitions)
    for name, text in texts.items():  # each file is the old one or the new one, never half of one
        atomic_write_bytes(out / name, text.encode(), then=REMAKE)
    return [out / name for name in (REPORT, COMPARE, *TABLES, *plots, *partitions)]
