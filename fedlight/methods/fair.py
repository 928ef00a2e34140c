"""Fair local representations for LG-FedAvg (Liang et al., 2020, section 2.3; after Louppe et al., 2017).

Each client owns an adversary that predicts a protected attribute ``a`` from the local
representation ``h = l(x)``. Updates alternate on every batch (the coordinate descent of
appendix eqs. 10-12):

1. adversary: ``adversary_steps`` steps on ``L_adv = BCE(adv(h.detach()), a)`` (its own optimizer);
2. local and global model: one step on ``L_task - lambda * L_adv(adv(h), a)``, the adversary
   held fixed: the model minimises its own loss and maximises the adversary's.

The adversary is private to the client (never communicated) and persists between its rounds;
its optimizer is rebuilt at every round. The adversary's step calls ``backward`` itself (the
engine steps only the model's optimizer): it is a small float32 head, so it needs no loss scaling.
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn

from fedlight.config.checks import non_empty, non_negative, positive, probability
from fedlight.methods.federated_module import Batch, FederatedModule
from fedlight.methods.local_global import LocalGlobal


class FairLocalGlobal(LocalGlobal):
    """LG-FedAvg with a per-client adversary on the local representation (method ``lg_fair``).

    Batches carry labels (B, 2): the class and the protected attribute (0 / 1); the engine
    builds them from a dataset's ``train_a`` (``uses_protected``).

    Args:
        objective, num_classes, global_layers, warmup_rounds, warmup_goal_acc: as in ``LocalGlobal``.
        adversary_weight: lambda, the weight of the adversary's loss in the model's objective
            (0 trains the adversary but not against it: LG-FedAvg without the adversarial term).
        adversary_hidden: hidden width of the adversary MLP.
        adversary_lr: Adam learning rate of the adversary.
        adversary_steps: adversary steps per model step (a near-optimal adversary keeps the model
            from "fooling" it by flipping its predictions instead of removing the attribute).
    """

    uses_protected = True
    compile_refusal = "steps its adversary's own optimizer inside training_step"
    batch_refusal = "its adversary takes its own optimizer steps inside training_step"

    def __init__(self, objective: FederatedModule, num_classes: int,
                 global_layers: Annotated[list[str] | None, non_empty] = None,
                 warmup_rounds: Annotated[int, non_negative] = 0,
                 warmup_goal_acc: Annotated[float | None, probability] = None,
                 adversary_weight: Annotated[float, non_negative] = 1.0,
                 adversary_hidden: Annotated[int, positive] = 32, adversary_lr: Annotated[float, positive] = 1e-2,
                 adversary_steps: Annotated[int, positive] = 5) -> None:
        super().__init__(objective, num_classes, global_layers, warmup_rounds, warmup_goal_acc)
        dim = objective.backbone.feature_dim
        self.adversary = nn.Sequential(nn.Linear(dim, adversary_hidden), nn.ReLU(), nn.Linear(adversary_hidden, 1))
        self.private_modules = (*self.private_modules, "adversary")
        self.adversary_weight, self.adversary_lr, self.adversary_steps = adversary_weight, adversary_lr, adversary_steps
        self._adv_optim: torch.optim.Optimizer | None = None

    def protected_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B,) the adversary's logit that a = 1, from the local representation."""
        return self.adversary(self.objective.features(x)).squeeze(1)

    def trainable(self) -> list[nn.Parameter]:
        own = {id(p) for p in self.adversary.parameters()}
        return [p for p in super().trainable() if id(p) not in own]

    def on_train_start(self) -> None:
        super().on_train_start()
        self._adv_optim = torch.optim.Adam(self.adversary.parameters(), lr=self.adversary_lr)

    def adversary_step(self, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """One descent step of the adversary on detached representations h (B, D); returns its loss."""
        if self._adv_optim is None:
            self._adv_optim = torch.optim.Adam(self.adversary.parameters(), lr=self.adversary_lr)
        params = list(self.adversary.parameters())
        loss = F.binary_cross_entropy_with_logits(self.adversary(h.detach()).squeeze(1).float(), a.float())
        self._adv_optim.zero_grad(set_to_none=True)
        loss.backward(inputs=params)
        self._adv_optim.step()
        return loss.detach()

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        """Adversary step, then the model's loss ``L_task - lambda * L_adv`` (labels (B, 2))."""
        views, ya = batch
        y, a = ya[:, 0], ya[:, 1]
        h = self.objective.features(views[0])
        if torch.is_grad_enabled():
            for _ in range(self.adversary_steps):
                self.adversary_step(h, a)
        task = super().training_step((views, y), batch_idx)
        adv = F.binary_cross_entropy_with_logits(self.adversary(h).squeeze(1).float(), a.float())
        return task - self.adversary_weight * adv
