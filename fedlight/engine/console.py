"""What a run prints (rank 0): user messages, progress each round, and the final line.

On a terminal, progress is two tqdm bars (rounds, and the round's clients). Off a terminal
(a SLURM log, a pipe, ``fedlight sweep --executor local``'s log files) a carriage-return bar
turns into one long line of overwritten states, so each round prints one plain line instead:
``round 3/10: loss 1.2345, linear probe, 10% labels 0.4560, kNN, 10% labels 0.4000; 2.1 s``.
"""

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


def metrics_text(metrics: dict[str, Any], label_fraction: float) -> str:
    """``'test 0.9100, linear probe, 10% labels 0.8000, kNN, 10% labels 0.7000'``: the numeric metrics,
    main one first, each named with its label fraction (spreads over clients, ``*_std``, left out)."""
    named = metric_names.with_fraction(metrics, label_fraction)
    shown = [k for k, v in named.items() if metric_names.is_metric(k) and isinstance(v, (int, float))
             and not isinstance(v, bool) and not k.endswith("_std") and math.isfinite(v)]
    return ", ".join(f"{metric_names.title(k)} {named[k]:.4f}" for k in metric_names.order(shown))


class RoundProgress:
    """Progress over a run's rounds: tqdm bars on a terminal, one plain line per round elsewhere.

    Args:
        start: rounds already done (a resumed run).
        total: the run's rounds.
        enabled: whether this process shows anything (rank 0).
        label_fraction: ``eval.label_fraction``, named next to the probe and kNN accuracies.
    """

    def __init__(self, start: int, total: int, enabled: bool, label_fraction: float) -> None:
        self.total, self.enabled, self.label_fraction = total, enabled, label_fraction
        self.bars = enabled and interactive()
        self.bar = tqdm(initial=start, total=total, desc="rounds", disable=not self.bars, dynamic_ncols=True)

    def clients(self, round_: int, count: int) -> tqdm:
        """A bar over the ``count`` clients of round ``round_`` (0-based); silent off a terminal."""
        return tqdm(total=count, leave=False, desc=f"round {round_ + 1} clients", disable=not self.bars,
                    dynamic_ncols=True)

    def round_done(self, row: dict[str, Any], last_eval: dict[str, Any] | None) -> None:
        """Show a finished round's history ``row`` (and the latest evaluation, ``last_eval``, on the bar)."""
        loss = row.get("train_loss")
        if self.bars:
            probe = (last_eval or {}).get(metric_names.PROBE)
            self.bar.set_postfix(loss=f"{loss:.3f}" if loss is not None else "-",
                                 probe=f"{probe:.3f}" if probe is not None else "-", refresh=False)
            self.bar.update(1)
        elif self.enabled:
            measured = metrics_text(row, self.label_fraction)
            print(f"round {row['round']}/{self.total}: loss {'-' if loss is None else f'{loss:.4f}'}"
                  f"{', ' + measured if measured else ''}; {row['seconds']:.1f} s", flush=True)

    def close(self) -> None:
        self.bar.close()


def final_line(results: dict[str, Any]) -> str:
    """The last line of ``fedlight fit``: every final metric, main one first and each probe named by
    its label fraction, with its random-init value; the wall time; the run folder."""
    recipe = results.get("recipe") or {}
    fraction = (recipe.get("eval") or {}).get("label_fraction", 1.0)
    final = metric_names.with_fraction(results.get("final") or {}, fraction)
    base = metric_names.with_fraction(results.get("baseline") or {}, fraction)
    shown = [k for k in metric_names.order(list(final)) if isinstance(final[k], (int, float))
             and not isinstance(final[k], bool) and not k.endswith("_std")]
    parts = [f"{metric_names.title(k)} {final[k]:.4f}"
             + (f" (random init {base[k]:.4f})" if isinstance(base.get(k), (int, float)) else "") for k in shown]
    folder = (recipe.get("run") or {}).get("dir") or f"runs/{recipe.get('name')}"
    return f"final: {'; '.join(parts) or 'no metric'}; {results['wall_seconds']:.1f} s; run folder {folder}"
