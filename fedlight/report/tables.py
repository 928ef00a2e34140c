"""The report's group table in three formats: Markdown (``report.md``), CSV and LaTeX.

One row per group of runs (the same values of the grouping keys): the keys' values, the
number of seeds, each metric's mean and sample standard deviation (n - 1) over the seeds (a
seed run twice counts once, as its runs' mean) in percent beside its random-init value (the
mean of the runs' ``baseline``; a group that ends below it says so: ``45.00 ± 1.00 (init
50.00; below init)``), and the bytes communicated per run in MB (10^6 bytes). Column headers name the label fraction of the probe and kNN accuracies
(``linear probe, 10% labels (%)``).
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
    values), and the mean of its random-init values (None where the runs have none)."""

    mean: float | None
    std: float | None
    init: float | None = None

    @classmethod
    def of(cls, values: list[float], inits: list[float] | None = None) -> Cell:
        init = 100 * statistics.fmean(inits) if inits else None
        if not values:
            return cls(None, None, init)
        return cls(100 * statistics.fmean(values), 100 * statistics.stdev(values) if len(values) > 1 else None, init)

    @property
    def below_init(self) -> bool:
        """Whether training ended below the random-init encoder."""
        return self.mean is not None and self.init is not None and self.mean < self.init

    def text(self, plus_minus: str = " ± ") -> str:
        """``'85.31 ± 0.42'``, ``'85.31'`` for one value, ``'-'`` for none."""
        if self.mean is None:
            return "-"
        return f"{self.mean:.2f}" if self.std is None else f"{self.mean:.2f}{plus_minus}{self.std:.2f}"

    def with_init(self, plus_minus: str = " ± ") -> str:
        """``text`` and the random-init value: ``'85.31 ± 0.42 (init 73.68)'``, ``'...; below init)'`` under it."""
        if self.mean is None or self.init is None:
            return self.text(plus_minus)
        return f"{self.text(plus_minus)} (init {self.init:.2f}{'; below init' if self.below_init else ''})"


@dataclass(frozen=True)
class GroupTable:
    """The group table: grouping ``keys``, ``metrics`` (named with label fractions) and one row per group."""

    keys: list[str]
    metrics: list[str]
    rows: list[tuple[tuple[Any, ...], int, list[Cell], float]]  # (key values, seeds, a cell per metric, MB)

    @classmethod
    def build(cls, groups: list[tuple[tuple[Any, ...], list[Run]]], keys: list[str], metrics: list[str]) -> GroupTable:
        rows = [(values, len({r.seed for r in runs}),
                 [Cell.of(list(seed_means(runs, m).values()), [r.baseline[m] for r in runs if m in r.baseline])
                  for m in metrics],
                 statistics.fmean(r.total_bytes for r in runs) / 1e6) for values, runs in groups]
        return cls(keys, metrics, rows)

    def headers(self) -> list[str]:
        return [*self.keys, "seeds", *(f"{metric_names.title(m)} (%)" for m in self.metrics), "MB communicated"]

    def markdown(self) -> list[str]:
        """The table's Markdown lines."""
        rows = [[*map(md_cell, values), str(seeds), *(c.with_init() for c in cells), f"{mb:.2f}"]
                for values, seeds, cells, mb in self.rows]
        return markdown_table(self.headers(), rows)

    def csv(self) -> str:
        """One column per key, then per metric a mean, a std and a random-init column (in %, empty where
        there is none), the MB, and the metrics that ended below their random init."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        metric_columns = [f"{metric_names.title(m)} {part} (%)" for m in self.metrics
                          for part in ("mean", "std", "random init")]
        writer.writerow([*self.keys, "seeds", *metric_columns, "MB communicated", "below random init"])
        for values, seeds, cells, mb in self.rows:
            numbers = [_number(x) for c in cells for x in (c.mean, c.std, c.init)]
            below = "; ".join(metric_names.title(m) for m, c in zip(self.metrics, cells) if c.below_init)
            keys = ("" if v is None or v is ABSENT else v for v in values)
            writer.writerow([*keys, seeds, *numbers, f"{mb:.4f}", below])
        return buffer.getvalue()

    def latex(self) -> str:
        """A ``booktabs`` tabular, mean ± std as ``$85.31 \\pm 0.42$``.

        Written by hand: the one library that writes LaTeX tables here would be pandas (with
        jinja2), which fedlight does not depend on, for a dozen lines of text.
        """
        align = "l" * (len(self.keys) + 1) + "r" * (len(self.metrics) + 1)
        lines = [f"\\begin{{tabular}}{{{align}}}", "\\toprule",
                 " & ".join(latex_escape(h) for h in self.headers()) + " \\\\", "\\midrule"]
        for values, seeds, cells, mb in self.rows:
            metric_cells = [latex_cell(c) for c in cells]
            lines.append(" & ".join([*(latex_escape(md_cell(v)) for v in values), str(seeds), *metric_cells,
                                     f"{mb:.2f}"]) + " \\\\")
        return "\n".join([*lines, "\\bottomrule", "\\end{tabular}"]) + "\n"


def seed_means(runs: list[Run], metric: str) -> dict[int, float]:
    """Seed -> the final ``metric`` of that seed's runs (their mean where a group ran a seed twice, e.g. on
    two devices, so each seed counts once), in seed order; seeds without a finite value left out."""
    values: dict[int, list[float]] = {}
    for run in runs:
        value = run.final.get(metric)
        if isinstance(value, (int, float)) and math.isfinite(value):
            values.setdefault(run.seed, []).append(value)
    return {seed: statistics.fmean(v) for seed, v in sorted(values.items())}


def latex_cell(cell: Cell) -> str:
    """``'$85.31 \\pm 0.42$ (init 73.68)'``, in bold when below its random init; ``'--'`` for none."""
    if cell.mean is None:
        return "--"
    text = "$" + cell.text(r" \pm ") + "$"
    if cell.init is None:
        return text
    return (rf"\textbf{{{text}}} (init {cell.init:.2f}; below init)" if cell.below_init
            else f"{text} (init {cell.init:.2f})")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def md_cell(value: Any) -> str:
    """A recipe value as a Markdown table cell (``-`` for none, empty for a key the recipe does not
    define, ``|`` escaped)."""
    if value is ABSENT:
        return ""
    return "-" if value is None else str(value).replace("|", "\\|")


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """``'kNN, 10% labels (%)'`` -> ``'kNN, 10\\% labels (\\%)'``."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)
