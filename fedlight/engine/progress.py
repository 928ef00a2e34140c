"""The run's progress (rank 0): tqdm bars on a terminal, one plain line per round elsewhere.

On a terminal there are two bars, one over the rounds and one over each round's clients. Off a
terminal (a SLURM log, a pipe, ``fedlight sweep --executor local``'s log files) a carriage-return
bar turns into one long line of overwritten states, so each round prints one plain line instead:
``round 3/10: loss 1.2345, linear probe, 10% labels 0.4560, kNN, 10% labels 0.4000; 2.1 s``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from tqdm.auto import tqdm

from fedlight.engine.console import interactive, metrics_text
from fedlight.eval import metric_names


class ClientTicks:
    """One round's clients bar: ``expect(n)`` once the round knows which clients this process
    trains (a plug-in may add some, e.g. a new device; a resumed round has fewer left), then a
    call per trained client."""

    def __init__(self, bar: tqdm | None = None) -> None:
        self.bar = bar if bar is not None else tqdm(disable=True)  # none shown (benchmarks driving rounds)

    def expect(self, clients: int) -> None:
        self.bar.reset(total=clients)

    def __call__(self) -> None:
        self.bar.update(1)


class RoundBars:
    """Progress over rounds ``done`` .. ``total`` and, inside each, over the clients it trains.

    Args:
        done: rounds already completed (a resumed run starts there).
        total: R, the run's rounds.
        enabled: whether this process shows anything (rank 0).
        label_fraction: ``eval.label_fraction``, named next to the probe and kNN accuracies.
    """

    def __init__(self, done: int, total: int, enabled: bool = True, label_fraction: float = 1.0) -> None:
        self.total, self.enabled, self.label_fraction = total, enabled, label_fraction
        self.bars = enabled and interactive()
        self.bar = tqdm(range(done, total), initial=done, total=total, desc="rounds", disable=not self.bars,
                        dynamic_ncols=True)

    def __iter__(self) -> Iterator[int]:
        return iter(self.bar)

    @contextmanager
    def round(self, round_: int) -> Iterator[ClientTicks]:
        """The (0-based) round's clients bar, as the ticks a trained client calls. An exception
        closes both bars, so a stopped run's last line is its message, not a progress bar."""
        bar = tqdm(total=None, leave=False, desc=f"round {round_ + 1} clients", disable=not self.bars,
                   dynamic_ncols=True)
        try:
            yield ClientTicks(bar)
        except BaseException:
            bar.close()
            self.bar.close()
            raise
        bar.close()

    def show(self, row: dict[str, Any], last_eval: dict[str, Any] | None) -> None:
        """A finished round's history ``row``: its loss and the latest evaluation's (``last_eval``) probe
        on the bar, or one plain line with the metrics it measured."""
        loss = row.get("train_loss")
        if self.bars:
            probe = (last_eval or {}).get(metric_names.PROBE)
            self.bar.set_postfix(loss=f"{loss:.3f}" if loss is not None else "-",
                                 probe=f"{probe:.3f}" if probe is not None else "-")
        elif self.enabled:
            measured = metrics_text(row, self.label_fraction)
            print(f"round {row['round']}/{self.total}: loss {'-' if loss is None else f'{loss:.4f}'}"
                  f"{', ' + measured if measured else ''}; {row['seconds']:.1f} s", flush=True)

    def close(self) -> None:
        self.bar.close()
