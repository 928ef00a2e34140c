"""The narrow interface every aggregator implements (in the spirit of Flower's Strategy).

Aggregation is a sum followed by a finish: each process folds the payloads of the clients
it trained into an accumulator (``accumulate``), the engine sums accumulators across
processes, and ``finalize`` turns the total into the new global state. Memory therefore
stays constant in the number of clients per round.
"""

from __future__ import annotations

from typing import Any

import torch

State = dict[str, torch.Tensor]


class Aggregator:
    """Base class: subclasses implement ``accumulate`` and ``finalize``."""

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        """Fold one client's ``payload`` (with its ``weight``, e.g. sample count) into ``acc``."""
        raise NotImplementedError

    def finalize(self, global_state: State, acc: State | None) -> State:
        """The new global state from the summed accumulator (None when no client answered)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Server-side state that must survive a checkpoint (default: none)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
