"""SimSiam (Chen & He, "Exploring Simple Siamese Representation Learning", CVPR 2021) as a federated
local objective, built from lightly parts and fedlight's public surface only, as an outside package would."""

from __future__ import annotations

from typing import Annotated

import torch
from lightly.loss import NegativeCosineSimilarity
from lightly.models.modules import SimSiamPredictionHead, SimSiamProjectionHead
from torch import nn

from fedlight import Batch, FederatedModule, OptimizerSpec, positive


class SimSiam(FederatedModule):
    """SimSiam: a predictor and a stop-gradient, no negatives and no momentum encoder.

    The symmetrised loss is L = D(p1, sg(z2)) / 2 + D(p2, sg(z1)) / 2, D the negative cosine
    similarity, z = projection_head(backbone(x)) and p = prediction_head(z). Everything is one
    online network, so everything is shared (FedSSL's FedSimSiam, Zhuang et al. 2022); its
    predictor makes FedU's divergence-aware predictor update apply (``method={name: fedu,
    objective: simsiam}``).

    Args:
        backbone: encoder (B, C, H, W) -> (B, D), from ``model.backbone``.
        optim: the local optimizer, from ``local.*``.
        hidden_dim: the projector's hidden width (the paper: 2048, a 3-layer MLP with BN).
        output_dim: z and p of shape (B, output_dim) (2048).
        predictor_hidden_dim: the predictor's bottleneck (512, a quarter of output_dim).
    """

    shared_modules = ("backbone", "projection_head", "prediction_head")
    predictor_module = "prediction_head"  # FedU's divergence-aware predictor update applies

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 2048, output_dim: Annotated[int, positive] = 2048,
                 predictor_hidden_dim: Annotated[int, positive] = 512) -> None:
        super().__init__(backbone, optim)
        self.projection_head = SimSiamProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.prediction_head = SimSiamPredictionHead(output_dim, predictor_hidden_dim, output_dim)
        self.criterion = NegativeCosineSimilarity()

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        z0, z1 = self.projection_head(self.backbone(x0)), self.projection_head(self.backbone(x1))
        p0, p1 = self.prediction_head(z0), self.prediction_head(z1)
        return (self.criterion(p0, z1.detach()) + self.criterion(p1, z0.detach())) / 2
