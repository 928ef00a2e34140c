"""LG-FedAvg's "new test" (section 2.4): ensembles of the clients' models on the full test set."""

from __future__ import annotations

import torch


def ensemble_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """Mean over models of the log-softmax outputs, as the authors' code averages its nets' log-probs.

    Args:
        logits: (K, N, C) logits of K models on N samples.

    Returns:
        (N, C) averaged log-probabilities (a geometric-mean ensemble, up to normalisation).
    """
    return torch.log_softmax(logits.float(), dim=-1).mean(dim=0)


def majority_vote(logits: torch.Tensor) -> torch.Tensor:
    """(K, N, C) logits -> (N,) the class most models predict; ties go to the smallest class id."""
    preds = logits.argmax(dim=-1)  # (K, N)
    votes = torch.nn.functional.one_hot(preds, logits.shape[-1]).sum(dim=0)  # (N, C)
    return votes.argmax(dim=-1)  # argmax returns the first maximum


def ensemble_accuracies(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """``new_test_acc`` (averaged log-probs) and ``new_test_acc_vote`` (majority vote) of K models.

    Args:
        logits: (K, N, C) logits of K models on the N test samples.
        labels: (N,) true classes.
    """
    return {
        "new_test_acc": float((ensemble_log_probs(logits).argmax(-1) == labels).float().mean()),
        "new_test_acc_vote": float((majority_vote(logits) == labels).float().mean()),
    }
