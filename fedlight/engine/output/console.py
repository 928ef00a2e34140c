"""What a run prints (rank 0): user messages, a round's metrics as text, and the final line
(the progress over rounds is ``fedlight.engine.output.progress``)."""

from __future__ import annotations

import math
import sys
from typing import Any

from tqdm.auto import tqdm

from fedlight.eval import metric_names


def say(message: str, rank: int = 0) -> None:
    """``fedlight: message`` on stderr, from rank 0 only."""
    if rank == 0:
        tqdm.write(f"fedlight: {message}", file=sys.stderr)


def interactive() -> bool:
    """Whether progress bars can redraw in place: stdout and stderr (tqdm's) are both terminals."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def _shown(named: dict[str, Any]) -> list[str]:
    """The keys of ``named`` a line prints, main metric first: finite numbers, not spreads (``*_std``)."""
    return metric_names.order([k for k, v in named.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                               and not metric_names.is_spread(k) and math.isfinite(v)])


def value_text(key: str, value: float) -> str:
    """An accuracy or AUC in percent, as the README and ``fedlight report`` print it (``'77.76%'``);
    any other number to four decimals."""
    return f"{100 * value:.2f}%" if metric_names.is_metric(key) else f"{value:.4f}"


def metrics_text(metrics: dict[str, Any], label_fraction: float) -> str:
    """``'test 91.00%, linear probe, 10% labels 80.00%, kNN, 10% labels 70.00%'``: the accuracies, main
    one first, each named with its label fraction (spreads over clients, ``*_std``, left out)."""
    named = metric_names.with_fraction(metrics, label_fraction)
    return ", ".join(f"{metric_names.title(k)} {value_text(k, named[k])}" for k in _shown(named)
                     if metric_names.is_metric(k))


def final_line(results: dict[str, Any]) -> str:
    """The last line of ``fedlight fit``: every final metric, main one first and each probe named by
    its label fraction, with its random-init value; the wall time; the run folder."""
    recipe = results.get("recipe") or {}
    fraction = (recipe.get("eval") or {}).get("label_fraction", 1.0)
    final = metric_names.with_fraction(results.get("final") or {}, fraction)
    base = metric_names.with_fraction(results.get("baseline") or {}, fraction)
    parts = [f"{metric_names.title(k)} {value_text(k, final[k])}"
             + (f" (random init {value_text(k, base[k])})" if isinstance(base.get(k), (int, float)) else "")
             for k in _shown(final) if metric_names.is_metric(k) or k in metric_names.FINAL_READINGS]
    folder = (recipe.get("run") or {}).get("dir") or f"runs/{recipe.get('name')}"
    return f"final: {'; '.join(parts) or 'no metric'}; {results['wall_seconds']:.1f} s; run folder {folder}"
