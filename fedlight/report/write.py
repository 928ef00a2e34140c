"""``report.md``: finished runs grouped by the recipe keys that vary (seed excepted).

Each group's row gives, per final accuracy, the mean and the sample standard deviation
(n - 1) over its seeds, in percent, and the bytes communicated per run (up + down + device
to device + LG-FedAvg's new-test upload, mean over seeds), in MB (10^6 bytes). Below: one row
per run, and the plots.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from fedlight.config.files import output_folder_problem
from fedlight.errors import UserError
from fedlight.report.plots import write_plots
from fedlight.report.runs import Run, find_runs, varying_keys

METRIC_NAMES = {"linear_probe_acc": "linear probe (%)", "knn_acc": "kNN (%)", "test_acc": "test (%)"}
REPORT = "report.md"

Group = tuple[tuple[Any, ...], list[Run]]


def metric_keys(runs: list[Run]) -> list[str]:
    """Final metrics any run has a value for: probe, kNN, test accuracy, then the rest by name."""
    present = {k for r in runs for k, v in r.results["final"].items() if v is not None}
    known = [k for k in METRIC_NAMES if k in present]
    return known + sorted(present - set(known))


def group_runs(runs: list[Run], keys: list[str]) -> list[Group]:
    """Runs grouped by their values of ``keys``, groups in order of first appearance."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(repr(run.keys.get(k)) for k in keys), []).append(run)
    return [(tuple(g[0].keys.get(k) for k in keys), g) for g in groups.values()]


def mean_std(values: list[float]) -> str:
    """``'85.31 ± 0.42'`` (percent; sample std), ``'85.31'`` for one value, ``'-'`` for none."""
    if not values:
        return "-"
    mean = 100 * statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {100 * statistics.stdev(values):.2f}"


def megabytes(runs: list[Run]) -> str:
    return f"{statistics.fmean(r.total_bytes for r in runs) / 1e6:.2f}"


def _cell(value: Any) -> str:
    return "-" if value is None else str(value).replace("|", "\\|")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def render(runs: list[Run], sources: list[str], plots: list[str], out: Path) -> str:
    """The markdown text of the report (run folders relative to ``out``, where it is written)."""
    done = [r for r in runs if r.finished]
    keys = [k for k in varying_keys(done) if k != "seed"]
    metrics = metric_keys(done)
    lines = ["# fedlight report", "",
             f"{len(done)} finished runs from {', '.join(f'`{s}`' for s in sources)}; grouped by "
             + (", ".join(f"`{k}`" for k in keys) or "nothing (no recipe key varies)")
             + f"; seeds {sorted({r.seed for r in done})}.",
             "Accuracies: mean ± sample std over seeds, in %. Bytes: sent per run (up + down + device to device), "
             "mean over seeds, in MB (10^6 bytes).", ""]
    header = [*keys, "seeds", *(METRIC_NAMES.get(m, f"{m} (%)") for m in metrics), "MB communicated"]
    rows = [[*map(_cell, values), str(len(group)),
             *(mean_std([r.results["final"][m] for r in group if r.results["final"].get(m) is not None]) for m in metrics),
             megabytes(group)] for values, group in group_runs(done, keys)]
    lines += _table(header, rows) + [""]
    lines += [f"![{p.removesuffix('.png').replace('_', ' ')}]({p})" for p in plots] + [""]
    lines += ["## Runs", ""]
    run_rows = [[f"`{os.path.relpath(r.path, out.resolve())}`", *(_cell(r.keys.get(k)) for k in keys), str(r.seed),
                 *(mean_std([r.results["final"][m]] if r.results["final"].get(m) is not None else []) for m in metrics),
                 f"{r.total_bytes / 1e6:.2f}", str(r.results["rounds_completed"])] for r in done]
    lines += _table(["run", *keys, "seed", *(METRIC_NAMES.get(m, m) for m in metrics), "MB", "rounds"], run_rows)
    unfinished = [r for r in runs if not r.finished]
    if unfinished:
        listed = ", ".join(f"`{r.path}` ({r.results.get('rounds_completed', 0)} rounds)" for r in unfinished)
        lines += ["", f"Not finished (left out): {listed}"]
    return "\n".join(lines) + "\n"


def write_report(paths: list[str], out: str | Path) -> Path:
    """Read the runs under ``paths``; write ``report.md`` and the plots into ``out``; returns the report path."""
    out = Path(out)
    blocked = output_folder_problem(out)
    if blocked:
        raise UserError(f"--out {blocked}; give --out a folder to write the report into")
    runs = find_runs(paths)  # every results.json is read and checked before anything is written
    done = [r for r in runs if r.finished]
    out.mkdir(parents=True, exist_ok=True)
    keys = [k for k in varying_keys(done) if k != "seed"]
    plots = write_plots(group_runs(done, keys), keys, out) if done else []
    path = out / REPORT
    tmp = out / f".{REPORT}.tmp"  # report.md is the old one or the new one, never half of one
    tmp.write_text(render(runs, [str(p) for p in paths], plots, out))
    os.replace(tmp, path)
    return path
