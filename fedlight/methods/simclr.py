"""SimCLR (Chen et al., ICML 2020) as a federated local objective, built from lightly parts."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from lightly.loss import NTXentLoss
from lightly.models.modules import SimCLRProjectionHead
from torch import nn

from fedlight.config.checks import positive
from fedlight.methods.federated_module import Batch, FederatedModule, OptimizerSpec


def info_nce(q: torch.Tensor, k: torch.Tensor, temperature: float) -> torch.Tensor:
    """One-directional InfoNCE used by FLESD's authors: logits q k^T / T, positives on the diagonal.

    lightly's NTXentLoss is the symmetric 2B-way loss, hence this three-liner.

    Args:
        q: (B, D) projections of the first views.
        k: (B, D) projections of the second views.
        temperature: softmax temperature T.
    """
    logits = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T / temperature
    return F.cross_entropy(logits, torch.arange(len(q), device=q.device))


class SimCLR(FederatedModule):
    """SimCLR: backbone + projection head, NT-Xent (or one-directional InfoNCE) over two views.

    Args:
        backbone: encoder (B, C, H, W) -> (B, D).
        optim: local optimizer.
        hidden_dim: projection head hidden width (FLESD: 512).
        output_dim: projection dimension (FLESD: 128).
        temperature: contrastive temperature (SimCLR 0.5; FLESD 0.4).
        loss: ``ntxent`` (lightly, symmetric) or ``infonce`` (FLESD's one-directional variant).
    """

    shared_modules = ("backbone", "projection_head")
    batch_refusal = None  # its step reads only its tensors and the two views

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 512,
                 output_dim: Annotated[int, positive] = 128, temperature: Annotated[float, positive] = 0.5,
                 loss: Literal["ntxent", "infonce"] = "ntxent") -> None:
        super().__init__(backbone, optim)
        self.projection_head = SimCLRProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.temperature = temperature
        self.loss_kind = loss
        self.criterion = NTXentLoss(temperature=temperature)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, output_dim) projection."""
        return self.projection_head(self.backbone(x))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Unit-length projection (B, output_dim), what FLESD's clients compare."""
        return F.normalize(self.project(x), dim=1)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        z0, z1 = self.project(x0), self.project(x1)
        if self.loss_kind == "infonce":
            return info_nce(z0, z1, self.temperature)
        return self.criterion(z0, z1)
