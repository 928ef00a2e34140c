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
