"""How an asynchronous server applies the updates that land: FedBuff's buffer and FedAsync's mixing.

FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022, Alg. 1):
the server collects K updates, each ``Delta_i = y_i - x_{v_i}`` (the client's model minus the version it
started from) weighted by its staleness ``s(tau_i)``, then steps ``x <- x + eta_g * sum_i w_i s_i Delta_i /
sum_i w_i``. Here ``w_i`` is the client's sample count, as in synchronous FedAvg, so that a full buffer of
fresh updates at ``eta_g = 1`` *is* a FedAvg round. Any aggregator can be the buffer's rule: it sees each
update rebased on the server's model, ``z_i = x + Delta_i`` (``y_i`` itself when it is fresh), with weight
``w_i s_i``, and returns ``a``; the step is ``x + eta_g (sum w_i s_i / sum w_i) (a - x)``, which for
FedAvg's weighted mean is the formula above, and ``a`` itself where the factor is 1 (a full buffer of fresh
updates at ``eta_g = 1``: the synchronous round, bit for bit). A robust rule (median, Krum) thus sees
decompressed, rebased client models as it does in a synchronous round.

FedAsync (Xie et al., "Asynchronous Federated Optimization", 2019, Alg. 1): each landed model ``y_i`` is
mixed in as it lands, ``x <- (1 - alpha_t) x + alpha_t y_i`` with ``alpha_t = alpha s(tau_i)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from fedlight.server.aggregator import Aggregator, ClientPayload, State


class Landed(NamedTuple):
    """One update the server applies.

    Attributes:
        client: its client; weight: its sample count; staleness: s(tau), its staleness weight.
        state: the client's model rebased on the server's (``z_i``; ``y_i`` for a fresh update), the global
            state's names, shapes and dtypes, on the CPU.
    """

    client: int
    weight: float
    staleness: float
    state: State


def apply_buffer(aggregator: Aggregator, global_state: State, updates: list[Landed], server_lr: float) -> State:
    """FedBuff's step: the aggregator's answer over ``updates`` (weights ``weight x staleness``, in client
    order), taken ``server_lr x sum(weight x staleness) / sum(weight)`` of the way from ``global_state``
    (all of it where that factor is 1). No update: ``global_state``.

    Args:
        aggregator: the buffer's rule (sum or payloads contract).
        global_state: x, the server's model, name -> tensor on the model's device.
        updates: the buffer's landed updates.
        server_lr: eta_g.
    """
    if not updates:
        return global_state
    device = next(iter(global_state.values())).device
    ordered = sorted(updates, key=lambda u: u.client)
    if aggregator.needs_payloads:
        target = aggregator.finalize(global_state, [ClientPayload(u.client, u.weight * u.staleness, u.state)
                                                    for u in ordered])
    else:
        acc = None
        for u in ordered:
            acc = aggregator.accumulate(acc, {k: v.to(device) for k, v in u.state.items()}, u.weight * u.staleness)
        target = aggregator.finalize(global_state, acc)
    step = server_lr * sum(u.weight * u.staleness for u in updates) / sum(u.weight for u in updates)
    if step == 1.0:
        return target
    return {k: x + step * (target[k] - x) if x.is_floating_point() else target[k] for k, x in global_state.items()}


def mix(global_state: State, state: State, alpha: float) -> State:
    """FedAsync's ``(1 - alpha) x + alpha y`` for every tensor (integer ones, e.g. BatchNorm's batch count,
    mixed in float64 and rounded).

    Examples:
        >>> mix({"w": torch.tensor([0.0, 4.0])}, {"w": torch.tensor([2.0, 0.0])}, 0.25)
        {'w': tensor([0.5000, 3.0000])}
    """
    out = {}
    for k, x in global_state.items():
        y = state[k].to(x.device)
        if x.is_floating_point():
            out[k] = torch.lerp(x, y.to(x.dtype), alpha)
        else:
            out[k] = ((1 - alpha) * x.double() + alpha * y.double()).round().to(x.dtype)
    return out
