"""FedAvg: the sample-count-weighted average of the clients' shared state (McMahan et al. 2017)."""

from __future__ import annotations

from typing import Annotated

from fedlight.config.checks import positive
from fedlight.server import ops
from fedlight.server.base import Aggregator, State


class FedAvg(Aggregator):
    """Weighted averaging, renormalised over the clients that answered this round.

    Weights are the clients' local sample counts (the MOON code's fix: normalised over the
    *sampled* clients, not all K). With no answer the global state is kept.

    Args:
        aggregate_every: if set, a round is this many local SGD iterations (CF-CL's Ta)
            instead of ``local.epochs`` epochs, and a client's weight is its mean local set
            size over those iterations (CF-CL eq. 5).
    """

    def __init__(self, aggregate_every: Annotated[int | None, positive] = None) -> None:
        self.aggregate_every = aggregate_every

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        return ops.weighted_sum(acc, payload, weight)

    def finalize(self, global_state: State, acc: State | None) -> State:
        if acc is None or float(acc[ops.WEIGHT_KEY]) == 0:
            return global_state
        return ops.finish_average(acc, global_state)
