"""Pure state-dict math of aggregation, with no framework in sight: what every aggregator, fedlight's
or another package's, builds on (exported from ``fedlight``).

A state maps names to tensors (``{"conv.weight": (C_out, C_in, k, k), "bn.num_batches_tracked": ()}``).
Sums are kept in float64 so that the order in which clients (or processes) add up matters as little
as possible; rules that see every client at once work on a ``(n, D)`` float64 matrix, one row per
client (``flatten_states``), and turn their ``(D,)`` answer back into a state (``unflatten_state``).
"""

from __future__ import annotations

import torch

State = dict[str, torch.Tensor]
WEIGHT_KEY = "__weight__"
"""The key under which ``weighted_sum`` keeps a running sum's total client weight (a float64 scalar)."""


def weighted_sum(acc: State | None, state: State, weight: float) -> State:
    """``acc + weight * state`` (float64), with the running total weight under ``WEIGHT_KEY``: a
    sum-contract aggregator's ``accumulate`` (the engine adds such sums across processes).

    Args:
        acc: the sum so far (None: start one), as this function returned it.
        state: one client's payload, name -> tensor.
        weight: its weight (e.g. its sample count).

    Examples:
        >>> acc = weighted_sum(None, {"w": torch.tensor([1.0, 2.0])}, 3.0)
        >>> finish_average(weighted_sum(acc, {"w": torch.tensor([5.0, 6.0])}, 1.0), {"w": torch.zeros(2)})
        {'w': tensor([2., 3.])}
    """
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
    """Weighted mean of ``states`` (FedAvg, McMahan et al. 2017); weights need not sum to one.

    Examples:
        >>> weighted_average([{"w": torch.tensor([0.0])}, {"w": torch.tensor([4.0])}], [3, 1])
        {'w': tensor([1.])}
    """
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


def float_keys(state: State) -> list[str]:
    """The names of ``state``'s floating-point tensors, in its order: the entries a rule on vectors
    (distances, norms, noise) works on; integer buffers (BatchNorm's ``num_batches_tracked``) are not."""
    return [k for k, v in state.items() if v.is_floating_point()]


def stack_states(states: list[State], key: str) -> torch.Tensor:
    """``(n, *shape)`` float64 on the CPU: every state's ``key``, one row per state, in list order (what a
    coordinate-wise rule such as ``coordinate_median`` takes)."""
    return torch.stack([s[key].detach().to("cpu", torch.float64) for s in states])


def flatten_states(states: list[State], keys: list[str]) -> torch.Tensor:
    """``(n, D)`` float64 on the CPU: each state's tensors under ``keys``, flattened and concatenated in
    that order, one row per state (D: their total number of elements).

    Examples:
        >>> flatten_states([{"a": torch.ones(2, 2), "b": torch.zeros(1)}], ["a", "b"])
        tensor([[1., 1., 1., 1., 0.]], dtype=torch.float64)
    """
    return torch.stack([torch.cat([s[k].detach().to("cpu", torch.float64).reshape(-1) for k in keys])
                        for s in states])


def unflatten_state(vector: torch.Tensor, like: State, keys: list[str]) -> State:
    """The inverse of ``flatten_states`` for one row: ``vector`` (D,) cut into ``like``'s tensors under
    ``keys`` (their shapes, in that order), each cast as ``cast_like`` casts it to ``like``'s.

    Examples:
        >>> like = {"a": torch.zeros(2, 2), "n": torch.tensor(0)}
        >>> unflatten_state(torch.arange(4.0), like, ["a"])
        {'a': tensor([[0., 1.],
                [2., 3.]])}
    """
    sizes = [like[k].numel() for k in keys]
    if vector.numel() != sum(sizes):
        raise ValueError(f"a vector of {vector.numel()} values cannot fill {sum(sizes)} values of {len(keys)} tensors")
    return {k: cast_like(part.reshape(like[k].shape), like[k]) for k, part in zip(keys, vector.split(sizes))}


def cast_like(value: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``value`` in ``ref``'s dtype and on its device (rounded first for an integer ``ref``)."""
    return (value if ref.is_floating_point() else value.round()).to(ref.device, ref.dtype)
