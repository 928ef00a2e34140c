"""Supervised cross-entropy training: the supervised baselines of FLESD section 3 and MOON."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedlight.methods.base import Batch, FederatedModule, OptimizerSpec


class Supervised(FederatedModule):
    """Backbone + linear classifier trained with cross-entropy on one (weakly) augmented view.

    Args:
        backbone: encoder (B, C, H, W) -> (B, D).
        num_classes: number of classes.
        optim: local optimizer.
    """

    shared_modules = ("backbone", "classifier")
    num_views = 1
    uses_labels = True
    has_classifier = True

    def __init__(self, backbone: nn.Module, num_classes: int, optim: OptimizerSpec | None = None) -> None:
        super().__init__(backbone, optim)
        self.classifier = nn.Linear(backbone.feature_dim, num_classes)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.backbone(x))

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        views, y = batch
        return F.cross_entropy(self.classify(views[0]), y)
