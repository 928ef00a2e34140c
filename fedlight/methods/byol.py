"""BYOL (Grill et al., NeurIPS 2020) as a federated local objective, built from lightly parts."""

from __future__ import annotations

from typing import Annotated, Literal

import copy

import torch
import torch.nn.functional as F
from lightly.loss import NegativeCosineSimilarity
from lightly.models.modules import BYOLPredictionHead, BYOLProjectionHead
from lightly.models.utils import deactivate_requires_grad, update_momentum
from torch import nn

from fedlight.config.checks import positive, probability
from fedlight.methods.federated_module import Batch, FederatedModule, OptimizerSpec


class BYOL(FederatedModule):
    """BYOL with the online network shared and the momentum (target) network private.

    As in FedU / FedEMA / SOFed, the server averages the online encoder, projector and
    predictor; each client keeps its own target network, initialised from the global online
    network the first time it trains.

    Args:
        backbone: encoder (B, C, H, W) -> (B, D).
        optim: local optimizer.
        hidden_dim: projector / predictor hidden width.
        output_dim: projection dimension.
        momentum: EMA rate of the target network (0.99 in SOFed).
    """

    shared_modules = ("backbone", "projection_head", "prediction_head")
    private_modules = ("backbone_momentum", "projection_head_momentum")
    predictor_module = "prediction_head"  # FedU's divergence-aware predictor update applies
    target_modules = private_modules  # an EMA target network: FedEMA applies
    batch_refusal = None  # its step reads only its tensors; the target's EMA is elementwise

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 1024,
                 output_dim: Annotated[int, positive] = 256, momentum: Annotated[float, probability] = 0.99) -> None:
        super().__init__(backbone, optim)
        self.projection_head = BYOLProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.prediction_head = BYOLPredictionHead(output_dim, hidden_dim, output_dim)
        self.backbone_momentum = copy.deepcopy(backbone)
        self.projection_head_momentum = copy.deepcopy(self.projection_head)
        deactivate_requires_grad(self.backbone_momentum)
        deactivate_requires_grad(self.projection_head_momentum)
        self.momentum = momentum
        self.criterion = NegativeCosineSimilarity()

    def reset_private_state(self) -> None:
        """The target starts as a copy of the (global) online network."""
        self.backbone_momentum.load_state_dict(self.backbone.state_dict())
        self.projection_head_momentum.load_state_dict(self.projection_head.state_dict())

    def online(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, output_dim) prediction."""
        return self.prediction_head(self.projection_head(self.backbone(x)))

    @torch.no_grad()
    def target(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, output_dim) target projection."""
        return self.projection_head_momentum(self.backbone_momentum(x))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Unit-length online projection (B, output_dim)."""
        return F.normalize(self.projection_head(self.backbone(x)), dim=1)

    @torch.no_grad()
    def importance_score(self, x: torch.Tensor,
                         head: Literal["prediction", "projection"] = "prediction") -> torch.Tensor:
        """SOFed eq. 3 (Gong et al. 2023): S(x) = 1 - cos(y, y_w'), y_w' the target projection of
        the horizontal flip of x. The optional hook SOFed's importance policy asks for
        (``fedlight.engine.parts.sofed.importance_score.ImportanceScoring``).

        With ``head="prediction"`` (the paper) y = g_o(f_o(x)) is the online prediction, so S(x)
        is the BYOL loss of the pair (x, flip(x)), half of eq. 1's 2 - 2 cos; ``"projection"``
        compares the online projection f_o(x) instead (fedlight's score before it followed the
        paper; the two rank samples differently).

        Args:
            x: (B, C, H, W) normalised images.
            head: ``buffer.score``: ``prediction`` or ``projection``.
        Returns:
            (B,) scores in [0, 2].
        """
        online = self.online(x) if head == "prediction" else self.projection_head(self.backbone(x))
        return 1 - F.cosine_similarity(online, self.target(x.flip(-1)), dim=1)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        p0, p1 = self.online(x0), self.online(x1)
        z0, z1 = self.target(x0), self.target(x1)
        # symmetric BYOL loss: sum over both directions of 2 - 2 cos(p, z)
        return 4 + 2 * (self.criterion(p0, z1) + self.criterion(p1, z0))

    def on_train_batch_end(self, outputs: torch.Tensor, batch: Batch, batch_idx: int) -> None:
        update_momentum(self.backbone, self.backbone_momentum, m=self.momentum)
        update_momentum(self.projection_head, self.projection_head_momentum, m=self.momentum)
