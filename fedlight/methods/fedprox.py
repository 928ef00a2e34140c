"""FedProx (Li et al., MLSys 2020): a proximal term that keeps local weights near the global ones."""

from __future__ import annotations

from typing import Annotated

import torch

from fedlight.config.checks import non_negative
from fedlight.methods.federated_module import Batch, FederatedModule
from fedlight.methods.wrapper import ObjectiveWrapper


def proximal_term(params: list[torch.Tensor], anchors: list[torch.Tensor], mu: float) -> torch.Tensor:
    """(mu / 2) * sum_i |w_i - w_global_i|^2; its gradient w.r.t. w_i is mu * (w_i - w_global_i)."""
    return 0.5 * mu * sum((p - a).pow(2).sum() for p, a in zip(params, anchors))


class FedProx(ObjectiveWrapper):
    """Any local objective plus the proximal term on the communicated weights.

    Args:
        objective: the local objective (SimCLR, BYOL, supervised, ...).
        mu: proximal strength (grid in the paper: 1e-3, 1e-2, 0.1, 1).
    """

    def __init__(self, objective: FederatedModule, mu: Annotated[float, non_negative] = 0.01) -> None:
        super().__init__(objective)
        self.mu = mu
        self._params: list[torch.Tensor] = []  # the communicated weights, listed once a client (not every step)
        self._anchors: list[torch.Tensor] = []

    def on_train_start(self) -> None:
        super().on_train_start()
        self._params = [p for _, p in self.trainable_shared()]
        self._anchors = [p.detach().clone() for p in self._params]

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss = self.objective.training_step(batch, batch_idx)
        return loss + proximal_term(self._params, self._anchors, self.mu)
