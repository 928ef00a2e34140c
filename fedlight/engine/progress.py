"""The run's progress bars on the terminal (rank 0): one over the rounds, one over each round's clients."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from tqdm.auto import tqdm


class RoundBars:
    """A bar over rounds ``done`` .. ``total`` and, inside it, one over each round's ``clients``.

    Args:
        done: rounds already completed (a resumed run starts its bar there).
        total: R, the run's rounds.
        clients: clients sampled a round.
        enabled: whether this process shows them (rank 0).
    """

    def __init__(self, done: int, total: int, clients: int, enabled: bool = True) -> None:
        self.clients, self.enabled = clients, enabled
        self.bar = tqdm(range(done, total), initial=done, total=total, desc="rounds", disable=not enabled,
                        dynamic_ncols=True)

    def __iter__(self) -> Iterator[int]:
        return iter(self.bar)

    @contextmanager
    def round(self, round_: int) -> Iterator[Callable[[], None]]:
        """The (0-based) round's clients bar; yields the tick a trained client calls. An exception
        closes both bars, so a stopped run's last line is its message, not a progress bar."""
        bar = tqdm(total=self.clients, leave=False, desc=f"round {round_ + 1} clients", disable=not self.enabled,
                   dynamic_ncols=True)
        try:
            yield lambda: bar.update(1)
        except BaseException:
            bar.close()
            self.bar.close()
            raise
        bar.close()

    def show(self, loss: float | None, probe: float | None) -> None:
        """The last round's mean training loss and the last evaluation's linear probe accuracy."""
        self.bar.set_postfix(loss=f"{loss:.3f}" if loss is not None else "-",
                             probe=f"{probe:.3f}" if probe is not None else "-")

    def close(self) -> None:
        self.bar.close()
