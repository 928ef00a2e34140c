"""FedBN (Li et al., "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization", ICLR 2021): every BatchNorm layer stays on its client.

The server averages everything else exactly as it would without FedBN (Algorithm 1: the
aggregation skips the BN layers); each client's BN affine parameters (gamma, beta: (C,)) and
running statistics (mean, var: (C,), and the batch counter) are its private, persistent state,
never uploaded nor downloaded. A client seen for the first time starts from freshly
initialised BN layers (gamma 1, beta 0, mean 0, var 1), i.e. the initial global model's.

Why not LG-FedAvg's split (``method.name=lg``)? ``global_layers`` can keep the BN layers local
only by naming every other layer one by one (a ResNet-18 has 21), and over SimCLR / BYOL it adds
a supervised head that FedBN does not have; this wrapper takes any objective and any backbone.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule
from fedlight.methods.local_global import complement
from fedlight.methods.wrapper import ObjectiveWrapper


def batchnorm_modules(root: nn.Module, skip: tuple[str, ...]) -> tuple[str, ...]:
    """Dotted names of the BatchNorm modules of ``root`` outside the modules named in ``skip``."""
    return tuple(name for name, m in root.named_modules()
                 if isinstance(m, _BatchNorm) and not any(name == s or name.startswith(s + ".") for s in skip))


class FedBN(ObjectiveWrapper):
    """Any local objective with its BatchNorm layers kept local (method ``fedbn``).

    The objective's own private modules (BYOL's target network, with its BN) and transient
    ones (MOON's frozen global model) keep their roles; only the BN layers of the shared
    modules become private.

    Args:
        objective: the local objective (supervised in the paper; SimCLR, BYOL, ...).

    Raises:
        UserError: the shared modules hold no BatchNorm layer (``model.backbone`` without BN).
    """

    def __init__(self, objective: FederatedModule) -> None:
        super().__init__(objective)
        self.local_bn = batchnorm_modules(self, (*self.private_modules, *self.transient_modules))
        if not self.local_bn:
            raise UserError(f"method.name=fedbn keeps BatchNorm layers local, but {type(objective).__name__}'s "
                            f"shared layers have none; use model.backbone=small_cnn or resnet18, or another method")
        self.private_modules = (*self.private_modules, *self.local_bn)
        self.shared_modules = complement(self, (*self.private_modules, *self.transient_modules))

    @torch.no_grad()
    def reset_private_state(self) -> None:
        """A new client: initial BN layers first, then the objective's own (BYOL copies its online
        network, BN included, into its target)."""
        for name in self.local_bn:
            self.get_submodule(name).reset_parameters()
        self.objective.reset_private_state()
