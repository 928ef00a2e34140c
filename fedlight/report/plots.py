"""Plots of a report, each as PNG and SVG: for every metric, accuracy vs round, accuracy vs bytes (every
direction) and accuracy vs upload bytes (``bytes_up``, what ``server.compress`` shrinks), and, where some
group's runs have a virtual clock, accuracy vs virtual hours (those groups only).

One line per group, named by its keys' values as a reader says them (``alpha = 0.1``, the
key's last part unless two keys share it; an arm by its name: ``fedlight.report.arm_groups``):
the mean over the group's seeds (the shaded band: ± one sample standard deviation, n - 1,
where there are two or more seeds, as the legend says) at the rounds every seed evaluated,
starting from round 0, the random-init model (``results.json``'s ``baseline``, 0 bytes sent).
The x of the bytes plot is the mean cumulative bytes sent by that round (the upload plot's: uploaded), of
the hours plot the mean
virtual hours at its end (``virtual_seconds``; round 0 at 0 hours). Round ticks are
integers; the legend sits outside the axes, right of the data, so no curve hides behind it.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedlight.atomic_files import atomic_write_bytes  # noqa: E402
from fedlight.eval import metric_names  # noqa: E402
from fedlight.report.arm_groups import Group, group_label  # noqa: E402
from fedlight.report.runs import Run  # noqa: E402
from fedlight.report.timing import HOUR, group_clocked  # noqa: E402

KINDS = ("round", "bytes", "upload")
HOURS = "hours"  # the third kind, where some group has a virtual clock
FORMATS = ("png", "svg")  # a picture for report.md, a vector drawing for papers
BAND = "band: ± 1 std over seeds"
REMAKE = "run fedlight report again"  # what a failed write of the report asks of its user


def plot_file(metric: str, kind: str, suffix: str = "png") -> str:
    """``('linear_probe_acc@0.1', 'round')`` -> ``'linear_probe_acc@0.1_vs_round.png'``; a character
    no file name may hold (``/``, NUL) becomes ``_``, and a name too long is cut to 200 characters."""
    safe = "".join("_" if c in "/\\\0" else c for c in metric)[:200]
    return f"{safe}_vs_{kind}.{suffix}"


def curve(runs: list[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rounds, mean cumulative bytes, mean accuracy, std accuracy over seeds) at the rounds every run
    evaluated, round 0 (the random-init baseline, no bytes) included where every run has it. A seed run
    twice (on two devices) counts once, as its runs' mean, as in the report's tables; a seed's NaN (it
    diverged) is left out of its rounds' means instead of cutting the group's line short."""
    return _mean_curve(runs, metric, lambda history: np.cumsum(
        [sum(v for k, v in row.items() if k.startswith("bytes_")) for row in history]))


def upload_curve(runs: list[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``curve`` with the mean cumulative bytes uploaded (``bytes_up``) for x."""
    return _mean_curve(runs, metric, lambda history: np.cumsum([row.get("bytes_up", 0) for row in history]))


def hours_curve(runs: list[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``curve`` with the mean virtual hours at each round's end for x (the runs need a clock)."""
    return _mean_curve(runs, metric, lambda history: [row["virtual_seconds"] / HOUR for row in history])


def _mean_curve(runs: list[Run], metric: str, xs: Callable[[list[dict[str, Any]]], Any]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``curve`` with ``xs(history)`` (an x per row, 0 at round 0) for the bytes."""
    per_run = []
    for r in runs:
        history = r.results["history"]
        cumulative = xs(history)
        points = {row["round"]: (float(b), value) for row, b in zip(history, cumulative)
                  if (value := r.named(row).get(metric)) is not None}
        start = r.named(r.results.get("baseline")).get(metric)
        if start is not None:
            points[0] = (0.0, start)
        per_run.append(points)
    rounds = sorted(set.intersection(*(set(p) for p in per_run)))
    seeds = sorted({r.seed for r in runs})
    with warnings.catch_warnings():  # a round where no seed has a finite value stays NaN: a gap in the line
        warnings.simplefilter("ignore", RuntimeWarning)
        # (seed, round, bytes / value): each seed's runs averaged first
        by_seed = np.array([np.nanmean([[p[t] for t in rounds] for p, r in zip(per_run, runs) if r.seed == seed],
                                       axis=0) for seed in seeds], dtype=float).reshape(len(seeds), len(rounds), 2)
        sent, acc = by_seed[..., 0], by_seed[..., 1]
        std = np.nanstd(acc, axis=0, ddof=1) if len(seeds) > 1 else np.zeros(len(rounds))
        return np.array(rounds), sent.mean(axis=0), np.nanmean(acc, axis=0), std


def plotted_metrics(groups: list[Group], metrics: list[str]) -> list[str]:
    """The ``metrics`` some run's history has a value of (a final-only one has no curve)."""
    return [m for m in metrics
            if any(r.named(row).get(m) is not None for _, g in groups for r in g for row in r.results["history"])]


def plot_kinds(groups: list[Group]) -> tuple[str, ...]:
    """``KINDS``, and ``HOURS`` where some group's runs have a virtual clock."""
    return (*KINDS, HOURS) if any(group_clocked(g) for g in groups) else KINDS


def plot_files(groups: list[Group], metrics: list[str]) -> list[str]:
    """The files ``write_plots`` writes, in its order, named before any is."""
    return [plot_file(metric, kind, suffix) for metric in plotted_metrics(groups, metrics)
            for kind in plot_kinds(groups) for suffix in FORMATS]


XLABEL = {"round": "round (0 = random init)", "bytes": "MB communicated (cumulative)",
          "upload": "MB uploaded (cumulative)",
          HOURS: "virtual hours (0 = random init)"}


def write_plots(groups: list[Group], keys: list[str], metrics: list[str], out: Path) -> list[str]:
    """Three plots per metric with a history into ``out`` (four with a clock), each as PNG and SVG; returns
    their file names."""
    files = []
    banded = any(len({r.seed for r in runs}) > 1 for _, runs in groups)
    for metric in plotted_metrics(groups, metrics):
        figures = {kind: plt.subplots(figsize=(7.5, 4)) for kind in plot_kinds(groups)}
        for values, runs in groups:
            name = group_label(keys, values)
            rounds, sent, acc, std = curve(runs, metric)
            lines = [("round", rounds, acc, std), ("bytes", sent / 1e6, acc, std),
                     ("upload", upload_curve(runs, metric)[1] / 1e6, acc, std)]
            if HOURS in figures and group_clocked((values, runs)):
                lines.append((HOURS, *(hours_curve(runs, metric)[1:])))
            for kind, x, y, sd in lines:
                ax = figures[kind][1]
                k = metric_names.scale(metric)  # percent, or a reading as it is
                ax.plot(x, k * y, marker="o", markersize=3, label=name)
                ax.fill_between(x, k * (y - sd), k * (y + sd), alpha=0.2)
        for kind, (fig, ax) in figures.items():
            ax.set_xlabel(XLABEL[kind])
            if kind == "round":
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(f"{metric_names.title(metric)}{metric_names.unit(metric)}")
            ax.grid(alpha=0.3)
            title = f"mean over seeds; {BAND}" if banded else "one seed per line"
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, title=title,
                      title_fontsize=7)
            for suffix in FORMATS:  # drawn in memory, then written whole: a kill leaves the old picture
                picture = io.BytesIO()
                fig.savefig(picture, format=suffix, dpi=120, bbox_inches="tight")
                atomic_write_bytes(out / plot_file(metric, kind, suffix), picture.getvalue(), then=REMAKE)
                files.append(plot_file(metric, kind, suffix))
            plt.close(fig)
    return files
