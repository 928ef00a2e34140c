"""Inner Product Manipulation (IPM): attackers send the benign mean, reversed and scaled."""

from __future__ import annotations

from typing import Annotated

import torch

from fedlight.attacks.attack import AttackContext, OmniscientAttack, State
from fedlight.config.checks import positive


class IPM(OmniscientAttack):
    """Inner Product Manipulation (Xie et al., UAI 2020, "Fall of Empires"): every attacker sends
    ``-epsilon`` times the mean of the round's benign updates, so the aggregate's inner product with
    the true update turns negative.

    The attackers are omniscient, as the paper assumes: each sees the round's benign updates; with
    none to see (every answering client attacks) an attacker sends its own payload.

    Args:
        epsilon: the scale; the paper's experiments use a small one (0.1) against median and Krum
            and a large one (100) against the mean.
    """

    def __init__(self, epsilon: Annotated[float, positive] = 0.1) -> None:
        self.epsilon = epsilon

    def update(self, own: State, benign: list[State], context: AttackContext) -> State:
        return {k: -self.epsilon * torch.stack([b[k] for b in benign]).mean(dim=0) for k in own}
