"""A method that adds a client-side correction around any local objective (FedProx, SCAFFOLD)."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn

from fedlight.methods.federated_module import Batch, FederatedModule


class ObjectiveWrapper(FederatedModule):
    """Delegates everything to ``objective``; subclasses add to the loss, gradients or payload.

    The objective's module names are prefixed with ``objective.`` so its shared and private
    state keep their meaning.

    Args:
        objective: the wrapped local objective (SimCLR, BYOL, supervised, ...).
    """

    default_objective: str = "supervised"
    """The ``method.objective`` a recipe that names none gets (FedU and FedEMA: BYOL, their papers')."""

    forwarded_hooks: tuple[str, ...] = ("importance_score", "update_split")
    """The optional hooks a part or the loop asks a method for, where it has them (docs/method_contract.md):
    the wrapper answers with its objective's where its own class defines none (FedU scores as BYOL)."""

    def __init__(self, objective: FederatedModule) -> None:
        L.LightningModule.__init__(self)  # not FederatedModule's: the backbone belongs to the objective
        self.objective = objective
        self.optim = objective.optim
        prefix = lambda names: tuple(f"objective.{n}" for n in names)  # noqa: E731
        self.shared_modules = prefix(objective.shared_modules)
        self.private_modules = prefix(objective.private_modules)
        self.transient_modules = prefix(objective.transient_modules)
        self.num_views, self.uses_labels = objective.num_views, objective.uses_labels
        self.has_classifier = objective.has_classifier
        for hook in self.forwarded_hooks:
            if hasattr(objective, hook) and not hasattr(type(self), hook):
                setattr(self, hook, getattr(objective, hook))

    @property
    def batch_refusal(self) -> str | None:  # type: ignore[override]
        """The objective's: a wrapper adds nothing to its step that several clients cannot share."""
        return self.objective.batch_refusal

    def trainable_shared(self) -> list[tuple[str, nn.Parameter]]:
        """(name, parameter) of the communicated parameters that receive gradients."""
        return [(f"{m}.{n}", p) for m in self.shared_modules
                for n, p in self.get_submodule(m).named_parameters() if p.requires_grad]

    @property
    def compile_refusal(self) -> str | None:  # the wrapped objective's step is compiled with the wrapper's
        return self.objective.compile_refusal

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.objective.features(x)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.objective.embed(x)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.objective.classify(x)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.objective.configure_optimizers()

    def reset_private_state(self) -> None:
        self.objective.reset_private_state()

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self.objective.training_step(batch, batch_idx)

    def on_train_start(self) -> None:
        self.objective.on_train_start()

    def on_train_batch_end(self, outputs: torch.Tensor, batch: Batch, batch_idx: int) -> None:
        self.objective.on_train_batch_end(outputs, batch, batch_idx)

    def on_train_end(self) -> None:
        self.objective.on_train_end()
