"""MoCo v2 (Chen, Fan, Girshick & He, "Improved Baselines with Momentum Contrastive Learning", 2020;
MoCo: He et al., CVPR 2020) as a federated local objective, built from lightly parts and fedlight's
public surface only."""

from __future__ import annotations

from typing import Annotated

import copy

import torch
import torch.nn.functional as F
from lightly.loss import NTXentLoss
from lightly.models.modules import MoCoProjectionHead
from lightly.models.utils import deactivate_requires_grad, update_momentum
from torch import nn

from fedlight import Batch, FederatedModule, OptimizerSpec, positive, probability

QUEUE_SEED = 0
"""Seed of the unit-length noise a client's queue starts from (MoCo's initial queue is random)."""


class MoCo(FederatedModule):
    """MoCo v2: queries contrasted with a momentum encoder's key and a queue of past keys.

    The loss is InfoNCE over (B, 1 + queue_size) logits q.k / T: the positive is the key of the
    other view, the negatives the queue; then the batch's keys replace the queue's oldest. The
    query encoder (backbone + MLP head, 2048 hidden, 128 out) is trained, the key encoder follows
    it by EMA after every step.

    As FedSSL's framework does for every Siamese method (Zhuang et al. 2022, Fig. 1: the online
    network is uploaded), the server averages the query (online) encoder; the key encoder and the
    queue are the client's private state, kept between its rounds and in checkpoints. A client seen for the first time starts its key encoder as a copy
    of the global query encoder and its queue as unit-length noise (from a fixed seed, so a
    resumed run starts it exactly as an unbroken one). With an EMA target, FedEMA applies
    (``method={name: fedema, objective: moco}``).

    Where the defaults leave the paper's: ``momentum`` 0.99 (the paper: 0.999 over ImageNet's
    5,000 steps an epoch; a client trains tens of steps a round, and FedSSL's MoCo code uses 0.99,
    as fedlight's BYOL does) and ``queue_size`` 4096 (the paper: 65536 for 1.28M images; a
    client holds thousands, and a queue longer than its data holds stale keys of its own
    images as negatives; FedSSL's MoCo code and Plato's MoCo v2 use 4096). The
    paper's shuffled BatchNorm (against leaks between the GPUs of one batch) has no counterpart
    on one device and is left out.

    Args:
        backbone: encoder (B, C, H, W) -> (B, D), from ``model.backbone``.
        optim: the local optimizer, from ``local.*``.
        hidden_dim: the MLP head's hidden width (2048).
        output_dim: q and k of shape (B, output_dim) (128).
        temperature: InfoNCE temperature T (0.2).
        momentum: EMA rate of the key encoder (0.99; the paper: 0.999).
        queue_size: negatives kept from earlier batches (4096; the paper: 65536).
    """

    shared_modules = ("backbone", "projection_head")
    private_modules = ("backbone_momentum", "projection_head_momentum", "criterion")
    target_modules = ("backbone_momentum", "projection_head_momentum")  # an EMA target: FedEMA applies

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 2048, output_dim: Annotated[int, positive] = 128,
                 temperature: Annotated[float, positive] = 0.2, momentum: Annotated[float, probability] = 0.99,
                 queue_size: Annotated[int, positive] = 4096) -> None:
        super().__init__(backbone, optim)
        self.projection_head = MoCoProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.backbone_momentum = copy.deepcopy(backbone)
        self.projection_head_momentum = copy.deepcopy(self.projection_head)
        deactivate_requires_grad(self.backbone_momentum)
        deactivate_requires_grad(self.projection_head_momentum)
        self.momentum = momentum
        self.criterion = NTXentLoss(temperature=temperature, memory_bank_size=(queue_size, output_dim))
        queue = self.criterion.memory_bank
        for name in ("bank", "bank_ptr"):  # lightly keeps the queue out of state_dict; the client's state needs it
            queue.register_buffer(name, getattr(queue, name))

    @torch.no_grad()
    def reset_private_state(self) -> None:
        """The key encoder starts as a copy of the (global) query encoder, the queue as seeded unit-length noise."""
        self.backbone_momentum.load_state_dict(self.backbone.state_dict())
        self.projection_head_momentum.load_state_dict(self.projection_head.state_dict())
        queue = self.criterion.memory_bank
        noise = torch.randn(queue.bank.shape, generator=torch.Generator().manual_seed(QUEUE_SEED))
        queue.bank.copy_(F.normalize(noise, dim=1))
        queue.bank_ptr.zero_()

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        query = self.projection_head(self.backbone(x0))
        with torch.no_grad():
            key = self.projection_head_momentum(self.backbone_momentum(x1))
        return self.criterion(query, key)

    def on_train_batch_end(self, outputs: torch.Tensor, batch: Batch, batch_idx: int) -> None:
        update_momentum(self.backbone, self.backbone_momentum, m=self.momentum)
        update_momentum(self.projection_head, self.projection_head_momentum, m=self.momentum)
