"""Label flipping: a data-poisoning attack on supervised methods."""

from __future__ import annotations

import torch

from fedlight.attacks.attack import Attack, AttackContext, State


class LabelFlip(Attack):
    """Trains on its data with every label ``y`` flipped to ``C - 1 - y`` and sends what it trained
    (label flipping, e.g. Tolpegin et al. 2020; a method that never reads a label is refused)."""

    poisons_labels = True

    def poison_labels(self, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
        return num_classes - 1 - labels

    def craft(self, own: State, context: AttackContext) -> State:
        return own
