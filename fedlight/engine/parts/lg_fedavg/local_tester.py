"""LG-FedAvg's evaluation (section 2.4): every client's own model, its own test split and ensembles.

* local test: client k's model (global layers + its local layers) on its local test split
  (test samples of its own classes, ``matching_test_split``): mean and spread over clients; a
  method without a classifier (SimCLR, BYOL, ... under FedBN) is scored by the run's weighted kNN
  instead (``local_knn_acc``): its own training share, labelled, as the bank, its local test split as
  the queries, so each client's encoder is judged on the data it is meant for (FedBN, Li et al.
  ICLR 2021, scores each client's model on its own domain); no new test, averaged model or fairness
  columns then, which read a classifier;
* new test: the ensemble of all clients' models on the full test set (``fedlight.eval.ensemble``);
* the averaged model: the sample-weighted mean of the clients' models on the full test set;
* what the new test costs: every client's local model sent to the server once (section 3.1,
  footnote: "all local models have to be sent to the global server only once after
  training"), i.e. the client's own tensors that a forward pass of ``classify`` reads
  (``upload``; not, e.g., lg_fair's adversary or SimCLR's projection head);
* on data with a protected attribute (fair LG-FedAvg, Table 4): the clients' classifier
  accuracy and ROC AUC on the full test set, their own adversaries' ROC AUC for the attribute,
  and a post-fit adversary: a logistic regression fitted on each client's representations of
  its training samples (torchmetrics AUROC; mean over clients).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchmetrics.functional.classification import binary_auroc

from fedlight.engine.loop.evaluator import mean_and_spread
from fedlight.eval.ensemble import ensemble_accuracies
from fedlight.eval.probes import knn_accuracy
from fedlight.server.ops import weighted_average

State = dict[str, torch.Tensor]
LOCAL_METRICS = ("local_test_acc", "local_knn_acc", "new_test_acc", "avg_model_acc", "class_acc", "class_auc",
                 "adv_auc", "postfit_adv_auc")


class LocalTester:
    """Scores a list of client models with the worker model and an ``Evaluator``'s ``apply``.

    Args:
        evaluator: the run's evaluator (worker model, data, normalisation, ``apply``).
        train_parts: one index array per client into the training set (for the post-fit adversary).
        test_parts: one index array per client into the test set (its local test split).
        weights: each client's training sample count (weights of the averaged model).
    """

    def __init__(self, evaluator: Any, train_parts: list[np.ndarray], test_parts: list[np.ndarray],
                 weights: list[float]) -> None:
        self.evaluator, self.weights = evaluator, weights
        self.train_parts = [torch.as_tensor(p, dtype=torch.long) for p in train_parts]
        self.test_parts = [torch.as_tensor(p, dtype=torch.long) for p in test_parts]
        self._inference_keys: set[str] | None = None

    def inference_keys(self) -> set[str]:
        """State keys of the modules a forward pass of the worker model's ``classify`` runs through."""
        if self._inference_keys is None:
            ev = self.evaluator
            ran: set[str] = set()
            hooks = [m.register_forward_hook(lambda *_, name=name: ran.add(name))
                     for name, m in ev.module.named_modules() if name]
            try:
                ev.apply(ev.module.classify, ev.data.test_x[:2])
            finally:
                for hook in hooks:
                    hook.remove()
            self._inference_keys = {k for k in ev.module.state_dict() if k.rpartition(".")[0] in ran}
        return self._inference_keys

    def upload(self, private: State) -> State:
        """What the new test needs a client to send once (section 3.1, footnote): the tensors of its
        ``private`` state that its model's prediction reads (the server holds the global ones)."""
        keys = self.inference_keys()
        return {k: v for k, v in private.items() if k in keys}

    def metrics(self, models: list[State]) -> dict[str, float | None]:
        """The metrics of ``models`` (one full state per client).

        The worker model is left holding the averaged model, so the run's linear probe, kNN and
        ``test_acc`` (scored next) describe it rather than whichever client trained last.
        """
        ev = self.evaluator
        module, data = ev.module, ev.data
        if not module.has_classifier:
            return self._local_knn(models)
        test_y = data.test_y.to(ev.fabric.device)
        logits, local_acc, fair = [], [], []
        for client, state in enumerate(models):
            module.load_partial(state)
            out = ev.apply(module.classify, data.test_x)  # (M, C)
            logits.append(out)
            part = self.test_parts[client].to(out.device)
            if len(part):
                local_acc.append(float((out[part].argmax(1) == test_y[part]).float().mean()))
            if data.test_a is not None:
                fair.append(self._fair(out, client))
        self._load_average(models)
        avg_acc = float((ev.apply(module.classify, data.test_x).argmax(1) == test_y).float().mean())
        out: dict[str, float | None] = {
            **mean_and_spread("local_test_acc", local_acc),
            **ensemble_accuracies(torch.stack(logits), test_y),
            "avg_model_acc": avg_acc,
        }
        for key in (fair[0] if fair else {}):
            out.update(mean_and_spread(key, [f[key] for f in fair]))
        return out

    def _local_knn(self, models: list[State]) -> dict[str, float | None]:
        """``local_knn_acc`` (mean and spread over clients): each client's model by the run's weighted kNN
        (``eval.knn_k``, ``eval.knn_temperature``), its training share (N_k, with labels) the bank and its
        local test split the queries; the worker model is left holding the averaged model."""
        ev = self.evaluator
        module, data, o = ev.module, ev.data, ev.options
        accs = []
        for client, state in enumerate(models):
            bank, queries = self.train_parts[client], self.test_parts[client]
            if len(bank) and len(queries):
                module.load_partial(state)
                accs.append(knn_accuracy(ev.apply(module.features, data.train_x[bank]),
                                         ev.fabric.to_device(data.train_y[bank]),
                                         ev.apply(module.features, data.test_x[queries]),
                                         ev.fabric.to_device(data.test_y[queries]), data.num_classes, o.knn_k,
                                         o.knn_temperature))
        self._load_average(models)
        return mean_and_spread("local_knn_acc", accs)

    def _load_average(self, models: list[State]) -> None:
        """Load the sample-weighted mean of ``models`` into the worker model (the run's probe and kNN,
        scored next, describe it rather than whichever client was scored last)."""
        common = set.intersection(*(set(m) for m in models))  # never-trained clients may lack private keys
        self.evaluator.module.load_partial(weighted_average([{k: m[k] for k in common} for m in models],
                                                            self.weights))

    def _fair(self, logits: torch.Tensor, client: int) -> dict[str, float]:
        """Table 4's columns for the loaded client model; ``logits`` (M, 2) on the full test set."""
        ev = self.evaluator
        module, data = ev.module, ev.data
        y, a = data.test_y.to(logits.device), data.test_a.to(logits.device)
        out = {"class_acc": float((logits.argmax(1) == y).float().mean()),
               "class_auc": float(binary_auroc(logits.softmax(1)[:, 1], y))}
        if hasattr(module, "protected_logits"):
            out["adv_auc"] = float(binary_auroc(ev.apply(module.protected_logits, data.test_x).sigmoid(), a))
        train = self.train_parts[client]
        train_a = data.train_a[train].numpy()
        if len(np.unique(train_a)) == 2:
            from sklearn.linear_model import LogisticRegression  # here: only tabular fairness runs need sklearn

            feats = ev.apply(module.features, data.train_x[train]).cpu().numpy()
            probe = LogisticRegression(max_iter=1000).fit(feats, train_a)
            scores = probe.predict_proba(ev.apply(module.features, data.test_x).cpu().numpy())[:, 1]
            out["postfit_adv_auc"] = float(binary_auroc(torch.as_tensor(scores), data.test_a))
        return out
