"""Per-client persistent private state, kept off the training device.

The engine trains every client on one worker model per process; whatever a method must
remember about a client between its rounds (BYOL's target network, MOON's previous model,
SCAFFOLD's control variate) lives here, so memory grows with that state, not with K models.
"""

from __future__ import annotations

from typing import Callable

import torch

State = dict[str, torch.Tensor]


class ClientStateStore:
    """A mapping client id -> private state dict, stored on CPU."""

    def __init__(self) -> None:
        self._states: dict[int, State] = {}

    def get(self, client: int) -> State | None:
        """The client's saved state, or None if it has none yet."""
        return self._states.get(client)

    def put(self, client: int, state: State) -> None:
        """Save a detached CPU copy of ``state`` for ``client`` (nothing is kept for empty state)."""
        if state:
            self._states[client] = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}

    def state_dict(self) -> dict[int, State]:
        return dict(self._states)

    def load_state_dict(self, states: dict[int, State], keep: Callable[[int], bool] = lambda c: True) -> None:
        """Restore states; ``keep`` selects the clients this process owns."""
        self._states = {int(c): s for c, s in states.items() if keep(int(c))}
