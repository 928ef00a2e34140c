"""LG-FedAvg (Liang et al., 2020): local representations below (or around) a global model.

The model is split by module name: ``global_layers`` are averaged by the server over the
sampled clients and written to every client; every other layer is the client's own,
persistent private state. Training starts with a FedAvg phase (``warmup_rounds`` rounds,
or until the global model's ``test_acc`` reaches ``warmup_goal_acc``), after which every
client's local layers start from the FedAvg model (Algorithm 1; the authors load a
FedAvg checkpoint into every local model).

Any split is expressible. The paper's experiments (sec. 3.1, 7.1) use two: on MNIST the last
two layers are the global model (``global_layers: [backbone.fc4, classifier]``, Table 5), on
CIFAR-10 the two convolutions (``global_layers: [backbone.conv1, backbone.conv2]``), as the
authors' code does; Figure 1 draws local representation layers below a global head
(``global_layers: [classifier]``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from fedlight.config.checks import non_negative, probability
from fedlight.errors import UserError
from fedlight.methods.federated_module import Batch, FederatedModule
from fedlight.methods.wrapper import ObjectiveWrapper


def complement(root: nn.Module, taken: tuple[str, ...]) -> tuple[str, ...]:
    """The fewest module names under ``root`` whose states cover everything outside ``taken``.

    Args:
        root: the module whose ``state_dict`` is split.
        taken: dotted module names already assigned (e.g. global and transient layers).
    """
    out: list[str] = []

    def walk(module: nn.Module, prefix: str) -> None:
        for name, child in module.named_children():
            full = f"{prefix}{name}"
            if full in taken:
                continue
            if any(t.startswith(full + ".") for t in taken):
                walk(child, full + ".")
            elif child.state_dict():
                out.append(full)
        own = [n for n, _ in (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False))]
        if own and prefix:
            raise UserError(f"method.global_layers splits '{prefix[:-1]}', which holds tensors of its own "
                            f"({own[0]}); name it or its parent whole")

    walk(root, "")
    return tuple(out)


class LocalGlobal(ObjectiveWrapper):
    """LG-FedAvg around any local objective (method ``lg``; ``method.objective`` picks the objective).

    Over an objective without a classifier (SimCLR, BYOL), a linear ``head`` on the local
    representation is added and trained with cross-entropy on detached features, so the local
    layers learn only from the self-supervised loss and the supervised head can be the global
    model (``global_layers: [head]``).

    Args:
        objective: the local objective (supervised in the paper).
        num_classes: classes of the head added over an objective without a classifier.
        global_layers: module names, relative to the objective (``classifier``,
            ``backbone.fc1``, ...) or ``head``, that the server averages; an empty list
            keeps every layer local after the warm-up (the "local only" baseline).
        warmup_rounds: FedAvg rounds before the LG rounds start.
        warmup_goal_acc: end the FedAvg phase early once an evaluated global ``test_acc``
            reaches this value (the paper's "FedAvg until a goal accuracy").
        warmup_goal_metric: the history column ``warmup_goal_acc`` is compared with
            (``normal_acc``: the original devices' mean accuracy when a new device arrives,
            sec. 3.2, ``fedlight.engine.parts.lg_fedavg.new_device``).
    """

    def __init__(self, objective: FederatedModule, num_classes: int,
                 global_layers: list[str] | None = None,  # [] is valid: every layer local (local only)
                 warmup_rounds: Annotated[int, non_negative] = 0,
                 warmup_goal_acc: Annotated[float | None, probability] = None,
                 warmup_goal_metric: Literal["test_acc", "normal_acc"] = "test_acc") -> None:
        super().__init__(objective)
        self.head: nn.Linear | None = None
        if not objective.has_classifier:
            self.head = nn.Linear(objective.backbone.feature_dim, num_classes)
            self.has_classifier = self.uses_labels = True
        names = ["classifier"] if global_layers is None else list(global_layers)
        self.global_layers = tuple(self._resolve(n) for n in names)
        self.warmup_rounds, self.warmup_goal_acc, self.warmup_goal_metric = warmup_rounds, warmup_goal_acc, warmup_goal_metric
        self.local_phase = False
        self.shared_modules = (*self.shared_modules, *(("head",) if self.head is not None else ()))
        self.private_modules = complement(self, (*self.shared_modules, *self.transient_modules))

    def _resolve(self, name: str) -> str:
        if name == "head" and self.head is not None:
            return "head"
        try:
            self.objective.get_submodule(name)
        except AttributeError:
            valid = sorted(n for n, m in self.objective.named_modules() if n and m.state_dict())[:12]
            raise UserError(f"method.global_layers entry {name!r} is not a layer of the objective; "
                            f"valid names include {', '.join(valid)}") from None
        return f"objective.{name}"

    # ------------------------------------------------------------------ phases
    def in_local_phase(self, round_: int, history: list[dict[str, Any]]) -> bool:
        """True once the FedAvg phase is over at the start of (0-based) ``round_``."""
        goal = self.warmup_goal_acc
        reached = goal is not None and any((row.get(self.warmup_goal_metric) or 0) >= goal for row in history)
        return round_ >= self.warmup_rounds or reached

    def update_split(self, round_: int, history: list[dict[str, Any]]) -> bool:
        """Enter the LG phase when it is due; True when the shared / private split just changed.

        The round loop calls it on every worker model before each round
        (``fedlight.engine.loop.interfaces.ChangingSplit``).

        Args:
            round_: the (0-based) round about to start.
            history: the history rows of the rounds so far (``test_acc``, ``normal_acc``, ...).
        """
        if self.local_phase or not self.in_local_phase(round_, history):
            return False
        self.local_phase = True
        self.shared_modules = self.global_layers
        self.private_modules = complement(self, (*self.global_layers, *self.transient_modules))
        return True

    # ------------------------------------------------------------------ model
    def classify(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, num_classes): the head over the local representation, or the objective's."""
        if self.head is not None:
            return self.head(self.objective.features(x))
        return self.objective.classify(x)

    def trainable(self) -> list[nn.Parameter]:
        """Parameters of the local step (subclasses exclude what they step themselves)."""
        return [p for p in self.parameters() if p.requires_grad]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optim.build(self.trainable())

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        """The objective's loss, plus cross-entropy of the head on detached features (B, D)."""
        loss = self.objective.training_step(batch, batch_idx)
        if self.head is None:
            return loss
        views, y = batch
        return loss + F.cross_entropy(self.head(self.objective.features(views[0]).detach()), y)
