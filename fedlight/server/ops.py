"""Pure tensor math of aggregation, with no framework in sight.

State dicts here map names to tensors. Sums are kept in float64 so that the order in
which clients (or processes) add up matters as little as possible.
"""

from __future__ import annotations

import torch

State = dict[str, torch.Tensor]
WEIGHT_KEY = "__weight__"


def weighted_sum(acc: State | None, state: State, weight: float) -> State:
    """``acc + weight * state`` (float64), with the running total weight under ``WEIGHT_KEY``."""
    if acc is None:
        acc = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in state.items()}  # keeps v's memory format
        acc[WEIGHT_KEY] = torch.zeros((), dtype=torch.float64)
    for k, v in state.items():
        acc[k].add_(v.detach(), alpha=weight)  # promoted to float64 element by element, no float64 copy of v
    acc[WEIGHT_KEY] += weight
    return acc


def finish_average(acc: State, like: State) -> State:
    """Divide a ``weighted_sum`` by its total weight; cast back to ``like``'s dtypes (ints rounded)."""
    total = acc[WEIGHT_KEY]
    out = {}
    for k, ref in like.items():
        mean = acc[k] / total
        out[k] = (mean.round() if not ref.is_floating_point() else mean).to(ref.dtype)
    return out


def weighted_average(states: list[State], weights: list[float]) -> State:
    """Weighted mean of ``states`` (FedAvg, McMahan et al. 2017); weights need not sum to one."""
    if not states or len(states) != len(weights):
        raise ValueError("need one weight per state and at least one state")
    acc = None
    for state, w in zip(states, weights):
        acc = weighted_sum(acc, state, float(w))
    return finish_average(acc, states[0])


def update_norm(state: State, reference: State) -> float | None:
    """L2 norm of ``state - reference`` over the floating-point tensors both hold (each tensor's
    norm in its dtype, their sum of squares in float64): a client's update, what it sends minus
    the model it was sent. None if they share no such tensor.

    Args:
        state: e.g. a client's payload, name -> tensor.
        reference: e.g. the round's global model; tensors of the same shapes under the same names.
    """
    names = [k for k, v in state.items() if v.is_floating_point() and k in reference]
    if not names:
        return None
    deltas = torch._foreach_sub([state[k].detach() for k in names], [reference[k] for k in names])
    return float(torch.stack(torch._foreach_norm(deltas)).double().square().sum().sqrt())
