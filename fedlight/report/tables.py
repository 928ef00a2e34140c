"""The report's group table in three formats: Markdown (``report.md``), CSV and LaTeX.

One row per group of runs (the same values of the grouping keys): the keys' values, the
number of seeds, each metric's mean and sample standard deviation (n - 1) over the seeds (a
seed run twice counts once, as its runs' mean) in percent beside its random-init value (the
mean of the runs' ``baseline``; a group that ends below it says so: ``45.00 ± 1.00 (init
50.00; below init)``, except on a metric where lower is better, an adversary's AUC), how many of
its seeds have no finite value (a diverged run's NaN, a metric one run did not measure: ``1 seed
without a value``), and the bytes communicated per run in MB (10^6 bytes), all directions and the uploads
alone (``MB up``: what ``server.compress`` shrinks). Column headers name
the label fraction of the probe and kNN accuracies (``linear probe, 10% labels (%)``).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass
from typing import Any

from fedlight.eval import metric_names
from fedlight.report.arm_groups import ABSENT
from fedlight.report.runs import Run


@dataclass(frozen=True)
class Cell:
    """A metric over a group's seeds, in percent: mean and sample std (None with fewer than two
    values), the mean of its random-init values (None where the runs have none), whether lower is
    better on it (``metric_names.lower_is_better``) and how many of the group's seeds have no value."""

    mean: float | None
    std: float | None
    init: float | None = None
    lower_is_better: bool = False
    missing: int = 0
    decimals: int = 2  # 4 for a label-free reading (a CKA of 0.9912 is no 0.99)

    @classmethod
    def of(cls, values: list[float], inits: list[float] | None = None, lower_is_better: bool = False,
           missing: int = 0, scale: float = 100.0) -> Cell:
        """The cell of ``values`` times ``scale`` (100: percent; 1 for a label-free reading)."""
        init = scale * statistics.fmean(inits) if inits else None
        mean = scale * statistics.fmean(values) if values else None
        std = scale * statistics.stdev(values) if len(values) > 1 else None
        return cls(mean, std, init, lower_is_better, missing, 2 if scale == 100 else 4)

    @property
    def below_init(self) -> bool:
        """Whether training ended below the random-init encoder on a metric where higher is better (it
        learnt nothing, or worse); an adversary's AUC ending below it is what its method aims at."""
        return (not self.lower_is_better and self.mean is not None and self.init is not None
                and self.mean < self.init)

    def notes(self) -> list[str]:
        """What a cell says beside its value: ``['init 73.68', 'below init', '1 seed without a value']``; a cell
        without a value (every seed's a NaN) says only how many seeds have none."""
        notes = [] if self.mean is None or self.init is None else [
            f"init {self.init:.{self.decimals}f}", *(["below init"] if self.below_init else [])]
        return notes + ([f"{_seed_count(self.missing)} without a value"] if self.missing else [])

    def text(self, plus_minus: str = " ± ") -> str:
        """``'85.31 ± 0.42'``, ``'85.31'`` for one value, ``'-'`` for none."""
        if self.mean is None:
            return "-"
        n = self.decimals
        return f"{self.mean:.{n}f}" if self.std is None else f"{self.mean:.{n}f}{plus_minus}{self.std:.{n}f}"

    def with_init(self, plus_minus: str = " ± ") -> str:
        """``text`` and its ``notes``: ``'85.31 ± 0.42 (init 73.68)'``, ``'...; below init)'`` under it."""
        notes = self.notes()
        return f"{self.text(plus_minus)} ({'; '.join(notes)})" if notes else self.text(plus_minus)


@dataclass(frozen=True)
class GroupTable:
    """The group table: grouping ``keys``, ``metrics`` (named with label fractions) and one row per group."""

    keys: list[str]
    metrics: list[str]
    rows: list[tuple[tuple[Any, ...], int, list[Cell], float, float]]  # (key values, seeds, a cell per metric, MB, MB up)

    @classmethod
    def build(cls, groups: list[tuple[tuple[Any, ...], list[Run]]], keys: list[str], metrics: list[str]) -> GroupTable:
        rows = [(values, len({r.seed for r in runs}), [metric_cell(runs, m) for m in metrics],
                 statistics.fmean(r.total_bytes for r in runs) / 1e6,
                 statistics.fmean(r.sent("bytes_up") for r in runs) / 1e6) for values, runs in groups]
        return cls(keys, metrics, rows)

    def headers(self) -> list[str]:
        return [*self.keys, "seeds", *(f"{metric_names.title(m)}{metric_names.unit(m)}" for m in self.metrics),
                "MB communicated", "MB up"]

    def markdown(self) -> list[str]:
        """The table's Markdown lines."""
        rows = [[*map(md_cell, values), str(seeds), *(c.with_init() for c in cells), f"{mb:.2f}", f"{up:.2f}"]
                for values, seeds, cells, mb, up in self.rows]
        return markdown_table(self.headers(), rows)

    def csv(self) -> str:
        """One column per key, then per metric a mean, a std and a random-init column (in %, empty where
        there is none), the MB, the metrics that ended below their random init, and the metrics some of
        whose seeds have no value (``kNN, 100% labels: 1``)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        metric_columns = [f"{metric_names.title(m)} {part}{metric_names.unit(m)}" for m in self.metrics
                          for part in ("mean", "std", "random init")]
        writer.writerow([*self.keys, "seeds", *metric_columns, "MB communicated", "MB up", "below random init",
                         "seeds without a value"])
        for values, seeds, cells, mb, up in self.rows:
            numbers = [_number(x) for c in cells for x in (c.mean, c.std, c.init)]
            below = "; ".join(metric_names.title(m) for m, c in zip(self.metrics, cells) if c.below_init)
            missing = "; ".join(f"{metric_names.title(m)}: {c.missing}" for m, c in zip(self.metrics, cells)
                                if c.missing)
            keys = ("" if v is None or v is ABSENT else v for v in values)
            writer.writerow([*keys, seeds, *numbers, f"{mb:.4f}", f"{up:.4f}", below, missing])
        return buffer.getvalue()

    def latex(self) -> str:
        """A ``booktabs`` tabular, mean ± std as ``$85.31 \\pm 0.42$``.

        Written by hand: the one library that writes LaTeX tables here would be pandas (with
        jinja2), which fedlight does not depend on, for a dozen lines of text.
        """
        align = "l" * (len(self.keys) + 1) + "r" * (len(self.metrics) + 2)
        lines = [f"\\begin{{tabular}}{{{align}}}", "\\toprule",
                 " & ".join(latex_escape(h) for h in self.headers()) + " \\\\", "\\midrule"]
        for values, seeds, cells, mb, up in self.rows:
            metric_cells = [latex_cell(c) for c in cells]
            lines.append(" & ".join([*(latex_escape(cell_text(v)) for v in values), str(seeds), *metric_cells,
                                     f"{mb:.2f}", f"{up:.2f}"]) + " \\\\")
        return "\n".join([*lines, "\\bottomrule", "\\end{tabular}"]) + "\n"


def finite(value: Any) -> bool:
    """Whether ``value`` is a number a mean can take (not None, NaN or a string)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def seed_means(runs: list[Run], metric: str) -> dict[int, float]:
    """Seed -> the final ``metric`` of that seed's runs (their mean where a group ran a seed twice, e.g. on
    two devices, so each seed counts once), in seed order; seeds without a finite value left out."""
    values: dict[int, list[float]] = {}
    for run in runs:
        value = run.final.get(metric)
        if finite(value):
            values.setdefault(run.seed, []).append(value)
    return {seed: statistics.fmean(v) for seed, v in sorted(values.items())}


def metric_cell(runs: list[Run], metric: str) -> Cell:
    """A group's ``metric`` over its seeds (``seed_means``), with its random init and the seeds left out
    (``without_value``)."""
    return Cell.of(list(seed_means(runs, metric).values()), [r.baseline[metric] for r in runs if metric in r.baseline],
                   metric_names.lower_is_better(metric), len(without_value(runs, metric)), metric_names.scale(metric))


def without_value(runs: list[Run], metric: str) -> list[int]:
    """The seeds of a group that measures ``metric`` (some run has it) whose runs hold no finite value of it
    (a NaN, or a run that did not measure it); none where no run measures it (FedAvg has no adversary's AUC)."""
    if not any(metric in r.final for r in runs):
        return []
    return sorted({r.seed for r in runs} - set(seed_means(runs, metric)))


def latex_cell(cell: Cell) -> str:
    """``'$85.31 \\pm 0.42$ (init 73.68)'``, in bold when below its random init; ``'--'`` for none."""
    notes = cell.notes()
    text = "--" if cell.mean is None else "$" + cell.text(r" \pm ") + "$"
    return (rf"\textbf{{{text}}}" if cell.below_init else text) + (f" ({'; '.join(notes)})" if notes else "")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def cell_text(value: Any) -> str:
    """A recipe value as a table cell's text: ``-`` for none, empty for a key the recipe does not define."""
    if value is ABSENT:
        return ""
    return "-" if value is None else str(value)


def md_cell(value: Any) -> str:
    """``cell_text`` for a Markdown table (``|`` escaped)."""
    return cell_text(value).replace("|", "\\|")


def _seed_count(count: int) -> str:
    """``1`` -> ``'1 seed'``, ``3`` -> ``'3 seeds'`` (compare.py's ``_seeds`` lists seeds by number)."""
    return f"{count} seed" + ("s" if count > 1 else "")


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """``'kNN, 10% labels (%)'`` -> ``'kNN, 10\\% labels (\\%)'``."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)
