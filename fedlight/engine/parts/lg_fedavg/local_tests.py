"""LG-FedAvg's extra evaluations (Liang et al. 2020, section 2.4): local test, new test, averaged model.

Every client's model (the global layers + its own local layers) is scored on its local test
split and, as an ensemble, on the full test set (``fedlight.engine.parts.lg_fedavg.local_tester.LocalTester``).
A method without a classifier is scored by kNN on its local test split instead (``local_knn_acc``), with
no new test. The new test needs every client's local model sent to the server once (section 3.1,
footnote: "only once after training"): ledger direction ``new_test``, charged in the round of
the first evaluation, whose byte count every later one shares (the models' sizes never
change), so a run grown by ``--resume`` is not charged twice and its ledger matches a straight
run's. Shows its metrics as ``eval/*`` and the upload as ``comm/bytes_new_test``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from lightning.fabric import Fabric

from fedlight.data.partition import local_test_split
from fedlight.engine.loop.comm_ledger import CommLedger
from fedlight.engine.loop.interfaces import ACCURACY, PluginContext, RoundPlugin, State
from fedlight.engine.parts.lg_fedavg.local_tester import LOCAL_METRICS, LocalTester
from fedlight.seeding import numpy_rng


class LocalTests(RoundPlugin):
    """The local and new tests over the trainable clients' models (metrics on rank 0).

    Args:
        fabric: devices (and this process's rank).
        evaluator: the run's ``Evaluator`` (worker model, data, ``apply``).
        clients: the trainable clients' ids.
        train_parts: their sample indices into the training set.
        train_labels: (N,) training labels; test_labels: (M,) test labels (local test splits).
        seed: run seed (the local test splits).
        domains: under feature shift, the (N,) training and (M,) test samples' domains: a client's local
            test split is then drawn from its own domain's test images (``local_test_split``).
    """

    needs_clients = True
    metric_prefixes = LOCAL_METRICS

    def __init__(self, fabric: Fabric, evaluator: Any, clients: list[int], train_parts: list[np.ndarray],
                 train_labels: np.ndarray, test_labels: np.ndarray, seed: int = 0,
                 domains: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.fabric, self.clients = fabric, clients
        rng = numpy_rng(seed, "local-test")
        test = local_test_split(train_labels, train_parts, test_labels, rng, domains)
        self.tester = LocalTester(evaluator, train_parts, test, [float(len(p)) for p in train_parts])

    @classmethod
    def from_context(cls, context: PluginContext) -> LocalTests | None:
        """The local tests of the trainable clients where ``eval.local_test`` asks for them, else None."""
        c = context
        if not c.options.eval.local_test:
            return None
        d = c.data
        return cls(c.fabric, c.evaluator, c.trainable, [c.parts[i].numpy() for i in c.trainable], c.labels.numpy(),
                   d.test_y.numpy(), c.seed, d.domain_ids())

    def evaluate(self, round_: int, clients: dict[int, State], global_state: State,
                 ledger: list[list]) -> tuple[dict[str, float | None], list[list]]:
        """Leaves the worker model holding the clients' averaged model (``LocalTester.metrics``),
        so the run's probe and kNN, scored next, describe it."""
        private = {c: clients.get(c, {}) for c in self.clients}
        uploads = CommLedger()
        if self.tester.evaluator.module.has_classifier and not any(row[2] == "new_test" for row in ledger):
            for c in self.clients:
                uploads.record(round_, c, "new_test", self.tester.upload(private[c]))
        if self.fabric.global_rank != 0:
            return {}, uploads.rows
        models = [{**global_state, **{k: self.fabric.to_device(v) for k, v in private[c].items()}}
                  for c in self.clients]
        return self.tester.metrics(models), uploads.rows

    def random_init_metrics(self, global_state: State) -> dict[str, float | None]:
        """Every client's model is the random-init one, whose local layers are the worker's own. The
        worker model is given back as it was: ``metrics`` leaves it holding the clients' average,
        which can differ from its own values in the last bits, and a client's first local layers
        come from it."""
        module = self.tester.evaluator.module
        kept = {k: v.clone() for k, v in module.state_dict().items()}
        try:
            return self.tester.metrics([global_state] * len(self.clients))
        finally:
            module.load_state_dict(kept)

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        return {"comm/bytes_new_test": row["bytes_new_test"],
                **{f"{ACCURACY}/{k}": v for k, v in row.items() if k.startswith(LOCAL_METRICS) and v is not None}}

    def option_keys(self) -> tuple[str, ...]:
        return ("eval.local_test",)
