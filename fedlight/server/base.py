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
    """Base class: subclasses implement ``accumulate`` and ``finalize``.

    Attributes:
        communicates: False for baselines in which nothing crosses the network.
        keeps_models_local: every client keeps its whole model (no global model to load).
        pools_clients: the clients' data is pooled into a single client (centralized).
        uses_public_set: clients send ``client_message(public embeddings)`` instead of weights.
        trains_once: with ``keeps_models_local``, a client trains only until it has a model of
            its own (its first answered round); later rounds only evaluate it.
    """

    trains_once = False

    communicates = True
    uses_public_set = False
    keeps_models_local = False
    pools_clients = False

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        """Fold one client's ``payload`` (with its ``weight``, e.g. sample count) into ``acc``."""
        raise NotImplementedError

    def client_message(self, embeddings: torch.Tensor) -> State:
        """For ``uses_public_set`` servers: the message for a client's (N, d) public embeddings."""
        raise NotImplementedError

    def check_public_set(self, n: int, world: int = 1) -> int | None:
        """For ``uses_public_set`` servers, before the run starts: raise a UserError if a public set
        of ``n`` images (split over ``world`` ranks) cannot serve the server-side training; returns
        that training's optimizer steps an epoch (None: no server-side training)."""
        return None

    def zeros(self, payload: State) -> State:
        """An accumulator that adds nothing, shaped as if ``payload`` had been folded in."""
        return {k: torch.zeros_like(v) for k, v in self.accumulate(None, payload, 1.0).items()}

    def finalize(self, global_state: State, acc: State | None) -> State:
        """The new global state from the summed accumulator (None when no client answered)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Server-side state that must survive a checkpoint (default: none)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
