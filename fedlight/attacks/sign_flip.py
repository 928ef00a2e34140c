"""Sign flipping: the attacker's own update, reversed and scaled."""

from __future__ import annotations

from typing import Annotated

from fedlight.attacks.attack import AttackContext, State, UpdateAttack
from fedlight.config.checks import positive


class SignFlip(UpdateAttack):
    """Sends its update reversed and scaled, ``-s u`` (the scaled sign flip of Blanchard et al. 2017's
    and El Mhamdi et al. 2018's experiments).

    Args:
        scale: s, ``faults.attack_scale``.
    """

    def __init__(self, scale: Annotated[float, positive] = 10.0) -> None:
        self.scale = scale

    def update(self, own: State, benign: list[State], context: AttackContext) -> State:
        return {k: -self.scale * u for k, u in own.items()}
