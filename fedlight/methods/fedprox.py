"""FedProx (Li et al., MLSys 2020): a proximal term that keeps local weights near the global ones."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import nn

from fedlight.config.checks import non_negative
from fedlight.methods.federated_module import Batch, FederatedModule
from fedlight.methods.wrapper import ObjectiveWrapper


def proximal_term(params: list[torch.Tensor], anchors: list[torch.Tensor], mu: float) -> torch.Tensor:
    """(mu / 2) * sum_i |w_i - w_global_i|^2; its gradient w.r.t. w_i is mu * (w_i - w_global_i)."""
    return 0.5 * mu * sum((p - a).pow(2).sum() for p, a in zip(params, anchors))


class FedProx(ObjectiveWrapper):
    """Any local objective plus the proximal term on the communicated weights.

    The global weights the term pulls towards (``anchors``) are buffers, copied from the shared
    weights as local training starts: a module tensor, so a step over several clients
    (``local.batched_clients``) holds each client's own. They are not saved (``persistent=False``).

    Args:
        objective: the local objective (SimCLR, BYOL, supervised, ...).
        mu: proximal strength (grid in the paper: 1e-3, 1e-2, 0.1, 1).
    """

    def __init__(self, objective: FederatedModule, mu: Annotated[float, non_negative] = 0.01) -> None:
        super().__init__(objective)
        self.mu = mu
        self.anchored = [name for name, _ in self.trainable_shared()]  # by name: under vmap requires_grad reads False
        self.anchors = nn.Module()
        for name, p in self.trainable_shared():
            self.anchors.register_buffer(name.replace(".", "__"), torch.empty_like(p), persistent=False)
        self.transient_modules = (*self.transient_modules, "anchors")  # copied again as each client starts

    def _anchored_params(self) -> list[torch.Tensor]:
        own = dict(self.named_parameters())
        return [own[name] for name in self.anchored]

    def on_train_start(self) -> None:
        super().on_train_start()
        with torch.no_grad():
            for anchor, p in zip(self.anchors.buffers(), self._anchored_params()):
                anchor.copy_(p)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss = self.objective.training_step(batch, batch_idx)
        return loss + proximal_term(self._anchored_params(), list(self.anchors.buffers()), self.mu)
