"""SOLO / Min-Local: every client trains alone; nothing is aggregated or communicated."""

from __future__ import annotations

from fedlight.server import ops
from fedlight.server.base import Aggregator, State


class LocalOnly(Aggregator):
    """Each client keeps its whole model between its rounds; evaluation reports the mean and
    spread of the clients' accuracies (MOON's SOLO, FLESD's Min-Local)."""

    communicates = False
    keeps_models_local = True

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        return ops.weighted_sum(acc, {}, weight)

    def finalize(self, global_state: State, acc: State | None) -> State:
        return global_state
