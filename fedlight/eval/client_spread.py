"""Does the encoder serve every client, or only the average one? A metric over clients' own test shares.

Each client's held-out share is the test images of the classes it trains on, in its training class mix
(``fedlight.data.partition.local_test_split``, LG-FedAvg's local test; under feature shift drawn from the
client's own domain). The global encoder's kNN
predictions on the whole test set, scored share by share, give one accuracy per client; the run reports
their mean, the mean of the worst tenth of clients (the fairness papers' worst-10%, e.g. Li et al.,
"Fair resource allocation in federated learning", ICLR 2020) and their standard deviation.
"""

from __future__ import annotations

import math

import numpy as np
import torch

WORST_SHARE = 0.1  # the worst tenth of clients (at least one)


def share_accuracies(correct: torch.Tensor, shares: list[torch.Tensor]) -> list[float]:
    """The accuracy of each non-empty share: ``correct`` (M,) bool over the test set, ``shares`` index tensors."""
    return [float(correct[idx].float().mean()) for idx in shares if len(idx)]


def worst_mean(values: list[float], share: float = WORST_SHARE) -> float:
    """The mean of the lowest ``share`` of ``values`` (ceil(share x n) of them, at least one)."""
    worst = sorted(values)[:max(1, math.ceil(share * len(values)))]
    return float(np.mean(worst))


def spread_columns(key: str, values: list[float]) -> dict[str, float | None]:
    """``{key: mean, key_worst10: worst_mean, key_std: std}`` over clients; None where no client has a share."""
    if not values:
        return {key: None, f"{key}_worst10": None, f"{key}_std": None}
    return {key: float(np.mean(values)), f"{key}_worst10": worst_mean(values), f"{key}_std": float(np.std(values))}
