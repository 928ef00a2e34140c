"""SwAV (Caron et al., "Unsupervised Learning of Visual Features by Contrasting Cluster Assignments",
NeurIPS 2020) as a federated local objective, built from lightly parts and fedlight's public surface only."""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from lightly.loss import SwaVLoss
from lightly.models.modules import SwaVProjectionHead, SwaVPrototypes
from torch import nn

from fedlight import Batch, FederatedModule, OptimizerSpec, at_least, positive


class SwAV(FederatedModule):
    """SwAV: each view predicts the other's code, its soft assignment to prototypes by Sinkhorn-Knopp.

    A view's embedding z (B, output_dim) is l2-normalised and scored against ``n_prototypes``
    unit-length prototypes (B, n_prototypes); the codes are those scores' equal-partition
    transport plan (``sinkhorn_iterations`` steps at ``sinkhorn_epsilon``), and the loss is the
    cross-entropy of each view's softmax(scores / temperature) against the other view's code.
    The prototypes are trained with the network and renormalised before every step; the server
    averages them with the encoder and projector (one network, shared whole).

    Where the defaults leave the paper's: ``n_prototypes`` 100, not 3000. Sinkhorn spreads each
    batch equally over the prototypes; the paper gives it about 4,096 features for 3,000
    prototypes (a batch of 4,096, or 256 plus a queue of 3,840), some 1.4 a prototype. A client's
    batch here is 64 to 256 with no queue, and 100 prototypes keep that ratio near a batch of 128
    (and ten times CIFAR-10's classes). The queue (for small batches only, from the 15th
    epoch), the first-epoch freeze of the prototypes and the multi-crop views are left out:
    fedlight makes two views of one size.

    Args:
        backbone: encoder (B, C, H, W) -> (B, D), from ``model.backbone``.
        optim: the local optimizer, from ``local.*``.
        hidden_dim: the projector's hidden width (2048).
        output_dim: the embedding width (128).
        n_prototypes: K, the number of prototypes (100; the paper: 3000).
        temperature: the softmax temperature of the predictions (0.1).
        sinkhorn_epsilon: the entropy weight of the codes' transport (0.05).
        sinkhorn_iterations: Sinkhorn-Knopp iterations (3).
    """

    shared_modules = ("backbone", "projection_head", "prototypes")

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 2048, output_dim: Annotated[int, positive] = 128,
                 n_prototypes: Annotated[int, at_least(2)] = 100, temperature: Annotated[float, positive] = 0.1,
                 sinkhorn_epsilon: Annotated[float, positive] = 0.05,
                 sinkhorn_iterations: Annotated[int, positive] = 3) -> None:
        super().__init__(backbone, optim)
        self.projection_head = SwaVProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.prototypes = SwaVPrototypes(output_dim, n_prototypes)
        self.criterion = SwaVLoss(temperature=temperature, sinkhorn_iterations=sinkhorn_iterations,
                                  sinkhorn_epsilon=sinkhorn_epsilon)

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, n_prototypes) cosine similarities of the embeddings with the prototypes."""
        return self.prototypes(F.normalize(self.projection_head(self.backbone(x)), dim=1))

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        views, _ = batch
        self.prototypes.normalize()
        return self.criterion([self.scores(x) for x in views], []).squeeze(0)  # lightly returns shape (1,)
