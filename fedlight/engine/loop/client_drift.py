"""Client drift: how far each sampled client's encoder moves from the global one in its local training.

Linear CKA (Kornblith et al., ICML 2019), debiased (``fedlight.eval.diagnostics.linear_cka``: the unbiased HSIC
estimator, since the batch's 128 images are no more than the features' dimensions, where the plain estimator
reads two unrelated encoders as 0.5 to 0.8), between the features of a fixed probe batch under the client's
encoder right after its local training and under the global encoder it started from (the round's model). 1:
the client's encoder represents the batch as the global one does (up to rotation and scale); lower: it
drifted; about 0: unrelated. Non-iid clients drift further (Zhuang et al., "Divergence-aware
federated self-supervised learning", ICLR 2022). Each client's value goes in its report; the round's history
row gets their mean (``drift_cka``), lowest (``drift_cka_min``) and standard deviation (``drift_cka_std``).

It costs one forward pass of the probe batch per client and one of the global model per round
(BENCHMARKS.md measures its share of a round), so ``eval.readings`` leaves it out unless it names ``drift``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedlight.engine.loop.interfaces import PluginContext, Report, RoundPlugin, State
from fedlight.eval.diagnostics import linear_cka
from fedlight.methods.federated_module import FederatedModule

COLUMNS = ("drift_cka", "drift_cka_min", "drift_cka_std")
SAMPLES = 128  # probe images: the first of the readings' fixed batch (a forward pass per client: kept small)


class ClientDrift(RoundPlugin):
    """The round plug-in that reads each client's drift (``client_reading``) and summarises it (``columns``).

    Args:
        module: the worker model that holds the global model at each round's start (worker 0's).
        batch: (B, C, H, W) normalised probe images on the model's device, the same every round (its first
            ``SAMPLES`` are used).
    """

    def __init__(self, module: FederatedModule, batch: torch.Tensor) -> None:
        self.module, self.batch = module, batch[:SAMPLES]
        self.global_features: torch.Tensor | None = None

    @classmethod
    def from_context(cls, context: PluginContext) -> ClientDrift | None:
        """The drift reading where ``eval.readings`` names ``drift``, else None; its probe batch is the
        readings' fixed test images, not augmented."""
        c = context
        if "drift" not in c.options.eval.readings:
            return None
        return cls(c.module, c.views.normalize(c.fabric.to_device(c.data.test_x[c.evaluator.reading_idx])))

    def on_round_start(self, round_: int, global_state: State) -> None:
        """The global encoder's features of the probe batch, before any client trains (it loads the round's
        model into the worker, as the first client's start does)."""
        self.module.load_partial(global_state)
        self.global_features = self._features(self.module)

    def client_reading(self, module: FederatedModule) -> dict[str, float]:
        """``{"drift_cka": CKA(client's features, global features)}`` of the client ``module`` just trained."""
        return {"drift_cka": linear_cka(self._features(module), self.global_features)}

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        """The round's mean, lowest and spread of its answering clients' CKA (None where none answered)."""
        values = [rep["drift_cka"] for rep in reports if rep["status"] == "ok" and "drift_cka" in rep]
        if not values:
            return dict.fromkeys(COLUMNS)
        return dict(zip(COLUMNS, (float(np.mean(values)), float(min(values)), float(np.std(values)))))

    def option_keys(self) -> tuple[str, ...]:
        return ("eval.readings",)

    @torch.no_grad()
    def _features(self, module: FederatedModule) -> torch.Tensor:
        """(B, D) features of the probe batch in eval mode; the module's train / eval mode is left as it was."""
        training = module.training
        module.eval()
        try:
            return module.features(self.batch).float()
        finally:
            module.train(training)
