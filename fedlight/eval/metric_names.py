"""Names of the evaluation metrics that say which label fraction they were measured with.

The linear probe and the kNN classifier both fit on ``eval.label_fraction`` of the training
labels (``Evaluator.probe_idx``), stored as plain ``linear_probe_acc`` and ``knn_acc``; each
``eval.extra_label_fractions`` entry ``f`` adds ``linear_probe_acc@f`` (SOFed's 1% / 10% / 100%
protocol). Once the run's label fraction is attached (``linear_probe_acc@0.1``), two runs with
10% and 1% labels no longer share a column, and every name reads as ``linear probe, 10% labels``.
"""

from __future__ import annotations

from typing import Any

PROBE, KNN, TEST = "linear_probe_acc", "knn_acc", "test_acc"
LABELLED = (PROBE, KNN)  # fit on eval.label_fraction of the training labels
TITLES = {PROBE: "linear probe", KNN: "kNN", TEST: "test", "client_knn_acc": "kNN on clients' own shares",
          "client_knn_acc_worst10": "kNN, worst 10% of clients", "finetune_acc": "fine-tune", "rankme": "RankMe",
          "spectrum_top1": "top singular value's share", "embedding_std_mean": "embedding std",
          "drift_cka": "client-to-global CKA", "drift_cka_min": "client-to-global CKA, lowest",
          "local_knn_acc": "kNN, each client's model on its own test split"}
# the label-free readings a run's final line prints beside its accuracies (the others: history, TensorBoard, report)
FINAL_READINGS = ("rankme",)
# LG-FedAvg's adversary (Liang et al. 2020, fair representations): its AUC at telling the protected attribute is what
# the method lowers, so for these a smaller value is the better one
LOWER_IS_BETTER = ("adv_auc", "postfit_adv_auc", "alignment", "uniformity", "spectrum_top1")
# what ``eval.readings`` may name (the recipe schema's ``Reading``): the label-free readings, the kNN over clients'
# own test shares, the clients' drift (fedlight.engine.loop.evaluator, fedlight.engine.loop.client_drift)
READINGS = ("rankme", "spectrum", "alignment", "uniformity", "embedding_std", "client_knn", "drift")
# the label-free readings of an evaluation (fedlight.eval.diagnostics): no accuracy, so no percent; a report shows
# them where ``--metric`` names them (their numbers as they are, differences in their own units)
LABEL_FREE = ("rankme", "spectrum_top1", "alignment", "uniformity", "embedding_std_mean", "drift_cka")
SPREAD = "_std"  # ``local_test_acc_std``: a metric's spread over clients (mean_and_spread), not a metric


def lower_is_better(key: str) -> bool:
    """Whether a smaller value of ``key`` is the better one (``adv_auc``; ``knn_acc`` is not)."""
    return split(key)[0] in LOWER_IS_BETTER


def is_metric(key: str) -> bool:
    """Whether a history row's ``key`` is an accuracy or AUC (not a loss, time or byte count)."""
    return "_acc" in key or "_auc" in key


def is_reading(key: str) -> bool:
    """Whether ``key`` is a label-free reading (``rankme``, ``drift_cka_min``), not an accuracy."""
    return key.startswith(LABEL_FREE)


def scale(key: str) -> float:
    """What a report multiplies ``key``'s values by: 100 for an accuracy or AUC (percent), 1 for a reading."""
    return 1.0 if is_reading(key) else 100.0


def unit(key: str) -> str:
    """A table header's unit for ``key``: ``' (%)'``, or nothing for a reading."""
    return "" if is_reading(key) else " (%)"


def is_spread(key: str) -> bool:
    """Whether ``key`` is a metric's spread over clients (``knn_acc_std``), not a metric of the model."""
    return key.endswith(SPREAD)


def split(key: str) -> tuple[str, float | None]:
    """``'linear_probe_acc@0.1'`` -> ``('linear_probe_acc', 0.1)``; ``'test_acc'`` -> ``('test_acc', None)``."""
    base, sep, fraction = key.partition("@")
    try:
        return base, float(fraction) if sep else None
    except ValueError:
        return key, None


def with_fraction(metrics: dict[str, Any], label_fraction: float) -> dict[str, Any]:
    """``metrics`` with the run's ``label_fraction`` attached to the probe and kNN keys:
    ``{'linear_probe_acc': .8, 'knn_acc': .7}``, 0.1 -> ``{'linear_probe_acc@0.1': .8, 'knn_acc@0.1': .7}``.

    An extra fraction equal to the run's own is the same labelled subset (the same seed and
    draw), so the plain key's value stands for both."""
    out = {k: v for k, v in metrics.items() if k not in LABELLED}
    out.update({f"{k}@{label_fraction:g}": metrics[k] for k in LABELLED if k in metrics})
    return out


def fraction_text(fraction: float) -> str:
    """``0.1`` -> ``'10% labels'``."""
    return f"{100 * fraction:g}% labels"


def title(key: str) -> str:
    """``'linear_probe_acc@0.1'`` -> ``'linear probe, 10% labels'``; an unknown key stays as it is."""
    base, fraction = split(key)
    name = TITLES.get(base, base)
    return name if fraction is None else f"{name}, {fraction_text(fraction)}"


def order(keys: list[str]) -> list[str]:
    """Main metric first: test accuracy, the linear probe (most labels first), kNN, then the rest by name."""
    def rank(key: str) -> tuple[int, float, str]:
        base, fraction = split(key)
        return {TEST: 0, PROBE: 1, KNN: 2}.get(base, 3), -(fraction or 0), key

    return sorted(keys, key=rank)


def matches(key: str, wanted: str) -> bool:
    """Whether ``--metric wanted`` selects ``key``: the same name, or its name without a label fraction."""
    return key == wanted or split(key)[0] == wanted
