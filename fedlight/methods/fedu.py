"""FedU (Zhuang et al., ICCV 2021): BYOL with a divergence-aware predictor update."""

from __future__ import annotations

from typing import Annotated

import copy

import torch
from lightly.models.utils import deactivate_requires_grad
from torch import nn

from fedlight.config.checks import non_negative, positive, probability
from fedlight.methods.byol import BYOL
from fedlight.methods.federated_module import OptimizerSpec


def divergence(global_net: nn.Module, local_net: nn.Module) -> float:
    """Mean over conv weight tensors of |W_global - W_local|_2 (all >= 2-d weights if no conv)."""
    def weights(net: nn.Module) -> list[torch.Tensor]:
        convs = [m.weight for m in net.modules() if isinstance(m, nn.Conv2d)]
        return convs or [p for p in net.parameters() if p.dim() >= 2]

    norms = [(g.detach() - l.detach()).norm() for g, l in zip(weights(global_net), weights(local_net))]
    return float(torch.stack(norms).mean())


class _OnlineCopy(nn.Module):
    """The client's own online network from the end of its last local training."""

    def __init__(self, model: BYOL) -> None:
        super().__init__()
        for name in ("backbone", "projection_head", "prediction_head"):
            self.add_module(name, copy.deepcopy(getattr(model, name)))
        deactivate_requires_grad(self)
        self.register_buffer("valid", torch.zeros((), dtype=torch.bool))
        self.register_buffer("scale", torch.zeros(()))  # FedEMA's lambda, set at its first update


class DivergenceAwareBYOL(BYOL):
    """BYOL whose client merges the incoming global model with its own previous one.

    At the start of a round the shared modules hold the global model and ``local`` the
    client's model from its last round; ``merge`` decides what training starts from.
    The divergence is measured on the online encoder (backbone) between the two.
    """

    private_modules = (*BYOL.private_modules, "local")

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 1024,
                 output_dim: Annotated[int, positive] = 256, momentum: Annotated[float, probability] = 0.99) -> None:
        super().__init__(backbone, optim, hidden_dim, output_dim, momentum)
        self.local = _OnlineCopy(self)
        self.last_divergence: float | None = None

    def reset_private_state(self) -> None:
        super().reset_private_state()
        self.local.valid.fill_(False)
        self.local.scale.zero_()

    def merge(self, delta: float) -> None:
        """Combine global (in the shared modules) and local (in ``self.local``) weights."""
        raise NotImplementedError

    def on_train_start(self) -> None:
        self.last_divergence = None
        if bool(self.local.valid):
            self.last_divergence = divergence(self.backbone, self.local.backbone)
            with torch.no_grad():
                self.merge(self.last_divergence)

    def on_train_end(self) -> None:
        for name in ("backbone", "projection_head", "prediction_head"):
            getattr(self.local, name).load_state_dict(getattr(self, name).state_dict())
        self.local.valid.fill_(True)


class FedU(DivergenceAwareBYOL):
    """Online encoder from the server; predictor from the server only if the divergence is small.

    Args:
        threshold: keep the local predictor when divergence >= threshold (0.4 in FedU).
    """

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 1024,
                 output_dim: Annotated[int, positive] = 256, momentum: Annotated[float, probability] = 0.99,
                 threshold: Annotated[float, non_negative] = 0.4) -> None:
        super().__init__(backbone, optim, hidden_dim, output_dim, momentum)
        self.threshold = threshold

    def merge(self, delta: float) -> None:
        if delta >= self.threshold:
            self.prediction_head.load_state_dict(self.local.prediction_head.state_dict())
