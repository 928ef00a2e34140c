"""FedU (Zhuang et al., ICCV 2021): the divergence-aware predictor update, around an objective with a predictor."""

from __future__ import annotations

from typing import Annotated

import copy

import torch
from lightly.models.utils import deactivate_requires_grad
from torch import nn

from fedlight.config.checks import non_negative
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule
from fedlight.methods.wrapper import ObjectiveWrapper


def divergence(global_net: nn.Module, local_net: nn.Module) -> float:
    """Mean over conv weight tensors of |W_global - W_local|_2 (all >= 2-d weights if no conv)."""
    def weights(net: nn.Module) -> list[torch.Tensor]:
        convs = [m.weight for m in net.modules() if isinstance(m, nn.Conv2d)]
        return convs or [p for p in net.parameters() if p.dim() >= 2]

    norms = [(g.detach() - l.detach()).norm() for g, l in zip(weights(global_net), weights(local_net))]
    return float(torch.stack(norms).mean())


class _OnlineCopy(nn.Module):
    """The client's own online network (the objective's shared modules) from the end of its last local training."""

    def __init__(self, objective: FederatedModule) -> None:
        super().__init__()
        for name in objective.shared_modules:
            self.add_module(name, copy.deepcopy(objective.get_submodule(name)))
        deactivate_requires_grad(self)
        self.register_buffer("valid", torch.zeros((), dtype=torch.bool))
        self.register_buffer("scale", torch.zeros(()))  # FedEMA's lambda, set at its first update


class DivergenceAware(ObjectiveWrapper):
    """An objective whose client merges the incoming global online network with its own previous one.

    In FedU's and FedEMA's framework (Zhuang et al. 2022, Fig. 1) the server aggregates the
    online network, here the objective's ``shared_modules``; its target network (BYOL's,
    MoCo's key encoder, DINO's teacher) stays on the client. At the start of a round the shared
    modules hold the global model and ``local`` the client's online network from its last round;
    ``merge`` decides what training starts from. The divergence is measured on the online encoder
    (backbone) between the two.

    What a subclass asks of the objective is a class attribute of the objective's (no base class
    needed; an outside package's objective declares it the same way), checked by ``unfit``:
    ``predictor_module`` (FedU), the name of its predictor, and ``target_modules`` (FedEMA), the
    names of its EMA target network.

    Args:
        objective: the local objective (BYOL, the papers').

    Raises:
        UserError: the objective lacks what the method needs (``unfit``).
    """

    default_objective = "byol"

    def __init__(self, objective: FederatedModule) -> None:
        super().__init__(objective)
        problem = self.unfit(objective)
        if problem:
            raise UserError(problem)
        self.local = _OnlineCopy(objective)
        self.private_modules = (*self.private_modules, "local")
        self.last_divergence: float | None = None

    @classmethod
    def unfit(cls, objective: FederatedModule) -> str | None:
        """Why ``objective`` cannot be wrapped: one line naming the fix, or None (default: any fits)."""
        return None

    def reset_private_state(self) -> None:
        self.objective.reset_private_state()
        self.local.valid.fill_(False)
        self.local.scale.zero_()

    def merge(self, delta: float) -> None:
        """Combine global (in the objective's shared modules) and local (in ``self.local``) weights."""
        raise NotImplementedError

    def on_train_start(self) -> None:
        self.last_divergence = None
        if bool(self.local.valid):
            self.last_divergence = divergence(self.objective.backbone, self.local.backbone)
            with torch.no_grad():
                self.merge(self.last_divergence)
        self.objective.on_train_start()

    def on_train_end(self) -> None:
        self.objective.on_train_end()
        for name in self.objective.shared_modules:
            self.local.get_submodule(name).load_state_dict(self.objective.get_submodule(name).state_dict())
        self.local.valid.fill_(True)


class FedU(DivergenceAware):
    """FedU: the online network from the server, its predictor only if the divergence is small (BYOL, SimSiam).

    Needs an objective with a predictor (``predictor_module``): BYOL, the paper's, or SimSiam.

    Args:
        objective: the local objective (``method.objective``, default BYOL).
        threshold: keep the local predictor when divergence >= threshold (0.4 in FedU).
    """

    def __init__(self, objective: FederatedModule, threshold: Annotated[float, non_negative] = 0.4) -> None:
        super().__init__(objective)
        self.threshold = threshold

    @classmethod
    def unfit(cls, objective: FederatedModule) -> str | None:
        if getattr(objective, "predictor_module", None):
            return None
        return (f"method.name=fedu updates a predictor, and {type(objective).__name__} has none; set "
                "method.objective=byol or simsiam (an objective naming its predictor in predictor_module)")

    def merge(self, delta: float) -> None:
        if delta >= self.threshold:
            name = self.objective.predictor_module
            self.objective.get_submodule(name).load_state_dict(self.local.get_submodule(name).state_dict())
