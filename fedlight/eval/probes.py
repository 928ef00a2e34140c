"""Representation quality: linear probe and weighted kNN on frozen features.

Both take precomputed features, so the caller decides which encoder and which images
(and the same features serve both probes).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy


def label_subset(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of a class-balanced ``fraction`` of the labelled examples (>= 1 per class)."""
    if fraction >= 1.0:
        return np.arange(len(labels))
    keep = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        keep.append(rng.choice(idx, size=_class_share(fraction, len(idx)), replace=False))
    return np.sort(np.concatenate(keep))


def labelled_count(labels: np.ndarray, fraction: float) -> int:
    """How many examples ``label_subset(labels, fraction, rng)`` keeps, whatever ``rng``."""
    if fraction >= 1.0:
        return len(labels)
    return sum(_class_share(fraction, int(n)) for n in np.unique(labels, return_counts=True)[1])


def _class_share(fraction: float, n: int) -> int:
    """A class's labelled examples: ``fraction`` of its ``n``, rounded, at least one."""
    return max(1, int(round(fraction * n)))


def _check_finite(*features: torch.Tensor) -> None:
    """Raise a ValueError where a feature is NaN or infinite: no probe can score such a model (a NaN
    kNN vote goes to class 0, L-BFGS overflows), so the run says so instead of a chance accuracy."""
    if not all(bool(torch.isfinite(f).all()) for f in features):
        raise ValueError("the model's features are not finite (NaN or inf): its weights or normalisation "
                         "statistics (e.g. a BatchNorm running_var below 0) are not a usable model")


def accuracy(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> float:
    metric = MulticlassAccuracy(num_classes=num_classes, average="micro").to(pred.device)
    return float(metric(pred, target))


KNN_CHUNK = 1024  # test points a kNN step compares with the whole bank at once
EXP_LIMIT = 80.0  # float32's exp overflows above 88.7


def knn_chunks(queries: int, chunk: int = KNN_CHUNK) -> int:
    """The steps ``knn_accuracy`` takes over ``queries`` test points (its progress total)."""
    return -(-queries // chunk)


def knn_accuracy(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                 test_labels: torch.Tensor, num_classes: int, k: int = 200, temperature: float = 0.1,
                 chunk: int = KNN_CHUNK, on_chunk: Callable[[], None] | None = None) -> float:
    """Weighted kNN accuracy (Wu et al. 2018, as used in SimCLR/MoCo code bases): ``knn_predict``'s
    predictions scored against ``test_labels`` (M,) int64."""
    preds = knn_predict(train_feats, train_labels, test_feats, num_classes, k, temperature, chunk, on_chunk)
    return accuracy(preds, test_labels, num_classes)


def knn_predict(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                num_classes: int, k: int = 200, temperature: float = 0.1,
                chunk: int = KNN_CHUNK, on_chunk: Callable[[], None] | None = None) -> torch.Tensor:
    """Weighted kNN predictions (M,) (Wu et al. 2018, as used in SimCLR/MoCo code bases).

    Each test point votes with its ``k`` most cosine-similar training points, weighted by
    exp(sim / temperature) (below a temperature of 1 / ``EXP_LIMIT``, by exp((sim - top sim) / temperature):
    the same vote, whose float32 weights would otherwise overflow to inf and tie every class).

    Args:
        train_feats: (N, D) bank features. train_labels: (N,) int64.
        test_feats: (M, D) query features.
        on_chunk: called after each chunk of ``chunk`` test points (progress; ``knn_chunks`` of them).
    """
    # Not lightly's ``knn_predict`` (lightly.utils.benchmarking, 1.6): the same vote, other numbers.
    # It ranks classes with ``argsort(descending=True)``, which is not stable, so an exact tie goes
    # to an arbitrary class (4 equal points of classes 99, 98, 99, 98 out of 100: lightly predicts
    # 99, argmax the lowest, 98; ties happen where features coincide, e.g. a dead encoder's zeros);
    # and it sums one-hot (B, k, C) x weights over k in another order than ``scatter_add_``, so the
    # class scores differ in their last bits and a near-tie can flip. Ours keeps the stored
    # histories' numbers (tests/test_views_and_probes.py: agreement without ties, the tie rule).
    _check_finite(train_feats, test_feats)
    bank = F.normalize(train_feats, dim=1)
    k = min(k, len(bank))
    preds = []
    for start in range(0, len(test_feats), chunk):
        q = F.normalize(test_feats[start:start + chunk], dim=1)
        sim, idx = (q @ bank.T).topk(k, dim=1)
        logits = sim / temperature
        if 1 / temperature > EXP_LIMIT:  # exp(1 / temperature) overflows: each row over its top (sorted) one
            logits = logits - logits[:, :1]  # the same vote, scaled; shifted only here to keep stored numbers
        votes = torch.zeros(len(q), num_classes, device=q.device)
        votes.scatter_add_(1, train_labels[idx], logits.exp())
        preds.append(votes.argmax(dim=1))
        if on_chunk is not None:
            on_chunk()
    return torch.cat(preds)


def probe_evaluations(steps: int) -> int:
    """The loss evaluations ``linear_probe_accuracy`` plans for ``steps`` L-BFGS iterations
    (``torch.optim.LBFGS``'s default ``max_eval``, 5/4 of ``max_iter``): its progress total. It
    often makes fewer (L-BFGS stops once the loss stops changing); the line search of its last
    iteration may make a few more."""
    return steps * 5 // 4


def linear_probe_accuracy(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                          test_labels: torch.Tensor, num_classes: int, steps: int = 100,
                          weight_decay: float = 1e-4, on_evaluation: Callable[[], None] | None = None) -> float:
    """Accuracy of a multinomial logistic regression on standardised frozen features.

    Fitted full-batch with L-BFGS (deterministic and quick for the feature sizes here).

    Args:
        train_feats: (N, D) features of the labelled examples. train_labels: (N,) int64.
        test_feats: (M, D). test_labels: (M,).
        steps: L-BFGS iterations.
        weight_decay: L2 penalty on the weights.
        on_evaluation: called after each evaluation of the loss (progress; about ``probe_evaluations(steps)``).
    """
    _check_finite(train_feats, test_feats)
    mean = train_feats.mean(0)
    # one labelled example has no spread (std would be NaN and L-BFGS overflow): centred, not scaled
    std = train_feats.std(0).clamp_min(1e-6) if len(train_feats) > 1 else torch.ones_like(mean)
    xtr, xte = (train_feats - mean) / std, (test_feats - mean) / std
    with torch.random.fork_rng(devices=[]):  # the same initial head whatever the process did before (resume)
        torch.manual_seed(0)
        head = torch.nn.Linear(xtr.shape[1], num_classes).to(xtr.device)
    opt = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(head(xtr), train_labels) + weight_decay * head.weight.pow(2).sum()
        loss.backward()
        if on_evaluation is not None:
            on_evaluation()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return accuracy(head(xte).argmax(1), test_labels, num_classes)
