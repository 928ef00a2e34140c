"""Barlow Twins (Zbontar et al., "Barlow Twins: Self-Supervised Learning via Redundancy Reduction",
ICML 2021) as a federated local objective, built from lightly parts and fedlight's public surface only."""

from __future__ import annotations

from typing import Annotated

import torch
from lightly.loss import BarlowTwinsLoss
from lightly.models.modules import BarlowTwinsProjectionHead
from torch import nn

from fedlight import Batch, FederatedModule, OptimizerSpec, non_negative, positive


class BarlowTwins(FederatedModule):
    """Barlow Twins: the two views' embeddings' cross-correlation matrix pushed to the identity.

    The loss (eq. 1) is sum_i (1 - C_ii)^2 + lambda * sum_{i != j} C_ij^2, C the (output_dim,
    output_dim) cross-correlation of the batch-normalised embeddings z0, z1 of shape (B,
    output_dim). One network, shared whole.

    The paper's projector is 3 layers of 8192 units; the defaults are 2048: the projector is
    uploaded every round, and an 8192 x 8192 layer is 67M weights, six times a ResNet-18 (the
    paper reports accuracy still rising, slowly, with the width: a choice of cost, not of method).

    Args:
        backbone: encoder (B, C, H, W) -> (B, D), from ``model.backbone``.
        optim: the local optimizer, from ``local.*``.
        hidden_dim: the projector's hidden width (the paper: 8192).
        output_dim: the embedding width (8192).
        lambda_param: weight of the off-diagonal (redundancy) terms (5e-3, sec. 2).
    """

    shared_modules = ("backbone", "projection_head")

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 2048, output_dim: Annotated[int, positive] = 2048,
                 lambda_param: Annotated[float, non_negative] = 5e-3) -> None:
        super().__init__(backbone, optim)
        self.projection_head = BarlowTwinsProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.criterion = BarlowTwinsLoss(lambda_param=lambda_param)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        return self.criterion(self.projection_head(self.backbone(x0)), self.projection_head(self.backbone(x1)))
