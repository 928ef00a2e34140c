"""FedEMA (Zhuang et al., ICLR 2022): divergence-aware EMA of the global and local online networks."""

from __future__ import annotations

from typing import Annotated

from fedlight.config.checks import fraction
from fedlight.methods.federated_module import FederatedModule
from fedlight.methods.fedu import DivergenceAware


def ema_weight(delta: float, scale: float) -> float:
    """mu_k = min(lambda * delta, 1)."""
    return min(scale * delta, 1.0)


class FedEMA(DivergenceAware):
    """FedEMA: online network <- mu * local + (1 - mu) * global, mu set by the divergence (BYOL, MoCo, DINO).

    lambda is set per client at its first update as tau / delta, so that mu = tau then. Needs
    an objective with an EMA target network (``target_modules``), the online / target pair of
    the paper's framework: BYOL, the paper's, MoCo (key encoder) or DINO (teacher).

    Args:
        objective: the local objective (``method.objective``, default BYOL).
        tau: the EMA weight at a client's first update (0.7).
    """

    def __init__(self, objective: FederatedModule, tau: Annotated[float, fraction] = 0.7) -> None:
        super().__init__(objective)
        self.tau = tau
        self.last_mu: float | None = None

    @classmethod
    def unfit(cls, objective: FederatedModule) -> str | None:
        if getattr(objective, "target_modules", ()):
            return None
        return (f"method.name=fedema needs an EMA target network, and {type(objective).__name__} has none; set "
                "method.objective=byol, moco or dino (an objective naming its target network in target_modules)")

    def merge(self, delta: float) -> None:
        if float(self.local.scale) == 0:
            self.local.scale.fill_(self.tau / max(delta, 1e-12))
        self.last_mu = mu = ema_weight(delta, float(self.local.scale))
        for name in self.objective.shared_modules:
            for g, l in zip(self.objective.get_submodule(name).state_dict().values(),
                            self.local.get_submodule(name).state_dict().values()):
                if g.is_floating_point():
                    g.mul_(1 - mu).add_(l, alpha=mu)
