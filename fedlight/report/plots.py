"""PNG plots of a report: accuracy vs round and accuracy vs bytes communicated, one line per group.

Each line is the mean over the group's seeds (shaded: ± sample std where there are two or
more) of the linear-probe accuracy (kNN where no probe was run) at the rounds every seed
evaluated; its x for the bytes plot is the mean cumulative bytes sent by that round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedlight.report.runs import Run  # noqa: E402

FILES = ("accuracy_vs_round.png", "accuracy_vs_bytes.png")


def metric_of(groups: list[tuple[Any, list[Run]]]) -> str:
    """linear_probe_acc when any run has it, else knn_acc."""
    has_probe = any(row.get("linear_probe_acc") is not None for _, g in groups for r in g for row in r.results["history"])
    return "linear_probe_acc" if has_probe else "knn_acc"


def curve(runs: list[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rounds, mean cumulative bytes, mean accuracy, std accuracy) at rounds every run evaluated."""
    per_run = []
    for r in runs:
        history = r.results["history"]
        cumulative = np.cumsum([sum(v for k, v in row.items() if k.startswith("bytes_")) for row in history])
        per_run.append({row["round"]: (float(b), row[metric]) for row, b in zip(history, cumulative)
                        if row.get(metric) is not None})
    rounds = sorted(set.intersection(*(set(p) for p in per_run)))
    acc = np.array([[p[t][1] for t in rounds] for p in per_run])
    sent = np.array([[p[t][0] for t in rounds] for p in per_run])
    std = acc.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(rounds))
    return np.array(rounds), sent.mean(axis=0), acc.mean(axis=0), std


def write_plots(groups: list[tuple[tuple[Any, ...], list[Run]]], keys: list[str], out: Path) -> list[str]:
    """Write the two PNGs into ``out``; returns their file names."""
    metric = metric_of(groups)
    label = {"linear_probe_acc": "linear probe accuracy (%)", "knn_acc": "kNN accuracy (%)"}[metric]
    figures = [plt.subplots(figsize=(6, 4)) for _ in FILES]
    for values, runs in groups:
        name = ", ".join(f"{k}={v}" for k, v in zip(keys, values)) or "all runs"
        rounds, sent, acc, std = curve(runs, metric)
        for (_, ax), x in zip(figures, (rounds, sent / 1e6)):
            ax.plot(x, 100 * acc, marker="o", markersize=3, label=name)
            ax.fill_between(x, 100 * (acc - std), 100 * (acc + std), alpha=0.2)
    for (fig, ax), xlabel, file in zip(figures, ("round", "MB communicated (cumulative)"), FILES):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / file, dpi=120)
        plt.close(fig)
    return list(FILES)
