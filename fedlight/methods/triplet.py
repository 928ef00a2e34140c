"""CF-CL's local objective (Wagle et al. 2022, eq. 1): the triplet loss on augmented views.

For an anchor d, its augmented view d~ = F(d) and a distinct datapoint d^ (a negative),

    L(d, d~, d^) = max(0, |f(d) - f(d~)|^2 - |f(d) - f(d^)|^2 + m).

In a batch of B images the negative of anchor b is image b-1 (mod B): every other datapoint
is distinct from the anchor, as eq. 3 asks.
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn

from fedlight.config.checks import non_negative
from fedlight.methods.federated_module import Batch, FederatedModule, OptimizerSpec


def triplet_loss(anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor,
                 margin: float) -> torch.Tensor:
    """Per-triplet loss, eq. 1.

    Args:
        anchor, positive, negative: (B, d) embeddings.
        margin: m.
    Returns:
        (B,) losses.
    """
    pos = (anchor - positive).pow(2).sum(1)
    neg = (anchor - negative).pow(2).sum(1)
    return F.relu(pos - neg + margin)


def expected_triplet_loss(anchor: torch.Tensor, positive: torch.Tensor, candidates: torch.Tensor,
                          margin: float) -> torch.Tensor:
    """CF-CL eq. 10: each candidate's mean loss as the negative of every (anchor, view) pair.

    Args:
        anchor: (R, d) embeddings of the receiver's reserve points.
        positive: (R, d) embeddings of their augmented views.
        candidates: (A, d) embeddings of the transmitter's candidate points.
        margin: m.
    Returns:
        (A,) expected losses E_{d in reserve}[L(d, F(d), candidate)].
    """
    pos = (anchor - positive).pow(2).sum(1, keepdim=True)  # (R, 1)
    neg = torch.cdist(anchor, candidates).pow(2)  # (R, A)
    return F.relu(pos - neg + margin).mean(0)


class Triplet(FederatedModule):
    """Backbone trained with the triplet loss on two augmented views (CF-CL).

    Args:
        backbone: encoder (B, C, H, W) -> (B, d); its output is the embedding f.
        optim: local optimizer (the paper: Adam, lr 1e-4).
        margin: m of eq. 1. The paper does not give it; 0.5 on unit-length embeddings
            (squared distances in [0, 4]) is our choice.
        normalize: compare unit-length embeddings (True) or the raw backbone outputs.
    """

    batch_refusal = None  # its step reads only its tensors and the two views

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 margin: Annotated[float, non_negative] = 0.5,
                 normalize: bool = True) -> None:
        super().__init__(backbone, optim)
        self.margin = margin
        self.normalize = normalize

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, d), the f of eq. 1 (unit length when ``normalize``)."""
        z = self.backbone(x)
        return F.normalize(z, dim=1) if self.normalize else z

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        a, p = self.embed(x0), self.embed(x1)
        return triplet_loss(a, p, a.roll(1, dims=0), self.margin).mean()
