"""DINO (Caron et al., "Emerging Properties in Self-Supervised Vision Transformers", ICCV 2021) as a
federated local objective, built from lightly parts and fedlight's public surface only."""

from __future__ import annotations

from typing import Annotated

import copy

import torch
from lightly.loss import DINOLoss
from lightly.models.modules import DINOProjectionHead
from lightly.models.utils import deactivate_requires_grad, update_momentum
from torch import nn

from fedlight import Batch, FederatedModule, OptimizerSpec, positive, probability


def dino_head(input_dim: int, hidden_dim: int, bottleneck_dim: int, output_dim: int) -> DINOProjectionHead:
    """lightly's DINO head, its last layer's weight norm (g fixed to 1) moved to torch's parametrization.

    lightly applies the deprecated ``torch.nn.utils.weight_norm``, whose hook leaves a non-leaf
    ``weight`` tensor on the layer that ``copy.deepcopy`` refuses once it has run; fedlight copies a
    method (the teacher here, worker models, FLESD's key encoder, FedEMA's local copy). The function
    computed is the same, weight = g * v / |v| row-wise.
    """
    head = DINOProjectionHead(input_dim, hidden_dim, bottleneck_dim, output_dim)
    layer = nn.utils.remove_weight_norm(head.last_layer)
    head.last_layer = nn.utils.parametrizations.weight_norm(layer)
    g = head.last_layer.parametrizations.weight.original0
    with torch.no_grad():
        g.fill_(1)
    g.requires_grad_(False)  # the paper's normalised last layer
    return head


class DINO(FederatedModule):
    """DINO: a student matches the centred, sharpened output of its EMA teacher on the other view.

    The loss is the cross-entropy between softmax((t - c) / teacher_temp) of the teacher's and
    softmax(s / student_temp) of the student's (B, output_dim) outputs on the two different views,
    averaged over both pairs; c, the centre, follows the teacher's batch means by EMA
    (``center_momentum``), and the teacher follows the student by EMA after every step. The
    head is a 3-layer MLP (GELU, ``hidden_dim``) to a ``bottleneck_dim`` code, l2-normalised,
    then a weight-normalised layer to ``output_dim``.

    The server averages the student; the teacher and the centre are the client's private state,
    kept between its rounds and in checkpoints (FedSSL's rule: the online network is uploaded,
    the target stays). A client seen for the first time starts its teacher as a copy of the global
    student and its centre at zero. With an EMA teacher, FedEMA applies (``method={name: fedema,
    objective: dino}``).

    Where the defaults leave the paper's: ``output_dim`` 4096 (the paper: 65536 for ImageNet; the
    last layer is uploaded every round, 256 x 65536 = 16.8M weights, 1.5 ResNet-18s); constant
    ``teacher_temp`` 0.04 and ``momentum`` 0.996, the paper's starting values (it warms the
    temperature up and raises the momentum to 1 over its epochs, schedules that a client's few
    steps a round do not map onto). Two views of one size: fedlight's views have no multi-crop
    (the paper adds small local crops), nor the paper's first-epoch freeze of the last layer.

    Args:
        backbone: encoder (B, C, H, W) -> (B, D), from ``model.backbone``.
        optim: the local optimizer, from ``local.*``.
        hidden_dim: the head's hidden width (2048).
        bottleneck_dim: the l2-normalised code's width (256).
        output_dim: K, the softmax's width (4096; the paper: 65536).
        teacher_temp: the teacher's softmax temperature (0.04).
        student_temp: the student's softmax temperature (0.1).
        center_momentum: EMA rate of the centre (0.9).
        momentum: EMA rate of the teacher (0.996).
    """

    shared_modules = ("backbone", "projection_head")
    private_modules = ("backbone_momentum", "projection_head_momentum", "criterion")
    target_modules = ("backbone_momentum", "projection_head_momentum")  # an EMA teacher: FedEMA applies

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 2048, bottleneck_dim: Annotated[int, positive] = 256,
                 output_dim: Annotated[int, positive] = 4096, teacher_temp: Annotated[float, positive] = 0.04,
                 student_temp: Annotated[float, positive] = 0.1,
                 center_momentum: Annotated[float, probability] = 0.9,
                 momentum: Annotated[float, probability] = 0.996) -> None:
        super().__init__(backbone, optim)
        self.projection_head = dino_head(backbone.feature_dim, hidden_dim, bottleneck_dim, output_dim)
        self.backbone_momentum = copy.deepcopy(backbone)
        self.projection_head_momentum = copy.deepcopy(self.projection_head)
        deactivate_requires_grad(self.backbone_momentum)
        deactivate_requires_grad(self.projection_head_momentum)
        self.momentum = momentum
        self.criterion = DINOLoss(output_dim, teacher_temp=teacher_temp, student_temp=student_temp,
                                  center_momentum=center_momentum)

    @torch.no_grad()
    def reset_private_state(self) -> None:
        """The teacher starts as a copy of the (global) student, the centre at zero."""
        self.backbone_momentum.load_state_dict(self.backbone.state_dict())
        self.projection_head_momentum.load_state_dict(self.projection_head.state_dict())
        self.criterion.center.zero_()

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        views, _ = batch
        with torch.no_grad():
            teacher = [self.projection_head_momentum(self.backbone_momentum(x)) for x in views]
        student = [self.projection_head(self.backbone(x)) for x in views]
        return self.criterion(teacher, student)

    def on_train_batch_end(self, outputs: torch.Tensor, batch: Batch, batch_idx: int) -> None:
        update_momentum(self.backbone, self.backbone_momentum, m=self.momentum)
        update_momentum(self.projection_head, self.projection_head_momentum, m=self.momentum)
