"""A Little Is Enough (ALIE): attackers hide just outside the benign clients' spread."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Annotated

import torch

from fedlight.attacks.attack import AttackContext, OmniscientAttack, State
from fedlight.config.checks import non_negative


def z_max(clients: int, attackers: int) -> float:
    """Baruch et al.'s largest z for a round of ``clients`` n with ``attackers`` f:
    ``s = floor(n / 2 + 1) - f`` benign clients the attackers must win over, ``z_max =
    Phi^{-1}((n - s) / n)``. Where the attackers are a majority (s < 1, outside the paper's
    premise) s is taken as 1, so z stays finite.

    Examples:
        >>> round(z_max(50, 24), 4)  # s = 2: Phi^{-1}(0.96)
        1.7507
    """
    s = max(1, math.floor(clients / 2 + 1) - attackers)
    return NormalDist().inv_cdf((clients - s) / clients)


class ALIE(OmniscientAttack):
    """A Little Is Enough (Baruch et al., NeurIPS 2019): every attacker sends ``mu - z sigma``, the
    benign updates' per-coordinate mean less z of their standard deviations.

    The attackers are omniscient and collude, as the paper assumes: each sees the round's benign
    updates. ``sigma`` is their sample standard deviation (0 with a single benign update); with
    none to see (every answering client attacks) an attacker sends its own payload.

    Args:
        z: the standard deviations below the mean; None: ``z_max`` of the round's n answering
            clients and f attackers (:func:`z_max`).
    """

    def __init__(self, z: Annotated[float | None, non_negative] = None) -> None:
        self.z = z

    def update(self, own: State, benign: list[State], context: AttackContext) -> State:
        f = context.attackers or 1
        z = self.z if self.z is not None else z_max(len(benign) + f, f)
        out = {}
        for k in own:
            stacked = torch.stack([b[k] for b in benign])  # (benign clients, *shape)
            sigma, mu = torch.std_mean(stacked, dim=0, correction=1 if len(benign) > 1 else 0)
            out[k] = mu - z * sigma
        return out
