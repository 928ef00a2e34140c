"""Gaussian noise in place of the attacker's update."""

from __future__ import annotations

from typing import Annotated

import torch

from fedlight.attacks.attack import AttackContext, State, UpdateAttack
from fedlight.config.checks import positive


class GaussianNoise(UpdateAttack):
    """Sends ``s z``, ``z ~ N(0, I)``, in place of its update (the "Gaussian" Byzantine clients of
    Blanchard et al. 2017, sec. 5), drawn per (seed, round, client).

    Args:
        scale: s, ``faults.attack_scale``.
    """

    def __init__(self, scale: Annotated[float, positive] = 10.0) -> None:
        self.scale = scale

    def update(self, own: State, benign: list[State], context: AttackContext) -> State:
        # drawn on the CPU in float32: the same numbers on any device and in any precision
        return {k: self.scale * torch.randn(u.shape, generator=context.generator, dtype=torch.float32).to(u.device, u.dtype)
                for k, u in own.items()}
