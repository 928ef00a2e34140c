"""VICReg (Bardes, Ponce & LeCun, "VICReg: Variance-Invariance-Covariance Regularization for
Self-Supervised Learning", ICLR 2022) as a federated local objective, built from lightly parts and
fedlight's public surface only."""

from __future__ import annotations

from typing import Annotated

import torch
from lightly.loss import VICRegLoss
from lightly.models.modules.heads import VICRegProjectionHead
from torch import nn

from fedlight import Batch, FederatedModule, OptimizerSpec, non_negative, positive


class VICReg(FederatedModule):
    """VICReg: invariance between the views, variance kept above a margin, covariance decorrelated.

    The loss is lambda * s(z0, z1) + mu * [v(z0) + v(z1)] + nu * [c(z0) + c(z1)] on the
    embeddings z0, z1 of shape (B, output_dim): s the mean squared distance, v the hinge on each
    dimension's standard deviation, c the squared off-diagonal covariances. One network, shared whole.

    The paper's expander is 3 layers of 8192 units; the defaults are 2048, for the reason
    Barlow Twins' are (``barlow_twins.py``): the expander is uploaded every round.

    Args:
        backbone: encoder (B, C, H, W) -> (B, D), from ``model.backbone``.
        optim: the local optimizer, from ``local.*``.
        hidden_dim: the expander's hidden width (the paper: 8192).
        output_dim: the embedding width (8192).
        lambda_param: invariance weight (25).
        mu_param: variance weight (25).
        nu_param: covariance weight (1).
    """

    shared_modules = ("backbone", "projection_head")

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 2048, output_dim: Annotated[int, positive] = 2048,
                 lambda_param: Annotated[float, non_negative] = 25.0, mu_param: Annotated[float, non_negative] = 25.0,
                 nu_param: Annotated[float, non_negative] = 1.0) -> None:
        super().__init__(backbone, optim)
        self.projection_head = VICRegProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.criterion = VICRegLoss(lambda_param=lambda_param, mu_param=mu_param, nu_param=nu_param)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        return self.criterion(self.projection_head(self.backbone(x0)), self.projection_head(self.backbone(x1)))
