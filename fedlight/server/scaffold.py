"""SCAFFOLD's server (Karimireddy et al., ICML 2020): average the weights, move the control variate."""

from __future__ import annotations

import torch

from fedlight.server import ops
from fedlight.server.aggregator import Aggregator, State

CONTROL_DELTA = "control_delta."
CONTROL_GLOBAL = "control_global."
COUNT_KEY = "__count__"


class ScaffoldServer(Aggregator):
    """w <- weighted mean of w_i (global step size 1); c <- c + (|S| / N) * mean_i(c_i+ - c_i).

    Weights are averaged by sample count like every aggregator here; the control variate
    follows the paper's unweighted mean over the |S| clients that answered.

    Args:
        num_clients: N, the number of clients in the federation that train (the engine's: ``clients.num``,
            less a public client, which never trains).
    """

    payload_is_state = False  # the clients' control-variate deltas travel beside the weights

    def __init__(self, num_clients: int) -> None:
        self.num_clients = num_clients

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        model = {k: v for k, v in payload.items() if not k.startswith(CONTROL_DELTA)}
        deltas = {k: v for k, v in payload.items() if k.startswith(CONTROL_DELTA)}
        acc = ops.weighted_sum(acc, model, weight)
        for k, v in deltas.items():
            acc[k] = acc.get(k, torch.zeros_like(v, dtype=torch.float64)) + v.double()
        acc[COUNT_KEY] = acc.get(COUNT_KEY, torch.zeros((), dtype=torch.float64)) + 1
        return acc

    def finalize(self, global_state: State, acc: State | None) -> State:
        if acc is None or float(acc[COUNT_KEY]) == 0:
            return global_state
        model_like = {k: v for k, v in global_state.items() if not k.startswith(CONTROL_GLOBAL)}
        out = ops.finish_average(acc, model_like)
        for k, c in global_state.items():
            if k.startswith(CONTROL_GLOBAL):
                delta_sum = acc[CONTROL_DELTA + k.split(".", 1)[1]]
                out[k] = (c.double() + delta_sum / self.num_clients).to(c.dtype)  # (|S|/N) * (sum / |S|)
        return out
