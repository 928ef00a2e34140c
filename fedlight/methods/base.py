"""The contract between a local objective and the federated engine.

A method is a LightningModule that the engine drives with an explicit Fabric loop
(``training_step`` / ``configure_optimizers`` / ``on_train_batch_end``). It declares which of
its sub-modules are communicated to the server (``shared_modules``) and which are private
to the client and must persist between the client's rounds (``private_modules``). Every
other parameter is rebuilt each round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import lightning as L
import torch
from torch import nn


@dataclass
class OptimizerSpec:
    """The local optimizer (``local.*`` keys)."""

    name: Literal["adam", "sgd", "adamw"] = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 1e-6

    def build(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        if self.name == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        cls = torch.optim.Adam if self.name == "adam" else torch.optim.AdamW
        return cls(params, lr=self.lr, weight_decay=self.weight_decay)


Batch = tuple[list[torch.Tensor], torch.Tensor]
"""What ``training_step`` receives: ``num_views`` augmented views (B, C, H, W) and labels (B,)."""


class FederatedModule(L.LightningModule):
    """Base class of local objectives.

    Args:
        backbone: encoder with a ``feature_dim`` attribute, (B, C, H, W) -> (B, D).
        optim: the local optimizer.
    """

    shared_modules: tuple[str, ...] = ("backbone",)
    private_modules: tuple[str, ...] = ()
    num_views: int = 2
    uses_labels: bool = False

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.optim = optim or OptimizerSpec()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Representation used for evaluation: backbone output (B, D)."""
        return self.backbone(x)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optim.build([p for p in self.parameters() if p.requires_grad])

    def reset_private_state(self) -> None:
        """Initialise private modules for a client seen for the first time (default: nothing)."""

    def _module_state(self, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
        return {f"{n}.{k}": v for n in names for k, v in getattr(self, n).state_dict().items()}

    def shared_state(self) -> dict[str, torch.Tensor]:
        """The communicated tensors (live references), keyed like ``state_dict``."""
        return self._module_state(self.shared_modules)

    def private_state(self) -> dict[str, torch.Tensor]:
        """The client's persistent private tensors (live references)."""
        return self._module_state(self.private_modules)

    def load_partial(self, state: dict[str, torch.Tensor]) -> None:
        """Copy ``state`` (a subset of ``state_dict`` keys) into this module in place."""
        own = self.state_dict()
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v)
