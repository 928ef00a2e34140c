"""SOLO / Min-Local: every client trains alone; nothing is aggregated or communicated."""

from __future__ import annotations

from typing import Literal

from fedlight.server import ops
from fedlight.server.aggregator import Aggregator, State


class LocalOnly(Aggregator):
    """Each client keeps its whole model between its rounds; evaluation reports the mean and
    spread of the clients' accuracies (MOON's SOLO, FLESD's Min-Local).

    Args:
        budget: how much a client trains. ``per_round``: E local epochs every round it is
            sampled, R x E in all over R rounds (as the federated methods it is compared
            with). ``once``: E epochs in all, in the first round it is sampled and answers;
            after that its model is only evaluated (the MOON authors' SOLO, whose
            ``local_training`` runs E epochs once).
    """

    communicates = False
    keeps_models_local = True

    def __init__(self, budget: Literal["per_round", "once"] = "per_round") -> None:
        self.trains_once = budget == "once"

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        return ops.weighted_sum(acc, {}, weight)

    def finalize(self, global_state: State, acc: State | None) -> State:
        return global_state
