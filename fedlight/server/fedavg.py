"""FedAvg: the sample-count-weighted average of the clients' shared state (McMahan et al. 2017)."""

from __future__ import annotations

from fedlight.server import ops
from fedlight.server.aggregator import Aggregator, State


class FedAvg(Aggregator):
    """Weighted averaging, renormalised over the clients that answered this round.

    Weights are the clients' local sample counts (the MOON code's fix: normalised over the
    *sampled* clients, not all K). With no answer the global state is kept.
    """

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        return ops.weighted_sum(acc, payload, weight)

    def finalize(self, global_state: State, acc: State | None) -> State:
        if acc is None or float(acc[ops.WEIGHT_KEY]) == 0:
            return global_state
        return ops.finish_average(acc, global_state)
