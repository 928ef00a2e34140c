"""FedEMA (Zhuang et al., ICLR 2022): divergence-aware EMA of the global and local online networks."""

from __future__ import annotations

from typing import Annotated

from torch import nn

from fedlight.config.checks import fraction, positive, probability
from fedlight.methods.federated_module import OptimizerSpec
from fedlight.methods.fedu import DivergenceAwareBYOL


def ema_weight(delta: float, scale: float) -> float:
    """mu_k = min(lambda * delta, 1)."""
    return min(scale * delta, 1.0)


class FedEMA(DivergenceAwareBYOL):
    """Online encoder (backbone + projector) and predictor <- mu * local + (1 - mu) * global.

    lambda is set per client at its first update as tau / delta, so that mu = tau then.

    Args:
        tau: the EMA weight at a client's first update (0.7).
    """

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 1024,
                 output_dim: Annotated[int, positive] = 256, momentum: Annotated[float, probability] = 0.99,
                 tau: Annotated[float, fraction] = 0.7) -> None:
        super().__init__(backbone, optim, hidden_dim, output_dim, momentum)
        self.tau = tau
        self.last_mu: float | None = None

    def merge(self, delta: float) -> None:
        if float(self.local.scale) == 0:
            self.local.scale.fill_(self.tau / max(delta, 1e-12))
        self.last_mu = mu = ema_weight(delta, float(self.local.scale))
        for name in ("backbone", "projection_head", "prediction_head"):
            for g, l in zip(getattr(self, name).state_dict().values(), getattr(self.local, name).state_dict().values()):
                if g.is_floating_point():
                    g.mul_(1 - mu).add_(l, alpha=mu)
