"""Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui, Stainer, "Machine Learning with
Adversaries: Byzantine Tolerant Gradient Descent", NeurIPS 2017, sec. 4)."""

from __future__ import annotations

from typing import Annotated

from fedlight.config.checks import non_negative, positive
from fedlight.errors import UserError
from fedlight.server import robust_ops
from fedlight.server.ops import cast_like, flatten_states, float_keys, stack_states
from fedlight.server.aggregator import Aggregator, ClientPayload, State


class Krum(Aggregator):
    """Multi-Krum: each client's score is the sum of squared distances from its state to its
    ``n - f - 2`` nearest others (over the floating-point tensors); the ``m`` lowest-scored states
    are averaged, each counted once (``m = 1``: Krum, the chosen state itself). Needs
    ``n >= 2f + 3`` clients a round; a round with fewer answers uses at least one neighbour and
    its guarantee lapses.

    Args:
        f: the Byzantine clients tolerated in a round (1).
        m: the states averaged (1: Krum), at most ``n - f``.
    """

    needs_payloads = True

    def __init__(self, f: Annotated[int, non_negative] = 1, m: Annotated[int, positive] = 1) -> None:
        self.f, self.m = f, m

    def check_clients(self, per_round: int, population: int) -> None:
        if per_round < 2 * self.f + 3 or self.m > per_round - self.f:
            raise UserError(f"server.name=krum with server.f={self.f} server.m={self.m} needs 2f + 3 <= n and "
                            f"m <= n - f for the n={per_round} clients a round samples; lower server.f or server.m "
                            "or sample more clients (clients.num, clients.fraction)")

    def finalize(self, global_state: State, payloads: list[ClientPayload]) -> State:
        states = [p.payload for p in payloads]
        chosen = robust_ops.krum_select(flatten_states(states, float_keys(global_state)), self.f, self.m)
        selected = [states[i] for i in chosen]
        return {k: cast_like(stack_states(selected, k).mean(dim=0), ref) for k, ref in global_state.items()}
