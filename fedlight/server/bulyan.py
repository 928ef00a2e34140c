"""Bulyan (El Mhamdi, Guerraoui, Rouault, "The Hidden Vulnerability of Distributed Learning in
Byzantium", ICML 2018, sec. 4)."""

from __future__ import annotations

from typing import Annotated

from fedlight.config.checks import non_negative
from fedlight.errors import UserError
from fedlight.server import robust_ops
from fedlight.server.aggregator import Aggregator, ClientPayload, State
from fedlight.server.ops import cast_like, flatten_states, float_keys, stack_states


class Bulyan(Aggregator):
    """Bulyan over Krum: take ``theta = n - 2f`` states one by one, each the Krum choice among those
    not yet taken; then each coordinate is the mean of the ``beta = theta - 2f`` selected values
    closest to their median. Every client counts once. Needs ``n >= 4f + 3`` clients a round; a
    round with fewer answers keeps ``theta`` and ``beta`` at least one and its guarantee lapses.

    Args:
        f: the Byzantine clients tolerated in a round (1).
    """

    needs_payloads = True

    def __init__(self, f: Annotated[int, non_negative] = 1) -> None:
        self.f = f

    def check_clients(self, per_round: int, population: int) -> None:
        if per_round < 4 * self.f + 3:
            raise UserError(f"server.name=bulyan with server.f={self.f} needs 4f + 3 = {4 * self.f + 3} clients a "
                            f"round, the recipe samples {per_round}; lower server.f or sample more clients "
                            "(clients.num, clients.fraction)")

    def finalize(self, global_state: State, payloads: list[ClientPayload]) -> State:
        states = [p.payload for p in payloads]
        taken = robust_ops.bulyan_select(flatten_states(states, float_keys(global_state)), self.f)
        beta = max(1, len(taken) - 2 * self.f)
        selected = [states[i] for i in taken]
        return {k: cast_like(robust_ops.closest_to_median_mean(stack_states(selected, k), beta), ref)
                for k, ref in global_state.items()}
