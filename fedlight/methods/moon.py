"""MOON: model-contrastive federated learning (Li, He and Song, CVPR 2021), Algorithm 1.

``term`` picks the second term of the local objective (slides, Table 5 "different kinds of
loss for the second term of local objective"): MOON's model-contrastive loss, or the l2 norm
between the local and the global model's representations.
"""

from __future__ import annotations

import copy
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from lightly.models.utils import deactivate_requires_grad
from torch import nn

from fedlight.config.checks import non_negative, positive
from fedlight.methods.federated_module import Batch, OptimizerSpec
from fedlight.methods.supervised import Supervised


def model_contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float) -> torch.Tensor:
    """l_con = -log( e^{sim(z, z_glob)/tau} / (e^{sim(z, z_glob)/tau} + e^{sim(z, z_prev)/tau}) ), batch mean.

    Args:
        z: (B, D) projections of the local model being trained.
        z_glob: (B, D) projections of the frozen global model (the positive).
        z_prev: (B, D) projections of the client's previous local model (the negative).
        tau: temperature.
    """
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=1), F.cosine_similarity(z, z_prev, dim=1)], 1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


def representation_l2(z: torch.Tensor, z_glob: torch.Tensor) -> torch.Tensor:
    """(1/2) ||z - z_glob||^2, batch mean: the l2 second term of Table 5 (slides) without its mu.

    The slides name the term only ("l_2 norm", mu tuned over {0.001, 0.01, 0.1, 1, 5, 10}); this
    is the usual penalty form, (mu/2) ||z - z_glob||^2 on the projections MOON contrasts.

    Args:
        z: (B, D) projections of the local model being trained.
        z_glob: (B, D) projections of the frozen global model.
    """
    return 0.5 * (z - z_glob).pow(2).sum(dim=1).mean()


class _Representation(nn.Module):
    """A frozen copy of backbone + projection head: x -> z."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = copy.deepcopy(backbone), copy.deepcopy(head)
        deactivate_requires_grad(self)
        self.register_buffer("valid", torch.zeros((), dtype=torch.bool))

    def copy_from(self, backbone: nn.Module, head: nn.Module) -> None:
        self.backbone.load_state_dict(backbone.state_dict())
        self.head.load_state_dict(head.state_dict())
        self.valid.fill_(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


class MOON(Supervised):
    """Supervised CE on the projection + mu * a second term: model-contrastive loss, or the l2 term.

    The representation z is the projection head's output and the classifier sits on z
    (MOON's code): the network is ``Supervised`` with ``projection_dim = output_dim``, so
    with mu = 0 MOON is FedAvg on that supervised network, step for step. ``previous`` (the
    client's model after its last local training) is the client's private state; a client
    without one (its first round) trains with mu = 0, i.e. plain FedAvg. ``frozen_global``
    is rebuilt from the global model every round. The l2 term needs no previous model, so it
    applies from a client's first round on (z = z_glob at its first step), and its clients keep
    no state between rounds (``previous`` is then transient).

    Args:
        backbone: encoder (B, C, H, W) -> (B, D); MOON uses ``moon_cnn`` (D = 84).
        num_classes: number of classes.
        optim: local optimizer (MOON: SGD 0.01, momentum 0.9, weight decay 1e-5).
        mu: weight of the model-contrastive term (5 for CIFAR-10, 1 for CIFAR-100).
        tau: temperature (0.5).
        output_dim: projection dimension (256); the head is D - D - output_dim.
        term: ``contrastive`` (MOON) or ``l2``: (mu/2) ||z - z_glob||^2 (Table 5's l2 norm row).
    """

    private_modules = ("previous",)
    transient_modules = ("frozen_global",)
    batch_refusal = ("its model-contrastive term branches, client by client, on whether the client has a "
                     "previous model (previous.valid), a Python branch one step over several clients cannot take")

    def __init__(self, backbone: nn.Module, num_classes: int, optim: OptimizerSpec | None = None,
                 mu: Annotated[float, non_negative] = 5.0, tau: Annotated[float, positive] = 0.5,
                 output_dim: Annotated[int, positive] = 256,
                 term: Literal["contrastive", "l2"] = "contrastive") -> None:
        super().__init__(backbone, num_classes, optim, projection_dim=output_dim)
        self.previous = _Representation(backbone, self.projection_head)
        self.frozen_global = _Representation(backbone, self.projection_head)
        self.mu, self.tau, self.term = mu, tau, term
        # whether ``previous`` holds a model, read once a client (on_train_start): reading the device
        # flag at every step would wait for the device each step
        self._has_previous: bool | None = None
        if term == "l2":  # no previous model to keep between a client's rounds: nothing stored per client
            self.private_modules, self.transient_modules = (), ("frozen_global", "previous")

    def reset_private_state(self) -> None:
        self.previous.valid.fill_(False)

    def on_train_start(self) -> None:
        self.frozen_global.copy_from(self.backbone, self.projection_head)
        self.frozen_global.eval()
        self.previous.eval()
        self._has_previous = bool(self.previous.valid)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        views, y = batch
        x = views[0]
        z = self.project(x)
        loss = F.cross_entropy(self.classifier(z), y)
        if self.mu == 0:
            return loss
        if self.term == "l2":
            with torch.no_grad():
                z_glob = self.frozen_global(x)
            return loss + self.mu * representation_l2(z, z_glob)
        if self._has_previous if self._has_previous is not None else bool(self.previous.valid):
            with torch.no_grad():
                z_glob, z_prev = self.frozen_global(x), self.previous(x)
            loss = loss + self.mu * model_contrastive_loss(z, z_glob, z_prev, self.tau)
        return loss

    def on_train_end(self) -> None:
        self.previous.copy_from(self.backbone, self.projection_head)
        self._has_previous = None
