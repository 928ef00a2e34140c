"""Supervised cross-entropy training: the supervised baselines of FLESD section 3 and MOON."""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from lightly.models.modules import SimCLRProjectionHead
from torch import nn

from fedlight.config.checks import non_negative
from fedlight.methods.federated_module import Batch, FederatedModule, OptimizerSpec


class Supervised(FederatedModule):
    """Backbone (+ optional projection head) + linear classifier, cross-entropy on one weak view.

    With ``projection_dim`` > 0 this is MOON's network (Li, He and Song, CVPR 2021; the
    authors' code builds it for every algorithm it compares, FedAvg / FedProx / SCAFFOLD /
    SOLO included): features h (B, D) -> projection head D - D - projection_dim (lightly's
    SimCLR head, two layers, no batch norm) -> z (B, projection_dim) -> classifier on z.
    The modules have MOON's names and are built in MOON's order, so from one seed both
    start from the same weights (``MOON`` is this class plus the model-contrastive term).
    With ``projection_dim`` = 0 the classifier sits on h (the head is an ``nn.Identity``
    with no state). Evaluation probes h either way (``features``).

    Args:
        backbone: encoder (B, C, H, W) -> (B, D).
        num_classes: number of classes.
        optim: local optimizer.
        projection_dim: output width of the projection head; 0 for no head.
    """

    shared_modules = ("backbone", "projection_head", "classifier")
    num_views = 1
    uses_labels = True
    has_classifier = True
    batch_refusal = None  # its step reads only its tensors, the view and the labels

    def __init__(self, backbone: nn.Module, num_classes: int, optim: OptimizerSpec | None = None,
                 projection_dim: Annotated[int, non_negative] = 0) -> None:
        super().__init__(backbone, optim)
        d = backbone.feature_dim
        self.projection_head: nn.Module = (
            SimCLRProjectionHead(d, d, projection_dim, num_layers=2, batch_norm=False) if projection_dim
            else nn.Identity())
        self.classifier = nn.Linear(projection_dim or d, num_classes)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, projection_dim) projection z, or the features (B, D) without a head."""
        return self.projection_head(self.backbone(x))

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.project(x))

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        views, y = batch
        return F.cross_entropy(self.classify(views[0]), y)
